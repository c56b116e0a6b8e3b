"""Shared test helpers: fixture paths and a CLI runner that returns (exit code, stdout, stderr)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
HOSTS = FIXTURES / "hosts"


def run_cli(*args: str, timeout: float = 120, input: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m infergap ARGS`` in a subprocess (the real entry point, real exit codes)."""
    import os

    e = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})}
    return subprocess.run([sys.executable, "-m", "infergap", *args], capture_output=True, text=True, timeout=timeout, input=input, env=e)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(autouse=True)
def _private_ledger(tmp_path_factory, monkeypatch):
    """Every test records runs into its own ledger, never the user's."""
    if "INFERGAP_DB" not in __import__("os").environ or not __import__("os").environ["INFERGAP_DB"].startswith(str(tmp_path_factory.getbasetemp())):
        monkeypatch.setenv("INFERGAP_DB", str(tmp_path_factory.mktemp("ledger") / "ledger.sqlite3"))
