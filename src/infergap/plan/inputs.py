"""Read the plan's inputs from files: audit, roofline and bench JSON, engine logs (``--evidence``).

Each loader raises :class:`~infergap.errors.UserError` naming the file and the problem.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from infergap.errors import UserError
from infergap.evidence.overlay import open_with_evidence
from infergap.facts.logs import engine_logs
from infergap.guard import read_json, validate
from infergap.roofline.bounds import RooflineResult
from infergap.synthesis import AuditReport

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.bench.results import BenchResult
    from infergap.parsers.engine_log import EngineLogFacts
    from infergap.snapshot.core import Snapshot


#: Bytes of an audit or roofline document the plan reads. An audit of an 8-GPU host with its
#: evidence is about 100 kB (tests/fixtures/hosts/seed-8x-rtxpro6000); parsed JSON takes about
#: 9x its size in memory (a 160 MB file took 1.37 GB), so the general 256 MB cap is far too much.
MAX_REPORT_BYTES = 16 << 20


def _json(path: str | Path, schema: str, what: str) -> dict[str, Any]:
    p = Path(path)
    data = read_json(p, f"--{what}", max_bytes=MAX_REPORT_BYTES)
    if not isinstance(data, dict) or data.get("schema") != schema:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise UserError(f"--{what} {p}: expected an {schema} document, found {got!r}")
    return data


def load_audit(path: str | Path) -> AuditReport:
    """An ``infergap audit --format json`` document (``infergap.audit/1``) as the
    :class:`infergap.synthesis.AuditReport` it was written from, validated here once, so a
    hand-edited or cut file is refused with one line naming the file and the first bad field,
    instead of failing later inside the plan."""
    return validate(AuditReport, _json(path, "infergap.audit/1", "audit"), f"--audit {path}")


def load_roofline(path: str | Path) -> dict[str, Any]:
    """An ``infergap roofline --format json`` document (``infergap.roofline/1``), checked against
    :class:`infergap.roofline.bounds.RooflineResult` like the audit document."""
    data = _json(path, "infergap.roofline/1", "roofline")
    validate(RooflineResult, data, f"--roofline {path}")
    return data


def load_bench(path: str | Path) -> BenchResult:
    """An ``infergap bench --format json`` document as a :class:`~infergap.bench.BenchResult`."""
    from infergap.bench import load_result

    try:
        return load_result(path)
    except UserError as e:
        raise UserError(f"--bench {e}") from None


def engine_logs_from(snap: Snapshot) -> list[tuple[str, EngineLogFacts]]:
    """(label, :class:`~infergap.parsers.engine_log.EngineLogFacts`) of every SGLang/vLLM log in a
    snapshot's evidence."""
    return [(part.label, facts) for part, facts in engine_logs(snap)]


def engine_logs_from_files(paths: list[str | Path]) -> list[tuple[str, EngineLogFacts]]:
    """Engine-log facts of the given evidence files (other evidence kinds are ignored here; the
    audit reads them)."""
    if not paths:
        return []

    snap = open_with_evidence(None, [str(p) for p in paths], host=False)
    try:
        return engine_logs_from(snap)
    finally:
        snap.close()
