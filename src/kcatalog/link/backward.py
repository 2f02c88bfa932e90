"""Each op's `backward:` linked to the op it names and checked against the convention (KC250-KC255): the backward
op takes one gradient per differentiable output of the forward op, then the forward op's parameters that `inputs`
names (by default all of them), then one Tensor per `outputs` entry and one per `saves` entry, and returns one
gradient per `grads` entry; it runs wherever the forward op does.

Runs after extensions, since the backends an extension adds must be covered too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .. import codes
from ..diagnostics import Diagnostics
from ..errors import Location, did_you_mean
from ..model import Backward, Capability, KernelSpec
from ..platform import covers, describe_capabilities
from .context import LinkContext
from .pending import PendingOp
from .torch_schema import SchemaParameter, SchemaTypes, schema_types


def link_backwards(context: LinkContext, pending_ops: Mapping[str, PendingOp]) -> None:
    """Link every op's backward (kept on the op where it follows the convention), reporting what is wrong."""
    for pending in pending_ops.values():
        if pending.op.backward is not None:
            pending.backward = _Link(context, pending_ops, pending).backward()


@dataclass
class _Link:
    context: LinkContext
    ops: Mapping[str, PendingOp]
    forward: PendingOp

    @property
    def diagnostics(self) -> Diagnostics:
        return self.context.diagnostics

    def at(self, *path: str | int) -> Location:
        """Where a value of the forward op's `backward:` is written."""
        return self.forward.file.locations.value(("ops", self.forward.name, "backward", *path))

    def backward(self) -> Backward | None:
        forward, decl = self.forward, self.forward.op.backward
        assert decl is not None
        key = forward.file.locations.key(("ops", forward.name, "backward"))
        if forward.op.mutates:
            message = (
                f"op '{forward.op_id}' mutates {', '.join(forward.op.mutates)} and so cannot have a backward: autograd "
                "differentiates functions; declare the backward on a functional op (one that returns its results)"
            )
            self.diagnostics.error(codes.BACKWARD_OF_MUTATING, message, key)
            return None
        group = forward.op_id.partition(".")[0]
        op_id = decl.op if "." in decl.op else f"{group}.{decl.op}"
        target = self.ops.get(op_id)
        if target is None:
            if not self.context.broken.covers(op_id):  # a broken op's own errors say what is wrong with it
                known = [o for o in self.ops if o != forward.op_id]
                self.diagnostics.error(
                    codes.BACKWARD_UNKNOWN_OP,
                    f"backward of op '{forward.op_id}' names op '{op_id}', which the catalog does not declare"
                    f"{did_you_mean(op_id, known)}",
                    self.at("op"),
                )
            return None
        forward_types = self.types(forward, f"op '{forward.op_id}' declares a backward")
        backward_types = self.types(target, f"op '{op_id}' is the backward of op '{forward.op_id}'")
        if forward_types is None or backward_types is None:
            return None
        saves = self.positions(forward_types, "saves", decl.saves, ())
        outputs = self.positions(forward_types, "outputs", decl.outputs, saves or ())
        inputs = self.inputs(forward_types)
        grads_ok = self.grads(forward_types)
        if saves is None or outputs is None or inputs is None or not grads_ok:
            return None
        if not self.differentiable(forward_types, saves):
            return None
        linked = Backward(op_id, decl.grads, inputs, outputs, saves, key)
        if not self.convention(target, forward_types, backward_types, linked):
            return None
        self.coverage(target, op_id)
        return linked

    def types(self, pending: PendingOp, role: str) -> SchemaTypes | None:
        """The op's signature in torch schema types (both ops of a pair become torch ops); None where it has none."""
        signature = pending.op.signature
        if signature is None:
            message = f"{role} but declares no signature: the pair become torch ops, whose schemas need one"
            self.diagnostics.error(codes.BACKWARD_SIGNATURE, message, pending.location)
            return None
        try:
            return schema_types(signature)
        except ValueError as exc:
            message = f"{role}, so it must become a torch op, but it cannot: {exc}"
            where = pending.file.locations.value(("ops", pending.name, "signature"))
            self.diagnostics.error(codes.BACKWARD_SIGNATURE, message, where)
            return None

    def grads(self, forward: SchemaTypes) -> bool:
        """Each entry names a Tensor parameter of the forward op, once."""
        decl, op_id = self.forward.op.backward, self.forward.op_id
        assert decl is not None
        kinds = {p.name: p.kind for p in forward.parameters}
        tensors = [name for name, kind in kinds.items() if kind == "Tensor"]
        ok = True
        for index, name in enumerate(decl.grads):
            problem = None
            if name not in kinds:
                problem = f"names '{name}', not a parameter of op '{op_id}'{did_you_mean(name, list(kinds))}"
            elif kinds[name] != "Tensor":
                problem = f"names '{name}', of type {kinds[name]}: only Tensor parameters get a gradient"
            elif name in decl.grads[:index]:
                problem = f"names '{name}' twice"
            if problem is not None:
                self.diagnostics.error(
                    codes.BACKWARD_GRADS,
                    f"grads of the backward of op '{op_id}' {problem}; its Tensor parameters: {', '.join(tensors)}",
                    self.at("grads", index),
                )
                ok = False
        return ok

    def inputs(self, forward: SchemaTypes) -> tuple[str, ...] | None:
        """The forward op's parameters handed to the backward op: those `inputs` names, each once (all by default)."""
        decl, op_id = self.forward.op.backward, self.forward.op_id
        assert decl is not None
        names = [p.name for p in forward.parameters]
        if decl.inputs is None:
            return tuple(names)
        ok = True
        for index, name in enumerate(decl.inputs):
            problem = None
            if name not in names:
                problem = f"names '{name}', not a parameter of op '{op_id}'{did_you_mean(name, names)}"
            elif name in decl.inputs[:index]:
                problem = f"names '{name}' twice"
            if problem is not None:
                self.diagnostics.error(
                    codes.BACKWARD_GRADS,
                    f"inputs of the backward of op '{op_id}' {problem}; its parameters: {', '.join(names) or 'none'}",
                    self.at("inputs", index),
                )
                ok = False
        return decl.inputs if ok else None

    def positions(
        self, forward: SchemaTypes, field: str, entries: tuple[str, ...], taken: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        """The positions of the outputs `saves` (or `outputs`) hands over: each a Tensor output of the forward op,
        once, and none that `taken` (the saved ones, for `outputs`) holds already."""
        op_id = self.forward.op_id
        found: list[int] = []
        ok = True
        outputs = ", ".join(_output(i, len(forward.returns)) for i in range(len(forward.returns))) or "none"
        for index, text in enumerate(entries):
            position = int(text.partition(".")[2])
            problem = None
            if position >= len(forward.returns):
                problem = f"names '{text}', but op '{op_id}' has no such output; its outputs: {outputs}"
            elif forward.returns[position] != "Tensor":
                problem = f"names '{text}', of type {forward.returns[position]}: only Tensor outputs can be handed over"
            elif position in found:
                problem = f"names '{text}' twice"
            elif position in taken:
                problem = (
                    f"names '{text}', which saves names too: an output handed over stays differentiable (outputs) "
                    "or is not (saves), not both"
                )
            if problem is not None:
                self.diagnostics.error(
                    codes.BACKWARD_SAVES, f"{field} of the backward of op '{op_id}' {problem}", self.at(field, index)
                )
                ok = False
            found.append(position)
        return tuple(found) if ok else None

    def differentiable(self, forward: SchemaTypes, saves: tuple[int, ...]) -> bool:
        """The forward op has an output to differentiate, and each one not saved is a Tensor."""
        op_id, pending = self.forward.op_id, self.forward
        where = pending.file.locations.value(("ops", pending.name, "signature"))
        differentiable = [i for i in range(len(forward.returns)) if i not in saves]
        if not differentiable:
            what = "returns nothing" if not forward.returns else "saves every output it returns"
            message = f"op '{op_id}' declares a backward but {what}: there is no output to differentiate"
            self.diagnostics.error(codes.BACKWARD_SIGNATURE, message, where)
            return False
        for i in differentiable:
            if forward.returns[i] != "Tensor":
                self.diagnostics.error(
                    codes.BACKWARD_SIGNATURE,
                    f"op '{op_id}' declares a backward, but its output {_output(i, len(forward.returns))} is "
                    f"{forward.returns[i]}: only Tensor outputs have gradients",
                    where,
                )
                return False
        return True

    def convention(self, target: PendingOp, forward: SchemaTypes, backward: SchemaTypes, linked: Backward) -> bool:
        """The backward op's signature follows the convention; else one diagnostic, the first mismatch first."""
        op_id, n_out, n_grads = linked.op, len(forward.returns), len(linked.grads)
        gradients = [_output(i, n_out) for i in range(n_out) if i not in linked.saves]
        by_name = {p.name: p for p in forward.parameters}
        expected: list[tuple[str, SchemaParameter | None]] = [(f"the gradient of {label}", None) for label in gradients]
        expected += [(f"parameter '{name}' of op '{self.forward.op_id}'", by_name[name]) for name in linked.inputs]
        expected += [(f"the output {_output(i, n_out)} itself", None) for i in linked.outputs]
        expected += [(f"the saved output {_output(i, n_out)}", None) for i in linked.saves]
        problem = _mismatch(expected, backward.parameters)
        if problem is None and backward.returns != ("Tensor",) * n_grads:
            returns = ", ".join(backward.returns) or "nothing"
            problem = (
                f"it returns {returns}, where {n_grads} Tensor{'s' * (n_grads != 1)} (one per grads entry) are due"
            )
        if problem is None:
            return True
        shown = [f"{p.name}: {_python(p.kind)}" if p is not None else f"a Tensor, {what}" for what, p in expected]
        grads = ", ".join(linked.grads)
        self.diagnostics.error(
            codes.BACKWARD_SIGNATURE,
            f"backward op '{op_id}' of op '{self.forward.op_id}' does not follow the convention: {problem}; it should "
            f"take ({'; '.join(shown)}) and return {n_grads} Tensor{'s' * (n_grads != 1)} (the gradients of {grads})",
            target.file.locations.value(("ops", target.name, "signature")),
        )
        return False

    def coverage(self, target: PendingOp, op_id: str) -> None:
        """Every backend of the forward op runs (capabilities and dtypes) where some backend of the backward does."""
        candidates = [spec for spec in target.specs.values() if spec.auto]  # priority never picks the others
        for spec in self.forward.specs.values():
            uncovered = _uncovered(spec, candidates)
            if not uncovered:
                continue
            where = " and ".join(
                " ".join(part for part in (", ".join(d for d in dtypes if d), _place(cap)) if part)
                for cap, dtypes in uncovered
            )
            theirs = ", ".join(
                f"{s.backend} ({describe_capabilities(s.capabilities)}"
                + (f"; {', '.join(s.dtypes)})" if s.dtypes is not None else ")")
                for s in candidates
            )
            self.diagnostics.error(
                codes.BACKWARD_UNCOVERED,
                f"backend '{spec.backend}' of op '{self.forward.op_id}' runs {where}, where no backend of its "
                f"backward op '{op_id}' does; backends of '{op_id}' chosen by priority: {theirs or 'none'}",
                spec.location,
            )


def _uncovered(
    spec: KernelSpec, candidates: list[KernelSpec]
) -> list[tuple[Capability | None, tuple[str | None, ...]]]:
    """Each capability of `spec` (None: anywhere) with the dtypes of `spec` no candidate covers there."""
    found = []
    for cap in spec.capabilities or (None,):
        dtypes = spec.dtypes if spec.dtypes is not None else (None,)
        missing = tuple(
            dtype
            for dtype in dtypes
            if not any(
                covers(c.capabilities, cap) and (c.dtypes is None or (dtype is not None and dtype in c.dtypes))
                for c in candidates
            )
        )
        if missing:
            found.append((cap, missing))
    return found


def _mismatch(expected: list[tuple[str, SchemaParameter | None]], actual: tuple[SchemaParameter, ...]) -> str | None:
    """What first differs between the parameters due and the backward op's (None: nothing)."""
    for index, ((what, due), got) in enumerate(zip(expected, actual)):
        place = f"parameter {index + 1} ('{got.name}')"
        if due is None:
            if got.kind != "Tensor":
                return f"{place} should be {what}, a Tensor, but is {got.kind}"
            continue
        if got.name != due.name:
            return f"{place} should be {what}"
        if got.kind != due.kind or got.keyword_only != due.keyword_only:
            return f"{place} is {_kind(got)}, where {what} is {_kind(due)}"
        if got.default is not None and got.default != due.default:
            return f"{place} defaults to {got.default}, where {what} defaults to {due.default or 'nothing'}"
    if len(actual) != len(expected):
        extra = len(actual) > len(expected)
        counted = f"it takes {len(actual)} parameters, {'more' if extra else 'fewer'} than the {len(expected)} due"
        return counted + ("" if extra else f" (missing: {expected[len(actual)][0]})")
    return None


def _kind(p: SchemaParameter) -> str:
    return f"{_python(p.kind)}{' (keyword-only)' if p.keyword_only else ''}"


def _python(kind: str) -> str:
    """A schema type as the signature writes it: 'SymInt' -> 'int', 'Tensor?' -> 'Optional[Tensor]'."""
    base = kind.rstrip("?")
    listed = base.endswith("[]")
    base = {"SymInt": "int", "ScalarType": "torch.dtype"}.get(base.removesuffix("[]"), base.removesuffix("[]"))
    text = f"list[{base}]" if listed else base
    return f"Optional[{text}]" if kind.endswith("?") else text


def _place(cap: Capability | None) -> str:
    """'anywhere', or 'on cuda >= 8.0'."""
    return "anywhere" if cap is None else f"on {describe_capabilities((cap,))}"


def _output(index: int, count: int) -> str:
    """'return' for an op's only output, 'return.N' for one of several."""
    return "return" if count == 1 else f"return.{index}"
