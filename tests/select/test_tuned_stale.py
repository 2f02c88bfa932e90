"""Tuned tables that stay true: each entry records what its timings depend on (each timed backend's kernel source,
the device, the versions), a load finds the entries measured on what is not here any more, and the settings'
`tuned: {stale: use|ignore|error}` decides what becomes of them; tables layer as every file kind does."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import kcatalog
from kcatalog import RejectKind
from kcatalog.model import Environment
from kcatalog.pyresolve import kernel_source
from kcatalog.select.selection import SelectRequest
from kcatalog.tools.cli import main

if TYPE_CHECKING:
    from catalog_builder import Workspace

KERNEL = "def tag(x):\n    return {name!r}\n"


def table(digests: dict[str, str], *, provenance: str = "{device: cpu}", platform: str = "cpu") -> str:
    """A table for g.tag float32 choosing 'fast' at up to 16 tokens, timed against 'ref', with these digests."""
    kernels = ", ".join(f"{name}: {digest!r}" for name, digest in digests.items())
    return (
        f"kcatalog: 1\ntuned:\n  platform: {platform}\n  provenance: {provenance}\n"
        + (f"  kernels:\n    g.tag: {{{kernels}}}\n" if digests else "")
        + "  ops:\n    g.tag:\n      float32:\n"
        "        - {tokens: [1, 16], backend: fast, at: 4, medians_us: {fast: 1.0, ref: 2.0}}\n"
    )


def digests(*targets: str) -> dict[str, str]:
    """The digest of each backend's target now, by backend name ('fast' for 'stale_fast:tag')."""
    found = {}
    for target in targets:
        digest = kernel_source(target).digest
        assert digest is not None
        found[target.partition(":")[0].rpartition("_")[2]] = digest
    return found


@pytest.fixture
def measured(workspace: Workspace) -> Path:
    """Op g.tag on the CPU: 'ref' first in priority, 'fast' chosen by a table recording both kernels' digests."""
    for name in ("fast", "ref"):
        workspace.module(f"stale_{name}", KERNEL.format(name=name))
    backends = {"fast": "stale_fast:tag", "ref": "stale_ref:tag"}
    directory = workspace.write({"tag": workspace.op(backends, reference="ref")}, backends=["ref", "fast"])
    workspace.files({"tuned/cpu.yaml": table(digests("stale_fast:tag", "stale_ref:tag"))})
    return directory


def edit(workspace: Workspace, module: str, text: str) -> None:
    """Rewrite a kernel module of the workspace (one character is enough)."""
    path = workspace.modules_dir / f"{module}.py"
    path.write_text(text, encoding="utf-8")


def test_an_entry_whose_kernel_is_unchanged_is_used_without_a_word(measured: Path) -> None:
    catalog = kcatalog.load_catalog(measured, cache=False)
    assert catalog.warnings == ()
    assert catalog.select("g.tag", "cpu", "float32", tokens=4).backend == "fast"


def test_a_kernel_edited_by_one_character_makes_its_entry_stale(
    measured: Path, workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    edit(workspace, "stale_fast", KERNEL.format(name="fast") + " ")
    catalog = kcatalog.load_catalog(measured, cache=False)
    [warning] = catalog.warnings
    assert (warning.code, warning.message) == (
        "KC235",
        "tuned entry g.tag float32 on cpu is stale: the kernel source of backend 'fast' (stale_fast:tag) changed "
        "since the table was measured; ignored: priority decides (tuned: {stale: ignore}); measure it again with "
        "`kcatalog tune`",
    )
    assert warning.location is not None and warning.location.path.endswith("cpu.yaml") and not warning.is_error
    # Ignored (the default): priority decides, and the backend the table chose says why it did not run.
    selection = catalog.select("g.tag", "cpu", "float32", tokens=4)
    assert selection.backend == "ref" and selection.decided_by == "catalog default priority"
    assert [(r.backend, r.kind) for r in selection.rejected] == [("fast", RejectKind.STALE_TABLE)]
    assert selection.rejected[0].reason == (
        "chosen by tuned table for cpu float32 T∈[1, 16], which is stale and ignored; "
        "ranked below ref by catalog default priority"
    )
    args = ["explain", "g.tag", str(measured), "--platform", "cpu", "--dtype", "float32"]
    assert main([*args, "--tokens", "4"]) == 0
    out = capsys.readouterr().out
    assert (
        "  note: tuned entry g.tag float32 on cpu is stale: the kernel source of backend 'fast' (stale_fast:tag) "
        "changed since the table was measured; ignored: priority decides\n"
    ) in out
    assert main(args) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "  tuned table for cpu float32: T∈[1, 16] fast (stale: the kernel source of backend 'fast' (stale_fast:tag) "
        "changed since the table was measured) (--tokens N picks one)"
    )


def test_a_module_of_its_package_it_imports_counts_and_others_do_not(workspace: Workspace) -> None:
    workspace.package(
        "stalepkg",
        {
            "__init__": "",
            "_rows": "BLOCK = 128\n",
            "unrelated": "X = 1\n",
            "norm": "import json\n\nfrom ._rows import BLOCK\n\n\ndef tag(x):\n    from . import lazy\n    return BLOCK\n",
            "lazy": "Y = 2\n",
        },
    )
    before = kernel_source("stalepkg.norm:tag")
    assert [name for name, _ in before.modules] == ["stalepkg._rows", "stalepkg.lazy", "stalepkg.norm"]
    assert before.digest is not None and len(before.digest) == 16
    package = workspace.modules_dir / "stalepkg"
    (package / "unrelated.py").write_text("X = 2\n")
    assert kernel_source("stalepkg.norm:tag").digest == before.digest  # not imported: not what is timed
    (package / "lazy.py").write_text("Y = 3\n")  # imported inside the function: imported by the time it runs
    lazy = kernel_source("stalepkg.norm:tag").digest
    assert lazy != before.digest
    (package / "_rows.py").write_text("BLOCK = 256\n")
    assert kernel_source("stalepkg.norm:tag").digest not in (before.digest, lazy)
    assert kernel_source("stalepkg.norm:other").digest != kernel_source("stalepkg.norm:tag").digest  # the target too


def test_an_imported_module_of_the_package_edited_makes_the_entry_stale(workspace: Workspace) -> None:
    workspace.package(
        "stalekern",
        {
            "__init__": "",
            "_rows": "BLOCK = 128\n",
            "fast": "from ._rows import BLOCK\n\n\ndef tag(x):\n    return 'fast'\n",
        },
    )
    workspace.module("stale_ref", KERNEL.format(name="ref"))
    backends = {"fast": "stalekern.fast:tag", "ref": "stale_ref:tag"}
    directory = workspace.write({"tag": workspace.op(backends, reference="ref")}, backends=["ref", "fast"])
    recorded = {"fast": kernel_source("stalekern.fast:tag").digest, "ref": kernel_source("stale_ref:tag").digest}
    workspace.files({"tuned/cpu.yaml": table(recorded)})  # type: ignore[arg-type]
    assert kcatalog.load_catalog(directory, cache=False).warnings == ()
    (workspace.modules_dir / "stalekern" / "_rows.py").write_text("BLOCK = 64\n")
    [warning] = kcatalog.load_catalog(directory, cache=False).warnings
    assert "the kernel source of backend 'fast' (stalekern.fast:tag) changed" in warning.message


def test_a_manifest_naming_another_target_makes_the_entry_stale(measured: Path, workspace: Workspace) -> None:
    workspace.module("stale_other", KERNEL.format(name="fast"))  # the same text, another module
    manifest = measured / "g.yaml"
    manifest.write_text(manifest.read_text().replace("stale_fast:tag", "stale_other:tag"))
    [warning] = kcatalog.load_catalog(measured, cache=False).warnings
    assert "backend 'fast' (stale_other:tag) changed since the table was measured" in warning.message


def test_a_table_without_digests_is_not_compared(measured: Path) -> None:
    """Tables written by hand, or before tables recorded digests (as the shipped one until it is measured again),
    load as they did."""
    (measured / "tuned" / "cpu.yaml").write_text(table({}))
    catalog = kcatalog.load_catalog(measured, cache=False)
    assert catalog.warnings == ()
    assert catalog.select("g.tag", "cpu", "float32", tokens=4).backend == "fast"


def test_a_backend_timed_without_a_digest_is_stale(measured: Path) -> None:
    (measured / "tuned" / "cpu.yaml").write_text(table(digests("stale_fast:tag")))
    [warning] = kcatalog.load_catalog(measured, cache=False).warnings
    assert "stale: the table records no kernel digest for backend 'ref';" in warning.message


def test_the_settings_decide_what_a_stale_entry_is(measured: Path, workspace: Workspace) -> None:
    edit(workspace, "stale_fast", KERNEL.format(name="fast") + "# edited\n")
    settings = measured / "kcatalog.yaml"
    plain = settings.read_text()
    settings.write_text(plain + "tuned: {stale: use}\n")
    used = kcatalog.load_catalog(measured, cache=False)
    assert [w.code for w in used.warnings] == ["KC235"]
    assert "used all the same (tuned: {stale: use})" in used.warnings[0].message
    selection = used.select("g.tag", "cpu", "float32", tokens=4)
    assert selection.backend == "fast"
    assert selection.decided_by == (
        "tuned table for cpu float32 T∈[1, 16] (stale: the kernel source of backend 'fast' (stale_fast:tag) "
        "changed since the table was measured): fast 1.0 µs vs ref 2.0 µs"
    )
    settings.write_text(plain + "tuned: {stale: error}\n")
    with pytest.raises(kcatalog.CatalogError) as raised:
        kcatalog.load_catalog(measured, cache=False)
    [error] = raised.value.diagnostics
    assert error.code == "KC235" and error.is_error and "tuned: {stale: error} refuses it" in error.message
    settings.write_text(plain + "tuned: {stale: sometimes}\n")
    _, found = kcatalog.check_catalog(measured)
    assert [d.code for d in found] == ["KC103", "KC235"]  # the stale entry is still reported, as ignored
    assert found[0].message == "'stale': unknown value 'sometimes'; expected one of use, ignore, error"
    assert "ignored: priority decides" in found[1].message


def test_a_later_layers_setting_decides(measured: Path, workspace: Workspace) -> None:
    edit(workspace, "stale_fast", KERNEL.format(name="fast") + " ")
    (measured / "kcatalog.yaml").write_text((measured / "kcatalog.yaml").read_text() + "tuned: {stale: use}\n")
    user = workspace.files({"kcatalog.yaml": "kcatalog: 1\ntuned: {stale: error}\n"}, name="user")
    _, found = kcatalog.check_catalog([measured, user])
    assert [(d.code, d.is_error) for d in found] == [("KC235", True)]


def test_a_warm_load_reuses_the_digests_and_still_sees_an_edit(
    measured: Path, workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    assert kcatalog.load_catalog(measured, cache=cache).warnings == ()
    import kcatalog.pyresolve.sources as sources

    def no_parsing(targets: object) -> object:
        raise AssertionError("a warm load whose kernel modules are unchanged computes no digest")

    with monkeypatch.context() as patched:
        patched.setattr(sources, "kernel_sources", no_parsing)
        warm = kcatalog.load_catalog(measured, cache=cache)
    assert warm.cache_status.outcome is kcatalog.CacheOutcome.HIT and warm.warnings == ()
    edit(workspace, "stale_ref", KERNEL.format(name="ref") + " ")
    edited = kcatalog.load_catalog(measured, cache=cache)
    assert [w.code for w in edited.warnings] == ["KC235"] and "backend 'ref'" in edited.warnings[0].message
    assert edited.cache_status.outcome is kcatalog.CacheOutcome.REFRESHED


# -- the environment, compared where the catalog runs --------------------------------------------------------

HERE = Environment("NVIDIA H200", 132, {"torch": "2.11.0+cu130", "triton": "3.6.0", "pluggy": "1.2.0"})
PROVENANCE = (
    '{device: NVIDIA H200, capability: "9.0", sms: 132, torch: 2.11.0+cu130, triton: 3.6.0, packages: {pluggy: 1.2.0}}'
)


@pytest.fixture
def on_gpu(workspace: Workspace) -> Path:
    """g.tag for cuda:9.0: 'fast' requires triton and pluggy; a table measured on HERE."""
    for name in ("fast", "ref"):
        workspace.module(f"stale_{name}", KERNEL.format(name=name))
    backends = {"fast": {"target": "stale_fast:tag", "requires": ["triton", "pluggy"]}, "ref": "stale_ref:tag"}
    directory = workspace.write({"tag": workspace.op(backends, reference="ref")}, backends=["ref", "fast"])
    recorded = digests("stale_fast:tag", "stale_ref:tag")
    workspace.files({"tuned/cuda_9.0.yaml": table(recorded, provenance=PROVENANCE, platform='"cuda:9.0"')})
    return directory


def _select(catalog: kcatalog.Catalog, here: Environment | None) -> kcatalog.Selection:
    request = SelectRequest("g.tag", kcatalog.Platform("cuda", "9.0"), "float32", tokens=4, packages_here=False,
                            environment=here)  # fmt: skip
    return catalog.select(request)


@pytest.mark.parametrize(
    ("here", "why"),
    [
        (HERE, None),
        (Environment("NVIDIA H200", 132, {**HERE.versions, "torch": "2.11.1+cu128"}), None),  # a patch release
        (
            Environment("NVIDIA H100 80GB HBM3", 132, HERE.versions),
            "the device changed since the table was measured (NVIDIA H200 then, NVIDIA H100 80GB HBM3 now)",
        ),
        (
            Environment("NVIDIA H200", 114, HERE.versions),
            "the device's multiprocessor count changed since the table was measured (132 then, 114 now)",
        ),
        (
            Environment("NVIDIA H200", 132, {**HERE.versions, "torch": "2.12.0"}),
            "torch changed since the table was measured (2.11.0+cu130 then, 2.12.0 now)",
        ),
        (
            Environment("NVIDIA H200", 132, {**HERE.versions, "triton": "3.9.0"}),
            "triton changed since the table was measured (3.6.0 then, 3.9.0 now)",
        ),
        (
            Environment("NVIDIA H200", 132, {**HERE.versions, "pluggy": None}),
            "pluggy changed since the table was measured (1.2.0 then, not installed now)",
        ),
    ],
)
def test_each_recorded_dependency_of_the_environment(on_gpu: Path, here: Environment, why: str | None) -> None:
    catalog = kcatalog.load_catalog(on_gpu, cache=False)
    assert catalog.warnings == ()  # only the machine that runs can compare its environment
    selection = _select(catalog, here)
    if why is None:
        assert selection.backend == "fast" and not selection.notes
    else:
        assert selection.backend == "ref"
        assert selection.notes == (f"tuned entry g.tag float32 on cuda:9.0 is stale: {why}; ignored: priority decides",)
    assert _select(catalog, None).backend == "fast"  # choosing for another machine: nothing here to compare


def test_an_environment_differing_where_the_catalog_runs_warns_once_or_fails(
    on_gpu: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The runtime detects this machine's environment when it selects for its own platform, once."""
    detected: list[tuple[str, ...]] = []

    def environment(self: kcatalog.Platform, distributions: tuple[str, ...] = ()) -> Environment:
        detected.append(tuple(distributions))
        return Environment("NVIDIA H100 80GB HBM3", 132, HERE.versions)

    monkeypatch.setattr(kcatalog.Platform, "detect", classmethod(lambda cls: cls("cuda", "9.0")))
    monkeypatch.setattr(kcatalog.Platform, "environment", environment)
    catalog = kcatalog.load_catalog(on_gpu, cache=False)
    with caplog.at_level(logging.WARNING, logger="kcatalog"):
        for _ in range(2):
            assert catalog.select("g.tag", dtype="float32", tokens=4).backend == "ref"
    assert detected == [("pluggy", "torch", "triton")]  # what the table's entries depend on
    assert [r.getMessage() for r in caplog.records] == [
        "tuned entry g.tag float32 on cuda:9.0 is stale: the device changed since the table was measured "
        "(NVIDIA H200 then, NVIDIA H100 80GB HBM3 now); ignored: priority decides"
    ]
    settings = on_gpu / "kcatalog.yaml"
    settings.write_text(settings.read_text() + "tuned: {stale: error}\n")
    strict = kcatalog.load_catalog(on_gpu, cache=False)
    with pytest.raises(kcatalog.CatalogError, match=r"refuses it$"):
        strict.select("g.tag", dtype="float32", tokens=4)


# -- layers ----------------------------------------------------------------------------------------------------


def test_a_later_layers_table_replaces_an_earlier_ones_and_explain_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shipped table sends rms_norm at 4096 tokens to triton; a user's table for cuda:9.0 in DIR says aten."""
    user = tmp_path / "DIR"
    (user / "tuned").mkdir(parents=True)
    (user / "tuned" / "cuda_9.0.yaml").write_text(
        'kcatalog: 1\ntuned:\n  platform: "cuda:9.0"\n  provenance: {device: NVIDIA H200, capability: "9.0"}\n'
        "  ops:\n    layernorm.rms_norm:\n      bfloat16:\n"
        "        - {tokens: [513, 8192], backend: aten, at: 4096, medians_us: {aten: 25.1, triton: 26.6}}\n"
    )
    shipped = kcatalog.load_catalog(["shipped"], cache=False).tuning.table("layernorm.rms_norm", "cuda:9.0", "bfloat16")
    assert shipped is not None and shipped.buckets[3].backend == "triton"  # what the user's table replaces
    assert (
        main(["explain", "layernorm.rms_norm", "shipped", str(user), "--platform", "cuda:9.0", "--tokens", "4096"]) == 0
    )
    first, note, *_ = capsys.readouterr().out.splitlines()
    assert first == (
        "layernorm.rms_norm on cuda:9.0: aten (kcatalog.kernels.aten.layernorm:rms_norm) [layer shipped], by "
        f"tuned table for cuda:9.0 bfloat16 T∈[513, 8192] (from layer {user}'s table, replacing layer shipped's): "
        "aten 25.1 µs vs triton 26.6 µs"
    )
    assert note == "  note: --dtype not given: bfloat16, the dtype of the op's tuned table for cuda:9.0"
    # The whole entry is the user's: the shipped buckets below 513 tokens are not kept.
    layered = kcatalog.load_catalog(["shipped", user], cache=False)
    assert (
        layered.select("layernorm.rms_norm", "cuda:9.0", "bfloat16", tokens=8).decided_by == "catalog default priority"
    )
    # `--tuned DIR` is the same layer on top of the default ones, for every command that loads a catalog.
    assert (
        main(["explain", "layernorm.rms_norm", "--tuned", str(user), "--platform", "cuda:9.0", "--tokens", "4096"]) == 0
    )
    assert capsys.readouterr().out.splitlines()[0] == first
    plan = tmp_path / "plan.yaml"
    for tuned, rms_norm in (
        ([], "triton\n"),  # the shipped table chooses triton in every bucket: one backend
        (["--tuned", str(user)], "[{tokens: [1, 512], backend: triton}, {tokens: [513, 8192], backend: aten}, "),
    ):
        assert main(["plan", *tuned, "--platform", "cuda:9.0", "--dtype", "bfloat16", "--out", str(plan)]) == 0
        assert f"    layernorm.rms_norm:\n      bfloat16: {rms_norm}" in plan.read_text()


def test_two_tables_for_one_entry_in_one_layer_stay_an_error(measured: Path) -> None:
    (measured / "tuned" / "again.yaml").write_text((measured / "tuned" / "cpu.yaml").read_text())
    _, found = kcatalog.check_catalog(measured)
    assert [d.code for d in found] == ["KC233"] and "is tuned twice (first at " in found[0].message
