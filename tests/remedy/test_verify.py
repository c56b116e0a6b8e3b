"""``fix --apply --url``: a real bench sweep before and after a real sysctl change, against a
real streaming server (``paced_server.py``) whose speed depends on that sysctl, all inside a
private network namespace."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from infergap.ledger import Ledger

from .conftest import sysctl_finding, write_report

pytestmark = pytest.mark.slow

SERVER = Path(__file__).with_name("paced_server.py")


@pytest.fixture
def paced_server(netns):
    subprocess.run(["ip", "netns", "exec", netns.name, "ip", "link", "set", "lo", "up"], check=True, timeout=20)
    proc = subprocess.Popen(["ip", "netns", "exec", netns.name, sys.executable, str(SERVER), "--port", "8011"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "ready", proc.stderr.read()
        yield "http://127.0.0.1:8011"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_verify_url_measures_before_and_after_and_records_both(netns, paced_server, tmp_path):
    som = netns.read("net.core.somaxconn")
    assert int(som) < 8192, "the namespace's default backlog must be below the server's threshold"
    db = tmp_path / "ledger.sqlite3"
    rep = write_report(tmp_path / "audit.json", [
        sysctl_finding("net.socket_buffers", [{"target": "net.core.somaxconn", "value": "8192", "previous": som}])])
    r = netns.infergap("fix", "--audit", str(rep), "--db", str(db), "--apply", "--yes", "--url", paced_server,
                       "--concurrency", "4", "--trials", "3", env={"INFERGAP_ETC": str(tmp_path / "etc")})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "before/after (bench runs" in r.stdout and "after the changes…" in r.stdout
    line = next(ln for ln in r.stdout.splitlines() if "output_throughput_tps:" in ln)
    assert line.rstrip().endswith("better"), line  # 4 ms → 1 ms between tokens
    with Ledger(db) as led:
        fix = led.latest(kind="fix")
        benches = led.runs(kind="bench")
        assert [b.parent_id for b in benches] == [fix.id, fix.id]
        assert all(b.payload["schema"] == "infergap.bench/1" and b.payload["points"][0]["trials"] for b in benches)
        verify = fix.payload["verify"]
        assert (verify["before_run"], verify["after_run"]) == (benches[1].id, benches[0].id)
        assert {"point": "c=4", "metric": "output_throughput_tps"}.items() <= next(
            c for c in verify["significant_changes"] if c["metric"] == "output_throughput_tps").items()
    r = netns.infergap("fix", "--revert", "--db", str(db), env={"INFERGAP_ETC": str(tmp_path / "etc")})
    assert r.returncode == 0 and netns.read("net.core.somaxconn") == som


def test_verify_url_needs_apply_and_a_reachable_server(netns, tmp_path):
    som = netns.read("net.core.somaxconn")
    db = tmp_path / "ledger.sqlite3"
    rep = write_report(tmp_path / "audit.json", [
        sysctl_finding("net.socket_buffers", [{"target": "net.core.somaxconn", "value": "8192", "previous": som}])])
    r = netns.infergap("fix", "--audit", str(rep), "--db", str(db), "--url", "http://127.0.0.1:9")
    assert r.returncode == 2 and "needs --apply" in r.stderr
    # Nothing listens: the first sweep fails before any change is made.
    r = netns.infergap("fix", "--audit", str(rep), "--db", str(db), "--apply", "--yes", "--url", "http://127.0.0.1:9")
    assert r.returncode == 2 and r.stderr.startswith("infergap: error: --url http://127.0.0.1:9: server unreachable")
    assert netns.read("net.core.somaxconn") == som
    with Ledger(db) as led:
        assert led.runs(kind="fix") == []
