"""Deterministic selection: use(deterministic=...), KCATALOG_DETERMINISTIC, load_catalog(...) and the settings select
only backends that promise it, on every path (overrides, tables, plans, backend=), and explain says why not."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import kcatalog
from kcatalog import CatalogError, NoEligibleBackendError, Promise, RejectKind
from kcatalog.tools.cli import main

if TYPE_CHECKING:
    from catalog_builder import Workspace

TABLE = """\
kcatalog: 1
tuned:
  platform: cpu
  provenance: {device: cpu}
  ops:
    g.op:
      float32:
        - {tokens: [1, null], backend: fast, medians_us: {fast: 1.0, same: 2.0}}
"""


@pytest.fixture
def promising(workspace: Workspace) -> Path:
    """g.op: `fast` first by priority and promising nothing, `same` deterministic everywhere, `rows` batch-invariant on
    the CPU, `gpu_rows` batch-invariant on cuda; g.loose: only `fast`. Each backend returns its name."""
    names = ["fast", "same", "rows", "gpu_rows"]
    workspace.named_functions("kc_promises", names)
    backends = {
        "fast": "kc_promises:fast",
        "same": {"target": "kc_promises:same", "deterministic": True},
        "rows": {"target": "kc_promises:rows", "batch_invariant": ["cpu"]},
        "gpu_rows": {"target": "kc_promises:gpu_rows", "batch_invariant": ["cuda"]},
    }
    return workspace.write(
        {"op": workspace.op(backends), "loose": workspace.op({"fast": "kc_promises:fast"})}, backends=names
    )


def _chosen(catalog: kcatalog.Catalog, op: str = "g.op", platform: str = "cpu") -> str | None:
    chosen = catalog.select(op, platform, "float32").chosen
    return None if chosen is None else chosen.backend


def _rejected(catalog: kcatalog.Catalog, platform: str = "cpu") -> dict[str, tuple[RejectKind, str]]:
    return {r.backend: (r.kind, r.reason) for r in catalog.select("g.op", platform, "float32").rejected}


def test_use_deterministic_selects_only_the_backends_that_promise_it(promising: Path) -> None:
    catalog = kcatalog.load_catalog(promising, cache=False)
    assert _chosen(catalog) == "fast"
    with catalog.use(deterministic=True):
        assert _chosen(catalog) == "same"
        rejected = _rejected(catalog)
        assert rejected["fast"] == (
            RejectKind.NOT_PROMISED,
            "does not promise deterministic outputs on cpu (asked for by use(deterministic=True))",
        )
        assert rejected["rows"][0] is RejectKind.RANKED_BELOW  # batch_invariant implies deterministic
        assert rejected["gpu_rows"] == (
            RejectKind.NOT_PROMISED,
            "does not promise deterministic outputs on cpu (asked for by use(deterministic=True))",
        )
        assert _chosen(catalog, "g.loose") is None
    assert _chosen(catalog) == "fast"  # the block is over


def test_use_batch_invariant_and_the_device_a_promise_holds_on(promising: Path) -> None:
    catalog = kcatalog.load_catalog(promising, cache=False)
    with catalog.use(batch_invariant=True):
        assert _chosen(catalog) == "rows"
        assert _rejected(catalog)["same"] == (
            RejectKind.NOT_PROMISED,
            "promises deterministic but not batch_invariant outputs on cpu (asked for by use(batch_invariant=True))",
        )
        assert _chosen(catalog, platform="cuda:9.0") == "gpu_rows"  # `rows` promises it on the CPU only
        assert _rejected(catalog, "cuda:9.0")["rows"] == (
            RejectKind.NOT_PROMISED,
            "does not promise batch_invariant outputs on cuda (asked for by use(batch_invariant=True))",
        )


def test_an_inner_block_adds_a_promise_and_never_lifts_one(promising: Path) -> None:
    catalog = kcatalog.load_catalog(promising, cache=False)
    with catalog.use(batch_invariant=True):
        with catalog.use(deterministic=True):
            assert _chosen(catalog) == "rows"  # the outer block's stronger promise still holds
        with catalog.use({"g.op": "fast"}):
            assert _chosen(catalog) == "rows"  # an override of a backend that does not promise it is not honoured
    with catalog.use(deterministic=True), catalog.use(batch_invariant=True):
        assert _chosen(catalog) == "rows"


@pytest.mark.parametrize(
    ("value", "chosen", "source"),
    [
        ("1", "same", "KCATALOG_DETERMINISTIC=1"),
        ("true", "same", "KCATALOG_DETERMINISTIC=true"),
        ("batch_invariant", "rows", "KCATALOG_DETERMINISTIC=batch_invariant"),
        ("0", "fast", None),
        ("", "fast", None),
    ],
)
def test_the_environment_variable(
    promising: Path, monkeypatch: pytest.MonkeyPatch, value: str, chosen: str, source: str | None
) -> None:
    monkeypatch.setenv("KCATALOG_DETERMINISTIC", value)
    catalog = kcatalog.load_catalog(promising, cache=False)
    assert _chosen(catalog) == chosen
    if source is not None:
        assert _rejected(catalog)["fast"][1].endswith(f"(asked for by {source})")
        assert catalog.kernel("g.op")() == chosen


def test_an_environment_variable_it_cannot_mean_fails_the_load(
    promising: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KCATALOG_DETERMINISTIC", "yes please")
    with pytest.raises(CatalogError) as raised:
        kcatalog.load_catalog(promising, cache=False)
    assert [str(d) for d in raised.value.diagnostics] == [
        "KC604 KCATALOG_DETERMINISTIC='yes please': expected 1 (deterministic), batch_invariant, or 0 (off); "
        "see docs/selection.md"
    ]


def test_load_catalog_option_and_the_settings_file(promising: Path, workspace: Workspace) -> None:
    catalog = kcatalog.load_catalog(promising, cache=False, deterministic=True)
    assert _chosen(catalog) == "same"
    assert _rejected(catalog)["fast"][1].endswith("(asked for by load_catalog(deterministic=True))")
    assert _chosen(kcatalog.load_catalog(promising, cache=False, batch_invariant=True)) == "rows"
    settings = (promising / "kcatalog.yaml").read_text(encoding="utf-8")
    (promising / "kcatalog.yaml").write_text(settings + "batch_invariant: true\n", encoding="utf-8")
    catalog = kcatalog.load_catalog(promising, cache=False)
    source = f"the settings of layer '{promising}'"  # a layer given as a path is named by it
    assert catalog.settings.required == (kcatalog.model.Required(Promise.BATCH_INVARIANT, source),)
    assert _chosen(catalog) == "rows"
    assert _rejected(catalog)["same"][1].endswith(f"(asked for by {source})")
    with catalog.use(deterministic=False):  # nothing lifts what the settings require
        assert _chosen(catalog) == "rows"


def test_a_later_layer_asks_it_of_the_ops_of_every_layer(promising: Path, workspace: Workspace) -> None:
    app = workspace.files({"kcatalog.yaml": "kcatalog: 1\ndeterministic: true\n"}, name="app")
    catalog = kcatalog.load_catalog([promising, app], cache=False)
    assert _chosen(catalog) == "same"
    assert _rejected(catalog)["fast"][1] == (
        f"does not promise deterministic outputs on cpu (asked for by the settings of layer '{app}')"
    )


def test_an_op_none_of_whose_backends_promises_it_fails_to_resolve_naming_it(promising: Path) -> None:
    catalog = kcatalog.load_catalog(promising, cache=False)
    with catalog.use(deterministic=True), pytest.raises(NoEligibleBackendError) as raised:
        catalog.kernel("g.loose")
    assert str(raised.value) == (
        "no backend of op 'g.loose' can run on cpu: fast: does not promise deterministic outputs on cpu "
        "(asked for by use(deterministic=True))"
    )
    assert [r.kind for r in raised.value.rejected] == [RejectKind.NOT_PROMISED]


def test_every_path_checks_it_backend_given_and_overrides(
    promising: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("KCATALOG_DETERMINISTIC", "1")
    monkeypatch.setenv("KCATALOG_OVERRIDES", "g.op=fast")
    catalog = kcatalog.load_catalog(promising, cache=False)
    with pytest.raises(NoEligibleBackendError, match=r"^no backend of op 'g\.op' can run on cpu: fast: does not "):
        catalog.kernel("g.op", backend="fast")
    with caplog.at_level(logging.WARNING, logger="kcatalog"):
        selection = catalog.select("g.op", "cpu", "float32")
    assert (selection.chosen.backend if selection.chosen else None, selection.decided_by) == (
        "same",
        "catalog default priority",
    )
    assert selection.notes == (
        "KCATALOG_OVERRIDES g.op=fast ignored: fast cannot run (does not promise deterministic outputs on cpu "
        "(asked for by KCATALOG_DETERMINISTIC=1))",
    )
    strict = kcatalog.load_catalog(promising, cache=False, strict=True)
    with pytest.raises(NoEligibleBackendError):
        strict.select("g.op", "cpu", "float32")


def test_a_tuned_pick_gives_way_quietly_and_a_plan_pin_with_a_note(
    promising: Path, workspace: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    workspace.files({"tuned/cpu.yaml": TABLE})
    catalog = kcatalog.load_catalog(promising, cache=False)
    assert catalog.select("g.op", "cpu", "float32", tokens=8).decided_by.startswith("tuned table")
    with catalog.use(deterministic=True), caplog.at_level(logging.WARNING, logger="kcatalog"):
        selection = catalog.select("g.op", "cpu", "float32", tokens=8)
    assert (selection.chosen.backend if selection.chosen else None, selection.decided_by) == (
        "same",
        "catalog default priority",
    )
    assert selection.notes == ()  # a measurement, not a request: no warning per bucket
    assert {r.backend: r.kind for r in selection.rejected}["fast"] is RejectKind.NOT_PROMISED
    assert not caplog.records


def test_op_handles_honour_the_block_and_the_process(promising: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    x = torch.zeros(2, 3)
    catalog = kcatalog.load_catalog(promising, cache=False)
    handle = catalog.op("g.op")
    assert handle(x) == "fast"
    with catalog.use(batch_invariant=True):
        assert handle(x) == "rows"
    assert handle(x) == "fast"
    monkeypatch.setenv("KCATALOG_DETERMINISTIC", "1")
    assert kcatalog.load_catalog(promising, cache=False).op("g.op")(x) == "same"


def test_promises_survive_the_load_cache(promising: Path, tmp_path: Path) -> None:
    cold = kcatalog.load_catalog(promising, cache=tmp_path / "cache")
    warm = kcatalog.load_catalog(promising, cache=tmp_path / "cache")
    assert warm.cache_status.outcome is kcatalog.CacheOutcome.HIT
    assert [s.promises for s in warm.specs("g.op")] == [s.promises for s in cold.specs("g.op")]
    assert warm.info("g.op").backends["rows"].promises == (kcatalog.model.Promised(Promise.BATCH_INVARIANT, ("cpu",)),)
    assert warm.info("g.op").backends["same"].keeps(Promise.DETERMINISTIC, "xpu")


def test_explain_says_which_promise_each_backend_lacks(promising: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["explain", "g.op", "--catalog", str(promising), "--platform", "cpu", "--dtype", "float32"]
    assert main([*args, "--batch-invariant", "--output-format", "json"]) == 0
    [entry] = json.loads(capsys.readouterr().out)
    assert entry["chosen"] == "rows"
    assert {r["backend"]: r["kind"] for r in entry["rejected"]} == {
        "fast": "not promised",
        "same": "not promised",
        "gpu_rows": "not promised",
    }
    assert main([*args, "--deterministic"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "g.op on cpu: same (kc_promises:same), by catalog default priority",
        "  fast: does not promise deterministic outputs on cpu (asked for by use(deterministic=True))",
        "  rows: ranked below same by catalog default priority",
        "  gpu_rows: does not promise deterministic outputs on cpu (asked for by use(deterministic=True))",
    ]
    assert main(["explain", "g.loose", "--catalog", str(promising), "--platform", "cpu", "--deterministic"]) == 1
    assert re.search(r"g\.loose on cpu: nothing eligible\n  fast: does not promise", capsys.readouterr().out)
