"""`kcatalog import-registry` and `dump-registry` as commands: options, usage errors, what they refuse to touch."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from catalog_builder import workspace_at
from registry_builder import write_registry

import kcatalog
from kcatalog.tools.cli import main


@pytest.fixture
def reference(tmp_path: Path) -> Iterator[str]:
    with workspace_at(tmp_path) as workspace:
        files = write_registry(workspace.modules_dir, package="kcmig_cli", ops_per_group=6)
        workspace._added(files.package)
        yield files.reference


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def usage_error(err: str, command: str = "import-registry") -> str:
    """The error line of a usage error, after checking the command's own usage came first."""
    assert err.startswith(f"usage: kcatalog {command} "), err
    return err.splitlines()[-1] + "\n"


def test_priority_and_no_auto_options(reference: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code, printed, _ = run(
        capsys, "import-registry", reference, "--out", str(out), "--priority", "triton,torch", "--no-auto", "KDA"
    )
    assert code == 0, printed
    assert printed.splitlines()[-2:] == [
        f"Wrote 6 files to {out}: 30 ops, 90 backend specs of 90 registry specs.",
        f"Next: kcatalog validate {out}",
    ]
    catalog = kcatalog.load_catalog(out, cache=False)
    assert catalog.settings.priority == ("triton", "torch")
    assert {name for name, info in catalog.settings.backends.items() if not info.auto} == {"KDA", "torch_compile"}
    # norm.op_5 declares no priority in the registry: the default order decides
    assert catalog.select("norm.op_5", "cuda:9.0").decided_by == "catalog default priority"


def test_without_priority_each_op_keeps_its_declaration_order(
    reference: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "import-registry", reference, "--out", str(tmp_path / "out"))[0] == 0
    catalog = kcatalog.load_catalog(tmp_path / "out", cache=False)
    assert catalog.settings.priority == ()
    assert catalog.select("norm.op_5", "cpu").decided_by == "declaration order"


def test_priority_may_name_every_backend_the_registry_declares(
    reference: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 'plugin' is a member of the registry's backend enum that no spec uses: SGLang's own default order names two.
    dump = tmp_path / "registry.json"
    assert run(capsys, "dump-registry", reference, "--out", str(dump))[0] == 0
    assert "plugin" in json.loads(dump.read_text(encoding="utf-8"))["backends"]
    for source in ([reference], ["--from-json", str(dump)]):
        out = tmp_path / f"out{len(source)}"
        code, printed, _ = run(
            capsys, "import-registry", *source, "--out", str(out), "--priority", "plugin,triton,torch"
        )
        assert code == 0, printed
        assert kcatalog.load_catalog(out, cache=False).settings.priority == ("plugin", "triton", "torch")


def test_an_op_left_to_declaration_order_is_a_warning_that_fails_validate_strict(
    reference: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code, printed, _ = run(capsys, "import-registry", reference, "--out", str(out))
    assert code == 0
    warned = [line for line in printed.splitlines() if line.startswith("KC709 ")]
    assert warned == [
        f"KC709 warning: op '{group}.op_5' has backends torch, triton that can run on one platform and the registry "
        "gives no order for them: the first declared that can run is chosen; give --priority A,B,... for a default "
        "order"
        for group in ("norm", "act", "attn", "moe", "quant")
    ]
    code, printed, _ = run(capsys, "validate", str(out))
    assert code == 0 and printed.count(" KC219 warning: op ") == 5
    code, printed, _ = run(capsys, "validate", str(out), "--strict")
    assert code == 1 and printed.count(" KC219 ") == 5 and printed.endswith("Found 5 errors in 5 files.\n")
    code, printed, _ = run(capsys, "import-registry", reference, "--out", str(out), "--force", "--priority", "triton")
    assert code == 0 and "KC709" not in printed
    assert run(capsys, "validate", str(out), "--strict")[:2] == (0, "All checks passed!\n")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "error: give one registry: MODULE:OBJECT, or --from-json FILE\n"),
        (["--from-json", "x.json"], "error: give one registry: MODULE:OBJECT, or --from-json FILE\n"),
        (["--priority", "trtion,torch"], "error: 'trtion': not a backend of the registry\n"),
        (["--no-auto", "kda"], "error: 'kda': not a backend of the registry\n"),
    ],
)
def test_usage_errors_exit_2(
    reference: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    given = [] if argv[:1] == [] else [reference]
    code, out, err = run(capsys, "import-registry", *given, *argv, "--out", str(tmp_path / "out"))
    assert (code, out, usage_error(err)) == (2, "", message)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("registry", "message"),
    [
        ("kcmig_none.registry:REGISTRY", "cannot import registry 'kcmig_none.registry:REGISTRY': ModuleNotFoundError"),
        ("kcmig_cli.registry", "registry 'kcmig_cli.registry' is not 'package.module:object'"),
        ("kcmig_cli.registry:Backend", "registry 'kcmig_cli.registry:Backend' (EnumType) has no all_specs() method"),
    ],
)
def test_a_registry_that_cannot_be_read_is_a_usage_error(
    reference: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], registry: str, message: str
) -> None:
    code, out, err = run(capsys, "import-registry", registry, "--out", str(tmp_path / "out"))
    assert (code, out) == (2, "")
    assert usage_error(err).startswith(f"error: {message}")


def test_it_replaces_an_earlier_import_only_when_forced_and_never_other_files(
    reference: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert run(capsys, "import-registry", reference, "--out", str(out))[0] == 0
    stale = out / "gone.yaml"
    stale.write_text((out / "norm.yaml").read_text(encoding="utf-8"), encoding="utf-8")  # an earlier import's
    code, printed, err = run(capsys, "import-registry", reference, "--out", str(out))
    assert (code, printed, usage_error(err)) == (
        2,
        "",
        f"error: {out} holds an earlier import; give --force to replace it\n",
    )
    assert run(capsys, "import-registry", reference, "--out", str(out), "--force")[0] == 0
    assert not stale.exists()  # what this import did not write again is gone: no stale group is left to load
    (out / "mine.yaml").write_text("kcatalog: 1\ngroup: mine\n", encoding="utf-8")
    code, printed, err = run(capsys, "import-registry", reference, "--out", str(out), "--force")
    assert (code, printed) == (2, "")
    assert usage_error(err) == f"error: {out} holds catalog files that import-registry did not write (mine.yaml)\n"


def test_dump_registry_writes_json_to_stdout(reference: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "dump-registry", reference)
    assert code == 0
    document = json.loads(out)
    assert document["kcatalog_registry_dump"] == 1 and len(document["specs"]) == 90
    first = document["specs"][0]
    assert first == {
        "op": "norm.op_0",
        "backend": "torch",
        "target": "kcmig_cli.kernels_norm:TorchKernels.op_0",
        "capabilities": [],
        "auto": True,
    }
    kda = next(spec for spec in document["specs"] if spec["backend"] == "KDA")
    assert kda["capabilities"] == [{"device": "cuda", "min_cuda_arch": [9, 0], "max_cuda_arch": [10, 3]}]
    assert document["priority"]["norm.op_0"] == ["KDA", "triton", "torch_compile", "torch"]


def test_a_dump_that_is_not_one_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"specs": [}', encoding="utf-8")
    code, _, err = run(capsys, "import-registry", "--from-json", str(bad), "--out", str(tmp_path / "out"))
    assert (code, usage_error(err)) == (2, f"error: {bad}:1:12: not JSON: Expecting value\n")
    bad.write_text('{"specs": []}', encoding="utf-8")
    code, _, err = run(capsys, "import-registry", "--from-json", str(bad), "--out", str(tmp_path / "out"))
    assert code == 2 and usage_error(err).startswith(f"error: {bad}: not a registry dump")


def test_the_imported_catalog_round_trips_through_the_load_cache(
    reference: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert run(capsys, "import-registry", reference, "--out", str(out))[0] == 0
    cache = tmp_path / "cache"
    cold = kcatalog.load_catalog(out, cache=cache)
    warm = kcatalog.load_catalog(out, cache=cache)
    assert warm.cache_status.outcome.value == "hit"
    assert [(s.op, s.backend, s.target, s.capabilities, s.dtypes, s.auto) for s in warm.specs()] == [
        (s.op, s.backend, s.target, s.capabilities, s.dtypes, s.auto) for s in cold.specs()
    ]
    assert warm.settings == cold.settings
    assert (
        warm.info("norm.op_0").priority
        == cold.info("norm.op_0").priority
        == ("KDA", "triton", "torch_compile", "torch")
    )
