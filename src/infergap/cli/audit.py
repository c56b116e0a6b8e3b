"""``infergap audit`` and ``infergap collect``."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path

import typer

from infergap.cli.base import app, emit_report, fail, safe_echo
from infergap.cli.options import Fmt, db_option, format_option, output_option, snapshot_option, url_option


class FailOn(str, Enum):
    P0 = "P0"
    P1 = "P1"
    P2 = "P2"


@app.command()
def audit(
    snapshot: Path | None = snapshot_option("Audit a snapshot directory or .tar.gz instead of this machine."),
    fmt: Fmt = format_option(Fmt.text),
    output: Path | None = output_option(),
    fail_on: FailOn | None = typer.Option(None, "--fail-on", case_sensitive=False, help="Exit 1 when an actionable finding of this severity or worse exists (P0, P1 or P2)."),
    active: bool = typer.Option(False, "--active", help="Also measure: host<->device copy bandwidth, device memory bandwidth, NCCL all-reduce (uses the GPUs for about a minute)."),
    sequential: bool = typer.Option(False, "--sequential", help="Run investigators one at a time (the default for snapshots; live hosts run them in parallel)."),
    evidence: list[Path] | None = typer.Option(None, "--evidence", "-e", metavar="FILE", help="Pasted outputs and logs (nvidia-smi, lspci, NCCL, SGLang, vLLM …), recognised by content; more files may follow; - reads standard input."),
    more_evidence: list[Path] | None = typer.Argument(None, hidden=True, metavar="FILE"),
    host: bool = typer.Option(True, "--host/--no-host", help="With --evidence: also audit this machine (default) or only the evidence."),
    server: str | None = url_option(False, "Read the serving engine's configuration from the server at this URL (SGLang, vLLM, llama.cpp)."),
    api_key: str | None = typer.Option(None, "--api-key", envvar="INFERGAP_API_KEY", show_envvar=False, help="Admin API key for --url (or INFERGAP_API_KEY)."),
    db: Path | None = db_option(),
) -> None:
    """Audit this machine (or a snapshot) and print a triaged report: confirmed good, actionable
    (ranked P0-P2; runtime / reboot / BIOS), expected, unknown."""
    from infergap.audit import run_audit
    from infergap.render.audit import render_json, render_md, render_text

    if active and snapshot is not None:
        raise fail("--active measures this machine; it cannot be combined with --snapshot")
    if active and not host:
        raise fail("--active measures this machine; it cannot be combined with --no-host (which audits only the evidence)")
    if more_evidence and not evidence:
        raise fail(f"unexpected argument {more_evidence[0]} (evidence files go after --evidence)")

    server_cfg = None
    if server is not None:
        from infergap.server import introspect

        try:
            server_cfg = introspect(server, api_key=api_key)
        except ValueError as e:
            raise fail(str(e))
        for err in server_cfg.errors:
            safe_echo(f"infergap: warning: {err}", err=True)
    inputs = [snapshot, *(evidence or []), *(more_evidence or [])]
    if output is not None:
        from infergap.errors import UserError
        from infergap.guard import check_not_input

        try:  # before the audit: a refused output must not cost the audit's time
            check_not_input(output, inputs)
        except UserError as e:
            raise fail(str(e))
    interactive = sys.stderr.isatty() and fmt == Fmt.text
    snap = _open_evidence(snapshot, [*(evidence or []), *(more_evidence or [])], host, active, interactive)
    try:
        if interactive:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn

            from infergap.investigators import REGISTRY

            with Progress(TextColumn("[bold]auditing[/]"), BarColumn(), TextColumn("{task.completed}/{task.total} {task.description}"),
                          console=Console(stderr=True), transient=True) as prog:
                task = prog.add_task("", total=len(REGISTRY))

                def progress(name: str, state: str) -> None:
                    if state != "start":
                        prog.update(task, advance=1, description=name)

                report = run_audit(snap, server=server_cfg, parallel=False if sequential else None, progress=progress)
        else:
            report = run_audit(snap, server=server_cfg, parallel=False if sequential else None)
    finally:
        snap.close()
    emit_report("audit", fmt, output, json=lambda: render_json(report), md=lambda: render_md(report),
                text=lambda **kw: render_text(report, **kw), payload=report.to_json,
                host=None if snapshot is None and host else report.host.as_dict(), db=db, inputs=inputs)
    if server_cfg is not None and server_cfg.reachable is False:  # an input that could not be used: 2, after the report
        safe_echo(f"infergap: error: --url {server}: the server could not be reached; the report above has no server part", err=True)
        raise typer.Exit(2)
    if fail_on is not None:
        order = ["P0", "P1", "P2"]
        worst = order[: order.index(fail_on.value) + 1]
        if any(f.severity and f.severity.value in worst for f in report.findings if f.status.value == "actionable"):
            raise typer.Exit(1)


def _open_evidence(snapshot, evidence: list, host: bool, active: bool, interactive: bool):
    """:func:`~infergap.evidence.overlay.open_with_evidence`, with a live count of the evidence files
    read on a terminal (a large folder takes a while)."""
    from infergap.evidence.overlay import open_with_evidence

    if not interactive or not evidence:
        return open_with_evidence(snapshot, evidence, host=host, active=active)
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import Progress, SpinnerColumn, TextColumn

    from infergap.guard import term_safe

    with Progress(SpinnerColumn(), TextColumn("[bold]reading evidence[/] {task.completed} file(s) {task.description}"),
                  console=Console(stderr=True), transient=True) as prog:
        task = prog.add_task("", total=None)

        def on_file(path, k: int) -> None:
            prog.update(task, completed=k, description=escape(term_safe(str(path)[-60:], one_line=True)))

        return open_with_evidence(snapshot, evidence, host=host, active=active, on_file=on_file)


@app.command()
def collect(
    output: Path = typer.Option(Path("infergap-snapshot.tar.gz"), "--output", "-o", help="Snapshot directory, or a .tar.gz file."),
    active: bool = typer.Option(False, "--active", help="Also store the GPU measurements of audit --active."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --output .tar.gz, or empty the --output directory first when it holds a previous snapshot."),
    url: str = typer.Option(None, "--url", help="The server whose serving process to keep (command line, GPU/thread environment, threads; secrets never kept). Default: every llama-server, vLLM or SGLang listening here."),
) -> None:
    """Write a snapshot of this host (files/, cmds/, probes/, meta.json) for later or elsewhere."""
    from infergap.errors import UserError
    from infergap.guard import os_reason
    from infergap.snapshot.collect import collect as do_collect

    try:
        meta = do_collect(output, active=active, force=force, url=url)
    except UserError as e:
        raise fail(str(e))
    except OSError as e:
        raise fail(f"--output {output}: cannot write ({os_reason(e)})")
    failed = meta["failed"]
    typer.echo(f"wrote {output} in {meta['duration_s']:.2f} s ({len(meta['sources'])} sources, {len(failed)} unavailable)")
