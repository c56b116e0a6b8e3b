"""Read the plan's inputs from files: audit, roofline and bench JSON, engine logs (``--evidence``).

Each loader raises :class:`~infergap.errors.UserError` naming the file and the problem.
"""

from __future__ import annotations

import ast
import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infergap import checks
from infergap.checks import is_template_line
from infergap.errors import UserError
from infergap.evidence.overlay import open_with_evidence
from infergap.facts.logs import engine_logs
from infergap.guard import read_json, validate
from infergap.roofline.bounds import RooflineResult
from infergap.synthesis import AuditReport

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.findings import Remedy
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
    instead of failing later inside the plan.

    A file is someone's data, not infergap's advice: each remedy line (commands, persist, revert)
    is kept only when it is what one of the check's command templates gives for valid values
    (:func:`infergap.checks.is_template_line`) or a literal line of the investigator that owns the
    check in the catalog; any other line, such as a template's output with ``; curl … | sh``
    appended, is withheld and the remedy's note says how many lines were (docs/security.md,
    class 1).
    """
    report = validate(AuditReport, _json(path, "infergap.audit/1", "audit"), f"--audit {path}")
    for f in report.findings:
        if f.remedy is not None:
            _keep_template_lines(f.id, f.remedy, path)
    return report


@lru_cache(maxsize=None)
def _own_literals(check_id: str) -> frozenset[str]:
    """The string constants of the module of the investigator that owns ``check_id`` in the
    catalog (not the one a file names): the literal remedy lines it can write, read from its
    source as data (:mod:`ast`, nothing imported). Empty when the module cannot be read."""
    try:
        name = checks.get(check_id).investigator
        spec = importlib.util.find_spec(f"infergap.investigators.{name}")
        tree = ast.parse(Path(spec.origin).read_text()) if spec and spec.origin else None
    except (UserError, ImportError, OSError, SyntaxError, ValueError):
        return frozenset()
    return frozenset(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)) if tree else frozenset()


def _infergaps_line(check_id: str, line: str) -> bool:
    return is_template_line(check_id, line) or line in _own_literals(check_id)


def _keep_template_lines(check_id: str, r: Remedy, path: str | Path) -> None:
    withheld = 0
    for field in ("commands", "persist", "revert"):
        lines = getattr(r, field)
        kept = [ln for ln in lines if _infergaps_line(check_id, ln)]
        withheld += len(lines) - len(kept)
        setattr(r, field, kept)
    if withheld:
        why = (f"{withheld} line(s) of this remedy in {Path(path).name} withheld: not what a command template of "
               f"{check_id} gives nor a line its investigator writes; run infergap audit on the host for its commands.")
        r.note = f"{why} {r.note}" if r.note else why


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
