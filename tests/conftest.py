"""Suite-wide setup: Triton kernels run under the interpreter unless a GPU run asks otherwise; one test
environment (no backend overrides, a private load cache); throwaway workspaces; and a check, at the end of the
session, that the user's own load cache was left alone."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from catalog_builder import CACHE_VARIABLE, SHELL_VARIABLES, Workspace, workspace_at

pytest_plugins = ["pytester"]  # tests/test_isolation.py runs sessions of this conftest

# Must be set before any Triton kernel is decorated: triton.jit reads it at definition time.
if os.environ.get("KCATALOG_TEST_DEVICE", "cpu") == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True, scope="session")
def _test_environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """What every test, fixture and child process sees: no KCATALOG_OVERRIDES, KCATALOG_BACKEND or KCATALOG_NO_CACHE
    of the developer's shell, and a load cache of this session's own, never the user's ~/.cache (children inherit
    it).

    Session-scoped, so that module- and session-scoped fixtures (which run a command once for many tests) see it
    too; a test that sets one of these variables does so through `monkeypatch`, which puts it back.
    """
    with pytest.MonkeyPatch.context() as mp:
        for name in SHELL_VARIABLES:
            mp.delenv(name, raising=False)
        mp.setenv(CACHE_VARIABLE, str(tmp_path_factory.mktemp("kcatalog-cache")))
        yield


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    """Throwaway catalogs and kernel modules under tmp_path (see catalog_builder)."""
    with workspace_at(tmp_path) as written:
        yield written


# -- the user's load cache is never touched --------------------------------------------------------------------

UserCacheState = tuple[bool, dict[str, tuple[int, int]], int] | None


def user_cache_dir() -> Path:
    """Where load_catalog() caches without KCATALOG_CACHE_DIR: $XDG_CACHE_HOME/kcatalog or ~/.cache/kcatalog."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kcatalog"


def user_cache_state(directory: Path) -> UserCacheState:
    """None if the directory is absent; else whether it could be listed, its entries' sizes and modification
    times, and its own modification time (an entry created, renamed or removed changes it)."""
    try:
        entries = {path.name: (path.lstat().st_size, path.lstat().st_mtime_ns) for path in directory.iterdir()}
        return True, entries, directory.stat().st_mtime_ns
    except FileNotFoundError:
        return None
    except OSError as exc:  # unreadable: compare what can be seen
        return False, {type(exc).__name__: (0, 0)}, 0


_USER_CACHE = pytest.StashKey[tuple[Path, UserCacheState]]()
_USER_CACHE_CHANGED = pytest.StashKey[str]()


_COLLECTION_CACHE = pytest.StashKey[tuple[str, str | None]]()


def pytest_configure(config: pytest.Config) -> None:
    """Collection runs before any fixture, and may load catalogs (parameters read from the shipped one; target
    checks keep module indexes in the cache directory): a private cache from the start, not only from the session
    fixture on."""
    directory = tempfile.mkdtemp(prefix="kcatalog-collection-cache-")
    config.stash[_COLLECTION_CACHE] = directory, os.environ.get(CACHE_VARIABLE)
    os.environ[CACHE_VARIABLE] = directory


def pytest_unconfigure(config: pytest.Config) -> None:
    directory, before = config.stash.get(_COLLECTION_CACHE, ("", None))
    if not directory:
        return
    if before is None:
        os.environ.pop(CACHE_VARIABLE, None)
    else:
        os.environ[CACHE_VARIABLE] = before
    shutil.rmtree(directory, ignore_errors=True)


def pytest_sessionstart(session: pytest.Session) -> None:
    directory = user_cache_dir()
    session.config.stash[_USER_CACHE] = directory, user_cache_state(directory)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session if anything in it created, changed or removed an entry of the user's load cache."""
    recorded = session.config.stash.get(_USER_CACHE, None)
    if recorded is None:  # this conftest was loaded after the session started: nothing to compare
        return
    directory, before = recorded
    after = user_cache_state(directory)
    if after == before:
        return
    message = (
        f"this test session changed the user's load cache {directory} ({_difference(before, after)}): a test "
        f"or a child process ran without the session's private {CACHE_VARIABLE} (or another process of this "
        "user loaded a catalog meanwhile)"
    )
    session.config.stash[_USER_CACHE_CHANGED] = message
    if session.config.pluginmanager.get_plugin("terminalreporter") is None:
        print(f"ERROR: {message}", file=sys.stderr)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    message = terminalreporter.config.stash.get(_USER_CACHE_CHANGED, None)
    if message is not None:
        terminalreporter.write_sep("=", "the user's load cache changed", red=True, bold=True)
        terminalreporter.write_line(f"ERROR: {message}", red=True)


def _difference(before: UserCacheState, after: UserCacheState) -> str:
    if before is None or after is None:
        return "created" if before is None else "removed"
    old, new = before[1], after[1]
    added, removed = len(new.keys() - old.keys()), len(old.keys() - new.keys())
    rewritten = sum(old[name] != new[name] for name in old.keys() & new.keys())
    return f"{added} added, {removed} removed, {rewritten} rewritten entries"
