"""``infergap checks [ID]``: what each audit check reads, needs for ok, decides and cites."""

from __future__ import annotations

import json

import typer

from infergap.cli.base import app, echo_fit
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
            echo_fit(f"{c.id:28} {c.investigator:15} {c.title}")
        echo_fit(f"{len(found)} checks; `infergap checks ID` shows one in full")
        return
    for c in found:
        echo_fit(f"{c.id} — {c.title}")
        echo_fit(f"  investigator: {c.investigator}" + (" (and known failures of signatures.yaml)" if c.signatures else ""))
        echo_fit(f"  reads:        {'; '.join(c.reads)}")
        echo_fit(f"  ok needs:     {c.ok_needs}")
        echo_fit(f"  decides:      {c.decides}")
        echo_fit(f"  fix kind:     {c.fix_kind or '-'}" + (f", severity {c.severity}" if c.severity else ""))
        for name, v in c.thresholds.items():
            echo_fit(f"  threshold:    {name} = {v}")
        for name, items in c.lists.items():
            echo_fit(f"  list:         {name} ({len(items)}: {', '.join(items[:6])}{', …' if len(items) > 6 else ''})")
        for name, table in c.tables.items():
            echo_fit(f"  table:        {name} ({', '.join(f'{k}: {v}' for k, v in table.items())})")
        for a in c.actions:
            echo_fit(f"  fix may run:  {a.type}" + (f" on {', '.join(a.targets)}" if a.targets else ""))
        echo_fit(f"  source:       {c.source}")
