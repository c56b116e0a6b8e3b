"""``compare``: audits finding by finding; benches per point with the bench library's spread
rule, on real ``infergap.bench/1`` results measured against real streaming servers on 127.0.0.1."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infergap.ledger import HostId, Ledger, compare_audits

SRC = Path(__file__).resolve().parents[2] / "src"
HOST = HostId("0123456789ab", "gpu-a")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    e = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "infergap", *args], capture_output=True, text=True, timeout=60, env=e)


def _finding(fid: str, status: str, subject: str | None = None, severity: str | None = None) -> dict:
    f = {"id": fid, "investigator": "t", "status": status, "title": fid}
    if subject:
        f["subject"] = subject
    if severity:
        f["severity"] = severity
        f["fix_kind"] = "runtime"
    return f


AUDIT_A = {"schema": "infergap.audit/1", "findings": [
    _finding("kernel.numa_balancing", "actionable", severity="P1"),
    _finding("pcie.max_read_request", "actionable", "0000:18:00.0", "P1"),
    _finding("pcie.max_read_request", "ok", "0000:3b:00.0"),
    _finding("vm.swappiness", "actionable", severity="P2")]}
AUDIT_B = {"schema": "infergap.audit/1", "findings": [
    _finding("kernel.numa_balancing", "ok"),
    _finding("pcie.max_read_request", "actionable", "0000:18:00.0", "P1"),
    _finding("pcie.max_read_request", "actionable", "0000:3b:00.0", "P1"),
    _finding("gpu.persistence_mode", "actionable", "0000:18:00.0", "P2")]}


def test_compare_audits_by_id_and_subject():
    d = compare_audits(AUDIT_A, AUDIT_B)
    assert [(f["id"], f.get("subject")) for f in d.appeared] == [("gpu.persistence_mode", "0000:18:00.0")]
    assert [f["id"] for f in d.disappeared] == ["vm.swappiness"]
    assert d.changed == [(("kernel.numa_balancing", ""), "actionable P1", "ok"),
                         (("pcie.max_read_request", "0000:3b:00.0"), "ok", "actionable P1")]


SERVER = Path(__file__).resolve().parents[1] / "remedy" / "paced_server.py"


def _serve(port: int, threshold: int) -> subprocess.Popen:
    """The paced server: 4 ms between tokens while net.core.somaxconn (read only) is below
    ``threshold``, 1 ms otherwise; threshold 0 makes it fast and a huge one slow on any machine."""
    p = subprocess.Popen([sys.executable, str(SERVER), "--port", str(port), "--threshold", str(threshold)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready", p.stderr.read()
    return p


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def bench_pair():
    """Two real bench results of one configuration: against a slow and a fast server."""
    from infergap.bench import BenchSettings
    from infergap.bench.runner import run

    settings = BenchSettings(concurrency=[4], trials=3, num_prompts=16, input_len=64, output_len=48, warmup=2)
    out = []
    for threshold in (10**9, 0):
        port = _free_port()
        srv = _serve(port, threshold)
        try:
            out.append(run(f"http://127.0.0.1:{port}", None, settings))
        finally:
            srv.terminate()
            srv.wait(timeout=10)
    return out


@pytest.mark.slow
def test_compare_cli_on_recorded_runs(tmp_path, bench_pair):
    slow, fast = bench_pair
    db = tmp_path / "l.db"
    with Ledger(db) as led:
        a = led.record("bench", slow.to_json(), HOST)
        b = led.record("bench", fast.to_json(), HOST)
        a2 = led.record("bench", slow.to_json(), HOST)
        c = led.record("audit", AUDIT_A, HOST)
        d = led.record("audit", AUDIT_B, HOST)
        assert led.latest(kind="bench").id == a2
    r = _cli("compare", str(a), str(b), "--db", str(db))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"bench run {a} (")
    line = next(ln for ln in r.stdout.splitlines() if "output_throughput_tps:" in ln)
    assert "c=4" in r.stdout and line.rstrip().endswith("better"), r.stdout
    r = _cli("compare", str(a), str(a2), "--db", str(db))  # the same result twice: nothing is significant
    assert r.returncode == 0 and "better" not in r.stdout and "worse" not in r.stdout
    r = _cli("compare", str(c), str(d), "--db", str(db))
    assert r.returncode == 0
    assert "+ gpu.persistence_mode 0000:18:00.0: actionable P2" in r.stdout
    assert "- vm.swappiness: actionable P2" in r.stdout
    assert "~ kernel.numa_balancing: actionable P1 → ok" in r.stdout
    r = _cli("compare", str(a), str(c), "--db", str(db))
    assert r.returncode == 2 and "compare runs of one kind" in r.stderr
    assert f"run {a} is a bench run and run {c} an audit run" in r.stderr  # "an audit", not "a audit"
    r = _cli("history", "--kind", "bench", "--db", str(db))
    rows = [ln.split()[0] for ln in r.stdout.splitlines() if re.match(r" {0,4}\d+  ", ln)]  # a run's first line
    assert r.returncode == 0 and rows == [str(a2), str(b), str(a)]


def test_compare_refuses_a_bench_run_that_is_not_a_bench_result(tmp_path):
    db = tmp_path / "l.db"
    with Ledger(db) as led:
        a = led.record("bench", {"schema": "infergap.bench/1", "points": []}, HOST)
        b = led.record("bench", {"schema": "infergap.bench/1", "points": []}, HOST)
    r = _cli("compare", str(a), str(b), "--db", str(db))
    assert r.returncode == 2 and f"compare: run {a} is not an infergap.bench/1 result" in r.stderr
