"""Following a module's or a class's body statement by statement, as it runs at import (the rules are in
index.py)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .bindings import CLASS, DEF, FROM, INSTANCE, MODULE, VALUE, Binding, ClassIndex, Expr, Star
from .branches import decide, why_dead

State = dict[str, tuple[Binding, ...]]
# A def and a value carry nothing but their kind (their lines are not needed): one shared binding each.
_A_DEF = Binding(DEF, 0)
_A_VALUE = Binding(VALUE, 0)


@dataclass
class Walker:
    """Follows one body (a module's or a class's) statement by statement."""

    package: str  # for relative imports
    top: bool  # the module body (star imports, __all__ and attribute assignments are only recorded there)
    walrus_seen: bool = True  # the source holds ':=' somewhere: expressions are searched for assignments
    stars: list[Star] = field(default_factory=list)
    all: list[str] | None = None
    all_dynamic: bool = False
    unbound: dict[str, str] = field(default_factory=dict)
    attributes: dict[str, set[str]] = field(default_factory=dict)
    _dead: str | None = None  # inside a branch that never runs: why

    def block(self, body: Iterable[ast.stmt], state: State, certain: bool) -> State:
        for stmt in body:
            state = self.statement(stmt, state, certain)
        return state

    def dead(self, body: list[ast.stmt], state: State, why: str) -> None:
        """A branch that never runs: what it would bind is remembered, for the message, and nothing else."""
        if not body:
            return
        outer, self._dead = self._dead, self._dead or why
        stars, all_, dynamic, attributes = self.stars, self.all, self.all_dynamic, self.attributes
        self.stars, self.attributes = [], {}
        try:
            after = self.block(body, dict(state), certain=False)
        finally:
            self.stars, self.all, self.all_dynamic, self.attributes = stars, all_, dynamic, attributes
            self._dead = outer
        for name in after:
            if name not in state:
                self.unbound.setdefault(name, self._dead or why)

    def statement(self, stmt: ast.stmt, state: State, certain: bool) -> State:
        handler = _HANDLERS.get(type(stmt))  # by exact type: the ast classes are never subclassed
        return handler(self, stmt, state, certain) if handler is not None else state

    def on_def(self, stmt: ast.FunctionDef | ast.AsyncFunctionDef, state: State, certain: bool) -> State:
        return _bind(state, stmt.name, _A_DEF)

    def on_class(self, stmt: ast.ClassDef, state: State, certain: bool) -> State:
        return _bind(state, stmt.name, Binding(CLASS, stmt.lineno, cls=self.class_index(stmt)))

    def on_assign(self, stmt: ast.Assign, state: State, certain: bool) -> State:
        self.walrus(stmt.value, state)
        for target in stmt.targets:
            state = self.assign(target, state, stmt.lineno, stmt.value)
        return state

    def on_annotated(self, stmt: ast.AnnAssign, state: State, certain: bool) -> State:
        if stmt.value is None:  # `x: int` annotates, binds nothing
            if isinstance(stmt.target, ast.Name) and stmt.target.id not in state:
                self.unbound.setdefault(stmt.target.id, f"only annotated (line {stmt.lineno}), never assigned")
            return state
        self.walrus(stmt.value, state)
        return self.assign(stmt.target, state, stmt.lineno, stmt.value)

    def on_augmented(self, stmt: ast.AugAssign, state: State, certain: bool) -> State:
        self.walrus(stmt.value, state)
        if isinstance(stmt.target, ast.Name) and stmt.target.id == "__all__" and self.top:
            self.extend_all(stmt.value)
            return state
        return self.assign(stmt.target, state, stmt.lineno, None)

    def on_import(self, stmt: ast.Import, state: State, certain: bool) -> State:
        for alias in stmt.names:
            if alias.asname:
                state = _bind(state, alias.asname, Binding(MODULE, stmt.lineno, alias.name))
            else:
                top = alias.name.partition(".")[0]
                state = _bind(state, top, Binding(MODULE, stmt.lineno, top))
        return state

    def on_import_from(self, stmt: ast.ImportFrom, state: State, certain: bool) -> State:
        module = self.absolute(stmt.module, stmt.level)
        for alias in stmt.names:
            if alias.name == "*":
                if self.top and self._dead is None:
                    self.stars.append(Star(module, stmt.lineno, certain))
            else:
                state = _bind(state, alias.asname or alias.name, Binding(FROM, stmt.lineno, module, alias.name))
        return state

    def on_delete(self, stmt: ast.Delete, state: State, certain: bool) -> State:
        for target in stmt.targets:
            for name in _target_names(target):
                if name in state:
                    del state[name]
                    self.unbound[name] = f"deleted by 'del' at line {stmt.lineno}"
        return state

    def on_if(self, stmt: ast.If, state: State, certain: bool) -> State:
        self.walrus(stmt.test, state)
        decided = decide(stmt.test)
        if decided is True:
            self.dead(stmt.orelse, state, why_dead(stmt.test, False))
            return self.block(stmt.body, state, certain)
        if decided is False:
            self.dead(stmt.body, state, why_dead(stmt.test, True))
            return self.block(stmt.orelse, state, certain)
        return _merge(self.block(stmt.body, dict(state), False), self.block(stmt.orelse, dict(state), False))

    def on_for(self, stmt: ast.For | ast.AsyncFor, state: State, certain: bool) -> State:
        self.walrus(stmt.iter, state)
        looped = self.block(stmt.body, self.assign(stmt.target, dict(state), stmt.lineno, None), False)
        after = _merge(state, looped)
        return _merge(after, self.block(stmt.orelse, dict(after), False)) if stmt.orelse else after

    def on_while(self, stmt: ast.While, state: State, certain: bool) -> State:
        self.walrus(stmt.test, state)
        if decide(stmt.test) is False:
            self.dead(stmt.body, state, why_dead(stmt.test, True))
            return self.block(stmt.orelse, state, certain)
        after = _merge(state, self.block(stmt.body, dict(state), False))
        return _merge(after, self.block(stmt.orelse, dict(after), False)) if stmt.orelse else after

    def on_with(self, stmt: ast.With | ast.AsyncWith, state: State, certain: bool) -> State:
        for item in stmt.items:
            self.walrus(item.context_expr, state)
            if item.optional_vars is not None:
                state = self.assign(item.optional_vars, state, stmt.lineno, None)
        return self.block(stmt.body, state, certain)

    def on_try(self, stmt: ast.Try, state: State, certain: bool) -> State:  # also TryStar, of the same shape
        body = self.block(stmt.body, dict(state), False)
        ran = _merge(state, body)  # a handler may start anywhere in the body
        outcomes = [self.block(stmt.orelse, body, False)]
        for handler in stmt.handlers:
            handled = dict(ran)
            if handler.name:
                handled = _bind(handled, handler.name, _A_VALUE)
            handled = self.block(handler.body, handled, False)
            if handler.name and handler.name in handled:  # `except E as e` unbinds e at the handler's end
                del handled[handler.name]
            outcomes.append(handled)
        merged = outcomes[0]
        for outcome in outcomes[1:]:
            merged = _merge(merged, outcome)
        return self.block(stmt.finalbody, merged, certain)

    def on_match(self, stmt: Any, state: State, certain: bool) -> State:  # ast.Match (3.10+)
        self.walrus(stmt.subject, state)
        merged = state
        for case in stmt.cases:
            bound = dict(state)
            for node in ast.walk(case.pattern):
                for attr in ("name", "rest"):
                    captured = getattr(node, attr, None)
                    if isinstance(captured, str):
                        bound = _bind(bound, captured, _A_VALUE)
            merged = _merge(merged, self.block(case.body, bound, False))
        return merged

    def on_type_alias(self, stmt: Any, state: State, certain: bool) -> State:  # `type X = ...` (3.12)
        return _bind(state, stmt.name.id, _A_VALUE)

    def on_expression(self, stmt: ast.Expr, state: State, certain: bool) -> State:
        self.walrus(stmt.value, state)
        if self.top:
            self.call_on_all(stmt.value)
            self.setattr_call(stmt.value)
        return state

    def assign(self, target: ast.expr, state: State, line: int, value: ast.expr | None) -> State:
        if isinstance(target, ast.Name):
            if target.id == "__all__" and self.top:
                self.set_all(value)
            return _bind(state, target.id, _called(value, line) or _A_VALUE)
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                state = self.assign(element, state, line, None)
            return state
        if isinstance(target, ast.Starred):
            return self.assign(target.value, state, line, None)
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and self.top:
            self.attributes.setdefault(target.value.id, set()).add(target.attr)
        return state

    def walrus(self, expr: ast.expr | None, state: State) -> None:
        """`(name := value)` in a top-level expression binds name here (also inside comprehensions)."""
        if expr is None or not self.walrus_seen:
            return
        stack: list[ast.AST] = [expr]
        while stack:
            node = stack.pop()
            if isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
                state[node.target.id] = (_A_VALUE,)
            if not isinstance(node, ast.Lambda):  # a lambda's body is its own scope
                stack.extend(ast.iter_child_nodes(node))

    # -- __all__ ------------------------------------------------------------------------------------------

    def set_all(self, value: ast.expr | None) -> None:
        names = _literal_names(value)
        if names is None:
            self.all, self.all_dynamic = None, True
        else:
            self.all, self.all_dynamic = names, False

    def extend_all(self, value: ast.expr) -> None:
        names = _literal_names(value)
        if names is None or self.all is None:
            self.all_dynamic = True
        else:
            self.all = [*self.all, *names]

    def call_on_all(self, expr: ast.expr) -> None:
        """`__all__.extend([...])`, `__all__.append('x')`, `__all__ += [...]`: literal ones are followed."""
        if not (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Attribute)
            and isinstance(expr.func.value, ast.Name)
            and expr.func.value.id == "__all__"
        ):
            return
        args = expr.args
        if expr.func.attr == "extend" and len(args) == 1:
            self.extend_all(args[0])
        elif expr.func.attr == "append" and len(args) == 1:
            self.extend_all(ast.List(elts=[args[0]], ctx=ast.Load()))
        else:
            self.all_dynamic = True

    def setattr_call(self, expr: ast.expr) -> None:
        """`setattr(name, "attr", value)` at the top level sets an attribute, as `name.attr = value` does."""
        if (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Name)
            and expr.func.id == "setattr"
            and len(expr.args) == 3
            and isinstance(expr.args[0], ast.Name)
            and isinstance(expr.args[1], ast.Constant)
            and isinstance(expr.args[1].value, str)
        ):
            self.attributes.setdefault(expr.args[0].id, set()).add(expr.args[1].value)

    # -- classes and imports ----------------------------------------------------------------------------

    def class_index(self, node: ast.ClassDef) -> ClassIndex:
        walker = Walker(self.package, top=False, walrus_seen=self.walrus_seen)
        members = walker.block(node.body, {}, certain=True)
        slots = next(
            (
                _literal_names(stmt.value)
                for stmt in node.body
                if isinstance(stmt, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__slots__" for t in stmt.targets)
            ),
            None,
        )
        for slot in slots or ():  # each slot is a member descriptor on the class
            members.setdefault(slot, (_A_VALUE,))
        metaclass = next((dotted(k.value) for k in node.keywords if k.arg == "metaclass"), None)
        return ClassIndex(
            name=node.name,
            line=node.lineno,
            members=MappingProxyType(members),
            bases=tuple(dotted(base.value if isinstance(base, ast.Subscript) else base) for base in node.bases),
            metaclass=metaclass,
            decorators=tuple(dotted(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list),
            unbound=MappingProxyType({k: v for k, v in walker.unbound.items() if k not in members}),
        )

    def absolute(self, module: str | None, level: int) -> str:
        """The absolute name of `from <level dots><module> import ...`; '' if it goes beyond the top."""
        if level == 0:
            return module or ""
        parts = self.package.split(".") if self.package else []
        if level - 1 > len(parts) or (level - 1 == len(parts) and not module):
            return ""
        base = parts[: len(parts) - (level - 1)]
        if not base:
            return ""
        return ".".join([*base, module] if module else base)


_HANDLERS: dict[type, Callable[[Walker, Any, State, bool], State]] = {
    ast.FunctionDef: Walker.on_def,
    ast.AsyncFunctionDef: Walker.on_def,
    ast.ClassDef: Walker.on_class,
    ast.Assign: Walker.on_assign,
    ast.AnnAssign: Walker.on_annotated,
    ast.AugAssign: Walker.on_augmented,
    ast.Import: Walker.on_import,
    ast.ImportFrom: Walker.on_import_from,
    ast.Delete: Walker.on_delete,
    ast.If: Walker.on_if,
    ast.For: Walker.on_for,
    ast.AsyncFor: Walker.on_for,
    ast.While: Walker.on_while,
    ast.With: Walker.on_with,
    ast.AsyncWith: Walker.on_with,
    ast.Try: Walker.on_try,
    ast.Expr: Walker.on_expression,
}
for _name, _handler in (("TryStar", Walker.on_try), ("Match", Walker.on_match), ("TypeAlias", Walker.on_type_alias)):
    if hasattr(ast, _name):  # TryStar 3.11, TypeAlias 3.12
        _HANDLERS[getattr(ast, _name)] = _handler


def _bind(state: State, name: str, binding: Binding) -> State:
    state[name] = (binding,)
    return state


def _merge(first: State, second: State) -> State:
    """Two ways the code may have gone: a name bound in either is bound, in any of their ways."""
    if first is second:
        return first
    merged = dict(first)
    for name, bindings in second.items():
        known = merged.get(name)
        merged[name] = (
            bindings if known is None or known == bindings else (*known, *(b for b in bindings if b not in known))
        )
    return merged


def _called(value: ast.expr | None, line: int) -> Binding | None:
    """`C(...)` of a dotted name C: an INSTANCE binding (what C returns is followed where C is a class)."""
    if not isinstance(value, ast.Call):
        return None
    called = dotted(value.func)
    return Binding(INSTANCE, line, called=called) if isinstance(called, tuple) else None


def _target_names(target: ast.expr) -> Iterable[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _target_names(element)


def _literal_names(value: ast.expr | None) -> list[str] | None:
    if isinstance(value, (ast.List, ast.Tuple)) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts
    ):
        return [e.value for e in value.elts]  # type: ignore[attr-defined]
    if isinstance(value, ast.Constant) and isinstance(value.value, str):  # __slots__ = "x"
        return [value.value]
    return None


def dotted(node: ast.expr) -> Expr:
    """('a', 'b', 'C') for `a.b.C`; else a few words saying what the expression is."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return (node.id, *reversed(parts))
    if isinstance(node, ast.Call):
        return "a call expression"
    return f"an expression ({type(node).__name__})"
