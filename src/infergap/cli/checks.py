"""``infergap checks [ID]``: what each audit check reads, needs for ok, decides and cites."""

from __future__ import annotations

import json

import typer

from infergap.cli.base import app
from infergap.cli.options import Fmt, format_option


@app.command("checks")
def checks_cmd(
    check_id: str = typer.Argument(None, metavar="[ID]", help="A check id (pcie.acs) or a prefix (pcie); all checks when left out."),
    fmt: Fmt = format_option(Fmt.text),
) -> None:
    """List the audit's checks: owning investigator, evidence read, evidence needed for ok, source."""
    from infergap.checks import get, matching
    found = matching(check_id)
    if check_id and not found:
        get(check_id)  # raises with the closest ids
    if fmt is Fmt.json:
        typer.echo(json.dumps([c.model_dump() for c in found], indent=1))
        return
    if fmt is Fmt.md:
        typer.echo("| id | investigator | needs for ok | decides | source |\n|---|---|---|---|---|")
        for c in found:
            typer.echo(f"| `{c.id}` | {c.investigator} | {c.ok_needs} | {c.decides} | {c.source} |")
        return
    if len(found) > 1 and check_id is None:
        for c in found:
            typer.echo(f"{c.id:28} {c.investigator:15} {c.title}")
        typer.echo(f"{len(found)} checks; `infergap checks ID` shows one in full")
        return
    for c in found:
        typer.echo(f"{c.id} — {c.title}")
        typer.echo(f"  investigator: {c.investigator}" + (" (and known failures of signatures.yaml)" if c.signatures else ""))
        typer.echo(f"  reads:        {'; '.join(c.reads)}")
        typer.echo(f"  ok needs:     {c.ok_needs}")
        typer.echo(f"  decides:      {c.decides}")
        typer.echo(f"  fix kind:     {c.fix_kind or '-'}" + (f", severity {c.severity}" if c.severity else ""))
        for name, v in c.thresholds.items():
            typer.echo(f"  threshold:    {name} = {v}")
        for name, items in c.lists.items():
            typer.echo(f"  list:         {name} ({len(items)}: {', '.join(items[:6])}{', …' if len(items) > 6 else ''})")
        for name, table in c.tables.items():
            typer.echo(f"  table:        {name} ({', '.join(f'{k}: {v}' for k, v in table.items())})")
        for a in c.actions:
            typer.echo(f"  fix may run:  {a.type}" + (f" on {', '.join(a.targets)}" if a.targets else ""))
        typer.echo(f"  source:       {c.source}")
