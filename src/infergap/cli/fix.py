"""``infergap fix``: show (default), apply or revert the runtime remedies of an audit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from infergap.cli import validate as v
from infergap.cli.base import app, echo_fit
from infergap.cli.options import db_option, served_model_option, snapshot_option, url_option


def _audit_findings(snapshot: Path | None) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """Run the audit on a snapshot (or this host); returns findings, host object, report JSON."""
    from infergap.errors import UserError

    try:
        from infergap.audit import run_audit
    except ImportError:
        raise UserError("the audit library is not available in this build; pass --audit AUDIT.json") from None
    from infergap.snapshot import open_snapshot

    with open_snapshot(str(snapshot) if snapshot else None) as snap:
        report = run_audit(snap)
    return list(report.findings), report.host.as_dict(), report.to_json()  # the document `infergap audit` records


def _check_only(only: set[str], findings: list[Any]) -> None:
    """Refuse ``--only`` ids that no finding of the audit has, listing the ids that can be fixed."""
    from infergap.errors import UserError

    from infergap.checks import matching

    known = {f.id for f in findings} | {c.id for c in matching(None)}
    unknown = sorted(only - known)
    if not unknown:
        return
    actionable = sorted({f.id for f in findings if getattr(f.status, "value", f.status) == "actionable"})
    valid = (f"the audit's actionable check ids are {', '.join(actionable)}" if actionable
             else "the audit has no actionable finding")
    raise UserError(f"--only {','.join(unknown)}: unknown check id{'s' if len(unknown) > 1 else ''}; {valid}")


def _render_change(ch: Any, persist: bool) -> list[str]:
    """The lines of one change, fitted to 100 columns with its commands whole."""
    from infergap.render.fit import fit_text

    keep = [c for c in (ch.command, ch.revert_command, *ch.commands, *(ch.persist or [])) if c]
    return fit_text("\n".join(_change_lines(ch, persist)), keep).split("\n")


def _change_lines(ch: Any, persist: bool) -> list[str]:
    from infergap.remedy import ChangeState

    sev = f"[{ch.severity.value}] " if ch.severity else ""
    head = f"{sev}{ch.check_id}{(' ' + ch.subject) if ch.subject else ''}: {ch.title}"
    lines = [head]
    if ch.action is not None:
        lines.append(f"  action   {ch.action.type} {ch.action.target}")
    if ch.state in (ChangeState.manual, ChangeState.not_runtime):
        lines.append(f"  {'skipped':8} {ch.reason}")
        for c in ch.commands:
            lines.append(f"  {'by hand':8} {c}")
        return lines
    if ch.command:
        lines.append(f"  {'command':8} {ch.command}")
    if ch.now is not None or ch.audit_value is not None:
        seen = f"   (audit saw {ch.audit_value})" if ch.audit_value is not None and ch.audit_value != ch.now else ""
        lines.append(f"  {'now':8} {ch.now if ch.now is not None else '?'}{seen}")
    if ch.after is not None:
        lines.append(f"  {'after':8} {ch.after}")
    if ch.read_back is not None:
        lines.append(f"  {'re-read':8} {ch.read_back}")
    if ch.revert_command:
        lines.append(f"  {'revert':8} {ch.revert_command}")
    if persist:
        for p in ch.persist or ["(no persistent form)"]:
            lines.append(f"  {'persist':8} {p}")
    state = ch.state.value.replace("_", " ")
    lines.append(f"  {'state':8} {state}{(': ' + ch.reason) if ch.reason else ''}")
    return lines


@app.command()
def fix(
    snapshot: Path = snapshot_option("Audit this snapshot (default: audit this host)."),
    report: Path = typer.Option(None, "--audit", help="Use the findings of this audit JSON (infergap audit --format json)."),
    only: str = typer.Option(None, "--only", help="Comma-separated check ids to act on."),
    severity: str = typer.Option(None, "--severity", help="Only findings at this severity or more severe: P0, P1, P2."),
    kind: str = typer.Option("runtime", "--fix-kind", help="Fix kind to list: runtime (applied), or reboot, bios, hardware, software, all (explained only)."),
    apply: bool = typer.Option(False, "--apply", help="Make the changes (default: dry run)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only show the changes: the default without --apply, made explicit."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask before each change."),
    persist: bool = typer.Option(False, "--persist", help="Also write the persistent form (sysctl.d, modules-load.d, udev rule)."),
    revert: bool = typer.Option(False, "--revert", help="Restore every value and file of fix run RUN (default: the last one)."),
    force: bool = typer.Option(False, "--force", help="With --revert: revert even when a later fix run changed the same setting, "
                                                      "and restore values changed since the run (each is warned about)."),
    run: str = typer.Argument(None, parser=v.run_id, metavar="[RUN_ID|last]", help="With --revert: the fix run to revert."),
    db: Path = db_option(),
    verify_url: str = url_option(False, "With --apply: bench the server at this URL before and after the changes and compare."),
    verify_model: str = served_model_option("Model name to request from --url (default: the first one /v1/models lists)."),
    verify_concurrency: int = typer.Option(4, "--concurrency", metavar="N", parser=v.number(integer=True, ge=1, le=10_000), help="Requests in flight during the --url sweeps."),
    verify_trials: int = typer.Option(3, "--trials", metavar="N", parser=v.number(integer=True, ge=2, le=100), help="Trials of each --url sweep (at least 2: a spread needs two)."),
) -> None:
    """Show, apply (--apply) or revert (--revert) the runtime remedies of an audit, with a journal."""
    from infergap.errors import UserError
    from infergap.facts import report_other_host
    from infergap.findings import FixKind, Severity
    from infergap.ledger import Ledger, host_fingerprint
    from infergap.remedy import apply_plan, load_report, plan_fix, revert_run
    from infergap.remedy.engine import check_report
    from infergap.remedy.engine import ChangeState

    if dry_run and (apply or revert):
        raise UserError(f"--dry-run and {'--apply' if apply else '--revert'}: give one of them")
    if force and not revert:
        raise UserError("--force applies to --revert only")
    if run is not None and not revert:
        raise UserError(f"unexpected argument {run!r}: a run id is given only with --revert")
    if revert:
        with Ledger(db) as ledger:
            res = revert_run(ledger, run or "last", force=force)
        for w in res.warnings:
            typer.echo(f"infergap: warning: {w} (--force: reverting anyway)", err=True)
        if res.already_reverted:
            typer.echo(f"fix run {res.run_id} was already reverted; re-read only, nothing written")
        else:
            typer.echo(f"reverting fix run {res.run_id} (revert recorded as run {res.revert_run_id})")
        for s in res.steps:
            what = s.command if not res.already_reverted else s.target
            val = f" → {s.read_back}" if s.read_back is not None else ""
            echo_fit(f"  {s.status:13} {s.check_id}  {what}{val}{('  (' + s.error + ')') if s.error else ''}", keep=[what])
        if not res.ok:
            raise typer.Exit(1)
        return

    if snapshot and report:
        raise UserError("--snapshot and --audit: give one of them")
    if verify_url and not apply:
        raise UserError("--url measures the server before and after changes: it needs --apply")
    try:
        sev = Severity(severity.upper()) if severity else None
    except ValueError:
        raise UserError(f"--severity {severity}: expected P0, P1 or P2") from None
    kinds_arg = {k.strip().lower() for k in kind.split(",") if k.strip()}
    if "all" in kinds_arg:
        kinds = set(FixKind)
    else:
        try:
            kinds = {FixKind(k) for k in kinds_arg}
        except ValueError:
            raise UserError(f"--fix-kind {kind}: expected runtime, reboot, bios, hardware, software or all") from None
    only_ids = {s.strip() for s in only.split(",") if s.strip()} if only else None

    audit_doc = None
    if report:
        findings, host = load_report(report)
        check_report(findings, f"--audit {report}")
        source: dict[str, Any] = {"report": str(report)}
    else:
        findings, host, audit_doc = _audit_findings(snapshot)
        source = {"snapshot": str(snapshot) if snapshot else "live"}

    if only_ids:
        _check_only(only_ids, findings)
    other = report_other_host(host) if (report or snapshot) else None
    if other:
        echo_fit(f"note: the audit describes another machine ({other}); 'now' values below are this machine's")
        if apply:
            raise UserError(f"the audit describes another machine ({other}): changes apply only to the machine "
                            "that was audited — run infergap fix there, or audit this machine (infergap fix without --snapshot/--audit)")
    plan = plan_fix(findings, only=only_ids, severity=sev, kinds=kinds)
    if plan.container:
        typer.echo(f"note: running inside a container ({plan.container}): host-owned settings are refused here")
    if not plan.changes:
        typer.echo("nothing to fix: no actionable finding matches" + (f" ({plan.filtered_out} filtered out)" if plan.filtered_out else ""))
        return

    if not apply:
        typer.echo("dry run: nothing is changed (add --apply to make the changes)\n")
        for ch in plan.changes:
            typer.echo("\n".join(_render_change(ch, persist)) + "\n")
        counts: dict[str, int] = {}
        for c in plan.changes:
            counts[c.state.value] = counts.get(c.state.value, 0) + 1
        n = counts.pop(ChangeState.planned.value, 0)
        rest = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in sorted(counts.items()))
        echo_fit(f"{n} change(s) would be applied" + (f" ({rest})" if rest else "")
                   + (f"; {plan.filtered_out} actionable finding(s) of other severities or fix kinds not shown"
                      " (--fix-kind all lists them)" if plan.filtered_out else ""))
        return

    def confirm(ch: Any) -> bool:
        # Plain readline: end of input declines this change, Ctrl-C interrupts the whole run.
        import sys

        typer.echo("\n".join(_render_change(ch, persist)))
        typer.echo("apply this change? [y/N]: ", nl=False)
        sys.stdout.flush()
        return sys.stdin.readline().strip().lower() in ("y", "yes")

    with Ledger(db) as ledger:
        # A live audit is this machine's; a snapshot's host is identified from its report.
        parent = (ledger.record("audit", audit_doc, host_fingerprint(host) if snapshot else None)
                  if audit_doc is not None else None)
        def do_apply() -> Any:
            return apply_plan(plan, ledger, persist=persist, confirm=None if yes else confirm, source=source, parent_id=parent)

        verified = why_not = None
        if verify_url:
            from infergap.remedy.verify import apply_verified, verify_settings

            typer.echo(f"measuring {verify_url} before the changes…")
            res, verified, why_not = apply_verified(
                do_apply, ledger, verify_url, verify_model, verify_settings(verify_concurrency, verify_trials),
                on_after=lambda: typer.echo(f"measuring {verify_url} after the changes…"))
        else:
            res = do_apply()
    for ch in res.changes:
        typer.echo("\n".join(_render_change(ch, persist)) + "\n")
    if res.run_id is None:
        typer.echo("nothing applied: no change is in a state to run")
        return
    counts: dict[str, int] = {}
    for ch in res.changes:
        counts[ch.state.value] = counts.get(ch.state.value, 0) + 1
    typer.echo(f"fix run {res.run_id}: {res.status} ({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}); "
               f"undo with: infergap fix --revert {res.run_id}")
    if verified is not None:
        from infergap.render.bench import comparison_text

        typer.echo(f"\nbefore/after (bench runs {verified.before_run_id} → {verified.after_run_id}; "
                   "a change counts only outside both runs' spread):")
        typer.echo(comparison_text(verified.comparison))
    elif why_not:
        typer.echo(f"\nno before/after comparison: {why_not}")
    if res.status == "failed":
        raise typer.Exit(1)
