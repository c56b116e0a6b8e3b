"""``infergap tune``: try levers on the real server one at a time, measured against the user's own
configuration in interleaved runs, judged against their noise, remembered in the ledger."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from infergap.cli import validate as v
from infergap.cli.base import app, fail, fit_report, safe_echo, write_report
from infergap.cli.options import Fmt, db_option, format_option, output_option, url_option

#: Unmeasured requests before each level of each run: the server was just started (caches cold).
WARMUP = 2

_BUDGET = re.compile(r"^\s*(\d{1,7}(?:\.\d{1,3})?)\s*(s|m|min|h)?\s*$")


def parse_budget(text: str | None) -> float | None:
    """``20m`` → 1200.0 seconds; ``90s``, ``1.5h``, a bare number of seconds. Raises UserError."""
    from infergap.errors import UserError

    if text is None:
        return None
    m = _BUDGET.match(text)
    if not m or float(m.group(1)) <= 0:
        raise UserError(f"--budget {text!r}: expected a positive duration like 20m, 90s or 1h")
    return float(m.group(1)) * {"s": 1, None: 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]


def _levers(spec: str, tries: list[str], base):
    """The levers to try: ``plan`` (None: the plan decides after the baseline run), catalog ids
    (comma-separated, their change for this engine), and each ``--try`` change."""
    from infergap.errors import UserError
    from infergap.plan import load_catalog
    from infergap.tune.launch import Change, parse_change
    from infergap.tune.run import LeverTry, recognise

    ids = [x.strip() for x in spec.split(",") if x.strip()]
    if ids == ["plan"]:
        if not tries:
            return None
        ids = []  # --try alone: only the changes given
    elif "plan" in ids:
        raise UserError("--levers: 'plan' or a list of lever ids, not both")
    cat = {lv.id: lv for lv in load_catalog()}
    out: list[LeverTry] = []
    for lid in ids:
        lv = cat.get(lid)
        if lv is None:
            raise UserError(f"--levers: no lever {lid!r} in the catalog (infergap/data/levers.yaml)")
        var = next((x for x in lv.engines.get(base.engine or "", []) if x.args or x.drop), None)
        if var is None or any("{" in w for w in var.args):
            raise UserError(f"--levers {lid}: the catalog gives no fixed command-line change for "
                            f"{base.engine or 'this program'}; use --levers plan or --try '<flags>'")
        out.append(LeverTry(lid, Change(tuple(var.args), tuple(var.drop)), lv.target, lv.title))
    for t in tries:
        lid, target = recognise(t, base)
        head, sep, rest = t.partition(":")
        text = rest.strip() if sep and head.strip() in ("throughput", "ttft", "tpot") else t
        out.append(LeverTry(lid, parse_change(text), target, f"--try {text}"))
    return out


@app.command()
def tune(
    launch: str = typer.Option(..., "--launch", metavar="COMMAND", help="The command that starts the server (split into words, never run through a shell)."),
    url: str | None = url_option(False, "The server's URL (default: from the command's --host/--port, else the engine's default)."),
    levers: str = typer.Option("plan", "--levers", metavar="plan|ID,…", help="plan (the plan's flag flips and small changes for this server) or catalog lever ids."),
    tries: list[str] | None = typer.Option(None, "--try", metavar="CHANGE", help="A change to try: '--parallel 8', 'without --no-kv-offload', 'ttft: -ub 8' (target metric first). Repeatable."),
    fix: str | None = typer.Option(None, "--fix", metavar="all|CHECK,…", help="Also try the audit's runtime host fixes (infergap fix) as levers, one finding at a time: applied through the fix journal for each variant run and reverted after it ('ttft:CHECK' names the target metric). Needs root."),
    audit: Path | None = typer.Option(None, "--audit", metavar="AUDIT.json", help="With --fix: the findings of this audit of this machine (default: audit it now)."),
    budget: str | None = typer.Option(None, "--budget", metavar="DURATION", help="Stop starting runs after this long: 20m, 90s, 1h."),
    keep_best: bool = typer.Option(False, "--keep-best", help="Leave the best configuration running instead of the user's."),
    leave_stopped: bool = typer.Option(False, "--leave-stopped", help="Stop the server at the end instead of leaving it running."),
    rounds: int = typer.Option(3, "--rounds", metavar="N", parser=v.number(integer=True, ge=2, le=20), help="Interleaved A B rounds per lever (a spread needs 2)."),
    concurrency: str = typer.Option("1,8", "--concurrency", metavar="LIST", help="Concurrency levels of each run."),
    num_prompts: int = typer.Option(16, "--num-prompts", metavar="N", parser=v.number(integer=True, ge=1, le=100_000), help="Requests per level and run."),
    input_len: int = typer.Option(128, "--input-len", metavar="TOKENS", parser=v.number(integer=True, ge=1, le=1_000_000), help="Prompt length of each request, in tokens."),
    output_len: int = typer.Option(64, "--output-len", metavar="TOKENS", parser=v.number(integer=True, ge=1, le=1_000_000), help="Output length of each request, in tokens."),
    api: str = typer.Option("chat", "--api", metavar="chat|completions", help="The endpoint the runs send requests to."),
    start_timeout: float = typer.Option(600.0, "--start-timeout", metavar="S", parser=v.number(gt=0, le=86400), help="Seconds a server may take to answer after start."),
    log_dir: Path | None = typer.Option(None, "--log-dir", metavar="DIR", help="Where the servers' logs go (default: a new directory under the user log directory)."),
    html: Path | None = typer.Option(None, "--html", metavar="FILE", help="Also write the HTML report with before/after curves."),
    fmt: Fmt = format_option(Fmt.text, "text or json"),
    output: Path | None = output_option(),
    db: Path | None = db_option(),
) -> None:
    """Try levers on the server the --launch command starts: each one change, restarted, measured
    in interleaved runs against the user's command, judged on the metric it targets."""
    from infergap.bench import BenchSettings
    from infergap.errors import UserError
    from infergap.tune.launch import parse_launch
    from infergap.tune.main import TuneOptions, run_tune
    from infergap.tune.report import render_html, render_json, render_text

    try:
        base = parse_launch(launch)
        levels = v.number_list(integer=True, ge=1, le=100_000)(concurrency)
        if api not in ("chat", "completions"):
            raise UserError(f"--api {api!r}: expected chat or completions")
        chosen = _with_host(_levers(levers, list(tries or []), base), fix, audit)
        opts = TuneOptions(levers=chosen, rounds=rounds, budget_s=parse_budget(budget),
                           keep_best=keep_best, leave_running=not leave_stopped, log_dir=_log_dir(log_dir),
                           start_timeout_s=start_timeout, db=db,
                           on_trial=lambda t: safe_echo(f"infergap: {t.lever} ({t.setting}): {t.verdict}"
                                                        + (f" ({len(t.failed_runs)} run(s) failed: {t.failed_runs[0]})"
                                                           if t.failed_runs else ""), err=True))
        settings = BenchSettings.checked(api=api, concurrency=levels, num_prompts=num_prompts, input_len=input_len,
                                         output_len=output_len, trials=1, warmup=WARMUP)
        result = run_tune(base, settings, opts, url=url)
    except ValueError as e:
        raise fail(str(e))
    except UserError as e:
        raise fail(str(e))
    text = render_json(result) if fmt is Fmt.json else fit_report(render_text(result), lambda: render_json(result))
    write_report(text, output, [])
    if html is not None:
        write_report(render_html(result), html, [])
    if result.stopped and "interrupt" in result.stopped:
        raise typer.Exit(130)


def _with_host(levers, fix: str | None, audit: Path | None):
    """The command-line levers (None: the plan's) followed by the ``--fix`` host levers. With
    ``--fix`` alone (no --levers or --try given beyond the default) only the host levers are tried."""
    from infergap.errors import UserError

    if fix is None:
        if audit is not None:
            raise UserError("--audit names the findings of --fix: give --fix too")
        return levers
    from infergap.tune.host import host_levers

    hosts, notes = host_levers(fix, audit)
    for n in notes:
        safe_echo(f"infergap: note: {n}", err=True)
    if not hosts:
        raise UserError(f"--fix {fix}: no runtime change of the audit can be tried here" + (f" ({notes[0]})" if notes else ""))
    return (levers or []) + hosts


def _log_dir(given: Path | None) -> Path:
    """The log directory: ``given`` (created), else a new one under the user log directory."""
    from datetime import datetime, timezone

    from platformdirs import user_log_dir

    d = given or Path(user_log_dir("infergap", appauthor=False)) / f"tune-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}"
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise fail(f"--log-dir {d}: cannot create ({e.strerror or e})")
    return d
