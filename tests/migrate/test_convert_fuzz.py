"""Whatever a registry holds, what import-registry writes validates, and every spec is either written as the
registry stated it or named by an error: nothing half-written, nothing dropped silently."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kcatalog
from kcatalog.migrate.convert import convert
from kcatalog.migrate.source import RegistryDump

NAMES = st.sampled_from(["rms_norm", "on", "null", "Yes", "op-1", "a.b", "x", "True"])
GROUPS = st.sampled_from(["norm", "no", "moe", "Bad"])
BACKENDS = st.sampled_from(["torch", "KDA", "off", "jit-cuda", "torch_compile", "~", "_private"])
DEVICES = st.sampled_from(["cuda", "hip", "musa", "tpu", "NPU", "on"])
ARCHS = st.one_of(
    st.none(), st.tuples(st.integers(0, 12), st.integers(0, 12)).map(list), st.sampled_from(["9.0", "sm90", "10.3"])
)
CAPABILITY = st.fixed_dictionaries(
    {"device": DEVICES}, optional={"min_cuda_arch": ARCHS, "max_arch": ARCHS, "sm": st.integers(0, 2)}
)
SPEC = st.fixed_dictionaries(
    {
        "op": st.builds(lambda g, n: f"{g}.{n}", GROUPS, NAMES),
        "backend": BACKENDS,
        "target": st.sampled_from(["pkg.mod:Class.method", "pkg.mod:fn", "pkg.mod", "pkg:yes"]),
        "capabilities": st.lists(CAPABILITY, max_size=3),
    },
    optional={
        "auto": st.booleans(),
        "priority": st.lists(BACKENDS, max_size=3),
    },
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(SPEC, max_size=12))
def test_what_is_written_validates_and_what_is_not_is_named(specs: list[dict[str, Any]]) -> None:
    converted = convert(RegistryDump("fuzz:registry", tuple(specs)))
    left_out = [d for d in converted.diagnostics if d.is_error and "left out" in d.message]
    if not converted.files:  # nothing could be written: every spec says why
        assert len(left_out) == len(specs)
        return
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in converted.files.items():
            (Path(tmp) / name).write_text(text, encoding="utf-8")
        catalog, diagnostics = kcatalog.check_catalog(tmp, check_targets=False)
        assert catalog is not None, [str(d) for d in diagnostics] + list(converted.files.values())
    written = {(s.op, s.backend) for s in catalog.specs()}
    assert len(written) + len(left_out) == len(specs)
    checked: set[tuple[str, str]] = set()
    for index, spec in enumerate(specs):  # each written spec as the registry stated it
        key = (spec["op"], spec["backend"])
        if key in written and key not in checked and not _left_out(index, converted.diagnostics):
            checked.add(key)
            loaded = catalog.info(key[0]).backends[key[1]]
            assert str(loaded.target) == spec["target"]
            assert {c.device for c in loaded.capabilities} == {c["device"] for c in spec["capabilities"]}
            assert loaded.auto is spec.get("auto", True)
    assert checked == written


def _left_out(index: int, diagnostics: Any) -> bool:
    return any(d.message.startswith(f"spec {index} (") and d.message.endswith("left out") for d in diagnostics)
