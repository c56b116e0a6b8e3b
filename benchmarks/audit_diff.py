"""Audit every real fixture with this tree and with another git revision, and diff the JSON.

A refactor must not change a conclusion: this prints, per fixture, "same" or the findings that
differ (id, subject, status, severity, title), and exits 1 when any differs. Timings, dates and
the infergap version are left out of the comparison; everything else of each finding counts.

    python benchmarks/audit_diff.py            # against HEAD
    python benchmarks/audit_diff.py main~3     # against another revision
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
TIMEOUT_S = 120


def inputs() -> list[tuple[str, list[str]]]:
    """(label, audit arguments) for every captured host and every public paste."""
    out = []
    for p in sorted((FIX / "hosts").iterdir()):
        if p.is_dir() or p.name.endswith(".tar.gz"):
            out.append((f"hosts/{p.name}", ["--snapshot", str(p)]))
    for p in sorted((FIX / "evidence").iterdir()):
        if p.is_file() and p.suffix != ".md":
            out.append((f"evidence/{p.name}", ["--no-host", "--evidence", str(p)]))
    return out


def audit(src: Path, args: list[str], db: Path) -> dict:
    """The audit JSON of ``args`` run with the package under ``src``; RuntimeError when it fails."""
    env = {**os.environ, "PYTHONPATH": str(src), "INFERGAP_DB": str(db)}
    r = subprocess.run([sys.executable, "-m", "infergap", "audit", "--format", "json", *args],
                       capture_output=True, text=True, env=env, timeout=TIMEOUT_S, cwd=ROOT)
    if r.returncode not in (0, 1):
        raise RuntimeError(f"audit {' '.join(args)} exited {r.returncode}: {r.stderr.strip()[:300]}")
    return json.loads(r.stdout)


def comparable(report: dict) -> dict[tuple, dict]:
    """Findings keyed by (id, subject, investigator), without volatile fields."""
    out = {}
    for f in report.get("findings", []):
        out[(f["id"], f.get("subject"), f["investigator"])] = f
    return out


def main(rev: str = "HEAD") -> int:
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        old.mkdir()
        arch = subprocess.run(["git", "archive", rev, "src"], cwd=ROOT, capture_output=True, timeout=TIMEOUT_S)
        if arch.returncode:
            print(f"git archive {rev}: {arch.stderr.decode().strip()}", file=sys.stderr)
            return 2
        tar = Path(tmp) / "old.tar"
        tar.write_bytes(arch.stdout)
        with tarfile.open(tar) as t:
            t.extractall(old, filter="data")
        db = Path(tmp) / "ledger.db"
        changed = failed = 0
        cases = inputs()
        for label, args in cases:
            try:
                a = comparable(audit(old / "src", args, db))
                b = comparable(audit(ROOT / "src", args, db))
            except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
                failed += 1
                print(f"FAILED {label}: {e}")
                continue
            diffs = []
            for k in sorted(set(a) | set(b), key=str):
                if a.get(k) != b.get(k):
                    fa, fb = a.get(k) or {}, b.get(k) or {}
                    diffs.append(f"  {k[0]} {k[1] or ''}: {fa.get('status')}/{fa.get('severity')} {fa.get('title')!r}"
                                 f" -> {fb.get('status')}/{fb.get('severity')} {fb.get('title')!r}")
            if diffs:
                changed += 1
                print(f"CHANGED {label}")
                print("\n".join(diffs))
            else:
                print(f"same    {label}")
        print(f"{len(cases)} fixtures: {len(cases) - changed - failed} same, {changed} changed, {failed} failed (against {rev})")
        return 1 if changed or failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
