"""The shipped tuned table is true of the shipped kernels: each entry records the kernel source digest of every
backend it timed, and they are the digests of the kernels as they are now. A kernel edited without measuring the
table again fails here, so this repository cannot ship a stale table. To measure it again, on the H200:

    kcatalog tune --device cuda --dtype bfloat16 --out catalog/tuned/ --force
    kcatalog tune --device cuda --check catalog/tuned/cuda_9.0.yaml
"""

from __future__ import annotations

from pathlib import Path

import kcatalog
from kcatalog.diagnostics import Diagnostics
from kcatalog.read.files import shipped_catalog_dir
from kcatalog.tools import tuning

SHIPPED_TABLE = shipped_catalog_dir() / "tuned" / "cuda_9.0.yaml"
MEASURE = "kcatalog tune --device cuda --dtype bfloat16 --out catalog/tuned/ --force (on the H200)"


def test_the_shipped_table_records_the_digests_of_the_shipped_kernels() -> None:
    catalog = kcatalog.load_catalog(["shipped"], cache=False)
    entries = list(catalog.tuning.tables.values())
    assert entries and {entry.platform for entry in entries} == {"cuda:9.0"}
    unrecorded = sorted(f"{entry.op} {entry.dtype}" for entry in entries if entry.kernels is None)
    assert not unrecorded, f"{SHIPPED_TABLE} records no kernel digests for {', '.join(unrecorded)}: {MEASURE}"
    stale = [str(w) for w in catalog.warnings if w.code == "KC235"]
    assert not stale, "the shipped kernels changed since the table was measured: " + "; ".join(stale) + f"; {MEASURE}"
    now = tuning.kernel_digests(catalog, [entry.op for entry in entries])
    for entry in entries:
        assert entry.kernels == {b: now[(entry.op, b)] for b in entry.timed}, entry.op
        assert entry.measured_on is not None and entry.measured_on.sms is not None  # written by today's `tune`


def test_a_table_tune_writes_for_the_shipped_kernels_holds_until_one_changes(tmp_path: Path) -> None:
    """What `tune` records (tools/tuning.py) is what a load compares (check/tuned_sources.py): the shipped table's
    buckets written again with today's digests load without a word, on top of the shipped layer; a digest that
    differs by one character is a stale entry of that op only."""
    kept = tuning.read_kept(SHIPPED_TABLE, Diagnostics())
    assert kept is not None
    catalog = kcatalog.load_catalog(["shipped"], cache=False)
    ops = sorted({m.op for m in kept.measured})
    provenance = tuning.Provenance("NVIDIA H200", "9.0", 132, None, None, None, {}, "test", "now", "test")
    kernels = tuning.kernel_digests(catalog, ops)
    table = tmp_path / "user" / "tuned" / "cuda_9.0.yaml"
    table.parent.mkdir(parents=True)
    table.write_text(tuning.table_text(kept.platform, provenance, kept.measured, kernels=kernels))
    layered = kcatalog.load_catalog(["shipped", table.parent.parent], cache=False)
    assert layered.warnings == ()
    entry = layered.tuning.table("layernorm.rms_norm", "cuda:9.0", "bfloat16")
    assert entry is not None and entry.replaced == "shipped" and entry.kernels is not None
    digest = kernels[("layernorm.rms_norm", "triton")]
    edited = digest[:-1] + ("0" if digest[-1] != "0" else "1")
    table.write_text(table.read_text().replace(digest, edited))  # as if the Triton kernel had been edited since
    stale = kcatalog.load_catalog(["shipped", table.parent.parent], cache=False).warnings
    assert [(w.code, w.message.split(" is stale: ")[0]) for w in stale] == [
        ("KC235", "tuned entry layernorm.rms_norm bfloat16 on cuda:9.0")  # a digest is of one target: one op's
    ]
