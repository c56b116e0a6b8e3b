"""Hostile ledgers and what is stored in them: read-only directories, huge values, NaN, ids
beyond SQLite's range."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from hostile_helpers import cli, no_traceback, one_line_error

from infergap.ledger import MAX_VALUE_CHARS, Ledger
from tests.conftest import ROOT


def test_history_reads_a_ledger_in_a_read_only_directory(tmp_path):
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to be an unprivileged reader")
    d = tmp_path / "ro"
    d.mkdir()
    db = d / "ledger.sqlite3"
    with Ledger(db) as led:
        led.record("audit", {"schema": "infergap.audit/1", "findings": []}, "abcd")
    for p in (tmp_path.parent.parent, tmp_path.parent, tmp_path):
        p.chmod(p.stat().st_mode | 0o005)
    d.chmod(0o555)
    db.chmod(0o444)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HOME": str(tmp_path)}
    p = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", sys.executable, "-m", "infergap",
                        "history", "--db", str(db)], capture_output=True, text=True, env=env, timeout=60)
    if "No module named" in p.stderr:
        pytest.skip("the unprivileged user cannot import the package here")
    no_traceback(p)
    assert p.returncode == 0 and "audit" in p.stdout, p.stderr
    assert sorted(x.name for x in d.iterdir()) == ["ledger.sqlite3"]  # nothing created beside it


def test_history_of_a_missing_ledger_creates_nothing(tmp_path):
    db = tmp_path / "none" / "ledger.sqlite3"
    p = cli("history", "--db", str(db))
    no_traceback(p)
    assert p.returncode == 0 and not db.parent.exists()


def test_values_are_capped_and_nan_is_null(tmp_path):
    with Ledger(tmp_path / "l.db") as led:
        rid = led.record("audit", {"evidence": "\0" * (4 * MAX_VALUE_CHARS), "x": float("nan"), "y": [float("inf")]})
        run = led.get(rid)
    assert len(run.payload["evidence"]) < MAX_VALUE_CHARS + 100
    assert run.payload["x"] is None and run.payload["y"] == [None]


def test_audit_of_a_nul_flood_adds_little_to_the_ledger(tmp_path):
    f = tmp_path / "flood.txt"
    f.write_text("NCCL INFO " + "\0" * (4 << 20) + "\n")
    db = tmp_path / "l.db"
    p = cli("audit", "--no-host", "--evidence", str(f), env={"INFERGAP_DB": str(db)})
    no_traceback(p)
    size = sum(x.stat().st_size for x in tmp_path.iterdir() if x.name.startswith("l.db"))
    assert size < 2 << 20, size


def test_compare_with_an_id_beyond_sqlite_integers(tmp_path):
    db = tmp_path / "l.db"
    with Ledger(db) as led:
        led.record("audit", {"findings": []}, "abcd")
    one_line_error(cli("compare", "1", "9" * 23, "--db", str(db)), "9" * 23)


def test_corrupt_payload_row_is_not_a_traceback(tmp_path):
    db = tmp_path / "l.db"
    with Ledger(db) as led:
        led.record("audit", {"findings": []}, "abcd")
        led._db.execute("UPDATE runs SET payload = ?", ("[" * 100_000 + "]" * 100_000,))
    p = cli("history", "--db", str(db), "--json")
    no_traceback(p)
    json.loads(p.stdout)


def test_history_and_errors_never_print_escapes(tmp_path):
    db = tmp_path / "l.db"
    with Ledger(db) as led:
        led.record("audit", {"schema": "infergap.audit/1", "host": {"snapshot": {"label": "\x1b]0;owned\x07"}}, "findings": []},
                   {"hostname": "h\x1b[2Jx"})
    p = cli("history", "--db", str(db))
    no_traceback(p)
    assert "\x1b" not in p.stdout and "\x07" not in p.stdout
    bad = tmp_path / "\x1b[31mred.json"
    p = cli("plan", "--audit", str(bad))
    assert "\x1b" not in p.stderr and "\\x1b" in p.stderr


@pytest.mark.parametrize("how", ["env", "--db"])
def test_a_named_ledger_under_a_missing_folder_is_not_created(tmp_path, how):
    """$INFERGAP_DB or --db naming a folder that does not exist (a typo) made that whole tree;
    now the run says so in one warning and records nothing, its exit status unchanged."""
    db = tmp_path / "typo" / "deeper" / "ledger.sqlite3"
    args = ["audit", "--no-host", "--evidence", str(ROOT / "tests/fixtures/hosts/h200-1gpu/cmds/nvsmi_q.out")]
    p = cli(*args, env={"INFERGAP_DB": str(db)}) if how == "env" else cli(*args, "--db", str(db))
    no_traceback(p)
    assert p.returncode == 0 and not (tmp_path / "typo").exists(), p.stderr
    by = "$INFERGAP_DB" if how == "env" else "--db"
    assert f"run not recorded: ledger {db} (named by {by}): the directory {db.parent} does not exist" in p.stderr
