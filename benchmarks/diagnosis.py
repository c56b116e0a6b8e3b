"""Diagnosis score over the corpus of real pastes in tests/fixtures/evidence/.

Each fixture is audited alone, as a new user would paste it (``infergap audit --no-host
--evidence FILE``). The expectations are the "Expected finding" column of the corpus tables in
tests/fixtures/evidence/ABOUT.md: a finding id with ``actionable`` is the root cause the thread
states; ``ok``/``expected`` marks a healthy input.

Printed, over the whole corpus:
  cases                      root-cause cases, healthy cases, files
  root cause in top 3        the expected finding among the first three actionable findings (%)
  false ok                   a root-cause case whose expected check says ok
  false P0 on healthy        a healthy input with any P0 finding
  unrecognised inputs        files (or stretches) the recognisers could not place
  no known cause, said so    a case whose expected finding is ``unknown`` (a paste no signature
                             explains) reported with that check as unknown, not dropped

Exits 1 when any target is missed (100 % in top 3, 0 false ok, 0 false P0, 0 unrecognised,
every no-known-cause case said so),
2 when the corpus cannot be read.

    python benchmarks/diagnosis.py [--verbose] [--json] [--corpus DIR]

``--corpus DIR`` scores another set laid out the same way (files beside an ABOUT.md), such as a
first-sight round under tests/fixtures/evidence/first-sight/.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from infergap.audit import run_audit  # noqa: E402
from infergap.evidence.overlay import EvidenceSnapshot  # noqa: E402
from infergap.findings import Status  # noqa: E402

CORPUS = ROOT / "tests" / "fixtures" / "evidence"
_ID = re.compile(r"`([a-z][a-z0-9_]*\.[a-z0-9_.]+)`")
_STATUS = re.compile(r"\b(actionable|ok|expected|unknown|healthy)\b")
_SEV = re.compile(r"\b(P[012])\b")


@dataclass
class Case:
    """One corpus row: a fixture and what its thread says."""

    file: str
    check: str | None
    status: str | None
    severity: str | None
    source: str = ""


@dataclass
class Result:
    """What the audit said about one case."""

    file: str
    expected: str
    top3: list[str] = field(default_factory=list)
    hit: bool | None = None
    false_ok: bool = False
    false_p0: list[str] = field(default_factory=list)
    unrecognized: int = 0
    said_unknown: bool | None = None


def read_cases(about: Path) -> list[Case]:
    """Rows of every Markdown table in ``about`` whose header has an "Expected finding" column."""
    cases: list[Case] = []
    cols: list[str] | None = None
    for line in about.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            cols = None
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]  # "\|" is a pipe inside a cell
        if cols is None:
            cols = [c.lower() for c in cells]
            continue
        if set("".join(cells)) <= set("-: "):
            continue
        if "expected finding" not in cols or "file" not in cols:
            continue
        row = dict(zip(cols, cells))
        name = row["file"].strip("` ")
        exp = row["expected finding"]
        idm, stm, svm = _ID.search(exp), _STATUS.search(exp), _SEV.search(exp)
        cases.append(Case(name, idm.group(1) if idm else None, stm.group(1) if stm else None, svm.group(1) if svm else None,
                          row.get("source", "")))
    return cases


def audit_file(path: Path):
    """The audit report of one evidence file alone (no host)."""
    snap = EvidenceSnapshot(None, [path])
    try:
        return run_audit(snap)
    finally:
        snap.close()


def score(cases: list[Case], files: list[Path], corpus: Path = CORPUS) -> tuple[dict, list[Result]]:
    """Audit every file once; score the cases (``corpus``: where the files are, for missing ones)."""
    by_file = {c.file: c for c in cases}
    results: list[Result] = []
    for path in files:
        rep = audit_file(path)
        c = by_file.get(path.name)
        act = [f for f in rep.findings if f.status == Status.actionable]
        r = Result(path.name, f"{c.check} {c.status} {c.severity or ''}".strip() if c else "(no expectation)")
        r.top3 = [f"{f.id} {f.severity.value if f.severity else ''}".strip() for f in act[:3]]
        r.unrecognized = sum(1 for f in rep.findings if f.id == "evidence.unrecognized")
        if c and c.status == "actionable" and c.check:
            r.hit = any(f.id == c.check for f in act[:3])
            r.false_ok = any(f.id == c.check and f.status == Status.ok for f in rep.findings) and not any(f.id == c.check for f in act)
        elif c and c.status in ("ok", "expected", "healthy"):
            r.false_p0 = [f.id for f in act if f.severity and f.severity.value == "P0"]
        elif c and c.status == "unknown" and c.check:
            r.said_unknown = any(f.id == c.check and f.status == Status.unknown for f in rep.findings)
        results.append(r)
    root = [r for r in results if r.hit is not None]
    healthy = [r for r in results if by_file.get(r.file) and by_file[r.file].status in ("ok", "expected", "healthy")]
    summary = {
        "cases": len(root),
        "healthy_cases": len(healthy),
        "files": len(results),
        "root_cause_top3": sum(1 for r in root if r.hit),
        "root_cause_top3_pct": round(100.0 * sum(1 for r in root if r.hit) / len(root), 1) if root else 0.0,
        "false_ok": sum(1 for r in root if r.false_ok),
        "false_p0_healthy": sum(1 for r in healthy if r.false_p0),
        "unrecognized_inputs": sum(1 for r in results if r.unrecognized),
        "no_cause_cases": sum(1 for r in results if r.said_unknown is not None),
        "no_cause_said": sum(1 for r in results if r.said_unknown),
        "missing_fixtures": sorted(c.file for c in cases if not (corpus / c.file).is_file()),
    }
    return summary, results


def main(argv: list[str] | None = None) -> int:
    """Print the corpus score; exit 1 when a target is missed, 2 when the corpus is unreadable."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--verbose", "-v", action="store_true", help="one line per case")
    ap.add_argument("--json", action="store_true", help="print the summary and cases as JSON")
    ap.add_argument("--corpus", type=Path, default=CORPUS, help="directory of pastes with an ABOUT.md (default: the corpus)")
    args = ap.parse_args(argv)
    corpus: Path = args.corpus
    about = corpus / "ABOUT.md"
    try:
        cases = read_cases(about)
    except OSError as e:
        print(f"{about}: cannot read ({e.strerror or e})", file=sys.stderr)
        return 2
    files = sorted(p for p in corpus.iterdir() if p.is_file() and p.name != "ABOUT.md")
    summary, results = score(cases, files, corpus)
    if args.json:
        print(json.dumps({"summary": summary, "cases": [asdict(r) for r in results]}, indent=2))
    else:
        if args.verbose:
            for r in results:
                mark = {True: "top3", False: "MISS", None: "    "}[r.hit] if r.said_unknown is None else ("said" if r.said_unknown else "DROP")
                extra = (" FALSE-OK" if r.false_ok else "") + (f" FALSE-P0 {r.false_p0}" if r.false_p0 else "") + (f" unrecognised×{r.unrecognized}" if r.unrecognized else "")
                print(f"{mark} {r.file:<44} want {r.expected:<32} got {', '.join(r.top3) or '-'}{extra}")
            print()
        s = summary
        print(f"cases:                    {s['cases']} root-cause, {s['healthy_cases']} healthy, {s['files']} files")
        print(f"root cause in top 3:      {s['root_cause_top3']}/{s['cases']} ({s['root_cause_top3_pct']} %)")
        print(f"false ok:                 {s['false_ok']}")
        print(f"false P0 on healthy:      {s['false_p0_healthy']}")
        print(f"unrecognised inputs:      {s['unrecognized_inputs']}")
        print(f"no known cause, said so:  {s['no_cause_said']}/{s['no_cause_cases']}")
        if s["missing_fixtures"]:
            print(f"missing fixtures:         {', '.join(s['missing_fixtures'])}")
    s = summary
    ok = s["cases"] > 0 and s["root_cause_top3"] == s["cases"] and not s["false_ok"] and not s["false_p0_healthy"] \
        and not s["unrecognized_inputs"] and not s["missing_fixtures"] and s["no_cause_said"] == s["no_cause_cases"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
