"""`kcatalog tune` records what its timings depend on; `tune --check TABLE` re-times each bucket's winner and
runner-up and exits 1 listing the buckets whose choice flipped; `tune --update TABLE` rewrites only those."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

import kcatalog
from kcatalog.pyresolve import kernel_source
from kcatalog.tools.cli import main

if TYPE_CHECKING:
    from catalog_builder import Workspace

SLOW = "import time\n\n\ndef scale(x):\n    time.sleep(0.002)\n    return x * 2\n"
FAST = "def scale(x):\n    return x * 2\n"


@pytest.fixture
def timed(workspace: Workspace, tmp_path: Path) -> tuple[Path, Path]:
    """A catalog of one op with a fast and a slow backend (it sleeps), and a table `tune` wrote for it on the CPU."""
    pytest.importorskip("torch")
    workspace.module("tc_fast", FAST)
    workspace.module("tc_slow", SLOW)
    samples = {"sizes": {"T": [1], "H": [8]}, "args": {"x": {"shape": ["T", "H"]}}, "decode": {"T": [1], "H": [8]}}
    op = workspace.op({"slow": "tc_slow:scale", "fast": "tc_fast:scale"}, reference="slow", samples=samples)
    directory = workspace.write({"scale": op}, backends=["slow", "fast"], group="tc")
    out = tmp_path / "tuned"
    assert main(["tune", "tc.scale", str(directory), "--device", "cpu", "--dtype", "float32", "--buckets", "1,16",
                 "--out", str(out)]) == 0  # fmt: skip
    return directory, out / "cpu.yaml"


def test_tune_records_what_its_timings_depend_on(timed: tuple[Path, Path]) -> None:
    import torch

    directory, table = timed
    written = yaml.safe_load(table.read_text())["tuned"]
    fast, slow = (kernel_source(f"tc_{name}:scale").digest for name in ("fast", "slow"))
    assert written["kernels"] == {"tc.scale": {"fast": fast, "slow": slow}}
    assert (written["provenance"]["device"], written["provenance"]["torch"]) == ("cpu", torch.__version__)
    catalog = kcatalog.load_catalog([directory, table], cache=False)
    assert catalog.warnings == ()
    entry = catalog.tuning.table("tc.scale", "cpu", "float32")
    assert entry is not None and entry.kernels == {"fast": fast, "slow": slow}
    assert [b.backend for b in entry.buckets] == ["fast", "fast"]


def check(capsys: pytest.CaptureFixture[str], directory: Path, flag: str, table: Path) -> tuple[int, str]:
    code = main(["tune", str(directory), "--device", "cpu", flag, str(table), "--rounds", "3"])
    return code, capsys.readouterr().out


def test_check_lists_a_swapped_winner_and_update_rewrites_only_that_bucket(
    timed: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    directory, table = timed
    assert check(capsys, directory, "--check", table)[0] == 0
    written = table.read_text()
    lines = written.splitlines()
    [row] = [i for i, line in enumerate(lines) if "at: 16," in line]
    lines[row] = lines[row].replace("backend: fast", "backend: slow")  # swapped by hand: the slow one "wins"
    swapped = "\n".join(lines) + "\n"
    table.write_text(swapped)

    code, out = check(capsys, directory, "--check", table)
    assert code == 1
    flipped = [line for line in out.splitlines() if line.startswith("flipped: ")]
    assert len(flipped) == 1
    assert re.fullmatch(
        r"flipped: tc\.scale float32 T∈\[5, ∞\]: fast [0-9.]+ µs beats slow [0-9.]+ µs in every round "
        r"\([0-9.]+x to [0-9.]+x\)",
        flipped[0],
    ), flipped
    assert out.splitlines()[-1] == f"1 bucket flipped; `kcatalog tune --update {table}` measures the flipped ones again"
    assert table.read_text() == swapped  # --check writes nothing

    code, out = check(capsys, directory, "--update", table)
    assert code == 0, out
    assert out.splitlines()[-1] == f"wrote {table}: 1 bucket measured again, 0 kernel digests updated"
    updated = table.read_text().splitlines()
    assert "backend: fast" in updated[row] and updated[row] != lines[row]  # measured again
    unchanged = [i for i, line in enumerate(lines) if "at: 1," in line]
    assert [updated[i] for i in unchanged] == [lines[i] for i in unchanged]  # the other bucket as it was
    assert check(capsys, directory, "--check", table)[0] == 0


def test_update_brings_the_digests_of_what_it_timed_again_up_to_date(
    timed: tuple[Path, Path], workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    """A kernel edited without changing which wins: the entry is stale; --update re-times the winner and the
    runner-up of every bucket, finds the choices hold, and records the digests they were timed with."""
    directory, table = timed
    (workspace.modules_dir / "tc_fast.py").write_text(FAST + "# faster still\n")
    [warning] = kcatalog.load_catalog([directory, table], cache=False).warnings
    assert warning.code == "KC235"
    code, out = check(capsys, directory, "--update", table)
    assert (code, out.splitlines()[-1]) == (0, f"wrote {table}: 0 buckets measured again, 1 kernel digest updated")
    assert kcatalog.load_catalog([directory, table], cache=False).warnings == ()
    code, out = check(capsys, directory, "--update", table)
    assert (code, out.splitlines()[-1]) == (0, f"{table}: nothing to update")


def test_check_refuses_what_it_cannot_check(timed: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    directory, table = timed
    assert main(["tune", str(directory), "--device", "cpu", "--check", str(table), "--out", "x"]) == 2
    assert (
        "error: --check and --update work on the TABLE given: no --out, --resume or --force" in capsys.readouterr().err
    )
    assert main(["tune", str(directory), "--device", "cpu"]) == 2
    assert "error: give --out DIR (where to write the table), or --check/--update TABLE" in capsys.readouterr().err
    gpu = table.with_name("cuda_9.0.yaml")
    gpu.write_text(re.sub(r"(?m)^  platform: .*$", '  platform: "cuda:9.0"', table.read_text()))
    assert main(["tune", str(directory), "--device", "cpu", "--check", str(gpu)]) == 2
    assert f"error: {gpu} is for cuda:9.0; --device cpu is cpu here" in capsys.readouterr().err


def test_resume_refuses_a_table_whose_kernels_changed(
    timed: tuple[Path, Path], workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    directory, table = timed
    (workspace.modules_dir / "tc_slow.py").write_text(SLOW + " ")
    argv = ["tune", "tc.scale", str(directory), "--device", "cpu", "--dtype", "float32", "--buckets", "1,16,64"]
    assert main([*argv, "--out", str(table.parent), "--resume"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: cannot resume from {table}: the kernel source of tc.scale [slow] changed since it was measured; "
        "--force measures every bucket again"
    )


def test_a_tie_does_not_flip_even_when_every_round_says_so() -> None:
    """One of 32 near-ties loses all five rounds by chance: under TIE at the median it is a tie, not a flip."""
    from kcatalog.tools.tune_check import TIE, Verdict
    from kcatalog.tools.tuning import Measured

    bucket = Measured("tc.scale", "float32", 16, ("T=16 H=8",), {"fast": 1.0, "slow": 2.0}, {})
    tie = Verdict(bucket, (5, None), "slow", ratios=(1.004, 1.012, 1.02, 1.008, 1.03))
    beyond = Verdict(bucket, (5, None), "slow", ratios=(1.0 + 2 * TIE, 1.01, 1.0 + 3 * TIE, 1.0 + 2 * TIE, 1.05))
    mixed = Verdict(bucket, (5, None), "slow", ratios=(0.99, 1.2, 1.2, 1.2, 1.2))
    assert (tie.flipped, beyond.flipped, mixed.flipped) == (False, True, False)
