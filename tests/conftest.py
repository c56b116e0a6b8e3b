"""Shared test helpers: fixture paths and a CLI runner that returns (exit code, stdout, stderr).

The user's ledger and cache are never touched: before any test module, fixture or subprocess exists, this
file points ``INFERGAP_DB`` at a private file (every ``python -m infergap`` a test starts inherits
it; ``INFERGAP_CACHE_DIR`` likewise), and after the session it checks that the user's ledger (``$INFERGAP_DB`` as it was, and the
default path under the user data directory) is byte for byte as it was; if not, the run fails.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
HOSTS = FIXTURES / "hosts"


def user_ledger_paths() -> list[Path]:
    """The ledger files a user's own runs write: ``$INFERGAP_DB`` from the environment the tests
    were started in, and the default path (platformdirs' user data directory)."""
    from platformdirs import user_data_dir

    paths = [Path(user_data_dir("infergap", appauthor=False)) / "ledger.sqlite3"]
    if _USER_ENV_DB:
        paths.insert(0, Path(_USER_ENV_DB))
    return paths


def ledger_state(paths: list[Path]) -> dict[str, tuple[int, int, str] | None]:
    """Size, mtime (ns) and SHA-256 of each ledger file and its SQLite side files (None: absent)."""
    out: dict[str, tuple[int, int, str] | None] = {}
    for p in paths:
        for f in (p, p.with_name(p.name + "-wal"), p.with_name(p.name + "-shm"), p.with_name(p.name + "-journal")):
            try:
                st = f.stat()
                out[str(f)] = (st.st_size, st.st_mtime_ns, hashlib.sha256(f.read_bytes()).hexdigest())
            except OSError:
                out[str(f)] = None
    return out


def _guard() -> types.SimpleNamespace:
    """Set up once per process: this file is also imported as ``tests.conftest`` by some tests,
    and a second set-up would point INFERGAP_DB elsewhere in mid-session."""
    g = sys.modules.get("_infergap_tests_ledger_guard")
    if g is None:
        g = types.SimpleNamespace(user_env_db=os.environ.get("INFERGAP_DB"))
        sys.modules["_infergap_tests_ledger_guard"] = g  # type: ignore[assignment]
        global _USER_ENV_DB
        _USER_ENV_DB = g.user_env_db
        g.paths = user_ledger_paths()
        g.before = ledger_state(g.paths)
        g.private_dir = Path(tempfile.mkdtemp(prefix="infergap-tests-ledger-"))
        os.environ["INFERGAP_DB"] = str(g.private_dir / "ledger.sqlite3")
        # parsed data files are cached (infergap.datafile); the tests' cache is theirs too
        os.environ["INFERGAP_CACHE_DIR"] = str(g.private_dir / "cache")
    return g


_USER_ENV_DB: str | None = None
_G = _guard()
_USER_ENV_DB = _G.user_env_db
USER_LEDGERS: list[Path] = _G.paths
_BEFORE = _G.before
PRIVATE_LEDGER_DIR: Path = _G.private_dir


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    """After the suite: the user's ledger must be exactly as it was before it."""
    after = ledger_state(USER_LEDGERS)
    changed = [p for p in after if after[p] != _BEFORE.get(p)]
    shutil.rmtree(PRIVATE_LEDGER_DIR, ignore_errors=True)
    if changed:
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        msg = (f"the user's ledger changed while the tests ran: {', '.join(changed)} (a test or a command it ran "
               "wrote there; or another process on this machine did)")
        if tr is not None:
            tr.write_line(f"ERROR: {msg}", red=True)
        else:
            print(f"ERROR: {msg}", file=sys.stderr)
        session.exitstatus = 1


def run_cli(*args: str, timeout: float = 120, input: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m infergap ARGS`` in a subprocess (the real entry point, real exit codes)."""
    e = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})}
    return subprocess.run([sys.executable, "-m", "infergap", *args], capture_output=True, text=True, timeout=timeout, input=input, env=e)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="session")
def user_ledger():
    """(the user's ledger paths, a function returning their current state, the session's private
    ledger directory) for tests of the guard itself."""
    return USER_LEDGERS, lambda: ledger_state(USER_LEDGERS), PRIVATE_LEDGER_DIR


@pytest.fixture(autouse=True)
def _private_ledger(tmp_path_factory, monkeypatch):
    """Every test records runs into its own ledger (the session's private one is the fallback
    for module- and session-scoped fixtures, which run before this)."""
    if not os.environ["INFERGAP_DB"].startswith(str(tmp_path_factory.getbasetemp())):
        monkeypatch.setenv("INFERGAP_DB", str(tmp_path_factory.mktemp("ledger") / "ledger.sqlite3"))
