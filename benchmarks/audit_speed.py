"""Audit speed: wall time of a full live audit (the CLI, as a user runs it) and of a snapshot
audit, median of N runs each, and the ratio of one-at-a-time to parallel investigation.

Targets (on a 2-core machine): live audit <= 2 s, snapshot audit <= 1 s (median of 10).

Every timed run must succeed (exit 0 and an ``infergap.audit/1`` JSON document on stdout); the
first that does not stops the benchmark with its error and exit status 1: the time of a crash is
not an audit time. Runs record into a throw-away ledger, never the user's.

Run: python benchmarks/audit_speed.py [--runs 10] [--snapshot tests/fixtures/hosts/seed-8x-rtxpro6000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))


LEDGER_DIR = tempfile.TemporaryDirectory(prefix="infergap-bench-ledger-")


def wall(cmd: list[str], runs: int) -> list[float]:
    """Wall seconds of ``runs`` runs of ``cmd``; SystemExit(1) on the first run that fails."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "INFERGAP_DB": str(Path(LEDGER_DIR.name) / "ledger.sqlite3")}
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, env=env, timeout=300)
        out.append(time.perf_counter() - t0)
        problem = None
        if p.returncode != 0:
            problem = f"exit status {p.returncode}"
        else:
            try:
                if json.loads(p.stdout).get("schema") != "infergap.audit/1":
                    problem = "stdout is not an infergap.audit/1 document"
            except ValueError:
                problem = "stdout is not JSON"
        if problem:
            print(f"FAILED: {' '.join(cmd)}: {problem}: {p.stderr.decode(errors='replace')[-500:]}", file=sys.stderr)
            raise SystemExit(1)
    return out


def in_process(snapshot: str | None, parallel: bool, runs: int) -> list[float]:
    from infergap.audit import run_audit
    from infergap.snapshot import open_snapshot

    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        with open_snapshot(snapshot) as snap:
            run_audit(snap, parallel=parallel)
        out.append(time.perf_counter() - t0)
    return out


def fmt(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.3f} s (min {min(xs):.3f}, max {max(xs):.3f}, n={len(xs)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--snapshot", default=str(ROOT / "tests/fixtures/hosts/seed-8x-rtxpro6000"))
    a = ap.parse_args()
    py = [sys.executable, "-m", "infergap", "audit", "--format", "json"]
    print(f"machine: {os.cpu_count()} CPUs")
    live = wall(py, a.runs)
    print(f"live audit, CLI wall:            {fmt(live)}   target <= 2 s: {'met' if statistics.median(live) <= 2 else 'NOT met'}")
    snap = wall([*py, "--snapshot", a.snapshot], a.runs)
    print(f"snapshot audit, CLI wall:        {fmt(snap)}   target <= 1 s: {'met' if statistics.median(snap) <= 1 else 'NOT met'}")
    for label, s in (("live", None), ("snapshot", a.snapshot)):
        par = in_process(s, True, a.runs)
        seq = in_process(s, False, a.runs)
        print(f"{label} investigation in-process: parallel {fmt(par)}; one at a time {fmt(seq)}; "
              f"sequential/parallel = {statistics.median(seq) / statistics.median(par):.2f}x")


if __name__ == "__main__":
    main()
