"""The suite records into a private ledger, never the user's (tests/conftest.py also checks the
user's ledger after the whole session and fails the run if it changed)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT / "tests" / "fixtures" / "hosts" / "h200-1gpu"


def _audit_count(db: Path) -> int:
    with sqlite3.connect(db) as con:
        return con.execute("select count(*) from runs where kind = 'audit'").fetchone()[0]


@pytest.fixture(scope="module")
def recorded_by_module_fixture():
    """A module-scoped fixture runs before the per-test private ledger: what it records must
    still go to a private ledger (the session's)."""
    db = Path(os.environ["INFERGAP_DB"])
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-m", "infergap", "audit", "--snapshot", str(SNAPSHOT), "--format", "json"],
                       capture_output=True, text=True, timeout=120, env=env)
    return db, r


def test_module_fixture_records_into_the_session_ledger(recorded_by_module_fixture, user_ledger):
    paths, _, private_dir = user_ledger
    db, r = recorded_by_module_fixture
    assert r.returncode in (0, 1), r.stderr  # 1: actionable findings
    assert db.parent == private_dir and db not in paths
    assert _audit_count(db) >= 1


def test_cli_runs_record_into_the_tests_ledger_not_the_users(cli, user_ledger, tmp_path_factory):
    paths, state, _ = user_ledger
    db = Path(os.environ["INFERGAP_DB"])
    assert db.is_relative_to(tmp_path_factory.getbasetemp()) and db not in paths
    before = state()
    r = cli("audit", "--snapshot", str(SNAPSHOT), "--format", "json")
    assert r.returncode in (0, 1), r.stderr
    assert _audit_count(db) == 1
    assert state() == before
