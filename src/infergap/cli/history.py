"""``infergap history`` (list ledger runs) and ``infergap compare`` (two runs of one kind)."""

from __future__ import annotations

from pathlib import Path

import typer

from infergap.cli import validate as v
from infergap.cli.base import app, echo_fit, safe_echo
from infergap.cli.options import ListFmt, db_option, format_option


@app.command()
def history(
    kind: str = typer.Option(None, "--kind", help="Only runs of this kind: audit, bench, roofline, plan, fix, fleet, tune."),
    host: str = typer.Option(None, "--host", help="Only runs of this host (fingerprint prefix or name)."),
    limit: int = typer.Option(50, "--limit", metavar="N", parser=v.number(integer=True, ge=1, le=1_000_000), help="Show at most this many runs, newest first."),
    fmt: ListFmt = format_option(ListFmt.text, "text or json (id, kind, created_at, host, host_name, status, what)"),
    experiments: bool = typer.Option(False, "--experiments", help="List the levers infergap tune tried (one row each) instead of the runs."),
    db: Path = db_option(),
) -> None:
    """List the runs recorded in the ledger, newest first."""
    from infergap.errors import UserError
    from infergap.ledger import KINDS, Ledger

    if experiments:
        _experiments(db, host, limit, fmt)
        return

    if kind and kind not in KINDS:
        raise UserError(f"--kind {kind}: expected one of {', '.join(KINDS)}")
    with Ledger(db, readonly=True) as ledger:
        runs = ledger.runs(kind=kind, host=host, limit=limit)
    if fmt is ListFmt.json:
        import json

        safe_echo(json.dumps([r.summary() for r in runs], indent=1))
        return
    if not runs:
        safe_echo("no runs recorded" + (" matching the filters" if kind or host else "")
                  + (f" (no ledger at {db} yet: check --db)" if db is not None and not db.exists() else ""))
        return
    rows = [r.summary() for r in runs]
    # two lines a run, so that a row fits 100 columns: what it measured, then what it was about
    safe_echo(f"{'id':>5}  {'kind':8}  {'time (UTC)':19}  {'host':16}  {'status':9}  result\n{'':7}about")
    for s in rows:
        host = s["host_name"] or s["host"]
        safe_echo(f"{s['id']:>5}  {s['kind']:8}  {s['created_at'][:19].replace('T', ' '):19}  {host[:16]:16}  "
                  f"{s['status']:9}  {s['what']}".rstrip())
        if s["about"]:
            echo_fit(f"{'':7}{s['about']}")


def _experiments(db: Path | None, host: str | None, limit: int, fmt: ListFmt) -> None:
    """``history --experiments``: every lever tried, newest first, with its key and verdict."""
    from infergap.ledger import Ledger

    with Ledger(db, readonly=True) as ledger:
        rows = [r for r in ledger.experiments(limit=None) if not host or r["host"].startswith(host)][:limit]
    if fmt is ListFmt.json:
        import json

        safe_echo(json.dumps(rows, indent=1, ensure_ascii=False))
        return
    if not rows:
        safe_echo("no experiments recorded" + (" for this host" if host else "") + " (infergap tune records them)")
        return
    # two lines a lever tried, so that a row fits 100 columns: the verdict, then what was tried where
    safe_echo(f"{'id':>5}  {'tune':>5}  {'time (UTC)':19}  {'host':12}  {'verdict':22}  {'change':>8}\n"
              f"{'':14}lever setting · engine · model · workload")
    for r in rows:
        change = f"{r['change_pct']:+.1f}%" if isinstance(r["change_pct"], (int, float)) else "–"
        eng = f"{r['engine']} {r['engine_version']}".strip()
        safe_echo(f"{r['id']:>5}  {r['run_id']:>5}  {r['created_at'][:19].replace('T', ' '):19}  {r['host'][:12]:12}  "
                  f"{r['verdict']:22}  {change:>8}")
        echo_fit(f"{'':14}{r['lever']} {r['setting']} · {eng} · {r['model']} · {r['workload']}", keep=[r["setting"]])


def _host_label(run) -> str:
    return f"{run.host_name or run.host}" + (f" ({run.host})" if run.host_name and run.host_name != run.host else "")


@app.command()
def compare(
    run_a: str = typer.Argument(..., parser=v.run_id, metavar="RUN_A", help="Run id (the baseline), or 'last'."),
    run_b: str = typer.Argument(..., parser=v.run_id, metavar="RUN_B", help="Run id (the new run), or 'last'."),
    fmt: ListFmt = format_option(ListFmt.text, "text or json"),
    db: Path = db_option(),
) -> None:
    """Compare two runs of one kind: audits finding by finding, fleet runs node by node, benches
    point by point. Warns when the two audits describe different hosts."""
    from infergap.ledger import AuditDiff, Ledger, LedgerError, compare_runs

    with Ledger(db, readonly=True) as ledger:
        a, b = ledger.get(run_a), ledger.get(run_b)
        if a.kind == "fleet" and b.kind == "fleet":
            from infergap.fleet.compare import compare_fleets

            if not isinstance(a.payload, dict) or not isinstance(b.payload, dict):
                raise LedgerError(f"compare: run {a.id if not isinstance(a.payload, dict) else b.id} has no JSON object payload")
            diff = compare_fleets(a.payload, b.payload)
        else:
            diff = compare_runs(a, b)
    if a.kind == "audit" and a.host != b.host:
        safe_echo(f"infergap: warning: run {a.id} and run {b.id} are audits of different hosts "
                   f"({_host_label(a)} and {_host_label(b)}): differences may be the machines, not changes", err=True)
    if fmt is ListFmt.json:
        import dataclasses
        import json

        doc = {"kind": a.kind, "a": a.summary(), "b": b.summary(), "same_host": a.host == b.host}
        if isinstance(diff, AuditDiff):
            doc.update(appeared=diff.appeared, disappeared=diff.disappeared,
                       changed=[{"id": cid, "subject": subj or None, "a": sa, "b": sb} for (cid, subj), sa, sb in diff.changed])
        elif dataclasses.is_dataclass(diff):
            doc["comparison"] = dataclasses.asdict(diff)
        else:
            doc["comparison"] = diff.model_dump(mode="json")
        safe_echo(json.dumps(doc, indent=1, ensure_ascii=False))
        return
    echo_fit(f"{a.kind} run {a.id} ({a.created_at[:19]}, {a.summary()['about'] or _host_label(a)})")
    echo_fit(f"  → run {b.id} ({b.created_at[:19]}, {b.summary()['about'] or _host_label(b)})")
    if isinstance(diff, AuditDiff):
        for f in diff.appeared:
            echo_fit(f"  + {f.get('id')}{(' ' + f['subject']) if f.get('subject') else ''}: {f.get('status')}"
                       f"{(' ' + f['severity']) if f.get('severity') else ''}  {f.get('title', '')}")
        for f in diff.disappeared:
            echo_fit(f"  - {f.get('id')}{(' ' + f['subject']) if f.get('subject') else ''}: {f.get('status')}"
                       f"{(' ' + f['severity']) if f.get('severity') else ''}  {f.get('title', '')}")
        for (cid, subj), sa, sb in diff.changed:
            echo_fit(f"  ~ {cid}{(' ' + subj) if subj else ''}: {sa} → {sb}")
        if not (diff.appeared or diff.disappeared or diff.changed):
            safe_echo("  no finding appeared, disappeared or changed status")
        return
    from infergap.fleet.compare import FleetDiff, diff_lines

    if isinstance(diff, FleetDiff):
        for line in diff_lines(diff):
            echo_fit(line)
        return
    from infergap.render.bench import comparison_text

    echo_fit(comparison_text(diff))
