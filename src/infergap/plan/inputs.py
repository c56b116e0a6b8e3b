"""Read the plan's inputs from files: audit, roofline and bench JSON, engine logs (``--evidence``).

Each loader raises :class:`~infergap.errors.UserError` naming the file and the problem.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infergap.errors import UserError
from infergap.guard import read_json, validate


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


def load_audit(path: str | Path) -> dict[str, Any]:
    """An ``infergap audit --format json`` document (``infergap.audit/1``), checked against
    :class:`infergap.synthesis.AuditReport` so a hand-edited or cut file is refused with one line
    naming the file and the first bad field, instead of failing later inside the plan."""
    from infergap.synthesis import AuditReport

    data = _json(path, "infergap.audit/1", "audit")
    validate(AuditReport, data, f"--audit {path}")
    return data


def load_roofline(path: str | Path) -> dict[str, Any]:
    """An ``infergap roofline --format json`` document (``infergap.roofline/1``), checked against
    :class:`infergap.roofline.bounds.RooflineResult` like the audit document."""
    from infergap.roofline.bounds import RooflineResult

    data = _json(path, "infergap.roofline/1", "roofline")
    validate(RooflineResult, data, f"--roofline {path}")
    return data


def load_bench(path: str | Path) -> Any:
    """An ``infergap bench --format json`` document as a :class:`~infergap.bench.BenchResult`."""
    from infergap.bench import load_result

    try:
        return load_result(path)
    except UserError as e:
        raise UserError(f"--bench {e}") from None


def engine_logs_from(snap: Any) -> list[tuple[str, Any]]:
    """(label, :class:`~infergap.parsers.engine_log.EngineLogFacts`) of every SGLang/vLLM log in a
    snapshot's evidence."""
    from infergap.facts.logs import engine_logs

    return [(part.label, facts) for part, facts in engine_logs(snap)]


def engine_logs_from_files(paths: list[str | Path]) -> list[tuple[str, Any]]:
    """Engine-log facts of the given evidence files (other evidence kinds are ignored here; the
    audit reads them)."""
    if not paths:
        return []
    from infergap.evidence.overlay import open_with_evidence

    snap = open_with_evidence(None, [str(p) for p in paths], host=False)
    try:
        return engine_logs_from(snap)
    finally:
        snap.close()
