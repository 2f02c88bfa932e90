"""pytest plugin: `pytest --kcatalog PATH` adds one test per (op, backend, dtype, sample) of a catalog."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from _pytest._code.code import TerminalRepr

    from .conformance import Case


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kcatalog", "kernel catalog conformance")
    group.addoption(
        "--kcatalog",
        action="append",
        default=None,
        metavar="PATH",
        help="check every backend of this catalog against its reference (repeatable; "
        "'shipped' for kcatalog's own catalog)",
    )
    group.addoption("--kcatalog-device", choices=["cpu", "cuda"], default="cpu")
    group.addoption("--kcatalog-seed", type=int, default=None, help="base seed of the inputs (default: random)")
    group.addoption("--kcatalog-interpret", action="store_true", help="run Triton kernels on the CPU")


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("kcatalog"):
        return
    if config.getoption("kcatalog_interpret"):
        os.environ["TRITON_INTERPRET"] = "1"  # before any kernel module imports triton
    seed = config.getoption("kcatalog_seed")
    # Chosen here, not at collection: the report header, which shows it, is written before collection.
    config._kcatalog_seed = seed if seed is not None else int.from_bytes(os.urandom(4), "little")  # type: ignore[attr-defined]


def pytest_report_header(config: pytest.Config) -> str | None:
    seed = getattr(config, "_kcatalog_seed", None)
    return None if seed is None else f"kcatalog: base seed {seed}"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    paths = config.getoption("kcatalog")
    if not paths:
        return
    from ..load import load_catalog
    from . import conformance
    from .inputs import describe

    seed: int = config._kcatalog_seed  # type: ignore[attr-defined]
    device = config.getoption("kcatalog_device")
    catalogs = [] if paths == ["shipped"] else paths
    interpret = config.getoption("kcatalog_interpret")
    catalog = load_catalog(catalogs or None)
    cases, _ = conformance.plan(catalog, catalog.ops(), device=device, base_seed=seed, interpret=interpret)
    for case in cases:
        name = f"kcatalog[{case.info.id}-{case.spec.backend}-{case.dtype}-{describe(case.sizes)}]"
        items.append(
            KcatalogItem.from_parent(
                session,
                name=name.replace(" ", ","),
                case=case,
                catalog=catalog,
                device=device,
                base_seed=seed,
                catalogs=catalogs,
                interpret=interpret,
            )
        )


class KcatalogFailure(Exception):
    """A backend disagreed with the reference; the message carries the figures and the seed."""


class KcatalogItem(pytest.Item):
    """One backend, dtype and sample size set of one op, checked against the op's reference."""

    def __init__(
        self,
        *,
        case: Case,
        catalog: Any,
        device: str,
        base_seed: int,
        catalogs: list[str],
        interpret: bool,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.catalogs = catalogs
        self.interpret = interpret
        self.case = case
        self.catalog = catalog
        self.device = device
        self.base_seed = base_seed

    def runtest(self) -> None:
        from .conformance import check, failure_line, reference_of

        reference = reference_of(self.catalog, self.case)
        result = check(self.case, reference, self.device)
        if not result.passed:
            raise KcatalogFailure(
                failure_line(
                    result, self.base_seed, catalogs=self.catalogs, device=self.device, interpret=self.interpret
                )
            )

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str | TerminalRepr:
        if isinstance(excinfo.value, KcatalogFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        location = self.case.spec.location
        return Path(location.path), location.line - 1, self.name
