"""Every row of the diagnosis corpus (tests/fixtures/evidence/ABOUT.md, tables with an "Expected
finding" column): the fixture audited alone names the cause its thread states among the first
three actionable findings, never calls that check ok, gives no P0 on a healthy input, and leaves
nothing unrecognised."""

from __future__ import annotations

import pytest

from benchmarks.diagnosis import read_cases
from infergap.audit import run_audit
from infergap.evidence import EvidenceSnapshot
from infergap.findings import Status
from tests.evidence.evidence_data import FIX


def corpus_rows() -> list[tuple[str, str | None, str | None, str | None]]:
    """(file, check id, status, severity) of every corpus row (the benchmark's reader)."""
    return [(c.file, c.check, c.status, c.severity) for c in read_cases(FIX / "ABOUT.md")]


ROWS = corpus_rows()


def audit(name: str):
    snap = EvidenceSnapshot(None, [FIX / name])
    try:
        return run_audit(snap)
    finally:
        snap.close()


def test_corpus_is_large_and_sourced():
    causes = [r for r in ROWS if r[2] == "actionable"]
    assert len(causes) >= 50, len(causes)
    text = (FIX / "ABOUT.md").read_text(encoding="utf-8")
    for name, *_ in ROWS:
        assert (FIX / name).is_file(), name
        row = next(ln for ln in text.splitlines() if ln.startswith(f"| `{name}`"))
        assert "https://" in row, name


@pytest.mark.parametrize("name,check,status,severity", ROWS, ids=[r[0] for r in ROWS])
def test_corpus_case(name, check, status, severity):
    rep = audit(name)
    act = [f for f in rep.findings if f.status == Status.actionable]
    assert not [f for f in rep.findings if f.id == "evidence.unrecognized"], name
    if status == "actionable":
        top = act[:3]
        assert any(f.id == check for f in top), f"{name}: want {check} in {[f.id for f in top]}"
        f = next(f for f in top if f.id == check)
        if severity:
            assert f.severity.value == severity, (name, f.title)
        assert f.evidence, (name, f.id)
        assert not any(g.id == check and g.status == Status.ok for g in rep.findings), name
    else:
        assert not [f.id for f in act if f.severity and f.severity.value == "P0"], name
        if status == "unknown" and check:  # no known cause: the paste is listed as read, not dropped
            assert any(f.id == check and f.status == Status.unknown and f.evidence for f in rep.findings), name
