"""Run every investigator concurrently over one snapshot and synthesize the report.

Investigators are independent and read shared, memoized :class:`~infergap.facts.Facts`; they run
in a thread pool (their work is I/O and subprocess waits on a live host). One that raises still
lets the report render: its error is listed under ``investigators`` and a finding of status
``unknown`` with id ``<name>.error`` names it.
"""

from __future__ import annotations

import logging
import os
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import TYPE_CHECKING, Callable

from infergap.checks import get as check
from infergap.checks import investigator_failed, unknown
from infergap.facts import Facts
from infergap.findings import Evidence, Finding, fold_repeats
from infergap.investigators import REGISTRY
from infergap.investigators.base import Context
from infergap.investigators.evidence_files import unmatched
from infergap.investigators.messages import join_messages
from infergap.snapshot.core import LiveSnapshot, Snapshot
from infergap.synthesis import AuditReport, InvestigatorRun, host_summary, synthesize

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.server import ServerConfig

log = logging.getLogger(__name__)

ProgressFn = Callable[[str, str], None]  # (investigator name, "start" | "done" | "error")


def _run_one(mod: ModuleType, ctx: Context, progress: ProgressFn | None) -> tuple[InvestigatorRun, list[Finding]]:
    name = mod.NAME
    if progress:
        progress(name, "start")
    t0 = time.perf_counter()
    try:
        found = list(mod.investigate(ctx))
        err = None
    except Exception as e:  # an investigator bug must not take the report down
        log.debug("investigator %s failed:\n%s", name, traceback.format_exc())
        err = f"{type(e).__name__}: {e}"
        found = [investigator_failed(name, err)]
    dt = time.perf_counter() - t0
    if progress:
        progress(name, "error" if err else "done")
    return InvestigatorRun(name=name, duration_s=round(dt, 4), error=err, findings=len(found)), found


def _live_as_root(snap: Snapshot) -> bool:
    """Whether this is a live audit run by root (then "run as root" is no advice: what is still
    denied is hidden by the container or a security module, not by file modes)."""
    return getattr(snap, "kind", None) == "live" and hasattr(os, "geteuid") and os.geteuid() == 0


def run_audit(
    snap: Snapshot,
    *,
    server: ServerConfig | None = None,
    investigators: list[ModuleType] | None = None,
    parallel: bool | None = None,
    progress: ProgressFn | None = None,
    facts: Facts | None = None,
) -> AuditReport:
    """Audit ``snap`` with every registered investigator (or the given ones).

    ``parallel``: True runs investigators in a thread pool, False one at a time, None (default)
    chooses: threads on a live host, where investigators wait on commands, probes and sysfs and
    the waits overlap; one at a time on a captured snapshot, where the work is pure-Python parsing
    that threads only contend for (``benchmarks/audit_speed.py`` measures both). On a live host the
    registered commands are started in the background first. ``facts``: a :class:`Facts` over
    ``snap`` to share with the caller (parsed once). Returns the synthesized
    :class:`AuditReport`; never raises for bad evidence.
    """
    mods = investigators if investigators is not None else REGISTRY
    live = snap if isinstance(snap, LiveSnapshot) else getattr(snap, "base", None)  # evidence over a live host
    live = live if isinstance(live, LiveSnapshot) else None
    if parallel is None:
        parallel = live is not None
    t0 = time.perf_counter()
    if live is not None and parallel:
        live.prefetch()
    facts = facts if facts is not None else Facts(snap)
    ctx = Context(snap=snap, facts=facts, server=server)
    runs: list[InvestigatorRun] = []
    findings: list[Finding] = []
    if parallel:
        with ThreadPoolExecutor(max_workers=max(1, len(mods)), thread_name_prefix="infergap-inv") as pool:
            results = list(pool.map(lambda m: _run_one(m, ctx, progress), mods))
    else:
        results = [_run_one(m, ctx, progress) for m in mods]
    for run, found in results:
        runs.append(run)
        findings.extend(found)
    try:  # every catalog message on every pasted line joins its check's finding or is explained
        # an audit of some investigators (tests, fleet digests) joins only the messages of their checks
        findings = join_messages(facts, findings, owners=None if investigators is None else {m.NAME for m in mods})
    except Exception as e:
        log.warning("message catalog matching failed: %s: %s", type(e).__name__, e)
    try:  # a pasted part no finding accounts for is listed, never dropped
        findings.extend(unmatched(facts, findings))
    except Exception as e:
        log.warning("evidence accounting failed: %s: %s", type(e).__name__, e)
    findings = fold_repeats(findings)  # a paste repeating one output gives each finding once, with a count
    for src, msg in sorted(facts.problems.items()):
        findings.append(unknown("evidence.unreadable", f"Unreadable evidence: {src}", msg, subject=src))
    denied = snap.unreadable_under("/") + snap.unreadable_under("cmds") + snap.unreadable_under("probes")
    if denied:
        reasons = sorted({r for _p, r in denied})
        findings.append(unknown(
            "evidence.unreadable", f"{len(denied)} file(s) could not be read ({', '.join(reasons)}): "
            + ", ".join(p for p, _r in denied[:3]) + (" …" if len(denied) > 3 else ""),
            check("evidence.unreadable").text("denied_as_root" if _live_as_root(snap) else "denied"),
            subject="files", evidence_=[Evidence(source=p, value=r) for p, r in denied[:5]]))
    try:
        host = host_summary(snap, facts)
    except Exception as e:  # bad evidence must not cost the report (same rule as investigators)
        log.warning("host summary failed: %s: %s", type(e).__name__, e)
        host = {"snapshot": {"kind": snap.kind, "label": snap.label}, "error": f"{type(e).__name__}: {e}"}
    return synthesize(findings, runs, host=host, duration_s=time.perf_counter() - t0, read_s=snap.read_s)
