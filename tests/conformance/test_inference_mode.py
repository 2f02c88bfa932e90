"""Every shipped op's every backend that runs on the CPU (Triton under the interpreter) under torch.inference_mode,
where its inputs and outputs are inference tensors: it agrees with its reference as `kcatalog test` checks it,
on one float32 sample each, and no kcatalog code reads a tensor's version counter."""

from __future__ import annotations

import torch
from test_shipped_catalog import SEED, interpreted  # noqa: F401  (interpreted: the fixture)
from version_reads import watched_version_reads

import kcatalog
from kcatalog.tools.conformance import Case, plan, run


def test_every_shipped_op_agrees_with_its_reference_under_inference_mode(
    interpreted: None,  # noqa: F811
    single_threaded: None,
) -> None:
    catalog = kcatalog.load_catalog()
    cases, _ = plan(catalog, catalog.ops(), device="cpu", dtypes=["float32"], base_seed=SEED, interpret=True)
    first: dict[tuple[str, str], Case] = {}
    for case in cases:  # the first (smallest) size set of each backend
        first.setdefault((case.info.id, case.spec.backend), case)
    with watched_version_reads() as reads, torch.inference_mode():
        results = list(run(list(first.values()), catalog, "cpu"))
    assert [(r.op, r.backend, r.message) for r in results if not r.passed] == []
    assert reads == []
    assert {r.op for r in results} == set(catalog.ops())
    assert any(r.backend == "triton" for r in results)
