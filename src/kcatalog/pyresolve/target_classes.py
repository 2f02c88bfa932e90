"""What an attribute of a resolved name is, above all a class member (`Class.method` targets): the class body,
then its bases in C3 order, across modules (inherited methods, builtin bases). A base that is a call, or a
metaclass or decorator that may add attributes, makes a missing member "not verifiable statically".

An instance made where its name is bound (`op = Op()` at the top of a module, or in a class body) has the
members of the class called; where the call may return something else (a function's result, a class whose
`__new__` or metaclass decides, a base that cannot be read), or the member is not in the class (an instance may
get it in `__init__`), the target is not verifiable statically, and the message says which."""

from __future__ import annotations

import builtins

from .. import codes
from ..errors import did_you_mean
from .index import CLASS, DEF, INSTANCE, PLAIN_DECORATORS, PLAIN_METACLASSES, VALUE, Binding, ClassIndex, Expr
from .target_bindings import MAX_HOPS, ModuleNames, Obj, Result, unique
from .target_problems import UNVERIFIABLE, Problem, pick, quote, reason


class Members:
    """Resolves `obj.attr` for whatever a name is: a module's names, a class's members through its bases, a
    builtin's attributes, or those set on a top-level name of its module."""

    def __init__(self, names: ModuleNames) -> None:
        self._names = names
        self._mros: dict[int, list[Obj | Problem]] = {}  # by id of the ClassIndex, which the index keeps alive

    def attribute(self, obj: Obj, attr: str, owner: str, hops: int) -> Result:
        """What `obj.attr` is, statically. `owner` is how the target path spells obj, for messages."""
        if hops > MAX_HOPS:
            return Problem(codes.TARGET_UNVERIFIABLE, f"too many re-exports and bases to follow; {UNVERIFIABLE}")
        if obj.kind == "module":
            assert obj.module is not None  # modules always know their name
            return self._names.module_attribute(obj.module, attr, hops, frozenset())
        if obj.kind == CLASS:
            return self._class_attribute(obj, attr, owner, hops)
        if obj.kind == INSTANCE:
            return self._instance_attribute(obj, attr, owner, hops)
        if obj.kind == "builtin":
            if hasattr(obj.value, attr):
                return [Obj("builtin", "builtins", attr)]
            return Problem(codes.TARGET_ATTRIBUTE_MISSING, f"{quote(owner)} has no attribute {quote(attr)}")
        if attr in self._names.assigned_attributes(obj):  # `fn.cuda = impl` at the top level of its module
            return [Obj(VALUE, obj.module, f"{obj.qualname}.{attr}")]
        return Problem(
            codes.TARGET_UNVERIFIABLE,
            f"{quote(owner)} is not a class in the source; {quote(attr)} on it is not verifiable statically",
        )

    def _class_attribute(self, obj: Obj, attr: str, owner: str, hops: int) -> Result:
        """A member of a class or of one of its bases, in method resolution order."""
        assert obj.cls is not None
        own = self._member(obj, attr, hops)
        if own is not None:
            return own
        mro = self._mro(obj, hops)
        unreadable: Problem | None = None
        for entry in mro[1:]:
            if isinstance(entry, Problem):
                unreadable = unreadable or entry
                continue
            if entry.kind == "builtin":
                if any(attr in vars(base) for base in entry.value.__mro__):
                    return [Obj("builtin", None if unreadable else "builtins", attr)]
                continue
            member = self._member(entry, attr, hops)
            if member is not None:
                if unreadable is not None and not isinstance(member, Problem):
                    return [Obj(o.kind, None, o.qualname, o.cls, o.scope, o.value) for o in member]
                return member
        if unreadable is not None:
            return Problem(
                codes.TARGET_UNVERIFIABLE,
                f"{quote(attr)} not found in class {quote(owner)} or the bases that could be read: "
                f"{reason(unreadable.text)}; {UNVERIFIABLE}",
            )
        for entry in mro:
            if isinstance(entry, Obj) and entry.cls is not None:
                concern = _opaque_class(entry.cls)
                if concern is not None:
                    return Problem(
                        codes.TARGET_UNVERIFIABLE,
                        f"{quote(attr)} not found in class {quote(owner)}, {concern}; {UNVERIFIABLE}",
                    )
        classes = [e for e in mro if isinstance(e, Obj) and e.cls is not None]
        members = [m for e in classes for m in (*e.cls.members, *self._names.assigned_attributes(e))]  # type: ignore[union-attr]
        bases = [e.qualname if e.module == obj.module else f"{e.module}.{e.qualname}" for e in classes[1:]]
        nor = f", nor do its bases ({', '.join(bases)})" if bases else ""
        why = obj.cls.unbound.get(attr)
        note = f" ({quote(attr)} is {why})" if why else ""
        return Problem(
            codes.TARGET_ATTRIBUTE_MISSING,
            f"class {quote(owner)} defines no {quote(attr)}{nor}{note}{did_you_mean(attr, members) if not why else ''}",
        )

    def _instance_attribute(self, obj: Obj, attr: str, owner: str, hops: int) -> Result:
        """A member of the class called to make the instance (through its bases), where the call surely
        returns an instance of it."""
        if attr in self._names.assigned_attributes(obj):  # `op.cuda = impl` at the top level of its module
            return [Obj(VALUE, obj.module, f"{obj.qualname}.{attr}")]
        binding: Binding = obj.value
        assert obj.module is not None  # an instance is bound in a module's source
        spelled = ".".join(binding.called)
        made = (
            f"{quote(owner)} is the result of a call to {quote(spelled)} (line {binding.line} of {quote(obj.module)})"
        )
        called = self._dotted(obj.module, binding.called, obj.scope, hops + 1)
        if called is None:
            return Problem(
                codes.TARGET_UNVERIFIABLE, f"{made}, and {quote(binding.called[0])} is not bound there; {UNVERIFIABLE}"
            )
        if isinstance(called, Problem):
            return Problem(
                codes.TARGET_UNVERIFIABLE,
                f"{made}, which cannot be read: {reason(called.text)}; {UNVERIFIABLE}",
                through=called.through,
            )
        found: list[Obj] = []
        problems: list[Problem] = []
        for cls in called:
            if cls.kind != CLASS:
                what = {DEF: "a function", VALUE: "a value", INSTANCE: "an instance", "module": "a module"}
                problems.append(
                    Problem(
                        codes.TARGET_UNVERIFIABLE,
                        f"{made}; {quote(spelled)} is {what.get(cls.kind, 'not a class in the source')}, whose "
                        f"result only running it shows; {quote(attr)} on it is {UNVERIFIABLE}",
                    )
                )
                continue
            instead = self._call_may_return_another(cls, hops + 1)
            if instead is not None:
                problems.append(
                    Problem(
                        codes.TARGET_UNVERIFIABLE,
                        f"{made}; class {quote(spelled)} {instead}; {quote(attr)} on it is {UNVERIFIABLE}",
                    )
                )
                continue
            member = self._class_attribute(cls, attr, spelled, hops + 1)
            if isinstance(member, list):
                found.extend(member)
            elif member.code == codes.TARGET_ATTRIBUTE_MISSING:  # an instance may be given it in __init__
                problems.append(
                    Problem(
                        codes.TARGET_UNVERIFIABLE,
                        f"{made}: {member.text}, and an instance may be given attributes when it runs "
                        f"(in __init__, say); {UNVERIFIABLE}",
                    )
                )
            else:
                problems.append(Problem(member.code, f"{made}: {member.text}", through=member.through))
        return unique(found) if found else pick(problems)

    def _call_may_return_another(self, cls: Obj, hops: int) -> str | None:
        """Why calling the class may return something that is not an instance of it, or None: a `__new__` or a
        metaclass of its own or of a base (one that cannot be read may have either)."""
        for entry in self._mro(cls, hops):
            if isinstance(entry, Problem):
                return f"has a base that cannot be read, which may define __new__ ({reason(entry.text)})"
            if entry.cls is None:  # a builtin type: its __new__ makes an instance of the class
                continue
            if "__new__" in entry.cls.members:
                where = "" if entry is cls else f" (in its base {quote(entry.qualname)})"
                return f"defines __new__{where}, which may return another object"
            meta = entry.cls.metaclass
            if meta is not None and (meta[-1] if isinstance(meta, tuple) else meta) not in PLAIN_METACLASSES:
                return f"has the metaclass {quote(_spell(meta))}, whose __call__ may return another object"
        return None

    def _member(self, obj: Obj, attr: str, hops: int) -> Result | None:
        """A member the class body itself binds (or that its module sets on it), or None."""
        assert obj.cls is not None
        bindings = obj.cls.members.get(attr)
        if bindings:
            return self._names.bindings(
                obj.module or "", attr, bindings, (*obj.scope, obj.cls), hops + 1, frozenset(), f"{obj.qualname}."
            )
        if attr in self._names.assigned_attributes(obj):
            return [Obj(VALUE, obj.module, f"{obj.qualname}.{attr}")]
        return None

    def _mro(self, obj: Obj, hops: int) -> list[Obj | Problem]:
        """The class's method resolution order (C3), bases that cannot be read standing in as problems."""
        key = id(obj.cls)
        known = self._mros.get(key)
        if known is not None:
            return known
        self._mros[key] = [obj, Problem(codes.TARGET_UNVERIFIABLE, f"class {quote(obj.qualname)} is its own base")]
        assert obj.cls is not None
        sequences: list[list[Obj | Problem]] = []
        direct: list[Obj | Problem] = []
        for base in obj.cls.bases:
            resolved = self._base(obj, base, hops + 1)
            direct.append(resolved)
            if isinstance(resolved, Obj) and resolved.kind == CLASS:
                sequences.append(self._mro(resolved, hops + 1))
            elif isinstance(resolved, Obj):  # a builtin type
                sequences.append([Obj("builtin", "builtins", t.__qualname__, value=t) for t in resolved.value.__mro__])
            else:
                sequences.append([resolved])
        if not obj.cls.bases:
            direct = [_OBJECT]
            sequences = [[_OBJECT]]
        merged = _c3([obj], [*sequences, direct])
        self._mros[key] = merged
        return merged

    def _base(self, obj: Obj, base: Expr, hops: int) -> Obj | Problem:
        """A base class expression, resolved where the class statement runs."""
        name = f"class {quote(obj.qualname)}"
        if isinstance(base, str):
            return Problem(codes.TARGET_UNVERIFIABLE, f"a base of {name} is {base}; {UNVERIFIABLE}")
        spelled = ".".join(base)
        if hops > MAX_HOPS or obj.module is None:
            return Problem(
                codes.TARGET_UNVERIFIABLE, f"base {quote(spelled)} of {name} is out of reach; {UNVERIFIABLE}"
            )
        current = self._dotted(obj.module, base, obj.scope, hops)
        if current is None:
            return Problem(
                codes.TARGET_UNVERIFIABLE,
                f"base {quote(spelled)} of {name} is not bound in {quote(obj.module)}; {UNVERIFIABLE}",
            )
        if isinstance(current, Problem):
            return Problem(
                codes.TARGET_UNVERIFIABLE,
                f"base {quote(spelled)} of {name} cannot be read: {reason(current.text)}; {UNVERIFIABLE}",
            )
        classes = [
            item for item in current if item.kind == CLASS or (item.kind == "builtin" and isinstance(item.value, type))
        ]
        if not classes:
            what = {DEF: "a function", VALUE: "a value", INSTANCE: "an instance", "module": "a module"}.get(
                current[0].kind, "not a class"
            )
            return Problem(
                codes.TARGET_UNVERIFIABLE,
                f"base {quote(spelled)} of {name} is {what} in the source, not a class; {UNVERIFIABLE}",
            )
        return classes[0]

    def _dotted(self, module: str, expr: tuple[str, ...], scope: tuple[ClassIndex, ...], hops: int) -> Result | None:
        """What a dotted name (`nn.Module`) is where code in `module` (in the class bodies `scope`) evaluates it;
        None where its first name is bound neither there nor as a builtin class."""
        first = self._name_in_scope(module, expr[0], scope, hops)
        if first is None:
            value = builtins.__dict__.get(expr[0])
            if isinstance(value, type) and len(expr) == 1:
                return [Obj("builtin", "builtins", expr[0], value=value)]
            return None
        current: Result = first
        for depth, attr in enumerate(expr[1:], start=1):
            if isinstance(current, Problem):
                break
            step: list[Obj] = []
            problem: Problem | None = None
            for item in current:
                result = self.attribute(item, attr, ".".join(expr[:depth]), hops + 1)
                if isinstance(result, Problem):
                    problem = problem or result
                else:
                    step.extend(result)
            current = step if step else (problem or Problem(codes.TARGET_UNVERIFIABLE, UNVERIFIABLE))
        return current

    def _name_in_scope(self, module: str, name: str, scope: tuple[ClassIndex, ...], hops: int) -> Result | None:
        """A name as code in a class body (nested in `scope`) sees it: the enclosing class, then the module."""
        if scope:
            bindings = scope[-1].members.get(name)
            if bindings:
                return self._names.bindings(module, name, bindings, scope[:-1], hops + 1, frozenset())
        result = self._names.module_attribute(module, name, hops + 1, frozenset())
        if isinstance(result, Problem) and result.code == codes.TARGET_ATTRIBUTE_MISSING:
            return None
        return result


_OBJECT = Obj("builtin", "builtins", "object", value=object)


def _c3(head: list[Obj | Problem], sequences: list[list[Obj | Problem]]) -> list[Obj | Problem]:
    """C3 linearisation; where the bases are inconsistent (the class statement would fail), depth-first."""
    result = list(head)
    pending = [list(seq) for seq in sequences if seq]
    while pending:
        for seq in pending:
            candidate = seq[0]
            if not any(candidate in other[1:] for other in pending):
                break
        else:
            for seq in pending:
                for item in seq:
                    if item not in result:
                        result.append(item)
            return result
        result.append(candidate)
        pending = [[item for item in seq if item != candidate] for seq in pending]
        pending = [seq for seq in pending if seq]
    return result


def _opaque_class(cls: ClassIndex) -> str | None:
    """Why a class may have attributes its body does not show: a metaclass or decorator that may add them."""
    if cls.metaclass is not None:
        last = cls.metaclass[-1] if isinstance(cls.metaclass, tuple) else cls.metaclass
        if last not in PLAIN_METACLASSES:
            return f"whose metaclass {quote(_spell(cls.metaclass))} may add attributes"
    for decorator in cls.decorators:
        last = decorator[-1] if isinstance(decorator, tuple) else decorator
        if last not in PLAIN_DECORATORS:
            return f"which is decorated with {quote(_spell(decorator))}, which may add attributes or replace it"
    return None


def _spell(expr: Expr) -> str:
    return ".".join(expr) if isinstance(expr, tuple) else expr
