"""Class 2 of docs/security.md: ``fix`` trusts only its catalog and its handlers, never what it
reads (a report given to ``--audit``, the journal in a ledger). Real files in temporary trees
stand in for /proc/sys and /etc; the ledger is a real SQLite file edited as an attacker would."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from infergap.errors import UserError
from infergap.findings import Finding
from infergap.ledger import Ledger
from infergap.remedy import ChangeState, SystemPaths, apply_plan, plan_fix, revert_run
from infergap.remedy.engine import FixRefused

from .conftest import SRC, write_report

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="apply and revert refuse to run when not root")


def _finding(fid: str, actions: list[dict], commands: list[str] | None = None) -> Finding:
    return Finding.model_validate({"id": fid, "investigator": "t", "status": "actionable", "severity": "P1",
                                   "fix_kind": "runtime", "title": fid,
                                   "remedy": {"actions": actions, "commands": commands or []}})


def _tree(tmp_path: Path, values: dict[str, str], etc_dirs: bool = True) -> SystemPaths:
    proc = tmp_path / "proc_sys"
    for key, v in values.items():
        p = proc / key.replace(".", "/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(v + "\n")
    etc = tmp_path / "etc"
    etc.mkdir()
    if etc_dirs:
        (etc / "sysctl.d").mkdir()
    return SystemPaths(proc_sys=proc, etc=etc, sys=tmp_path / "sys", root=tmp_path)


def _sysctl(key: str, value: str, previous: str) -> dict:
    return {"type": "sysctl", "target": key, "value": value, "previous": previous}


def _read(paths: SystemPaths, key: str) -> str:
    return (paths.proc_sys / key.replace(".", "/")).read_text().strip()


# -- fix --audit: only what the catalog entry declares, with valid values -------------------------

def test_an_action_the_findings_catalog_entry_does_not_declare_is_refused(tmp_path):
    paths = _tree(tmp_path, {"vm.swappiness": "60", "net.core.somaxconn": "4096"})
    plan = plan_fix([_finding("gpu.ecc", [_sysctl("net.core.somaxconn", "8192", "4096")]),  # declares no action
                     _finding("kernel.nmi_watchdog", [_sysctl("vm.swappiness", "100", "60")])],  # another check's key
                    paths=paths, container=None)
    assert [c.state for c in plan.changes] == [ChangeState.refused, ChangeState.refused]
    assert "gpu.ecc declares no sysctl action" in plan.changes[0].reason
    assert "kernel.nmi_watchdog declares no sysctl action on vm.swappiness" in plan.changes[1].reason


@pytest.mark.parametrize("value", ["١٠", "10\n", "１０", "10;id", " 10", "10 ", "$(id)"])
def test_a_value_that_fails_the_handlers_validation_is_refused(tmp_path, value):
    paths = _tree(tmp_path, {"vm.swappiness": "60"})
    (ch,) = plan_fix([_finding("vm.swappiness", [_sysctl("vm.swappiness", value, "60")])], paths=paths, container=None).changes
    assert ch.state == ChangeState.refused and "not one to four integers" in ch.reason, ch


@pytest.mark.parametrize("bdf", ["0000:01:00.0\n", "0000:0١:00.0", "0000:01:00.0;id"])
def test_a_pci_address_with_a_trailing_newline_or_non_ascii_digit_is_refused(tmp_path, bdf):
    paths = _tree(tmp_path, {})
    act = {"type": "setpci", "target": bdf, "pci_register": "CAP_EXP+8.w", "value": "5000", "mask": "7000"}
    (ch,) = plan_fix([_finding("pcie.max_read_request", [act])], paths=paths, container=None).changes
    assert ch.state == ChangeState.refused and "not a PCI address" in ch.reason, ch


def test_a_report_whose_commands_and_actions_disagree_is_refused_in_one_line(tmp_path):
    from infergap.remedy.engine import check_report

    good = _finding("vm.swappiness", [_sysctl("vm.swappiness", "10", "60")], ["sysctl -w vm.swappiness=10"])
    check_report([good], Path("a.json"))  # agreeing: accepted
    bad = _finding("vm.swappiness", [_sysctl("vm.swappiness", "100", "60")], ["sysctl -w vm.swappiness=10"])
    with pytest.raises(UserError, match=r"a.json: finding vm.swappiness: the action sysctl -w vm.swappiness=100 is not among its commands"):
        check_report([bad], Path("a.json"))
    rep = write_report(tmp_path / "audit.json", [bad.to_json()])
    env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONWARNINGS": "ignore"}
    r = subprocess.run([sys.executable, "-m", "infergap", "fix", "--audit", str(rep), "--db", str(tmp_path / "db")],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"infergap: error: --audit {rep}: finding vm.swappiness: ") and "not among its commands" in r.stderr


# -- fix --revert: only what the handlers wrote, in order, from the value the run set -------------

def _apply(led: Ledger, paths: SystemPaths, key: str, value: str, previous: str, persist: bool = False) -> int:
    plan = plan_fix([_finding("net.socket_buffers", [_sysctl(key, value, previous)])], paths=paths, container=None)
    assert plan.changes[0].state == ChangeState.planned, plan.changes[0].reason
    res = apply_plan(plan, led, paths=paths, persist=persist)
    assert res.status == "applied", res
    return res.run_id


def _tamper(db: Path, sql: str, *args) -> None:
    con = sqlite3.connect(db)
    with con:
        con.execute(sql, args)
    con.close()


@root_only
def test_revert_never_writes_a_file_the_handlers_did_not_write(tmp_path):
    paths = _tree(tmp_path, {"net.core.somaxconn": "4096"})
    db = tmp_path / "db"
    with Ledger(db) as led:
        run = _apply(led, paths, "net.core.somaxconn", "8192", "4096", persist=True)
    victim = tmp_path / "victim"
    _tamper(db, "UPDATE fix_steps SET target = ?, file_existed = 1, file_previous = ? WHERE run_id = ? AND step_kind = 'file'",
            str(victim), b"root::0:0::/root:/bin/sh\n", run)
    with Ledger(db) as led:
        res = revert_run(led, str(run), paths=paths)
    assert not victim.exists()
    assert not res.ok and any(s.status == "revert_failed" and "not a file infergap fix writes" in (s.error or "") for s in res.steps), res


_HOSTILE_PREVIOUS = [
    ("sysctl.d/90-infergap.conf", b"net.core.somaxconn = 4096\nkernel.core_pattern = |/tmp/x %p\n"),
    ("sysctl.d/90-infergap.conf", b"net.core.somaxconn = 4096; id\n"),
    ("modules-load.d/infergap.conf", b"nvidia_peermem\n/tmp/evil.ko\n"),
    ("udev/rules.d/90-infergap-setpci.rules", b'ACTION=="add", RUN+="/bin/sh -c id"\n'),
    ("udev/rules.d/90-infergap-setpci.rules",
     b'ACTION=="add", SUBSYSTEM=="pci", KERNEL=="0000:01:00.0", RUN+="/usr/bin/setpci -s 0000:01:00.0 CAP_EXP+8.w=2000:7000"; '
     b'RUN+="/bin/sh -c id"\n'),
]


@root_only
@pytest.mark.parametrize(("rel", "previous"), _HOSTILE_PREVIOUS)
def test_revert_never_restores_a_journalled_file_content_persist_does_not_write(tmp_path, rel, previous):
    paths = _tree(tmp_path, {"net.core.somaxconn": "4096"})
    (paths.etc / rel).parent.mkdir(parents=True, exist_ok=True)
    db = tmp_path / "db"
    with Ledger(db) as led:
        run = _apply(led, paths, "net.core.somaxconn", "8192", "4096", persist=True)
    _tamper(db, "UPDATE fix_steps SET target = ?, file_existed = 1, file_previous = ?, after = NULL "
            "WHERE run_id = ? AND step_kind = 'file'", str(paths.etc / rel), previous, run)
    with Ledger(db) as led:
        res = revert_run(led, str(run), paths=paths)
    target = paths.etc / rel
    assert not target.exists() or target.read_bytes() != previous
    assert not res.ok and any(s.status == "revert_failed" and "does not write" in (s.error or "") for s in res.steps), res


@root_only
def test_revert_restores_a_previous_content_persist_wrote(tmp_path):
    paths = _tree(tmp_path, {"net.core.somaxconn": "4096"})
    previous = b"# Written by infergap fix --persist\nnet.core.somaxconn = 4096\n-vm.max_map_count=262144\n"
    (paths.etc / "sysctl.d/90-infergap.conf").write_bytes(previous)
    with Ledger(tmp_path / "db") as led:
        run = _apply(led, paths, "net.core.somaxconn", "8192", "4096", persist=True)
        res = revert_run(led, str(run), paths=paths)
    assert res.ok, res
    assert (paths.etc / "sysctl.d/90-infergap.conf").read_bytes() == previous


@root_only
@pytest.mark.parametrize("before", ["4096; id", "٤٠٩٦", "4096\n1", "$(id)"])
def test_revert_never_writes_a_journalled_value_that_fails_validation(tmp_path, before):
    paths = _tree(tmp_path, {"net.core.somaxconn": "4096"})
    db = tmp_path / "db"
    with Ledger(db) as led:
        run = _apply(led, paths, "net.core.somaxconn", "8192", "4096")
    _tamper(db, "UPDATE fix_steps SET before = ? WHERE run_id = ?", before, run)
    with Ledger(db) as led:
        res = revert_run(led, str(run), paths=paths)
    assert _read(paths, "net.core.somaxconn") == "8192"
    assert not res.ok and "not a valid" in (res.steps[0].error or ""), res


@root_only
def test_revert_of_an_earlier_run_refuses_while_a_later_run_changed_the_same_setting(tmp_path):
    paths = _tree(tmp_path, {"net.core.somaxconn": "4096"})
    with Ledger(tmp_path / "db") as led:
        first = _apply(led, paths, "net.core.somaxconn", "8192", "4096")
        second = _apply(led, paths, "net.core.somaxconn", "16384", "8192")
        with pytest.raises(FixRefused, match=rf"fix run {second}.*net.core.somaxconn.*revert it first"):
            revert_run(led, str(first), paths=paths)
        assert _read(paths, "net.core.somaxconn") == "16384" and led.get(str(first)).status == "applied"
        res = revert_run(led, str(first), paths=paths, force=True)
        assert res.warnings and f"fix run {second}" in res.warnings[0]
        assert _read(paths, "net.core.somaxconn") == "4096"
        # In order, the later one first: both revert cleanly, no warning.
    paths2 = _tree(tmp_path / "b", {"net.core.somaxconn": "4096"})
    with Ledger(tmp_path / "db2") as led:
        first = _apply(led, paths2, "net.core.somaxconn", "8192", "4096")
        second = _apply(led, paths2, "net.core.somaxconn", "16384", "8192")
        assert revert_run(led, str(second), paths=paths2).ok and _read(paths2, "net.core.somaxconn") == "8192"
        res = revert_run(led, str(first), paths=paths2)
        assert res.ok and not res.warnings and _read(paths2, "net.core.somaxconn") == "4096"


@root_only
def test_revert_restores_only_when_the_value_is_still_the_one_the_run_set(tmp_path):
    paths = _tree(tmp_path, {"net.core.somaxconn": "4096"})
    with Ledger(tmp_path / "db") as led:
        run = _apply(led, paths, "net.core.somaxconn", "8192", "4096")
        (paths.proc_sys / "net/core/somaxconn").write_text("2048\n")  # someone else changed it since
        res = revert_run(led, str(run), paths=paths)
        assert not res.ok and res.steps[0].status == "changed_since", res
        assert "2048" in res.steps[0].error and "8192" in res.steps[0].error
        assert _read(paths, "net.core.somaxconn") == "2048"


@root_only
def test_revert_removes_the_directories_persist_created(tmp_path):
    paths = _tree(tmp_path, {"net.core.somaxconn": "4096"}, etc_dirs=False)
    with Ledger(tmp_path / "db") as led:
        run = _apply(led, paths, "net.core.somaxconn", "8192", "4096", persist=True)
        assert (paths.etc / "sysctl.d/90-infergap.conf").is_file()
        res = revert_run(led, str(run), paths=paths)
    assert res.ok, res
    assert not (paths.etc / "sysctl.d").exists() and paths.etc.is_dir()
    assert [s.step_kind for s in res.steps] == ["file", "dir", "value"]


@pytest.mark.parametrize("host", ["h200-1gpu", "seed-8x-rtxpro6000"])
def test_the_reports_audit_writes_agree_with_their_actions(host):
    """What the investigators write passes ``check_report``: the command each action runs is
    one the report shows (otherwise every real report would be refused)."""
    from infergap.audit import run_audit
    from infergap.remedy.engine import check_report
    from infergap.snapshot import open_snapshot
    from tests.conftest import HOSTS

    findings = run_audit(open_snapshot(HOSTS / host)).findings
    with_actions = [f for f in findings if f.remedy and f.remedy.actions]
    assert with_actions, "the fixture host has no finding with an executable action"
    check_report(findings, host)


@root_only
def test_revert_writes_in_the_environments_trees_never_in_those_the_journal_names(tmp_path):
    paths = _tree(tmp_path, {"net.core.somaxconn": "4096"})
    db = tmp_path / "db"
    env = {"INFERGAP_PROC_SYS": str(paths.proc_sys), "INFERGAP_ETC": str(paths.etc), "INFERGAP_SYS": str(paths.sys)}
    with Ledger(db) as led:
        run = _apply(led, paths, "net.core.somaxconn", "8192", "4096", persist=True)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "sysctl.d").mkdir(parents=True)
    con = sqlite3.connect(db)
    with con:
        (payload,) = con.execute("SELECT payload FROM runs WHERE id = ?", (run,)).fetchone()
        doc = json.loads(payload)
        doc["roots"]["etc"] = str(elsewhere)
        con.execute("UPDATE runs SET payload = ? WHERE id = ?", (json.dumps(doc), run))
        con.execute("UPDATE fix_steps SET target = ?, file_existed = 1, file_previous = ?, after = NULL "
                    "WHERE run_id = ? AND step_kind = 'file'", (str(elsewhere / "sysctl.d/90-infergap.conf"), b"vm.swappiness = 1\n", run))
    r = subprocess.run([sys.executable, "-m", "infergap", "fix", "--revert", str(run), "--db", str(db)], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(SRC), **env})
    assert r.returncode == 2 and "journalled other trees" in r.stderr and "INFERGAP_ETC=" in r.stderr, r.stdout + r.stderr
    assert not (elsewhere / "sysctl.d/90-infergap.conf").exists()
    assert _read(paths, "net.core.somaxconn") == "8192"
