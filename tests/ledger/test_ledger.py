"""The SQLite ledger: records, schema versions, bad databases, concurrent writers."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from infergap.ledger import APPLICATION_ID, MIGRATIONS, HostId, Ledger, LedgerError, host_fingerprint

SRC = Path(__file__).resolve().parents[2] / "src"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONWARNINGS": "ignore", **(env or {})}
    return subprocess.run([sys.executable, "-m", "infergap", *args], capture_output=True, text=True, timeout=60, env=e)


def test_record_get_latest_and_filters(tmp_path):
    with Ledger(tmp_path / "l.db") as led:
        a = led.record("audit", '{"schema": "infergap.audit/1", "findings": []}', {"hostname": "gpu-a", "cpu_model": "x"})
        b = led.record("bench", {"schema": "infergap.bench/1", "points": []}, HostId("abc123def456", "gpu-b"))
        c = led.record("bench", {"schema": "infergap.bench/1", "points": [{}]}, HostId("abc123def456", "gpu-b"))
        assert a < b < c
        assert led.latest(kind="bench").id == c
        assert led.latest(kind="audit").payload == {"schema": "infergap.audit/1", "findings": []}
        assert [r.id for r in led.runs(host="abc123")] == [c, b]
        assert [r.id for r in led.runs(host="gpu-a")] == [a]
        assert led.latest(kind="roofline") is None
        assert led.get("last").id == c
        with pytest.raises(LedgerError, match="no run 99"):
            led.get(99)
        with pytest.raises(LedgerError, match="unknown run kind"):
            led.record("nonsense", {}, None)
        with pytest.raises(LedgerError, match="not JSON"):
            led.record("plan", "{not json", None)


def test_host_fingerprint_is_stable_across_volatile_keys():
    h1 = host_fingerprint({"hostname": "gpu-a", "cpu_model": "EPYC", "gpus": ["H200"], "time": "2026-01-01", "uptime_s": 5})
    h2 = host_fingerprint({"hostname": "gpu-a", "cpu_model": "EPYC", "gpus": ["H200"], "time": "2026-02-01", "uptime_s": 9})
    h3 = host_fingerprint({"hostname": "gpu-b", "cpu_model": "EPYC", "gpus": ["H200"]})
    assert h1 == h2 and h1.fingerprint != h3.fingerprint and len(h1.fingerprint) == 12 and h1.name == "gpu-a"


def test_new_database_is_migrated_to_the_latest_version_in_wal_mode(tmp_path):
    path = tmp_path / "l.db"
    Ledger(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"runs", "fix_steps"} <= tables
    db.close()
    with Ledger(path) as led:  # re-opening an up-to-date database changes nothing
        assert led.schema_version == len(MIGRATIONS)


def test_default_path_comes_from_the_environment(tmp_path):
    path = tmp_path / "from-env.sqlite3"
    with Ledger(path) as led:
        led.record("plan", {"tiers": []}, None)
    r = _cli("history", env={"INFERGAP_DB": str(path)})
    assert r.returncode == 0 and "plan" in r.stdout
    r = _cli("history", "--format", "json", env={"INFERGAP_DB": str(path)})
    import json

    (run,) = json.loads(r.stdout)
    assert run["id"] == 1 and run["kind"] == "plan" and run["created_at"].endswith("+00:00")


@pytest.mark.parametrize("damage,message", [
    ("newer", "schema version 99 is newer than this infergap supports"),
    ("garbage", "not a usable infergap ledger"),
    ("foreign", "not an infergap ledger"),
])
def test_unusable_databases_give_one_line_and_exit_2(tmp_path, damage, message):
    path = tmp_path / "l.db"
    if damage == "newer":
        Ledger(path).close()
        db = sqlite3.connect(path)
        db.execute("PRAGMA user_version = 99")
        db.commit()
        db.close()
    elif damage == "garbage":
        path.write_bytes(b"this is not sqlite\n" * 300)
    else:
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE contacts(name TEXT)")
        db.commit()
        db.close()
    with pytest.raises(LedgerError, match=message):
        Ledger(path)
    for args in (["history", "--db", str(path)], ["fix", "--revert", "--db", str(path)], ["compare", "1", "2", "--db", str(path)]):
        r = _cli(*args)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("infergap: error: ledger ") and message in lines[0]


_WRITER = """
import sys
from infergap.ledger import Ledger, HostId
path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with Ledger(path) as led:
    for i in range(n):
        rid = led.record("bench", {"writer": tag, "i": i, "points": []}, HostId(tag))
        if i % 10 == 0:
            step = led.journal_begin(rid, 1, check_id="c", subject=None, step_kind="value", target="t", command="x", before=str(i))
            led.journal_end(step, status="applied", after=str(i + 1))
"""


@pytest.mark.slow
def test_two_concurrent_writers_do_not_corrupt_it(tmp_path):
    path = tmp_path / "l.db"
    n = 150
    env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONWARNINGS": "ignore"}
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), tag, str(n)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for tag in ("w1", "w2")]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
    with Ledger(path) as led:
        assert led.integrity_ok()
        runs = led.runs()
        assert len(runs) == 2 * n and len({r.id for r in runs}) == 2 * n
        for tag in ("w1", "w2"):
            mine = sorted(r.payload["i"] for r in runs if r.payload["writer"] == tag)
            assert mine == list(range(n))
        steps = sum(len(led.steps(r.id)) for r in runs)
        assert steps == 2 * len(range(0, n, 10))


_CREATOR = """
import sys, time
from infergap.ledger import ExperimentKey, Ledger
base, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with Ledger(f"{base}.{i}") as led:
        rid = led.record("tune", {"i": i}, None, status="running")
        led.record_experiment(rid, ExperimentKey(host="h", engine="llama.cpp", engine_version="1", model="m", workload="w"),
                              lever="llamacpp.parallel", setting="--parallel 8", metric="ttft_p50_ms", verdict="helps",
                              change_pct=-50.0, payload={})
    time.sleep(0.02)
"""

_READER = """
import os, sys, time
from infergap.ledger import Ledger, LedgerError
base, n = sys.argv[1], int(sys.argv[2])
errors, done = [], set()
deadline = time.monotonic() + 120
while len(done) < n and time.monotonic() < deadline:
    for i in range(n):
        p = f"{base}.{i}"
        if i in done or not os.path.exists(p):
            continue
        try:
            with Ledger(p, readonly=True) as led:
                tunes, tried = led.runs(kind="tune"), led.experiments()
                if tunes and tried:
                    done.add(i)
        except LedgerError as e:
            errors.append(str(e))
print(len(done), len(errors), errors[:3])
"""


@pytest.mark.slow
def test_a_reader_never_sees_a_ledger_half_created_by_another_process(tmp_path):
    # A tune creating its ledger while history or plan reads it: the reader sees an empty ledger
    # or the whole schema, never "no such table".
    base, n = str(tmp_path / "l.db"), 30
    env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONWARNINGS": "ignore"}
    reader = subprocess.Popen([sys.executable, "-c", _READER, base, str(n)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    creator = subprocess.run([sys.executable, "-c", _CREATOR, base, str(n)], env=env, capture_output=True, text=True, timeout=180)
    out, err = reader.communicate(timeout=180)
    assert creator.returncode == 0 and reader.returncode == 0, creator.stderr + err
    assert out.split(maxsplit=2)[:2] == [str(n), "0"], out


def test_try_record_never_fails_the_caller(tmp_path, caplog):
    from infergap.ledger import try_record

    good = tmp_path / "l.db"
    rid = try_record("roofline", {"model": "m", "bounds": {}}, None, db=good)
    assert rid == 1
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"x" * 5000)
    assert try_record("roofline", {"model": "m"}, None, db=bad) is None
    assert "run not recorded in the ledger" in caplog.text


def test_fingerprint_of_the_real_capture_ignores_snapshot_path_and_software(tmp_path):
    from infergap.audit import run_audit
    from infergap.snapshot import open_snapshot

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "hosts" / "h200-1gpu"
    with open_snapshot(str(fixture)) as snap:
        host = run_audit(snap).model_dump(mode="json")["host"]
    moved = {**host, "snapshot": {"kind": "archive", "label": "elsewhere.tar.gz"}, "kernel": "6.20.0", "driver": "590.1"}
    other = {**host, "gpus": host["gpus"] * 2}
    assert host_fingerprint(host) == host_fingerprint(moved)
    assert host_fingerprint(host) != host_fingerprint(other)


def test_an_older_ledger_is_migrated_in_place_keeping_its_runs(tmp_path, monkeypatch):
    import infergap.ledger as ledger_mod

    path = tmp_path / "l.db"
    with Ledger(path) as led:
        rid = led.record("audit", {"findings": []}, HostId("aaaaaaaaaaaa"))
    # A later version of the code adds a step; opening the current file applies only that step.
    step = "ALTER TABLE runs ADD COLUMN note TEXT; CREATE INDEX runs_note ON runs(note)"
    monkeypatch.setattr(ledger_mod, "MIGRATIONS", [*MIGRATIONS, step])
    with Ledger(path) as led:
        assert led.schema_version == len(MIGRATIONS) + 1
        assert led.get(rid).payload == {"findings": []}
    db = sqlite3.connect(path)
    assert "note" in [r[1] for r in db.execute("PRAGMA table_info(runs)")]
    db.close()
    # ...and the current code refuses the newer file instead of corrupting it.
    monkeypatch.setattr(ledger_mod, "MIGRATIONS", MIGRATIONS)
    n = len(MIGRATIONS)
    with pytest.raises(LedgerError, match=f"schema version {n + 1} is newer than this infergap supports \\({n}\\)"):
        Ledger(path)


def test_a_version_1_ledger_gains_the_experiments_table_and_keeps_its_runs(tmp_path, monkeypatch):
    import infergap.ledger as ledger_mod
    from infergap.ledger import ExperimentKey

    path = tmp_path / "l.db"
    monkeypatch.setattr(ledger_mod, "MIGRATIONS", MIGRATIONS[:1])
    with Ledger(path) as led:
        rid = led.record("bench", {"points": []}, HostId("aaaaaaaaaaaa"))
    monkeypatch.setattr(ledger_mod, "MIGRATIONS", MIGRATIONS)
    key = ExperimentKey("aaaaaaaaaaaa", "llama.cpp", "b1", "m.gguf", "chat c=8")
    with Ledger(path) as led:
        assert led.schema_version == len(MIGRATIONS) and led.get(rid).payload == {"points": []}
        tid = led.record("tune", {"trials": [{"verdict": "hurts"}]}, HostId("aaaaaaaaaaaa"))
        led.record_experiment(tid, key, lever="llamacpp.ubatch", setting="-ub 8", metric="ttft_p50_ms",
                              verdict="hurts", change_pct=33.0, payload={"judgement": {"level": "c=1"}})
        rows = led.experiments(host="aaaaaaaaaaaa", engine="llama.cpp", engine_version="b1", model="m.gguf")
        assert [(r["lever"], r["verdict"], r["payload"]["judgement"]["level"]) for r in rows] == [("llamacpp.ubatch", "hurts", "c=1")]
        assert led.experiments(host="aaaaaaaaaaaa", engine_version="b2") == []  # another version inherits nothing
        assert led.get(tid).summary()["what"] == "1 hurts"


def test_rooflines_are_filed_under_the_host_their_audit_names(tmp_path):
    """A roofline of a snapshot was filed under a hash of {'gpu': 'auto'} (one id for every
    snapshot) and one naming --gpu under a hash of that name: neither matched the audit of the
    same host. Now a roofline of a snapshot has its audit's host id, and one run here (whatever
    GPU it names) this machine's."""
    hosts = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"
    db = str(tmp_path / "l.db")
    runs = [("audit", "-s", str(hosts / "h200-1gpu")), ("roofline", "-m", "llama-3.1-8b", "-s", str(hosts / "h200-1gpu")),
            ("roofline", "-m", "llama-3.1-8b", "-s", str(hosts / "h200-1gpu-collect.tar.gz")),
            ("roofline", "-m", "llama-3.1-8b", "-s", str(hosts / "seed-8x-rtxpro6000")),
            ("audit", "-s", str(hosts / "seed-8x-rtxpro6000")), ("roofline", "-m", "llama-3.1-8b", "--gpu", "h200")]
    for args in runs:
        p = _cli(*args, "-f", "json", "--db", db)
        assert p.returncode in (0, 1), p.stderr
    con = sqlite3.connect(db)
    ids = [h for (h,) in con.execute("SELECT host FROM runs ORDER BY id")]
    con.close()
    assert len(ids) == len(runs) and ids[0] == ids[1] == ids[2], ids  # the collect archive of the same VM: the same id
    assert ids[3] == ids[4] != ids[0], ids
    from infergap.ledger import local_host

    assert ids[5] == local_host().fingerprint


def test_a_plan_of_a_live_audit_is_filed_under_this_machine(tmp_path):
    """The plan of this machine's live audit was filed under a hash of the audit's host summary,
    the audit itself under this machine's id: history showed two hosts for one machine."""
    from infergap.ledger import local_host

    db = str(tmp_path / "l.db")
    audit = tmp_path / "audit.json"
    assert _cli("audit", "-f", "json", "-o", str(audit), "--db", db).returncode in (0, 1)
    assert _cli("plan", "--audit", str(audit), "--db", db).returncode == 0
    hosts = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"
    snap_audit = tmp_path / "snap.json"
    assert _cli("audit", "-s", str(hosts / "h200-1gpu"), "-f", "json", "-o", str(snap_audit), "--db", db).returncode in (0, 1)
    assert _cli("plan", "--audit", str(snap_audit), "--db", db).returncode == 0
    con = sqlite3.connect(db)
    rows = list(con.execute("SELECT kind, host FROM runs ORDER BY id"))
    con.close()
    assert [k for k, _ in rows] == ["audit", "plan", "audit", "plan"], rows
    assert rows[0][1] == rows[1][1] == local_host().fingerprint and rows[2][1] == rows[3][1] != rows[0][1], rows


def test_history_of_a_ledger_path_that_does_not_exist_says_so(tmp_path):
    """A mistyped --db is not an empty ledger: history says no file is there (and creates none)."""
    path = tmp_path / "typo" / "ledger.db"
    r = _cli("history", "--db", str(path))
    assert r.returncode == 0 and "no runs recorded" in r.stdout and f"no ledger at {path}" in r.stdout, r.stdout + r.stderr
    assert not path.exists() and not path.parent.exists()
