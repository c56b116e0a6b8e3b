"""``infergap bench``: concurrency or request-rate sweep against an OpenAI-compatible server."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from infergap.cli import validate as v
from infergap.cli.base import app, render_report, write_report
from infergap.cli.options import Fmt, db_option, format_option, output_option, served_model_option, url_option
from infergap.errors import UserError

#: Requests per trial at most: every prompt is built before the run starts.
MAX_PROMPTS = 100_000
#: Requests in flight at most.
MAX_CONCURRENCY = 100_000
#: Lowest open-loop rate, req/s: one request every ~17 minutes; below it a point's default 32
#: requests would take days (1e-9 req/s was accepted and the bench sat silent).
MIN_RATE = 0.001


def parse_slo(text: str):
    """``ttft=2s,tpot=50ms[,e2e=10s]`` → SLO. Percentile keys (``ttft_p99=2s``) also bound each
    request for goodput. Raises UserError on an unknown key or bad value."""
    from infergap.bench.results import SLO
    from infergap.bench.slo import parse_duration_ms

    vals = {}
    seen: set[str] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, _, v = part.partition("=")
        k = k.strip().lower()
        base, _, pct = k.partition("_p")
        if base not in ("ttft", "tpot", "e2e", "itl") or not v or (pct and pct not in ("50", "90", "95", "99")) \
                or (base == "itl" and not pct):
            raise UserError(f"--slo {text!r}: {part!r} is not a bound; expected ttft=2s,tpot=50ms[,e2e=10s] or "
                            "ttft_p99=2s,tpot_p99=80ms (percentiles p50, p90, p95, p99)")
        if k in seen:
            raise UserError(f"--slo {text!r}: {k} is given twice")
        seen.add(k)
        if base != "itl":
            vals[f"{base}_ms"] = parse_duration_ms(v, f"--slo {k}")
    if not vals:
        raise UserError(f"--slo {text!r}: no bound given")
    return SLO(**vals)


def parse_error_rate(text: str, what: str = "--max-error-rate") -> float:
    """``1%`` → 0.01, ``0.05`` → 0.05. Raises UserError outside 0 … 100 %."""
    t = text.strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise UserError(f"{what} {text!r}: expected a fraction like 0.01 or a percentage like 1%") from None
    if not 0 <= v <= 1:
        raise UserError(f"{what} {text!r}: expected a fraction 0 … 1 or a percentage 0 … 100%")
    return v


def _baseline(baseline: str, db: Path | None = None):
    """A bench result from a file, or ``last``: the newest bench run in the ledger."""
    if baseline == "last":
        from infergap.ledger import Ledger

        with Ledger(db) as led:
            run = led.latest(kind="bench")
        if run is None:
            raise UserError("--baseline last: the ledger holds no bench run yet (run infergap bench once first)")
        from infergap.bench.results import BenchResult

        return BenchResult.model_validate(run.payload)
    from infergap.bench import load_result

    try:
        return load_result(Path(baseline))
    except UserError as e:
        raise UserError(f"--baseline {e}") from None


def _load_tokenizer(path: str | None):
    if not path:
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UserError("--tokenizer needs the 'tokenizers' package (pip install tokenizers)") from None
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    try:
        tok = Tokenizer.from_file(str(p))
    except Exception as e:
        raise UserError(f"--tokenizer {path}: cannot load ({e})") from None
    return lambda s: len(tok.encode(s, add_special_tokens=False).ids)


@app.command()
def bench(
    url: str = url_option(True, "Server base URL, e.g. http://127.0.0.1:8000 (or …/v1)."),
    model: Optional[str] = served_model_option(),
    api: str = typer.Option("chat", "--api", parser=v.choice("chat", "completions"), metavar="chat|completions", help="chat (/v1/chat/completions) or completions (/v1/completions)."),
    concurrency: Optional[list] = typer.Option(None, "--concurrency", metavar="N,N,...", parser=v.number_list(
        integer=True, ge=1, le=MAX_CONCURRENCY), help="Closed-loop levels, e.g. 1,2,4,8 (default 1,2,4,8,16,32,64); with --request-rate: one cap on requests in flight."),
    request_rate: Optional[list] = typer.Option(None, "--request-rate", metavar="R,R,...", parser=v.number_list(
        ge=MIN_RATE, le=1e6), help="Open-loop request rates in req/s, e.g. 1,2,4."),
    arrival: str = typer.Option("poisson", "--arrival", parser=v.choice("poisson", "constant"), metavar="poisson|constant", help="poisson or constant inter-arrival times (rate mode)."),
    num_prompts: Optional[int] = typer.Option(None, "--num-prompts", metavar="N", parser=v.number(
        integer=True, ge=1, le=MAX_PROMPTS, cap_reason="every prompt is built before the run; use --duration for longer runs"),
        help="Requests per trial (default 4 × concurrency, ≥ 32)."),
    duration: Optional[float] = typer.Option(None, "--duration", metavar="SECONDS", parser=v.seconds, help="Seconds per trial instead of --num-prompts."),
    input_len: int = typer.Option(256, "--input-len", metavar="TOKENS", parser=v.tokens, help="Prompt length in tokens (synthetic dataset)."),
    output_len: int = typer.Option(128, "--output-len", metavar="TOKENS", parser=v.tokens, help="max_tokens of each request."),
    len_spread: float = typer.Option(0.0, "--len-spread", metavar="F", parser=v.number(ge=0, lt=1), help="Lengths uniform in L × (1 ± F), 0 <= F < 1."),
    dataset: str = typer.Option("random", "--dataset", help="random, sharegpt:FILE, shared-prefix:GxP+S (G groups sharing a P-token prefix, S-token suffixes), multi-turn:T[,think=1s], mooncake:FILE or azure:FILE (trace replay)."),
    time_scale: float = typer.Option(1.0, "--time-scale", metavar="F", parser=v.number(gt=0, le=1e6), help="Trace replay: multiply the trace's arrival times (0.5 = twice as fast)."),
    max_duration: Optional[float] = typer.Option(None, "--max-duration", metavar="SECONDS", parser=v.seconds, help="Trace replay: only the arrivals of the first N seconds (after --time-scale)."),
    token_scale: float = typer.Option(1.0, "--token-scale", metavar="F", parser=v.number(gt=0, le=1e6), help="Trace replay: multiply the trace's token lengths (a small test server)."),
    client_procs: int = typer.Option(1, "--client-procs", metavar="N", parser=v.number(integer=True, ge=1, le=1024), help="Client processes (one event loop each) sharing the load; raises the client's ceiling on a multi-core host."),
    search: Optional[str] = typer.Option(None, "--search", parser=v.choice("rate", "concurrency"), metavar="rate|concurrency", help="rate or concurrency: find the highest load meeting every --slo percentile bound (bracketing, then bisection)."),
    trials: int = typer.Option(3, "--trials", metavar="N", parser=v.number(integer=True, ge=1, le=1000), help="Repetitions of each point."),
    warmup: int = typer.Option(4, "--warmup", metavar="N", parser=v.number(integer=True, ge=0, le=MAX_PROMPTS), help="Unmeasured requests before each point."),
    seed: int = typer.Option(0, "--seed", metavar="N", parser=v.number(integer=True, ge=0, le=2**32 - 1), help="Seed of the prompt lengths and arrival times."),
    slo: Optional[str] = typer.Option(None, "--slo", help="Goodput bounds, e.g. ttft=2s,tpot=50ms; percentile bounds for --search, e.g. ttft_p99=2s,tpot_p99=80ms."),
    timeout: float = typer.Option(600.0, "--timeout", metavar="SECONDS", parser=v.seconds, help="Per-request timeout in seconds."),
    no_stream: bool = typer.Option(False, "--no-stream", help="Non-streaming requests (no TTFT/ITL)."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="Local tokenizer.json for exact counts when the server sends no usage."),
    output: Optional[Path] = output_option("Write the report here (rewritten after every point)."),
    fmt: Fmt = format_option(Fmt.text),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="A previous --format json result to compare with, or 'last' for the last bench in the ledger."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write a plot (.svg or .png)."),
    max_error_rate: str = typer.Option("1%", "--max-error-rate", help="Failure budget of a point, e.g. 1% or 0.01: above it the point is invalid and bench exits 1."),
    db: Optional[Path] = db_option(),
) -> None:
    """Sweep concurrency (closed loop) or request rate (open loop) against an OpenAI-compatible server,
    with repeated trials, client self-monitoring and GPU telemetry."""
    from infergap.bench import compare_bench
    from infergap.bench.results import BenchSettings
    from infergap.bench.runner import run
    from infergap.render import bench as render

    if plot is not None and plot.suffix.lower() not in (".svg", ".png"):
        raise UserError(f"--plot {plot}: expected a .svg or .png file name")
    from infergap.bench import slo as slo_search
    from infergap.bench import workloads

    targets = slo_search.parse_targets(slo) if slo else []  # its message names percentile bounds first
    # Which combinations of options can run is the settings' own check (BenchSettings), one line.
    settings = BenchSettings.checked(
        api=api, stream=not no_stream, concurrency=concurrency or [], request_rate=request_rate or [], arrival=arrival,
        num_prompts=num_prompts, duration_s=duration, input_len=input_len, output_len=output_len, len_spread=len_spread,
        dataset=dataset, trials=trials, warmup=warmup, seed=seed, slo=parse_slo(slo) if slo else None, timeout_s=timeout,
        tokenizer=tokenizer, time_scale=time_scale, max_duration_s=max_duration, token_scale=token_scale,
        slo_targets=targets, search=search,
        max_error_rate=parse_error_rate(max_error_rate), client_procs=client_procs)
    if settings.concurrency:
        from infergap.guard import ensure_open_files

        ensure_open_files(max(settings.concurrency), f"--concurrency {max(settings.concurrency)}")
    for opt, path in (("--output", output), ("--plot", plot)):
        if path is not None and not path.parent.is_dir():
            raise UserError(f"{opt} {path}: directory {path.parent} does not exist")
    base = _baseline(baseline, db) if baseline else None
    if dataset.startswith("sharegpt:"):
        from infergap.bench.datasets import sharegpt

        sharegpt(dataset.split(":", 1)[1], 1, seed=seed)  # a malformed file fails before any load
    wl = workloads.parse_dataset(dataset)
    if wl is not None and wl.path is not None:
        workloads.load_trace(wl, settings)  # a malformed trace fails before any load
    count = _load_tokenizer(tokenizer)

    def render_all(result) -> str:
        cmp = compare_bench(base, result) if base is not None else None
        return render_report(fmt, output, json=lambda: result.to_json() + "\n", md=lambda: render.to_markdown(result, cmp),
                             text=lambda width, color: render.to_text(result, cmp, width=width))

    def write(result) -> None:
        if output is not None:  # an exclusive temporary file beside it, then a rename
            from infergap.guard import write_atomic

            write_atomic(output, render_all(result), inputs=[baseline])

    prog = render.BenchProgress()
    try:
        result = run(url, model, settings, progress=prog.hooks(), on_partial=write, tokenizer=count)
    finally:
        prog.stop()
    write(result)
    for w in result.warnings:
        typer.echo(f"infergap: warning: {w}", err=True)
    if output is None:
        write_report(render_all(result))
    else:
        typer.echo(f"wrote {output}", err=True)
    from infergap.cli.base import optional_step, record

    record("bench", result.to_json(), None, db)  # before the plot: an optional step cannot lose the run
    if plot is not None and result.points:
        optional_step(f"--plot {plot}", lambda: render.plot(result, str(plot)))
    if result.interrupted:
        raise typer.Exit(130)
    if result.error:
        typer.echo(f"infergap: error: {result.error} (partial results written)", err=True)
        raise typer.Exit(1)
    bad = result.invalid_points
    if bad and settings.search is None:  # a capacity search drives load past failure on purpose
        from infergap.bench.metrics import likely_cause

        errors: dict[str, int] = {}
        for p in bad:
            for k, v in p.errors.items():
                errors[k] = errors.get(k, 0) + v
        cause = likely_cause(errors)
        typer.echo(f"infergap: error: {len(bad)} of {len(result.points)} point(s) above the failure budget: "
                   + "; ".join(f"{p.label}: {p.invalid_reason}" for p in bad)
                   + (f"; most likely cause: {cause}" if cause else "") + " (everything measured was written)", err=True)
        raise typer.Exit(1)
