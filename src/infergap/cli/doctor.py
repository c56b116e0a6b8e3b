"""``infergap doctor``: audit, introspect, bound, measure and plan in one run; one report."""

from __future__ import annotations

from pathlib import Path

import typer

from infergap.cli import validate as v
from infergap.cli.base import app, echo_fit, fail
from infergap.cli.options import db_option, served_model_option, snapshot_option, url_option


def _plan_commands(plan: object) -> list[str]:
    """The commands of the plan (its JSON document's), kept whole when its lines are fitted."""
    if plan is None:
        return []
    import json

    from infergap.render.fit import commands_in
    from infergap.render.plan import render_json

    return commands_in(json.loads(render_json(plan)))


def _record(files: dict[str, str], db: Path | None) -> None:
    """Keep the doctor's audit, roofline, bench and plan in the ledger, each as its own run."""
    import json

    from infergap.cli.base import record

    for kind in ("audit", "roofline", "bench", "plan"):
        path = files.get(f"{kind}.json")
        if path:
            try:
                record(kind, json.loads(open(path, encoding="utf-8").read()), None, db)
            except (OSError, ValueError):
                continue


def stage_lines(stage: str, msg: str) -> list[str]:
    """The doctor's progress line ``"{stage}: {msg}"`` (stderr) as lines fitted to 100 columns by
    :func:`infergap.render.fit.fit_text`: wrapped at spaces, continuations indented under the
    message, quoted spans and URLs kept whole. Returns at least one line; the first starts with
    ``stage``."""
    from infergap.render.fit import fit_text

    return fit_text(f"{stage}: {msg}").split("\n")


def _unreachable(url: str, timeout_s: float = 5.0) -> str | None:
    """Why nothing answers at ``url``'s host and port (a TCP connection is refused, times out after
    ``timeout_s`` seconds or the name does not resolve), or ``None`` when something listens there.
    The URL's form was validated by its option; an unparsable port is left to the bench to report."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout_s):
            return None
    except socket.gaierror:
        return f"cannot resolve {parts.hostname}"
    except TimeoutError:
        return f"no answer from {parts.hostname}:{port} within {timeout_s:.0f} s"
    except OSError as e:
        return f"{parts.hostname}:{port}: {e.strerror or e}"


@app.command()
def doctor(
    url: str = url_option(True, "Server base URL, e.g. http://127.0.0.1:8000."),
    model: str | None = typer.Option(None, "--model", "-m", help="config.json path, its directory, a GGUF file or a built-in name for the roofline (default: what the server reports)."),
    quick: bool = typer.Option(False, "--quick", help="Three concurrencies, one trial, short requests (under two minutes on a small model)."),
    output_dir: Path = typer.Option(Path("infergap-report"), "--output-dir", "-o", help="Where to write the report and the JSON of every stage."),
    evidence: list[Path] | None = typer.Option(None, "--evidence", "-e", metavar="FILE", help="Engine/NCCL logs and pasted outputs for the audit and the plan; more files may follow; - reads standard input."),
    more_evidence: list[Path] | None = typer.Argument(None, hidden=True, metavar="FILE"),
    api_key: str | None = typer.Option(None, "--api-key", envvar="INFERGAP_API_KEY", show_envvar=False, help="Admin API key for the server's config endpoints."),
    gpu: str | None = typer.Option(None, "--gpu", help="GPU name for the roofline when the host's cannot be read (h200, rtx-pro-6000-server, ...)."),
    gpus: int | None = typer.Option(None, "--gpus", parser=v.gpu_count, metavar="N", help="GPU count with --gpu."),
    served_model: str | None = served_model_option(),
    snapshot: Path | None = snapshot_option("Audit this snapshot instead of this machine."),
    db: Path | None = db_option(),
    concurrency: list | None = typer.Option(None, "--concurrency", metavar="N,N,...", parser=v.number_list(integer=True, ge=1, le=4096),
                                            help="The sweep's concurrencies instead of the default ones, e.g. 1,4,16,32 (past the server's slots shows queueing)."),
    input_len: int | None = typer.Option(None, "--input-len", metavar="TOKENS", parser=v.tokens, help="Prompt tokens per request in the sweep."),
    output_len: int | None = typer.Option(None, "--output-len", metavar="TOKENS", parser=v.tokens, help="Output tokens per request in the sweep."),
    num_prompts: int | None = typer.Option(None, "--num-prompts", metavar="N", parser=v.number(integer=True, ge=1, le=100000),
                                           help="Requests per concurrency (default with --concurrency: 4 × concurrency, at least 32)."),
    max_error_rate: str = typer.Option("1%", "--max-error-rate", help="Failure budget of a bench point, e.g. 1% or 0.01: above it the point is invalid and doctor exits 1."),
) -> None:
    """Run audit (+ evidence), server introspection, roofline, a bench sweep and the plan; write
    report.html (self-contained), report.md and the JSON of every stage; print the top actions."""
    from rich.markup import escape

    from infergap.doctor import run_doctor
    from infergap.errors import UserError
    from infergap.guard import safe_console

    err = safe_console(stderr=True, highlight=False, soft_wrap=True, markup=True)  # not cut at 80 columns; values escaped

    def progress(stage: str, msg: str) -> None:
        first, *rest = stage_lines(stage, msg)
        err.print(f"[bold]{escape(stage)}[/]{escape(first[len(stage):])}")
        for line in rest:
            err.print(escape(line))

    if more_evidence and not evidence:
        raise fail(f"unexpected argument {more_evidence[0]} (evidence files go after --evidence)")
    evidence = [*(evidence or []), *(more_evidence or [])]
    for p in evidence:
        if not p.exists():
            raise fail(f"--evidence {p}: no such file or directory")
    unreachable = _unreachable(url)
    if unreachable:  # before the audit: nothing the doctor does is worth its time without the server
        raise fail(f"--url {url}: the server could not be reached ({unreachable}); nothing was run")
    sweep = {k: x for k, x in (("concurrency", [int(c) for c in concurrency] if concurrency else None), ("input_len", input_len),
                                ("output_len", output_len), ("num_prompts", num_prompts)) if x is not None}
    try:
        from infergap.cli.bench import parse_error_rate

        budget = parse_error_rate(max_error_rate)
        res = run_doctor(url, output_dir, model=model, served_model=served_model, quick=quick, evidence=[str(p) for p in evidence or []], api_key=api_key,
                         gpu=gpu, gpus=gpus, snapshot=str(snapshot) if snapshot else None, progress=progress,
                         max_error_rate=budget, sweep=sweep)
    except UserError as e:
        raise fail(str(e))
    plan = res.plan
    keep = _plan_commands(plan)
    if plan is not None and plan.gap.summary:
        echo_fit(plan.gap.summary, keep=keep)
    echo_fit("top actions")
    for i, a in enumerate(plan.top_actions if plan else [], 1):
        echo_fit(f" {i}. {a}", keep=keep)
    if plan is not None and not plan.top_actions:
        echo_fit("  none selected by the facts at hand")
    if plan is not None and plan.url_note:
        echo_fit(f"note: {plan.url_note}", keep=keep)
    _record(res.files, db)
    echo_fit(f"report: {res.files.get('report.html')}  ({len(res.files)} files in {output_dir}, {res.duration_s:.0f} s)")
    if not res.reachable:  # something listens there, but it gave no usable answer (or went away)
        typer.echo(f"infergap: error: --url {url}: the server did not answer; nothing was measured", err=True)
        raise typer.Exit(2)
    if res.points == 0:
        typer.echo(f"infergap: error: the bench against {url} measured nothing (see the bench stage above)", err=True)
        raise typer.Exit(1)
    if res.invalid_points:
        typer.echo(f"infergap: error: {res.invalid_points} of {res.points} bench point(s) failed more requests than the "
                   "failure budget (see the bench stage above and the report)", err=True)
        raise typer.Exit(1)
