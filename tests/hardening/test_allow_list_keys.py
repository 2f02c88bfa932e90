"""What one catalog imported is never handed to another whose allow-lists are narrower: every cache that can hand
out a callable (a gate's verdict function, a kernel, a layer forward, a registered torch op) belongs to one
catalog's targets, whose allow-lists are part of what they are (model.Importable, model.KernelSpec: each imports
under its own lists, runtime/room.py keeps its kernels per catalog).

Each case loads the same files twice in one process: first without a caller's allow-list, using the callable
once; then with a list that leaves out the module the object is really defined in. The object is made by a
factory of that module, so the static checks see a name of the allowed module (the load succeeds) and only the
import-time check can refuse it. It must, and the forbidden function is never called again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import kcatalog
from kcatalog.errors import KernelImportError

FORBIDDEN = """\
CALLS = []


def make(name):
    def made(*args, **kwargs):
        CALLS.append(name)
        return True if name == "gate" else args[0] if args else name

    return made
"""
# Allowed by name; each object it binds is defined in kc_keys_forbidden (its __module__), made by its factory.
ALLOWED = """\
import kc_keys_forbidden as _factory

gate = _factory.make("gate")
fast = _factory.make("fast")
forward = _factory.make("forward")


def ref(x):
    return x
"""


def _catalog(workspace: Any) -> Path:
    workspace.module("kc_keys_forbidden", FORBIDDEN)
    workspace.module("kc_keys_allowed", ALLOWED)
    backends = {
        "fast": {"target": "kc_keys_allowed:fast", "eligible": "kc_keys_allowed:gate"},
        "ref": "kc_keys_allowed:ref",
    }
    op = workspace.op(backends, reference="ref", fake="reference")
    directory = workspace.write({"tag": op}, backends=["fast", "ref"])
    layers = {
        "kcatalog": 1,
        "layers": {
            "m": {"classes": ["kc_keys_allowed:Missing"], "forward": "kc_keys_allowed:forward", "ops": ["g.tag"]}
        },
    }
    workspace.files({"model.layers.yaml": layers})
    return directory


def _calls() -> list[Any]:
    import kc_keys_forbidden

    return kc_keys_forbidden.CALLS  # type: ignore[no-any-return]


CACHES = pytest.mark.parametrize("cache", [False, True], ids=["cold", "through the load cache"])


@CACHES
def test_a_gate_asked_by_a_wide_catalog_is_refused_by_a_narrow_one(workspace: Any, cache: bool) -> None:
    torch = pytest.importorskip("torch")
    directory = _catalog(workspace)
    wide = kcatalog.load_catalog(directory, cache=cache, check_targets=False)  # the layer class is not there
    wide.op("g.tag")(torch.zeros(2))
    assert _calls() == ["gate", "fast"]
    narrow = kcatalog.load_catalog(directory, cache=cache, allowed_modules=["kc_keys_allowed"], check_targets=False)
    narrow.op("g.tag")(torch.zeros(2))
    assert _calls() == ["gate", "fast"]  # neither the gate nor the kernel ran for the narrow catalog
    refused = narrow.select("g.tag", "cpu", "float32", call=((torch.zeros(2),), {}))
    assert refused.backend == "ref"
    reason = refused.rejected[0].reason
    assert "its gate raised KernelImportError" in reason
    assert "defined in module 'kc_keys_forbidden', outside the allowed modules (kc_keys_allowed)" in reason
    assert _calls() == ["gate", "fast"]


@CACHES
def test_a_kernel_and_a_layer_forward_imported_by_a_wide_catalog_are_refused_by_a_narrow_one(
    workspace: Any, cache: bool
) -> None:
    directory = _catalog(workspace)
    wide = kcatalog.load_catalog(directory, cache=cache, check_targets=False)
    assert wide.kernel("g.tag", "fast")() == "fast"
    assert wide.layer_mappings[0].forward.load()() == "forward"
    narrow = kcatalog.load_catalog(directory, cache=cache, allowed_modules=["kc_keys_allowed"], check_targets=False)
    with pytest.raises(KernelImportError) as kernel:
        narrow.kernel("g.tag", "fast")
    assert isinstance(kernel.value.__cause__, PermissionError)
    with pytest.raises(KernelImportError) as forward:
        narrow.layer_mappings[0].forward.load()
    assert isinstance(forward.value.__cause__, PermissionError)
    assert _calls() == ["fast", "forward"]


def test_the_narrow_catalog_first_then_the_wide_one(workspace: Any) -> None:
    """The other order: a refusal is not remembered for the catalog whose lists allow the object."""
    directory = _catalog(workspace)
    narrow = kcatalog.load_catalog(directory, cache=False, allowed_modules=["kc_keys_allowed"], check_targets=False)
    with pytest.raises(KernelImportError):
        narrow.kernel("g.tag", "fast")
    wide = kcatalog.load_catalog(directory, cache=False, check_targets=False)
    assert wide.kernel("g.tag", "fast")() == "fast"


def test_a_torch_op_of_a_wide_catalog_is_not_the_narrow_catalogs(workspace: Any) -> None:
    """Torch's operator registry is process-wide: a second catalog cannot take over (and so call through) the
    torch op another registered under the same name; under its own namespace it dispatches under its own lists."""
    torch = pytest.importorskip("torch")
    directory = _catalog(workspace)
    wide = kcatalog.load_catalog(directory, cache=False, check_targets=False)
    wide.register_torch_ops("kc_keys_wide")["g.tag"](torch.zeros(2))
    assert _calls() == ["gate", "fast"]
    narrow = kcatalog.load_catalog(directory, cache=False, allowed_modules=["kc_keys_allowed"], check_targets=False)
    with pytest.raises(kcatalog.errors.NamespaceTakenError):
        narrow.register_torch_ops("kc_keys_wide")
    narrow.register_torch_ops("kc_keys_narrow")["g.tag"](torch.zeros(2))
    assert _calls() == [
        "gate",
        "fast",
    ]  # the narrow catalog's torch op ran its gate and kernel under its own lists: refused


@pytest.mark.parametrize(
    ("target", "via"),
    [
        ("kc_keys_shell:system", "os"),  # `from os import system`: os's star import of posix cannot be followed
        ("kc_keys_shell:NamedTuple.anything", "typing"),  # an attribute of typing's NamedTuple (not a class there)
    ],
)
def test_target_checks_cached_without_a_list_still_apply_the_callers(workspace: Any, target: str, via: str) -> None:
    """The static target checks are cached with the files (the load cache), whatever list the load that stored
    them had: a target they could not follow to its definition is refused by a later load whose list leaves out a
    module it was followed into (KC305), as a cold load refuses it."""
    workspace.module(
        "kc_keys_shell", "from os import system\nfrom typing import NamedTuple\n\n\ndef ref(x):\n    return x\n"
    )
    backends = {"shell": target, "ref": "kc_keys_shell:ref"}
    directory = workspace.write({"tag": workspace.op(backends, reference="ref")}, backends=["shell", "ref"])
    first = kcatalog.load_catalog(directory)
    assert first.cache_status.outcome is kcatalog.CacheOutcome.WRITTEN
    assert [w.code for w in first.warnings] == ["KC304"]
    expected = (
        f"{directory / 'g.yaml'}:12:17: KC305 target '{target}' names an object imported from module '{via}', outside the allowed "
        "modules (allowed_modules: kc_keys_shell); where it is defined is not verifiable statically"
    )
    for cache in (True, False):
        with pytest.raises(kcatalog.CatalogError) as refused:
            kcatalog.load_catalog(directory, cache=cache, allowed_modules=["kc_keys_shell"])
        assert [str(d) for d in refused.value.diagnostics] == [expected]
    assert kcatalog.load_catalog(directory).cache_status.outcome is kcatalog.CacheOutcome.HIT  # the entry was used


def test_a_gate_and_a_layer_forward_re_exported_from_outside_are_refused(workspace: Any) -> None:
    """Every declared target is checked alike: a gate (`eligible:`) and a layer mapping's forward that an allowed
    module only re-exports from os are KC305, not the warning that os's own star imports would give."""
    workspace.module("kc_keys_roles", "from os import system\n\n\ndef ref(x):\n    return x\n")
    backends = {"fast": {"target": "kc_keys_roles:ref", "eligible": "kc_keys_roles:system"}, "ref": "kc_keys_roles:ref"}
    directory = workspace.write({"tag": workspace.op(backends, reference="ref")}, backends=["fast", "ref"])
    layers = {
        "kcatalog": 1,
        "layers": {"m": {"classes": ["kc_keys_roles:ref"], "forward": "kc_keys_roles:system", "ops": ["g.tag"]}},
    }
    workspace.files({"model.layers.yaml": layers})
    _, diagnostics = kcatalog.check_catalog([directory], allowed_modules=["kc_keys_roles"])
    refused = [d for d in diagnostics if d.code == "KC305"]
    assert [(Path(d.location.path).name, d.location.line) for d in refused if d.location] == [
        ("g.yaml", 13),
        ("model.layers.yaml", 6),
    ]
    assert all("names an object imported from module 'os'" in d.message for d in refused)
