"""Ranks agree: 4 processes under torch.distributed (gloo), in one spawn: all consistent passes; one rank with
KCATALOG_OVERRIDES set differently, and one rank whose 'triton' kernel fails to import, raise on every rank naming
the op, the rank and the fallback; check_consistent is timed and a shipped op gives the same bits on every rank.
The script is benchmarks/rank_consistency.py, which also runs with NCCL (one GPU per rank) and under torchrun."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from catalog_builder import child_env

if TYPE_CHECKING:
    from catalog_builder import Workspace

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "rank_consistency.py"


def run_ranks(tmp_path: Path, world: int) -> tuple[str, list[dict[str, Any]]]:
    """The script with `world` gloo ranks: what it printed, and every rank's report (it must exit 0)."""
    pytest.importorskip("torch.distributed")
    report = tmp_path / "ranks.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--backend", "gloo", "--world-size", str(world), "--json", str(report)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, json.loads(report.read_text())["ranks"]


def test_four_gloo_ranks_agree_or_raise_naming_op_rank_and_fallback(tmp_path: Path) -> None:
    _, ranks = run_ranks(tmp_path, 4)
    assert [cases["rank"] for cases in ranks] == [0, 1, 2, 3]
    for cases in ranks:  # every rank saw the same outcome
        timing = cases["timing"]
        assert timing["repeats"] == 20 and 0 < timing["median_s"] and 0 < timing["first_s"]
        assert cases["shipped_op"] == {
            "device": "cpu",
            "dtype": "torch.float32",
            "backend": ranks[0]["shipped_op"]["backend"],
            "bit_identical_to_every_rank": True,
        }
        assert cases["consistent"] == {"raised": None}
        override = cases["override"]["message"]
        assert override == (
            "ranks resolved 1 op differently:\n"
            "  norm.scale: ranks 0, 1, 2: float32: triton (by catalog default priority); "
            "rank 3: float32: torch (by override KCATALOG_OVERRIDES norm.scale=torch)"
        )
        failed = cases["import_fails"]["message"]
        assert failed == (
            "ranks resolved 1 op differently:\n"
            "  norm.scale: ranks 0, 1, 2: float32: triton (by catalog default priority); "
            "rank 3: float32: torch (by catalog default priority, after triton import failed on first use: "
            "ImportError: libtriton.so: cannot open shared object file)"
        )


def test_one_rank_runs_what_needs_no_second_rank(tmp_path: Path) -> None:
    printed, (cases,) = run_ranks(tmp_path, 1)
    assert set(cases) == {"rank", "timing", "consistent", "shipped_op"}  # the two cases that need a second rank
    assert cases["consistent"] == {"raised": None} and cases["shipped_op"]["bit_identical_to_every_rank"]
    assert "override: not run (one rank)" in printed


def test_check_consistent_needs_a_process_group(workspace: Workspace) -> None:
    pytest.importorskip("torch.distributed")
    import kcatalog

    catalog = kcatalog.load_catalog(workspace.minimal(), cache=False)
    with pytest.raises(kcatalog.CatalogError, match="^check_consistent needs an initialised torch.distributed"):
        catalog.check_consistent()
