"""``compare``: audits finding by finding, benches per point with the spread rule.

The bench documents here are shaped like ``infergap.bench/1`` (points → trials → metrics, field
names of the bench result model); they are built by :func:`bench_doc`, not captured from a server.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from infergap.ledger import HostId, Ledger, compare_audits, compare_bench_points

SRC = Path(__file__).resolve().parents[2] / "src"
HOST = HostId("0123456789ab", "gpu-a")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    e = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "infergap", *args], capture_output=True, text=True, timeout=60, env=e)


def _trial(i: int, tps: float, ttft_p50: float) -> dict:
    return {"trial": i, "duration_s": 30.0, "requests": 64, "completed": 64, "failed": 0, "truncated": 0,
            "request_throughput_rps": tps / 128, "output_throughput_tps": tps, "total_throughput_tps": tps * 3,
            "ttft_ms": {"n": 64, "p50": ttft_p50, "p99": ttft_p50 * 2}, "tpot_ms": {"n": 64, "p50": 1000 / tps * 16},
            "itl_ms": {"n": 64, "p50": 1000 / tps * 16}, "e2e_ms": {"n": 64, "p50": ttft_p50 + 128 * 1000 / tps * 16}}


def bench_doc(points: dict[int, list[tuple[float, float]]]) -> dict:
    """A bench result: concurrency → per-trial (output tok/s, TTFT p50 ms)."""
    return {"schema": "infergap.bench/1", "infergap_version": "0.1.0", "started_at": "2026-11-29T20:00:00+00:00",
            "environment": {"url": "http://127.0.0.1:8000", "endpoint": "/v1/chat/completions", "model": "m"},
            "settings": {"concurrency": sorted(points), "trials": 3},
            "points": [{"mode": "concurrency", "concurrency": c, "trials": [_trial(i, *v) for i, v in enumerate(vals)]}
                       for c, vals in points.items()]}


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


def test_compare_bench_significance_uses_both_spreads():
    a = bench_doc({16: [(1000, 50), (1040, 52), (980, 49)], 64: [(3000, 200), (3300, 210), (2900, 190)]})
    b = bench_doc({16: [(1300, 40), (1290, 41), (1320, 39)], 64: [(3100, 205), (3050, 195), (3200, 215)],
                   128: [(4000, 400)]})
    out = {(m.point, m.metric): m for m in compare_bench_points(a, b)}
    assert {p for p, _ in out} == {"c=16", "c=64"}  # c=128 only in B
    up = out[("c=16", "output_throughput_tps")]
    assert up.significant and up.better and up.a_median == 1000 and up.b_median == 1300
    assert round(up.change_pct, 1) == 30.0
    ttft = out[("c=16", "ttft_ms_p50")]
    assert ttft.significant and ttft.better and ttft.change_pct < 0
    noise = out[("c=64", "output_throughput_tps")]
    assert not noise.significant and noise.a_values == [3000, 3300, 2900]


def test_compare_cli_on_recorded_runs(tmp_path):
    db = tmp_path / "l.db"
    with Ledger(db) as led:
        a = led.record("bench", bench_doc({16: [(1000, 50), (1040, 52), (980, 49)]}), HOST)
        b = led.record("bench", bench_doc({16: [(700, 80), (690, 82), (710, 79)]}), HOST)
        c = led.record("audit", AUDIT_A, HOST)
        d = led.record("audit", AUDIT_B, HOST)
    r = _cli("compare", str(a), str(b), "--db", str(db))
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if "output_throughput_tps" in ln)
    assert "c=16" in line and "-30.0%" in line and "worse" in line and "(trials 3/3)" in line
    r = _cli("compare", str(c), str(d), "--db", str(db))
    assert r.returncode == 0
    assert "+ gpu.persistence_mode 0000:18:00.0: actionable P2" in r.stdout
    assert "- vm.swappiness: actionable P2" in r.stdout
    assert "~ kernel.numa_balancing: actionable P1 → ok" in r.stdout
    r = _cli("compare", str(a), str(c), "--db", str(db))
    assert r.returncode == 2 and "compare runs of one kind" in r.stderr
    r = _cli("history", "--kind", "bench", "--db", str(db))
    assert r.returncode == 0 and [ln.split()[0] for ln in r.stdout.splitlines()[1:]] == [str(b), str(a)]


values = st.lists(st.floats(min_value=1, max_value=1e5, allow_nan=False), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(values, values)
def test_significance_is_symmetric_and_never_for_identical_runs(av, bv):
    a = bench_doc({8: [(v, 10.0) for v in av]})
    b = bench_doc({8: [(v, 10.0) for v in bv]})
    ab = {m.metric: m.significant for m in compare_bench_points(a, b)}
    ba = {m.metric: m.significant for m in compare_bench_points(b, a)}
    assert ab == ba
    assert not any(m.significant for m in compare_bench_points(a, a))
    if max(av) < min(bv):  # completely separated runs always count
        assert ab["output_throughput_tps"]
