"""``infergap bench``: concurrency or request-rate sweep against an OpenAI-compatible server."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Optional

import typer

from infergap.cli import app
from infergap.errors import UserError

_DUR = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(us|ms|s)?\s*$")


def parse_duration_ms(text: str, what: str) -> float:
    """``2s`` → 2000.0, ``50ms`` → 50.0, ``250us`` → 0.25, bare numbers are ms."""
    m = _DUR.match(text)
    if not m:
        raise UserError(f"{what} {text!r}: expected a duration like 2s, 50ms or 250us")
    v = float(m.group(1))
    return v * {"us": 1e-3, "ms": 1.0, "s": 1e3, None: 1.0}[m.group(2)]


def parse_slo(text: str):
    """``ttft=2s,tpot=50ms[,e2e=10s]`` → SLO. Raises UserError on an unknown key or bad value."""
    from infergap.bench.models import SLO

    vals = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, _, v = part.partition("=")
        k = k.strip().lower()
        if k not in ("ttft", "tpot", "e2e") or not v:
            raise UserError(f"--slo {text!r}: expected ttft=2s,tpot=50ms[,e2e=10s]")
        vals[f"{k}_ms"] = parse_duration_ms(v, f"--slo {k}")
    if not vals:
        raise UserError(f"--slo {text!r}: no bound given")
    return SLO(**vals)


def _baseline(baseline: str):
    """A bench result from a file, or ``last``: the newest bench run in the ledger."""
    if baseline == "last":
        from infergap.ledger import Ledger

        with Ledger() as led:
            run = led.latest(kind="bench")
        if run is None:
            raise UserError("--baseline last: the ledger holds no bench run yet (run infergap bench once first)")
        from infergap.bench.models import BenchResult

        return BenchResult.model_validate(run.payload)
    from infergap.bench import load_result

    return load_result(Path(baseline))


def _numbers(text: str | None, kind, what: str) -> list:
    if not text:
        return []
    try:
        vals = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"{what} {text!r}: expected comma-separated numbers") from None
    if not vals or any(v <= 0 for v in vals):
        raise UserError(f"{what} {text!r}: values must be positive")
    return vals


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


class _Progress:
    """Rich progress bar per point on a terminal; one plain line per point when piped."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.live = self.console.is_terminal
        self.bar = None
        self.task = None

    def hooks(self):
        from infergap.bench.runner import SweepProgress

        return SweepProgress(point_start=self.start, request_done=self.done, point_end=self.end)

    def start(self, label: str, trial: int, total: int | None) -> None:
        if not self.live:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        if self.bar is None:
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=self.console, transient=True)
            self.bar.start()
        if self.task is not None:
            self.bar.remove_task(self.task)
        desc = label if trial == 0 else f"{label} trial {trial}"
        self.task = self.bar.add_task(desc, total=total)

    def done(self) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.advance(self.task)

    def end(self, point) -> None:
        s = point.summary.get("output_throughput_tps")
        med = f"{s.median:.1f}" if s and s.median is not None else "–"
        line = f"{point.label}: {med} output tok/s over {len(point.trials)} trial(s)" + (
            " [client-bound]" if point.client_bound else "") + (f" [{point.error}]" if point.error else "")
        if self.live:
            self.console.print(line, highlight=False)
        else:
            print(line, file=sys.stderr, flush=True)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@app.command()
def bench(
    url: str = typer.Option(..., "--url", help="Server base URL, e.g. http://127.0.0.1:8000 (or …/v1)."),
    model: Optional[str] = typer.Option(None, "--model", help="Model name; default: the first of /v1/models."),
    api: str = typer.Option("chat", "--api", help="chat (/v1/chat/completions) or completions (/v1/completions)."),
    concurrency: Optional[str] = typer.Option(None, "--concurrency", help="Closed-loop levels, e.g. 1,2,4,8 (default 1,2,4,8,16,32,64); with --request-rate: one cap on requests in flight."),
    request_rate: Optional[str] = typer.Option(None, "--request-rate", help="Open-loop request rates in req/s, e.g. 1,2,4."),
    arrival: str = typer.Option("poisson", "--arrival", help="poisson or constant inter-arrival times (rate mode)."),
    num_prompts: Optional[int] = typer.Option(None, "--num-prompts", help="Requests per trial (default 4 × concurrency, ≥ 32)."),
    duration: Optional[float] = typer.Option(None, "--duration", help="Seconds per trial instead of --num-prompts."),
    input_len: int = typer.Option(256, "--input-len", help="Prompt length in tokens (synthetic dataset)."),
    output_len: int = typer.Option(128, "--output-len", help="max_tokens of each request."),
    len_spread: float = typer.Option(0.0, "--len-spread", help="Lengths uniform in L × (1 ± F)."),
    dataset: str = typer.Option("random", "--dataset", help="random, or sharegpt:FILE (ShareGPT-format JSON)."),
    trials: int = typer.Option(3, "--trials", help="Repetitions of each point."),
    warmup: int = typer.Option(4, "--warmup", help="Unmeasured requests before each point."),
    seed: int = typer.Option(0, "--seed", help="Seed of the prompt lengths and arrival times."),
    slo: Optional[str] = typer.Option(None, "--slo", help="Goodput bounds, e.g. ttft=2s,tpot=50ms."),
    timeout: float = typer.Option(600.0, "--timeout", help="Per-request timeout in seconds."),
    no_stream: bool = typer.Option(False, "--no-stream", help="Non-streaming requests (no TTFT/ITL)."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="Local tokenizer.json for exact counts when the server sends no usage."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the report here (rewritten after every point)."),
    fmt: str = typer.Option("text", "--format", help="text, json or md."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="A previous --format json result to compare with, or 'last' for the last bench in the ledger."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write a plot (.svg or .png)."),
) -> None:
    """Sweep concurrency (closed loop) or request rate (open loop) against an OpenAI-compatible server,
    with repeated trials, client self-monitoring and GPU telemetry."""
    from infergap.bench import compare_bench
    from infergap.bench.models import BenchSettings
    from infergap.bench.runner import run
    from infergap.render import bench as render

    if api not in ("chat", "completions"):
        raise UserError(f"--api {api!r}: expected chat or completions")
    if fmt not in ("text", "json", "md"):
        raise UserError(f"--format {fmt!r}: expected text, json or md")
    if arrival not in ("poisson", "constant"):
        raise UserError(f"--arrival {arrival!r}: expected poisson or constant")
    if plot is not None and plot.suffix.lower() not in (".svg", ".png"):
        raise UserError(f"--plot {plot}: expected a .svg or .png file name")
    if num_prompts is not None and duration is not None:
        raise UserError("--num-prompts and --duration: give one, not both")
    if (num_prompts is not None and num_prompts < 1) or (duration is not None and duration <= 0) or trials < 1 or warmup < 0:
        raise UserError("--num-prompts, --duration and --trials must be positive, --warmup ≥ 0")
    if not (dataset == "random" or dataset.startswith("sharegpt:")):
        raise UserError(f"--dataset {dataset!r}: expected random or sharegpt:FILE")
    rates = _numbers(request_rate, float, "--request-rate")
    levels = _numbers(concurrency, int, "--concurrency") or ([] if rates else [1, 2, 4, 8, 16, 32, 64])
    if rates and len(levels) > 1:
        raise UserError("--concurrency with --request-rate is one cap on requests in flight, not a list")
    if levels:
        from infergap.guard import ensure_open_files

        ensure_open_files(max(levels), f"--concurrency {max(levels)}")
    for opt, path in (("--output", output), ("--plot", plot)):
        if path is not None and not path.parent.is_dir():
            raise UserError(f"{opt} {path}: directory {path.parent} does not exist")
    base = _baseline(baseline) if baseline else None
    settings = BenchSettings(api=api, stream=not no_stream, concurrency=levels, request_rate=rates, arrival=arrival,
                             num_prompts=num_prompts, duration_s=duration, input_len=input_len, output_len=output_len,
                             len_spread=len_spread, dataset=dataset, trials=trials, warmup=warmup, seed=seed,
                             slo=parse_slo(slo) if slo else None, timeout_s=timeout, tokenizer=tokenizer)
    if dataset.startswith("sharegpt:"):
        from infergap.bench.datasets import sharegpt

        sharegpt(dataset.split(":", 1)[1], 1, seed=seed)  # a malformed file fails before any load
    count = _load_tokenizer(tokenizer)

    def render_all(result) -> str:
        cmp = compare_bench(base, result) if base is not None else None
        if fmt == "json":
            return result.to_json() + "\n"
        if fmt == "md":
            return render.to_markdown(result, cmp)
        return render.to_text(result, cmp)

    def write(result) -> None:
        if output is not None:
            try:
                tmp = output.with_name(output.name + ".tmp")
                tmp.write_text(render_all(result), encoding="utf-8")
                tmp.replace(output)
            except OSError as e:
                raise UserError(f"--output {output}: cannot write ({e.strerror or e})") from None

    prog = _Progress()
    try:
        result = run(url, model, settings, progress=prog.hooks(), on_partial=write, tokenizer=count)
    finally:
        prog.stop()
    write(result)
    if output is None:
        sys.stdout.write(render_all(result))
    else:
        typer.echo(f"wrote {output}", err=True)
    if plot is not None and result.points:
        try:
            render.plot(result, str(plot))
        except OSError as e:
            raise UserError(f"--plot {plot}: cannot write ({e.strerror or e})") from None
    from infergap.cli import record

    record("bench", result.to_json())
    if result.interrupted:
        raise typer.Exit(130)
    if result.error:
        typer.echo(f"infergap: error: {result.error} (partial results written)", err=True)
        raise typer.Exit(1)
