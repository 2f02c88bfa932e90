"""Stage 3's entry: every link stage over one catalog's validated files, in order: the manifests, settings and
layer mappings (linker.py), then the tuned tables against the linked ops (tuned.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..diagnostics import Diagnostics
from ..model import CatalogLayer, LinkedCatalog
from ..platform import known_devices
from ..read.digest import text_digest
from ..read.files import SourceFile
from ..validate.tables import TunedTable
from ..validate.validator import ValidatedFiles
from .linker import link_files
from .tuned import link_tuned


def link_catalog(
    sources: Sequence[SourceFile],
    validated: ValidatedFiles,
    layers: Sequence[CatalogLayer],
    diagnostics: Diagnostics,
) -> LinkedCatalog:
    """The catalog that the files `validated` from `sources` (of `layers`) make, what is wrong added to
    `diagnostics`; complete only when none of that is an error."""
    files, broken = validated.files, validated.broken
    settings_found = any(s.is_settings for s in sources)
    linked = link_files(files, diagnostics, settings_found=settings_found, layers=layers, broken=broken)
    tables = [file for file in files if isinstance(file.model, TunedTable)]
    if not tables:
        return linked
    texts = {source.shown: source.text for source in sources}
    # The catalog's content digest leaves the tables out: a plan holds their choices (LinkedCatalog.tuned_texts).
    tuned_texts = tuple(text_digest(texts[file.path]) for file in tables)
    devices = known_devices(linked.settings.devices if linked.settings is not None else ())
    tuned = link_tuned(files, linked.ops, linked.broken, diagnostics, devices, layers)  # also the ops linking left out
    return dataclasses.replace(linked, tuned=tuned, tuned_texts=tuned_texts)
