"""Host levers of ``infergap tune``: the runtime fixes of an audit (``infergap fix``), tried one
finding at a time like an engine lever. The variant arm applies the finding's changes through the
fix journal (:func:`infergap.remedy.apply_plan`: value read, journalled, written, re-read), starts
the user's own command, runs the bench and stops it, then reverts the fix run
(:func:`infergap.remedy.revert_run`: every journalled value restored and re-read). So between two
arms the host is always as the audit found it, and a stop in the middle of a variant run still
reverts. After the tune a host lever that helped is applied once more and left when
``--keep-best`` asks for it; nothing else stays changed.

Every apply and revert is a ``fix`` run of the ledger under the tune run, so ``infergap fix
--revert RUN`` and ``infergap history`` see them as any other fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infergap.errors import UserError
from infergap.tune.launch import Refused


class RevertFailed(Exception):
    """A fix run the tune applied could not be reverted: the host is not as the audit found it."""


@dataclass
class HostFix:
    """The runtime changes of one finding (``check_id``), planned by :func:`infergap.remedy.plan_fix`
    on this machine. ``ledger`` and ``parent`` (the tune run) are set by the tune before its first
    trial; ``runs`` lists every fix run made, ``{"apply": id, "revert": id or None}``."""

    check_id: str
    plan: Any
    ledger: Any = None
    parent: int | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)

    def commands(self) -> str:
        """The changes in words: the commands ``infergap fix`` runs, ``; `` between them."""
        return "; ".join(c.command for c in self.plan.changes if c.command)

    def apply(self) -> int:
        """Apply the planned changes through the journal; returns the fix run id. Raises
        :class:`~infergap.tune.launch.Refused` when a change is refused or fails (what was applied
        of it is reverted first) and :class:`RevertFailed` when that revert fails."""
        from infergap.remedy import FixRefused, apply_plan

        if self.ledger is None:
            raise Refused("no ledger to journal the change in (infergap fix needs one to revert it)", [])
        try:
            res = apply_plan(self.plan, self.ledger, source={"tune_run": self.parent}, parent_id=self.parent)
        except FixRefused as e:
            raise Refused(f"infergap fix refused it: {e}", []) from None
        if res.run_id is not None:
            self.runs.append({"apply": res.run_id, "revert": None})
        if res.status != "applied" or any(c.state.value in ("failed", "refused") for c in res.changes):
            why = "; ".join(f"{c.check_id} {c.state.value}: {c.reason}" for c in res.changes if c.reason) or res.status
            if res.run_id is not None:
                self.revert(res.run_id)
            raise Refused(f"infergap fix could not apply it: {why}", [])
        return res.run_id

    def revert(self, run_id: int) -> None:
        """Revert fix run ``run_id`` (every value restored and re-read). Raises :class:`RevertFailed`."""
        from infergap.remedy import FixRefused, revert_run

        try:
            res = revert_run(self.ledger, str(run_id))
        except FixRefused as e:
            raise RevertFailed(f"fix run {run_id} was not reverted: {e}") from None
        for r in self.runs:
            if r["apply"] == run_id:
                r["revert"] = res.revert_run_id
        if not res.ok:
            bad = next((s for s in res.steps if s.status not in ("reverted", "unchanged")), None)
            raise RevertFailed(f"fix run {run_id} was not fully reverted ({bad.target if bad else '?'}: "
                               f"{bad.error if bad else 'failed'}); revert it with infergap fix --revert {run_id}")


def _findings(audit: Path | None) -> list[Any]:
    """The audit's findings: the report ``audit`` (checked as ``fix --audit`` checks it, and refused
    when it describes another machine) or a live audit of this machine."""
    from infergap.facts import report_other_host
    from infergap.remedy import load_report
    from infergap.remedy.engine import check_report

    if audit is not None:
        findings, host = load_report(audit)
        check_report(findings, f"--audit {audit}")
        other = report_other_host(host)
        if other:
            raise UserError(f"--audit {audit} describes another machine ({other}): host levers are tried on the audited machine only")
        return findings
    from infergap.audit import run_audit
    from infergap.snapshot import open_snapshot

    with open_snapshot(None) as snap:
        return list(run_audit(snap).findings)


def host_levers(spec: str, audit: Path | None) -> tuple[list[Any], list[str]]:
    """The host levers ``--fix`` names: ``all`` (every runtime finding of the audit with a change
    to make) or check ids, each maybe prefixed by its target metric (``ttft:net.socket_buffers``;
    default throughput). Returns the :class:`~infergap.tune.run.LeverTry` list and a note for each
    finding that has nothing to try (and why). Raises UserError when not root (``infergap fix``
    writes as root only), for an unknown id, or a bad report."""
    from infergap.findings import FixKind
    from infergap.remedy import ChangeState, is_root, plan_fix
    from infergap.tune.launch import Change
    from infergap.tune.run import LeverTry
    from infergap.tune.verdict import TARGETS

    if not is_root():
        raise UserError("--fix: host levers are applied and reverted by infergap fix, which must run as root; "
                        "without --fix the tune changes only the server's command line")
    wanted: dict[str, str] = {}
    for item in (x.strip() for x in spec.split(",") if x.strip()):
        head, sep, rest = item.partition(":")
        target, cid = (head, rest) if sep and head in TARGETS else ("throughput", item)
        wanted[cid] = target
    findings = _findings(audit)
    ids = {f.id for f in findings if f.status.value == "actionable"}
    unknown = sorted(set(wanted) - ids - {"all"})
    if unknown:
        raise UserError(f"--fix {','.join(unknown)}: no actionable finding of the audit has this check id"
                        + (f" (it has: {', '.join(sorted(ids))})" if ids else " (it has none)"))
    only = None if "all" in wanted else set(wanted)
    plan = plan_fix(findings, only=only, kinds={FixKind.runtime})
    out, notes, seen = [], [], []
    for ch in plan.changes:
        if ch.check_id not in seen:
            seen.append(ch.check_id)
    for cid in seen:
        mine = [c for c in plan.changes if c.check_id == cid]
        todo = [c for c in mine if c.state == ChangeState.planned]
        if not todo or len(todo) < len([c for c in mine if c.state != ChangeState.already]):
            why = "; ".join(f"{c.state.value.replace('_', ' ')}: {c.reason}" for c in mine if c.state != ChangeState.planned)
            notes.append(f"fix:{cid}: not tried: {why or 'nothing to change'}")
            continue
        fix = HostFix(cid, plan.model_copy(update={"changes": todo}))
        out.append(LeverTry(f"fix:{cid}", Change(), wanted.get(cid, "throughput"), todo[0].title, host=fix))
    return out, notes
