"""The Python API page: mkdocstrings directives for every name `kcatalog` exports (its `__all__`, each at the module
that defines it, so the lazily loaded ones resolve too), then the public modules beside it."""

from __future__ import annotations

import inspect

import kcatalog

#: Modules that are public API as a whole (kcatalog's docstring lists them).
MODULES = ("kcatalog.compat", "kcatalog.testing")
INTRO = """\
# Python API

What `import kcatalog` exports, generated from the docstrings (mkdocstrings). `kcatalog.__version__` is the installed
distribution's version. The diagnostic codes, `kcatalog.codes`, have [their own page](diagnostics.md).
"""


def _where(name: str) -> str:
    """`kcatalog.load.load_catalog` for `load_catalog`: where griffe finds the object's source."""
    value = getattr(kcatalog, name)
    return f"{value.__module__}.{value.__qualname__}"


def api_page() -> str:
    """The page: functions, classes and exceptions of `kcatalog`, then the public modules."""
    sections: dict[str, list[str]] = {"Functions": [], "Classes": [], "Exceptions": []}
    for name in sorted(kcatalog.__all__, key=str.lower):
        value = getattr(kcatalog, name)
        section = (
            "Exceptions"
            if inspect.isclass(value) and issubclass(value, BaseException)
            else "Classes"
            if inspect.isclass(value)
            else "Functions"
        )
        sections[section].append(f"::: {_where(name)}\n")
    parts = [INTRO]
    for title, directives in sections.items():
        parts += [f"## {title}\n", *directives]
    for module in MODULES:
        parts += [f"## `{module}`\n", f"::: {module}\n    options:\n      show_root_heading: false\n"]
    return "\n".join(parts)
