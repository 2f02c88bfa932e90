"""Suite-wide setup: Triton kernels run under the interpreter unless a GPU run asks otherwise; a private load cache."""

import os

import pytest

# Must be set before any Triton kernel is decorated: triton.jit reads it at definition time.
if os.environ.get("KCATALOG_TEST_DEVICE", "cpu") == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True, scope="session")
def _private_catalog_cache(tmp_path_factory: pytest.TempPathFactory):
    """Loads cache into a directory of this session's own, never the user's ~/.cache (subprocesses inherit it)."""
    saved = os.environ.get("KCATALOG_CACHE_DIR")
    os.environ["KCATALOG_CACHE_DIR"] = str(tmp_path_factory.mktemp("kcatalog-cache"))
    yield
    if saved is None:
        del os.environ["KCATALOG_CACHE_DIR"]
    else:
        os.environ["KCATALOG_CACHE_DIR"] = saved
