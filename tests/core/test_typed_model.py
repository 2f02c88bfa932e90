"""The typed model every stage shares: immutable, and stored by the cache codec generically, from its fields."""

from __future__ import annotations

import dataclasses
import marshal

import pytest

import kcatalog
from kcatalog import CacheOutcome, CacheStatus, LoadOptions
from kcatalog.cache.codec import MODEL_TYPES, Codec  # unit test of the cache's codec: internal on purpose
from kcatalog.load import LoadKeywords  # the keywords of load_catalog, checked against LoadOptions: internal on purpose
from kcatalog.model import LinkedCatalog, OpInfo
from kcatalog.tools.inputs import samples_of


@pytest.fixture(scope="module")
def shipped() -> LinkedCatalog:
    """The shipped catalog as the linker yields it, rebuilt from what a loaded Catalog exposes."""
    catalog = kcatalog.load_catalog(cache=False)
    ops = {op: catalog.info(op) for op in catalog}
    return LinkedCatalog(catalog.settings, ops, tuple(catalog.specs()))


def files_of(linked: LinkedCatalog) -> list[str]:
    return sorted({spec.location.path for spec in linked.declared})


def test_the_codec_round_trips_the_linked_model_through_marshal(shipped: LinkedCatalog) -> None:
    codec = Codec(files_of(shipped))
    back = codec.decode(marshal.loads(marshal.dumps(codec.encode(shipped))))
    assert back == shipped
    assert [samples_of(info) for info in back.ops.values()] == [samples_of(info) for info in shipped.ops.values()]
    # Shared objects stay shared: each op's backends are the very specs of `declared`.
    declared = {id(spec) for spec in back.declared}
    assert all(id(spec) in declared for info in back.ops.values() for spec in info.backends.values())


def test_a_field_added_to_the_model_needs_no_codec_edit(shipped: LinkedCatalog) -> None:
    """What adding a field to OpInfo takes: the field. The codec derives the entry from the dataclass fields."""
    Extended = dataclasses.make_dataclass(  # noqa: N806 - a class
        "OpInfo", [("tuned_for", tuple, dataclasses.field(default=()))], bases=(OpInfo,), frozen=True
    )
    types = tuple(Extended if cls is OpInfo else cls for cls in MODEL_TYPES)
    ops = {op: Extended(**_init_fields(info), tuned_for=("9.0", op)) for op, info in shipped.ops.items()}
    extended = dataclasses.replace(shipped, ops=ops)
    codec = Codec(files_of(shipped), types)
    back = codec.decode(marshal.loads(marshal.dumps(codec.encode(extended))))
    assert {op: info.tuned_for for op, info in back.ops.items()} == {op: ("9.0", op) for op in shipped.ops}
    assert back == extended


def _init_fields(value: object) -> dict[str, object]:
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}  # type: ignore[arg-type]


def test_the_model_is_immutable_all_the_way_down(shipped: LinkedCatalog) -> None:
    info = next(iter(shipped.ops.values()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.reference = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        info.backends["new"] = info.backends[info.reference]  # type: ignore[index]
    with pytest.raises(TypeError):
        shipped.settings.backends["new"] = shipped.settings.backends["torch"]  # type: ignore[index, union-attr]
    with pytest.raises(TypeError):
        info.tolerance["float32"] = 1.0  # type: ignore[index]


def test_load_keywords_are_the_load_options() -> None:
    assert set(LoadKeywords.__annotations__) == {f.name for f in dataclasses.fields(LoadOptions)}


def test_options_as_an_object_and_as_keywords_are_the_same() -> None:
    options = LoadOptions(require=["layernorm.rms_norm"], cache=False)
    assert (
        kcatalog.check_catalog(None, options).diagnostics
        == kcatalog.check_catalog(None, require=["layernorm.rms_norm"]).diagnostics
    )
    with pytest.raises(kcatalog.CatalogError, match="KC501 required op 'no.such_op'"):
        kcatalog.load_catalog(None, options, require=["no.such_op"])  # keywords refine the object


def test_cache_status_reads_as_one_line() -> None:
    assert str(CacheStatus(CacheOutcome.OFF, "cache=False")) == "off: cache=False"
    written = CacheStatus(CacheOutcome.NOT_WRITTEN, "no entry yet", None, "PermissionError: denied")
    assert str(written) == "not written: no entry yet; PermissionError: denied"


def test_the_codec_keeps_equal_tuples_of_other_types_apart() -> None:
    """(True,) == (1,) == (1.0,) in Python; the codec stores equal tuples once, but never one for another."""
    value = (("k", True), ("k", 1), ("k", 1.0))
    codec = Codec([])
    back = codec.decode(marshal.loads(marshal.dumps(codec.encode(value))))
    assert [type(v) for _, v in back] == [bool, int, float]
