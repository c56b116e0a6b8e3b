"""``infergap fleet audit``: audit every node of a Ray cluster (or a set of snapshots) and report
the nodes that drifted from their hardware class."""

from __future__ import annotations

import json
import sys
import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from infergap.cli import validate as v
from infergap.cli.base import app, fail, render_report, write_report
from infergap.cli.options import db_option, format_option, output_option

if TYPE_CHECKING:  # annotations only: no import at run time
    from collections.abc import Callable, Iterable

    from infergap.fleet.digest import NodeDigest
    from infergap.fleet.runner import NodeIdentity, Payload
    from infergap.fleet.drift import FleetReport

fleet_app = typer.Typer(name="fleet", help="Audit many nodes at once and find the ones that drifted from their peers.",
                        no_args_is_help=True, rich_markup_mode=None)  # plain help, as the main app
app.add_typer(fleet_app, name="fleet")


class FleetFmt(str, Enum):
    """Output format of the fleet report."""

    text = "text"
    json = "json"
    md = "md"
    html = "html"


class FleetFailOn(str, Enum):
    P0 = "P0"
    P1 = "P1"
    P2 = "P2"
    drift = "drift"


def _fails(report: FleetReport, fail_on: FleetFailOn) -> bool:
    """Whether the run fails ``--fail-on``: a node not audited always does; ``drift``: any drift
    item; P0/P1/P2: a drift item or an actionable finding on any node of that severity or worse."""
    if report.failed():
        return True
    if fail_on == FleetFailOn.drift:
        return bool(report.drift)
    worst = report.worst_severity()
    order = ["P0", "P1", "P2"]
    return worst is not None and order.index(worst) <= order.index(fail_on.value)


class _Ledger:
    """The fleet run and each node's audit in the ledger; a ledger that cannot be used only
    warns once (the report is what matters)."""

    def __init__(self, db: Path | None, enabled: bool) -> None:
        self.led = None
        self.run_id: int | None = None
        if not enabled:
            return
        from infergap.ledger import Ledger, LedgerError

        try:
            self.led = Ledger(db)
            self.run_id = self.led.record("fleet", {"schema": "infergap.fleet/1", "state": "running"}, None, status="running")
        except LedgerError as e:
            typer.echo(f"infergap: warning: fleet run not recorded in the ledger: {e}", err=True)
            self.led = None

    def node(self, d: NodeDigest, audit: dict[str, Any]) -> int | None:
        if self.led is None:
            return None
        from infergap.ledger import LedgerError

        # The host identity the audit itself records (the snapshot's own host object), so that
        # `audit` and `fleet` of one snapshot are one host in the ledger and in `compare`.
        host = {**d.host, "node_id": d.node.node_id, "address": d.node.address} if d.host else {
            "fingerprint": d.node.fingerprint, "hostname": d.node.name, "node_id": d.node.node_id, "address": d.node.address}
        try:
            return self.led.record("audit", audit, host, parent_id=self.run_id)
        except LedgerError as e:
            typer.echo(f"infergap: warning: node {d.node.name} not recorded in the ledger: {e}", err=True)
            return None

    def abort(self, why: str) -> None:
        """Mark the fleet run failed (the cluster could not be reached, the run was interrupted)."""
        if self.led is None or self.run_id is None:
            return
        from infergap.ledger import LedgerError

        try:
            self.led.update_run(self.run_id, payload={"schema": "infergap.fleet/1", "state": "failed", "error": why}, status="failed")
        except LedgerError:
            pass
        self.led.close()
        self.led = None

    def finish(self, report: FleetReport) -> None:
        if self.led is None or self.run_id is None:
            return
        from infergap.ledger import LedgerError

        try:
            self.led.update_run(self.run_id, payload=report.to_json(), status="done")
        except LedgerError as e:
            typer.echo(f"infergap: warning: fleet run not recorded in the ledger: {e}", err=True)
        self.led.close()


@fleet_app.command("audit")
def fleet_audit(
    address: str | None = typer.Option(None, "--address", help="Ray cluster address (ray://host:10001, host:6379), or 'auto' (RAY_ADDRESS, else a cluster on this machine)."),
    snapshots: str | None = typer.Option(None, "--snapshots", help="Audit snapshot files instead: a directory of .tar.gz files / snapshot directories, or a glob."),
    fmt: FleetFmt = format_option(FleetFmt.text, "text, json, md or html"),
    output: Path | None = output_option(),
    fail_on: FleetFailOn | None = typer.Option(None, "--fail-on", case_sensitive=False, help="Exit 1 when a drift item or finding of this severity or worse exists (drift: any drift item), or a node could not be audited."),
    active: bool = typer.Option(False, "--active", help="With --address: also measure each node's GPUs (copy, memory and all-reduce bandwidth); the task asks Ray for all of the node's GPUs, so it waits for running GPU jobs."),
    tolerance: float = typer.Option(0.10, "--tolerance", metavar="F", parser=v.number(ge=0, le=0.9), help="Measured bandwidth more than this fraction below the class median is drift."),
    timeout: float = typer.Option(180.0, "--timeout", metavar="SECONDS", parser=v.number(ge=1, le=86400, cap_reason="one day"), help="Per-node seconds to collect before the node is reported as hung."),
    runtime_env: str | None = typer.Option(None, "--runtime-env", help="Ray runtime_env as JSON, passed to ray.init unchanged, e.g. '{\"pip\": [\"infergap\"]}' for nodes without infergap."),
    workers: int | None = typer.Option(None, "--workers", metavar="N", parser=v.number(integer=True, ge=0, le=4096), help="Processes that audit snapshots (default: the CPUs here; 0: in this process)."),
    record: bool = typer.Option(True, "--record/--no-record", help="Record the fleet run and every node's audit in the ledger."),
    db: Path | None = db_option(),
) -> None:
    """Audit every node of a Ray cluster (one pinned task per node runs collect there) or a set
    of snapshots, group nodes into hardware classes and report what drifted within each class."""
    from infergap.fleet import build_report
    from infergap.fleet.runner import expand_snapshots, ray_stream, snapshot_stream

    if (address is None) == (snapshots is None):
        raise fail("give either --address (a Ray cluster) or --snapshots (snapshot files)")
    if active and snapshots is not None:
        raise fail("--active measures the nodes; it cannot be combined with --snapshots")
    env = None
    if runtime_env is not None:
        if address is None:
            raise fail("--runtime-env applies to --address only")
        try:
            env = json.loads(runtime_env)
        except ValueError as e:
            raise fail(f"--runtime-env: not JSON ({e})")
        if not isinstance(env, dict):
            raise fail("--runtime-env: expected a JSON object such as '{\"pip\": [\"infergap\"]}'")
    if output is not None and output.parent and not output.parent.exists():
        raise fail(f"--output {output}: directory {output.parent} does not exist")
    t0 = time.monotonic()
    if snapshots is not None:
        paths = expand_snapshots(snapshots)
        items = snapshot_stream(paths)
        source: dict[str, Any] = {"kind": "snapshots", "snapshots": snapshots}
        n_items = len(paths)
    else:
        items = ray_stream(address or "auto", active=active, timeout_s=timeout, runtime_env=env)
        source = {"kind": "ray", "address": address, "active": active, "timeout_s": timeout}
        n_items = None
    ledger = _Ledger(db, record)
    interactive = sys.stderr.isatty()

    def progress(d: NodeDigest) -> None:
        if d.state != "audited":
            typer.echo(f"infergap: node {d.node.name}: {d.state}: {d.error}", err=True)

    if workers is None and n_items is not None and n_items <= 8:
        workers = 0  # a handful of snapshots: starting processes costs more than it saves
    try:
        digests = _audit(items, n_items, workers, ledger, progress, interactive)
    except BaseException as e:
        ledger.abort(str(e).splitlines()[0] if str(e) else type(e).__name__)
        raise
    report = build_report(digests, source=source, tolerance=tolerance, duration_s=time.monotonic() - t0)
    if ledger.run_id is not None:
        report.source["ledger_run"] = ledger.run_id
    from infergap.fleet import render

    if fmt == FleetFmt.html:
        text = render.render_html(report)
    else:
        text = render_report(fmt, output, json=lambda: json.dumps(report.to_json(), indent=1),
                             md=lambda: render.render_md(report), text=lambda **kw: render.render_text(report))
    ledger.finish(report)  # first: a report that cannot be written is still kept
    write_report(text, output)
    if fail_on is not None and _fails(report, fail_on):
        raise typer.Exit(1)


def _audit(items: Iterable[tuple[NodeIdentity, Payload]], n_items: int | None, workers: int | None, ledger: _Ledger,
           progress: Callable[[NodeDigest], None], interactive: bool) -> list[NodeDigest]:
    """Audit the stream, with a progress bar on a terminal."""
    from infergap.fleet.runner import audit_stream

    if interactive:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn

        with Progress(TextColumn("[bold]fleet[/]"), BarColumn(), TextColumn("{task.completed} nodes audited"),
                      console=Console(stderr=True), transient=True) as prog:
            task = prog.add_task("", total=n_items)

            def progress_bar(d: NodeDigest) -> None:
                prog.update(task, advance=1)
                progress(d)

            return audit_stream(items, workers=workers, recorder=ledger.node if ledger.led else None, progress=progress_bar)
    return audit_stream(items, workers=workers, recorder=ledger.node if ledger.led else None, progress=progress)
