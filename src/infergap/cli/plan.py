"""``infergap plan``: a ranked, tiered plan from any of an audit, a roofline, a bench, a live server and logs."""

from __future__ import annotations

import json

from pathlib import Path

import typer

from infergap.cli.base import app, emit_report, fail
from infergap.cli.options import Fmt, db_option, format_option, output_option, url_option


def _elsewhere(host: dict | None, cfg: object, bench: object) -> str | None:
    """Why the audit given describes another machine than this one, asked only when the URL the
    verify commands would name is this machine's (``--url``, else the bench file's)."""
    from infergap.plan.build import is_local_url

    url = getattr(cfg, "url", None) or (bench.environment.url if bench is not None else None)
    if not host or not url or not is_local_url(url):
        return None
    from infergap.facts import report_other_host

    why = report_other_host(host)
    return f"the audit given is of another machine ({why})" if why else None


@app.command()
def plan(
    audit: Path | None = typer.Option(None, "--audit", help="infergap audit --format json output."),
    roofline: Path | None = typer.Option(None, "--roofline", help="infergap roofline --format json output."),
    bench: Path | None = typer.Option(None, "--bench", help="infergap bench --format json output."),
    server: str | None = url_option(False, "Read the serving engine's configuration from the server at this URL."),
    api_key: str | None = typer.Option(None, "--api-key", envvar="INFERGAP_API_KEY", show_envvar=False, help="Admin API key for --url (or INFERGAP_API_KEY)."),
    evidence: list[Path] | None = typer.Option(None, "--evidence", "-e", metavar="FILE", help="Engine logs (SGLang, vLLM); more files may follow; - reads standard input."),
    more_evidence: list[Path] | None = typer.Argument(None, hidden=True, metavar="FILE"),
    catalog: Path | None = typer.Option(None, "--catalog", help="Use this lever catalog (YAML) instead of the shipped one."),
    fmt: Fmt = format_option(Fmt.text),
    output: Path | None = output_option("Write the plan here instead of stdout."),
    db: Path | None = db_option(),
) -> None:
    """Synthesize the efficiency gap, host fixes, levers by tier (flag flips, small changes, engineering),
    what will not help and what is unknown, from whatever inputs are given."""
    from infergap.errors import UserError
    from infergap.plan import Stage, build_plan, load_catalog
    from infergap.plan.inputs import engine_logs_from_files, load_audit, load_bench, load_roofline
    from infergap.render.plan import render_json, render_markdown, render_text

    if more_evidence and not evidence:
        raise fail(f"unexpected argument {more_evidence[0]} (evidence files go after --evidence)")
    evidence = [*(evidence or []), *(more_evidence or [])]
    try:
        a = load_audit(audit) if audit else None
        r = load_roofline(roofline) if roofline else None
        b = load_bench(bench) if bench else None
        logs = engine_logs_from_files(list(evidence or []))
        cat = load_catalog(catalog) if catalog else None
        cfg = proc = None
        if server:
            from infergap.server import introspect

            try:
                cfg = introspect(server, api_key=api_key)
            except ValueError as e:
                raise UserError(str(e)) from None
            for err in cfg.errors:
                typer.echo(f"infergap: warning: {err}", err=True)
            proc = _serving_process(server)
    except UserError as e:
        raise fail(str(e))
    if not (audit or roofline or bench or server or evidence):  # after the files given were checked (a bad --catalog first)
        raise fail("nothing to plan from: give --audit, --roofline, --bench (their --format json files), --url or --evidence")
    stages = [Stage(name="audit", status="given" if a else "missing", detail=str(audit) if audit else None),
              Stage(name="roofline", status="given" if r else "missing", detail=str(roofline) if roofline else None),
              Stage(name="bench", status="given" if b else "missing", detail=str(bench) if bench else None),
              Stage(name="server", status=("given" if cfg.reachable is not False else "failed") if cfg else ("from log" if logs else "missing"),
                    detail=server or (", ".join(lab for lab, _ in logs) if logs else None))]
    host = a.host.as_dict() if a is not None else None
    if proc is not None:
        stages.append(Stage(name="process", status="ran", detail=f"pid {proc.pid}"))
    elsewhere = _elsewhere(host, cfg, b)
    p = build_plan(audit=a, roofline=r, bench=b, server=cfg, engine_logs=logs, catalog=cat, stages=stages,
                   elsewhere=elsewhere, process=proc, experiments=_experiments(db, host, cfg, elsewhere))
    emit_report("plan", fmt, output, json=lambda: render_json(p), md=lambda: render_markdown(p),
                text=lambda **kw: render_text(p, **kw), payload=lambda: json.loads(render_json(p)), host=_ledger_host(host),
                db=db, inputs=[audit, roofline, bench, catalog, *(evidence or [])])
    if cfg is not None and cfg.reachable is False:  # an input that could not be used: 2, after the plan
        typer.echo(f"infergap: error: --url {server}: the server could not be reached; the plan above has no server part", err=True)
        raise typer.Exit(2)


def _ledger_host(host: dict | None) -> dict | None:
    """The host a plan is filed under in the ledger: the audited host's summary, except for an
    audit of this machine live, which is filed under this machine's id as that audit was (the
    summary's hash gave the plan an id of its own: two rows of one machine in history)."""
    snap = (host or {}).get("snapshot") if isinstance(host, dict) else None
    return None if isinstance(snap, dict) and snap.get("kind") == "live" else host


def _experiments(db: Path | None, host: dict | None, cfg: object, elsewhere: str | None) -> list[dict]:
    """What ``infergap tune`` measured on this key: the host (this machine, unless the audit given
    is of another one), the engine, its version and the model the server at --url reports. Empty
    without a reachable server or when the ledger cannot be read (a note says so)."""
    engine, version = getattr(cfg, "engine", None), getattr(cfg, "version", None)
    model = getattr(cfg, "model", None) or getattr(cfg, "served_model_name", None)
    if cfg is None or not engine or getattr(cfg, "reachable", None) is False:
        return []
    from infergap.ledger import Ledger, LedgerError, host_fingerprint, local_host

    fp = host_fingerprint(host).fingerprint if host and elsewhere else local_host().fingerprint
    try:
        with Ledger(db, readonly=True) as led:
            return led.experiments(host=fp, engine=engine, engine_version=version or "", model=model or "")
    except LedgerError as e:
        typer.echo(f"infergap: note: the tune experiments were not read: {e}", err=True)
        return []


def _serving_process(url: str):
    """The serving process behind ``url`` when it runs on this machine (its flags and environment
    become plan facts), else None with a one-line note on stderr."""
    from infergap.plan.build import is_local_url
    from infergap.snapshot.process import serving_process

    if not is_local_url(url):
        return None
    proc, why = serving_process(url)
    if proc is None:
        typer.echo(f"infergap: note: the serving process of {url} was not read: {why}", err=True)
    return proc
