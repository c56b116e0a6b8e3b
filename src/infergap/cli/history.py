"""``infergap history`` (list ledger runs) and ``infergap compare`` (two runs of one kind)."""

from __future__ import annotations

from pathlib import Path

import typer

from infergap.cli import app, safe_echo

_DB_HELP = "Ledger database (default: $INFERGAP_DB or the user data directory)."


@app.command()
def history(
    kind: str = typer.Option(None, "--kind", help="Only runs of this kind: audit, bench, roofline, plan, fix."),
    host: str = typer.Option(None, "--host", help="Only runs of this host (fingerprint prefix or name)."),
    limit: int = typer.Option(50, "--limit", help="Show at most this many runs, newest first."),
    as_json: bool = typer.Option(False, "--json", help="Print the list as JSON (id, kind, created_at, host, host_name, status, what)."),
    db: Path = typer.Option(None, "--db", help=_DB_HELP),
) -> None:
    """List the runs recorded in the ledger, newest first."""
    from infergap.errors import UserError
    from infergap.ledger import KINDS, Ledger

    if kind and kind not in KINDS:
        raise UserError(f"--kind {kind}: expected one of {', '.join(KINDS)}")
    with Ledger(db, readonly=True) as ledger:
        runs = ledger.runs(kind=kind, host=host, limit=limit)
    if as_json:
        import json

        safe_echo(json.dumps([r.summary() for r in runs], indent=1))
        return
    if not runs:
        safe_echo("no runs recorded" + (" matching the filters" if kind or host else ""))
        return
    safe_echo(f"{'id':>5}  {'kind':8}  {'time (UTC)':19}  {'host':12}  {'status':13}  what")
    for r in runs:
        s = r.summary()
        safe_echo(f"{s['id']:>5}  {s['kind']:8}  {s['created_at'][:19].replace('T', ' '):19}  {s['host']:12}  "
                   f"{s['status']:13}  {s['what']}")


@app.command()
def compare(
    run_a: str = typer.Argument(..., help="Run id (the baseline), or 'last'."),
    run_b: str = typer.Argument(..., help="Run id (the new run), or 'last'."),
    db: Path = typer.Option(None, "--db", help=_DB_HELP),
) -> None:
    """Compare two runs of one kind: audits finding by finding, benches point by point."""
    from infergap.ledger import AuditDiff, Ledger, compare_runs

    with Ledger(db, readonly=True) as ledger:
        a, b = ledger.get(run_a), ledger.get(run_b)
        diff = compare_runs(a, b)
    safe_echo(f"{a.kind} run {a.id} ({a.created_at[:19]}) → run {b.id} ({b.created_at[:19]})")
    if isinstance(diff, AuditDiff):
        for f in diff.appeared:
            safe_echo(f"  + {f.get('id')}{(' ' + f['subject']) if f.get('subject') else ''}: {f.get('status')}"
                       f"{(' ' + f['severity']) if f.get('severity') else ''}  {f.get('title', '')}")
        for f in diff.disappeared:
            safe_echo(f"  - {f.get('id')}{(' ' + f['subject']) if f.get('subject') else ''}: {f.get('status')}"
                       f"{(' ' + f['severity']) if f.get('severity') else ''}  {f.get('title', '')}")
        for (cid, subj), sa, sb in diff.changed:
            safe_echo(f"  ~ {cid}{(' ' + subj) if subj else ''}: {sa} → {sb}")
        if not (diff.appeared or diff.disappeared or diff.changed):
            safe_echo("  no finding appeared, disappeared or changed status")
        return
    from infergap.render.bench import comparison_text

    safe_echo(comparison_text(diff))
