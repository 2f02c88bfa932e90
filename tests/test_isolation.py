"""The suite keeps to its temporary directories: loads cache in the session's private directory, in this process
and in child processes, never in the user's ~/.cache/kcatalog; and a session that touches it fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from catalog_builder import CACHE_VARIABLE, child_env

TESTS = Path(__file__).resolve().parent
# The inner sessions need none of these plugins; loading them is most of an inner session's time.
INNER_OPTIONS = ("-p", "no:cacheprovider", "-p", "no:benchmark", "-p", "no:hypothesispytest")


def test_a_child_process_caches_in_the_private_directory_not_under_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = child_env() | {"HOME": str(home)}
    env.pop("XDG_CACHE_HOME", None)  # so the user's cache would be $HOME/.cache/kcatalog
    child = subprocess.run(
        [sys.executable, "-c", "import kcatalog; print(kcatalog.load_catalog().cache_status.path)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    assert Path(child.stdout.strip()).parent == Path(os.environ[CACHE_VARIABLE])  # the entry it read or wrote
    assert list(home.iterdir()) == []


@pytest.fixture
def session_of_this_suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """An inner test session under this suite's conftest, its user cache in pytester's directory."""
    pytester.makeconftest((TESTS / "conftest.py").read_text(encoding="utf-8"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(pytester.path / "xdg"))
    return pytester


@pytest.mark.parametrize("existing", [False, True], ids=["no-user-cache", "user-cache-with-an-entry"])
def test_a_session_that_writes_into_the_user_cache_fails(
    session_of_this_suite: pytest.Pytester, existing: bool
) -> None:
    user_cache = session_of_this_suite.path / "xdg" / "kcatalog"
    if existing:
        user_cache.mkdir(parents=True)
        (user_cache / "old.kcache").write_bytes(b"")
    session_of_this_suite.makepyfile(
        test_stray="""
        import os
        from pathlib import Path


        def test_writes_where_no_test_may():
            directory = Path(os.environ["XDG_CACHE_HOME"]) / "kcatalog"
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "stray.kcache").write_bytes(b"")
        """
    )
    result = session_of_this_suite.runpytest(*INNER_OPTIONS)
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    change = "1 added, 0 removed, 0 rewritten entries" if existing else "created"
    result.stdout.fnmatch_lines([f"ERROR: this test session changed the user's load cache {user_cache} ({change}): *"])


def test_a_session_whose_loads_use_the_private_cache_passes(session_of_this_suite: pytest.Pytester) -> None:
    session_of_this_suite.makepyfile(
        test_loads="""
        import os
        from pathlib import Path

        import kcatalog


        def test_loads_the_shipped_catalog():
            status = kcatalog.load_catalog().cache_status
            assert status.path.parent == Path(os.environ["KCATALOG_CACHE_DIR"])
        """
    )
    result = session_of_this_suite.runpytest(*INNER_OPTIONS)
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    assert not (session_of_this_suite.path / "xdg").exists()
