"""Render a :class:`BenchResult` (and a comparison) as a terminal table, Markdown, or a plot."""

from __future__ import annotations

import io
from pathlib import Path
from time import perf_counter

from rich import box
from rich.table import Table

from infergap.bench.compare import BenchComparison
from infergap.bench.metrics import MIN_TAIL_SAMPLES, likely_cause
from infergap.bench.results import BenchResult, PointResult, Spread, TelemetrySummary, throttled
from infergap.guard import md_escape, md_fence, safe_console, term_safe, write_atomic
from infergap.render.bench_why import head_lines, point_lines
from infergap.render.fit import WIDTH as FIT_WIDTH

COLUMNS = ("point", "req/s", "out tok/s", "total tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99",
           "ITL p50", "ITL p99", "failed", "retried", "trunc", "stability")

#: p99 summary key → the per-trial Stats attribute it is read from (for the sample count).
_TAIL = {"ttft_p99_ms": "ttft_ms", "tpot_p99_ms": "tpot_ms", "itl_p99_ms": "itl_ms"}


def _f(v: float | None, digits: int = 1) -> str:
    if v is None:
        return "–"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def _thr(s: Spread | None, client_bound: bool) -> str:
    if s is None or s.median is None:
        return "–"
    txt = _f(s.median)
    if s.min is not None and s.max is not None and s.min != s.max:
        txt += f" ({_f(s.min)}–{_f(s.max)})"
    return txt + (" [client-bound]" if client_bound else "")


def _stability(p: PointResult) -> str:
    tags = []
    if len(p.trials) < 2:
        tags.append(f"{len(p.trials)} trial")
    else:
        s = p.summary.get("output_throughput_tps")
        pct = f"spread {s.spread_pct:.1f} %" if s and s.spread_pct is not None else ""
        tags.append(("UNSTABLE, " if p.unstable else "stable, ") + pct)
    if p.client_bound:
        tags.append("CLIENT-BOUND")
    if not p.valid:
        tags.append("INVALID")
    elif p.failed:
        tags.append("FAILURES")
    if p.error:
        tags.append("ERROR")
    return ", ".join(tags)


def tail_cell(p: PointResult, key: str) -> str:
    """A p99 cell: the median over trials, or ``max X (n=K)`` when a trial had fewer than
    :data:`MIN_TAIL_SAMPLES` samples (then p99 is about the largest value, not a tail percentile)."""
    attr = _TAIL[key]
    ns = [getattr(t, attr).n for t in p.trials]
    s = p.summary.get(key)
    if ns and min(ns) < MIN_TAIL_SAMPLES:
        maxes = sorted(getattr(t, attr).max for t in p.trials if getattr(t, attr).max is not None)
        if not maxes:
            return "–"
        return f"max {_f(maxes[len(maxes) // 2])} (n={min(ns)})"
    return _f(s.median) if s is not None else "–"


def _failed(p: PointResult) -> str:
    if not p.requests:
        failed, reqs = sum(t.failed for t in p.trials), sum(t.requests for t in p.trials)
        return f"{failed}/{reqs}"
    rate = f" ({p.error_rate * 100:.1f} %)" if p.failed and p.error_rate is not None else ""
    return f"{p.failed}/{p.requests}{rate}"


def rows(result: BenchResult) -> list[list[str]]:
    """Table rows (strings) in :data:`COLUMNS` order; throughputs are medians with min–max."""
    out = []
    for p in result.points:
        s = p.summary
        cb = p.client_bound

        def lat(k):
            return _f(s[k].median) if k in s else "–"

        trunc = sum(t.truncated for t in p.trials)
        retried = sum(t.retried for t in p.trials)
        out.append([p.label, _thr(s.get("request_throughput_rps"), cb), _thr(s.get("output_throughput_tps"), cb),
                    _thr(s.get("total_throughput_tps"), cb), lat("ttft_p50_ms"), tail_cell(p, "ttft_p99_ms"), lat("tpot_p50_ms"),
                    tail_cell(p, "tpot_p99_ms"), lat("itl_p50_ms"), tail_cell(p, "itl_p99_ms"), _failed(p), str(retried), str(trunc),
                    _stability(p)])
    return out


def telemetry_line(t: TelemetrySummary | None) -> str:
    """``GPU 0: 235 W of 600 W, util 41 %, SM 1980 of 1980 MHz`` per GPU, or why there is none."""
    if t is None:
        return "telemetry not sampled"
    if not t.available:
        return f"telemetry unavailable ({t.reason})" if t.reason else "telemetry unavailable"
    parts = []
    for g in t.gpus:
        s = f"GPU {g.index}: {_f(g.power_W_mean, 0)} W of {_f(g.power_limit_W, 0)} W, util {_f(g.util_pct_mean, 0)} %"
        s += f", SM {_f(g.sm_clock_MHz_mean, 0)} of {_f(g.sm_clock_MHz_max_rated, 0)} MHz"
        s += f", mem {_f(g.mem_used_MiB_max, 0)} of {_f(g.mem_total_MiB, 0)} MiB"
        held = throttled(g.throttle_reasons, g.sm_clock_MHz_mean, g.sm_clock_MHz_max_rated)
        if held:
            s += f", throttled: {', '.join(held)}"
        parts.append(s)
    return "; ".join(parts) or "no samples"


def failure_summary(result: BenchResult) -> list[str]:
    """Lines that must come before any figure: points above the failure budget, points with
    failures, the likely cause, the server's keep-alive behaviour. Empty when nothing failed."""
    out = []
    budget = result.settings.max_error_rate
    bad = result.invalid_points
    if bad:
        out.append(f"INVALID: {len(bad)} of {len(result.points)} point(s) failed more than the failure budget "
                   f"({budget * 100:g} %, --max-error-rate); their figures describe only the requests that succeeded "
                   "and are left out of plots and of the plan")
    for p in result.points:
        if p.failed:
            kinds = ", ".join(f"{k} ×{v}" for k, v in sorted(p.errors.items(), key=lambda kv: -kv[1]))
            ex = next((t.error_examples[0] for t in p.trials if t.error_examples), None)
            verdict = "INVALID" if not p.valid else "within budget"
            cancelled = p.errors.get("cancelled", 0)  # stopped by the run's end or an interrupt: not sent to the end
            failed, sent = p.failed - cancelled, p.requests - cancelled
            out.append(f"{p.label}: {failed} of {sent} requests failed"
                       + (f" ({p.error_rate * 100:.1f} %, {verdict})" if p.error_rate is not None else "")
                       + (f", {cancelled} more cancelled when the run stopped (not counted)" if cancelled else "")
                       + f": {kinds}" + (f"; e.g. {ex}" if ex else ""))
    errors: dict[str, int] = {}
    for p in result.points:
        for k, v in p.errors.items():
            errors[k] = errors.get(k, 0) + v
    cause = likely_cause(errors)
    if cause:
        out.append(f"most likely cause: {cause}")
    retried = sum(p.retried for p in result.points)
    if result.connections.note:
        out.append(f"connections: {result.connections.note}")
    elif retried:
        out.append(f"{retried} request(s) retried once on a fresh connection")
    return out


def failure_heading(result: BenchResult) -> str:
    """The heading of :func:`failure_summary`'s lines: ``FAILED REQUESTS`` when a request failed
    or a point is over its failure budget, else ``CONNECTIONS (no request failed)``: a run whose
    only note is the server's keep-alive behaviour and the retries it caused lost no request."""
    if result.invalid_points or any(p.failed for p in result.points):
        return "FAILED REQUESTS"
    return "CONNECTIONS (no request failed)"


def _load_words(st) -> str:
    """The load the settings asked for, in words (an SLO search names its mode and first load)."""
    if st.search:
        first = (f"{st.request_rate[0]:g}/s" if st.search == "rate" and st.request_rate else
                 str(st.concurrency[0]) if st.search == "concurrency" and st.concurrency else None)
        return f"SLO capacity search over {'request rate' if st.search == 'rate' else 'concurrency'}" + \
            (f" from {first}" if first else "") + (f" ({st.arrival} arrivals)" if st.search == "rate" else "")
    if not st.request_rate:
        return f"concurrency {','.join(map(str, st.concurrency))}"
    return (f"request rate {','.join(f'{r:g}' for r in st.request_rate)}/s ({st.arrival})"
            + (f", at most {st.concurrency[0]} in flight" if st.concurrency else ""))


def _length_words(st) -> str:
    """Where the prompt and output lengths come from: the settings' lengths only for the workloads
    that use them (a trace carries both, ShareGPT its prompts)."""
    kind = st.dataset.partition(":")[0].strip().lower()
    spread = f" ±{st.len_spread * 100:.0f} %" if st.len_spread else ""
    if kind in ("mooncake", "azure"):
        scale = f", × {st.token_scale:g}" if st.token_scale != 1 else ""
        return f"input and output lengths from the trace{scale}"
    if kind == "sharegpt":
        return f"input from the dataset's prompts, output {st.output_len} tokens"
    if kind == "shared-prefix":
        return f"input = shared prefix + suffix as the dataset says, output {st.output_len} tokens{spread}"
    if kind == "multi-turn":
        return f"input {st.input_len} tokens per turn plus the history, output {st.output_len} tokens{spread}"
    return f"input {st.input_len}, output {st.output_len} tokens{spread}"


def _short_answers(result: BenchResult) -> list[str]:
    """One note when completed requests produced fewer output tokens than their ``max_tokens``
    (``truncated``): the throughput and TPOT then describe shorter answers than the settings say."""
    trials = [t for p in result.points for t in p.trials]
    cut = sum(t.truncated for t in trials)
    done = sum(t.completed for t in trials)
    if not cut or not done:
        return []
    mean = sum(t.output_tokens for t in trials) / done
    reasons: dict[str, int] = {}
    for t in trials:
        for k, v in t.finish_reasons.items():
            reasons[k] = reasons.get(k, 0) + v
    kind = result.settings.dataset.partition(":")[0].strip().lower()
    asked = "each its own max_tokens" if kind in ("mooncake", "azure") else f"{result.settings.output_len} asked"
    why = (" (finish reasons: " + ", ".join(f"{k} ×{v}" for k, v in sorted(reasons.items())) + ")") if reasons else ""
    return [f"{cut} of {done} completed requests ended before their max_tokens (mean {mean:.1f} output tokens, {asked}){why}: "
            "output tok/s and TPOT describe shorter answers than asked (an end-of-sequence the server does not let "
            "ignore_eos override, or its own output limit)"]


def _notes(result: BenchResult) -> list[str]:
    env = result.environment
    lc = env.length_control
    notes = [f"server {env.url} ({env.endpoint}), model {env.model}"
             + (f", versions: {', '.join(f'{k}={v}' for k, v in env.server_versions.items())}" if env.server_versions else "")]
    st = result.settings
    notes.append(f"load: {_load_words(st)}; {st.trials} trial(s) per point, {st.warmup} warm-up request(s); "
                 f"dataset {st.dataset}, {_length_words(st)}; prompts salted '{st.salt}'")
    notes.append("output length forced with " + (", ".join(lc.fields) if lc.fields else "nothing (server accepted no length field)")
                 + ("; usage streamed by the server" if lc.stream_usage else "; server streams no usage"))
    srcs_in: dict[str, int] = {}
    srcs_out: dict[str, int] = {}
    disagree = 0
    for p in result.points:
        for t in p.trials:
            for k, v in t.input_token_source.items():
                srcs_in[k] = srcs_in.get(k, 0) + v
            for k, v in t.output_token_source.items():
                srcs_out[k] = srcs_out.get(k, 0) + v
            disagree += t.count_disagreements
    if srcs_out:
        notes.append("output tokens counted by " + ", ".join(f"{k} ({v} req)" for k, v in srcs_out.items())
                     + "; input tokens by " + ", ".join(f"{k} ({v} req)" for k, v in srcs_in.items()))
    if "prompt_estimate" in srcs_in:
        notes.append("input tokens are the prompt generator's estimate, not the server's count: total tok/s is approximate")
    if "chunks" in srcs_out:
        notes.append("output tokens counted as streamed chunks (no usage from the server): undercounts if chunks bundle tokens")
    if disagree:
        notes.append(f"{disagree} request(s) where the token counts of two sources disagree")
    notes += _short_answers(result)
    few = [p.label for p in result.points if p.few_samples]
    if few:
        notes.append(f"{', '.join(few)}: fewer than {MIN_TAIL_SAMPLES} completed requests in a trial; their p99 cells "
                     "show the largest value ('max … (n=K)'), not a tail percentile")
    for p in result.points:
        for t in p.trials:
            if t.errors and len(p.trials) > 1:
                notes.append(f"{p.label} trial {t.trial}: " + ", ".join(f"{k} ×{v}" for k, v in t.errors.items()))
            if t.client.client_bound:
                notes.append(f"{p.label} trial {t.trial}: CLIENT-BOUND ({'; '.join(t.client.reasons)}): "
                             "throughput measures the client, not the server")
        if p.telemetry is not None and p.telemetry.available:
            notes.append(f"{p.label}: {telemetry_line(p.telemetry)}")
        if p.error:
            notes.append(f"{p.label}: {p.error}")
    missing = {telemetry_line(p.telemetry) for p in result.points if p.telemetry is not None and not p.telemetry.available}
    notes += [f"GPU {m}" if m.startswith("telemetry") else m for m in sorted(missing)]
    if result.interrupted:
        notes.append("run interrupted: results are partial")
    if result.error:
        notes.append(f"run ended early: {result.error}")
    return notes


#: Columns of the three tables the sweep is split into below :data:`WIDE` columns: throughputs
#: (each cell up to ~40 columns with its range and marker), outcome, latencies.
_SPLIT = (("point", "req/s", "out tok/s", "total tok/s"),
          ("point", "failed", "retried", "trunc", "stability"),
          ("point", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "ITL p50", "ITL p99"))
#: Terminal width (columns) from which the sweep is one table.
WIDE = 160


def _tables(result: BenchResult, width: int | None) -> list[Table]:
    """The sweep as one table, or as three (throughput; outcome; latencies) below :data:`WIDE`
    columns or when ``width`` is None (a file or a pipe: fitted to 100 columns), so that every
    cell shows whole at 100 columns (a cut "UNSTA…" hides the verdict):
    no borders, cells wrapped at spaces and folded, never cut with an ellipsis."""
    groups = [COLUMNS] if (width or FIT_WIDTH) >= WIDE else list(_SPLIT)
    out = []
    all_rows = rows(result)
    for i, cols in enumerate(groups):
        t = (Table(title="infergap bench", show_lines=False) if len(groups) == 1 else
             Table(title="infergap bench" if i == 0 else None, show_lines=False, box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False))
        for c in cols:
            t.add_column(c, justify="left" if c in ("point", "stability") else "right", overflow="fold",
                         min_width=len("[client-bound]") if c.endswith("/s") else None)  # the throughput cells' marker whole
        idx = [COLUMNS.index(c) for c in cols]
        for r in all_rows:
            t.add_row(*[r[j] for j in idx])
        out.append(t)
    return out


def to_text(result: BenchResult, comparison: BenchComparison | None = None, width: int | None = None) -> str:
    """Terminal report: the sweep table (latencies in ms; throughputs median (min–max) over
    trials), notes, the metric definitions (on a terminal, ``width`` given: one line saying where they
    are), and the comparison with a baseline if given. Lines are wrapped at ``width`` columns when
    given, never when ``None`` (a file or a pipe); below :data:`WIDE` columns the sweep is two tables."""
    buf = io.StringIO()
    con = safe_console(file=buf, width=width or 1000, force_terminal=False, no_color=True, soft_wrap=width is None)
    fails = failure_summary(result)
    if fails:
        con.print(failure_heading(result))
        for n in fails:
            con.print(f"- {n}", highlight=False)
    for line in head_lines(result):
        con.print(line, highlight=False)
    tables = safe_console(file=buf, width=width or FIT_WIDTH, force_terminal=False, no_color=True)
    for table in _tables(result, width):  # laid out in the columns they have: never refitted line by line
        tables.print(table)
    con.print("latencies in ms (median over trials of the per-trial percentile); throughputs: median (min–max) over trials")
    for line in point_lines(result):
        con.print(f"- {line}", highlight=False)
    for n in _notes(result):
        con.print(f"- {n}", highlight=False)
    if comparison is not None:
        con.print(comparison_text(comparison), highlight=False)
    if width is None:  # a file or a pipe keeps the definitions with the numbers
        con.print("definitions:")
        for k, v in result.definitions.items():
            con.print(f"  {k}: {v}", highlight=False)
    else:  # on a terminal, one line instead of the same block after every run
        con.print(f"definitions of the {len(result.definitions)} metrics: in the report's Markdown (-f md) and JSON (-f json)")
    return term_safe(buf.getvalue())  # plain text: no value may drive the terminal


def comparison_text(c: BenchComparison) -> str:
    """Per point and metric: baseline → new median, change %, and the verdict."""
    lines = ["comparison with baseline (significant only outside the spread of both runs):"]
    lines += [f"  note: {n}" for n in c.notes]
    for p in c.points:
        lines.append(f"  {p.label}:")
        for m in p.metrics:
            if m.verdict == "missing":
                continue
            ch = f"{m.change_pct:+.1f} %" if m.change_pct is not None else "n/a"
            lines.append(f"    {m.metric}: {_f(m.a.median)} → {_f(m.b.median)} ({ch}) {m.verdict}")
        lines += [f"    note: {n}" for n in p.notes]
    if c.only_in_a:
        lines.append(f"  only in baseline: {', '.join(c.only_in_a)}")
    if c.only_in_b:
        lines.append(f"  only in this run: {', '.join(c.only_in_b)}")
    return "\n".join(lines)


def to_markdown(result: BenchResult, comparison: BenchComparison | None = None) -> str:
    """The same report as Markdown."""
    out = ["# infergap bench", ""]
    fails = failure_summary(result)
    if fails:
        out += ["## Failed requests", ""] + [f"- **{md_escape(n)}**" for n in fails] + [""]
    out += [f"**{md_escape(line)}**" for line in head_lines(result)] + [""]
    out += ["| " + " | ".join(map(md_escape, COLUMNS)) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows(result):
        out.append("| " + " | ".join(map(md_escape, r)) + " |")
    out += ["", "Latencies in ms; throughputs are median (min–max) over trials.", ""]
    out += [f"- {md_escape(n)}" for n in point_lines(result) + _notes(result)]
    if comparison is not None:
        out += ["", md_fence(comparison_text(comparison))]
    out += ["", "## Definitions", ""] + [f"- **{md_escape(k)}**: {md_escape(v)}" for k, v in result.definitions.items()]
    return "\n".join(out) + "\n"


def plot(result: BenchResult, path: str) -> None:
    """Two panels: output tok/s (median, min–max bars) vs load level; p99 TPOT vs output tok/s.
    Format from the file name (.svg or .png); matplotlib's Agg backend, no display needed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [p for p in result.points if p.valid and p.summary.get("output_throughput_tps")
           and p.summary["output_throughput_tps"].median is not None]
    rate = bool(pts) and pts[0].mode == "rate"
    xs = [p.request_rate if rate else p.concurrency for p in pts]
    thr = [p.summary["output_throughput_tps"] for p in pts]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    med = [s.median for s in thr]
    err = [[s.median - s.min for s in thr], [s.max - s.median for s in thr]]
    a1.errorbar(xs, med, yerr=err, marker="o", capsize=3, label="output tok/s")
    tot = [p.summary["total_throughput_tps"].median for p in pts]
    a1.plot(xs, tot, marker="s", linestyle="--", label="total tok/s")
    for x, y, p in zip(xs, med, pts):
        if p.client_bound:
            a1.annotate("client-bound", (x, y), fontsize=7, color="red")
    a1.set_xlabel("request rate (req/s)" if rate else "concurrency")
    if not rate and xs and max(xs) / max(min(xs), 1) >= 8:
        a1.set_xscale("log", base=2)
        a1.set_xticks(xs, [str(x) for x in xs])
    a1.set_ylabel("tokens/s")
    a1.set_title("throughput vs load")
    a1.legend()
    a1.grid(alpha=0.3)
    tp = [p.summary.get("tpot_p99_ms") for p in pts]
    a2.plot(med, [t.median if t else None for t in tp], marker="o")
    for x, t, p in zip(med, tp, pts):
        if t and t.median is not None:
            a2.annotate(p.label, (x, t.median), fontsize=7)
    a2.set_xlabel("output tok/s")
    a2.set_ylabel("p99 TPOT (ms)")
    a2.set_title("latency vs throughput")
    a2.grid(alpha=0.3)
    skipped = [p.label for p in result.points if not p.valid]
    # parse_math off: a "$" in a model id would start matplotlib's math text (and may not parse)
    fig.suptitle(term_safe(f"{result.environment.model} @ {result.environment.url}", one_line=True)
                 + (f" — not plotted (too many failed requests): {', '.join(skipped)}" if skipped else ""), fontsize=9, parse_math=False)
    fig.tight_layout()
    _save(fig, path)


def _save(fig, path: str) -> None:
    """Render ``fig`` in the format of ``path``'s suffix and write it atomically (an exclusive
    temporary file beside it, then a rename). Raises UserError naming ``--plot`` and the path."""
    import matplotlib.pyplot as plt


    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=Path(path).suffix.lstrip(".").lower() or "png")
    finally:
        plt.close(fig)
    write_atomic(path, buf.getvalue(), option="--plot")


class BenchProgress:
    """Live progress of a sweep on a terminal (stderr): one line per trial of a point with the
    requests done of the total, elapsed time, ETA, the output tok/s of the requests completed
    so far and the failed ones. Prints nothing when stderr is not a terminal (piped, a file, CI)."""

    def __init__(self, console=None) -> None:
        from rich.console import Console

        self.console = console or Console(stderr=True)
        self.live = self.console.is_terminal
        self.bar = None
        self.task = None
        self._t0 = 0.0
        self._tokens = 0
        self._failed = 0
        self._retried = 0

    def hooks(self):
        """The :class:`~infergap.bench.runner.SweepProgress` callbacks of this display."""
        from infergap.bench.runner import SweepProgress

        return SweepProgress(point_start=self.start, request_done=self.done, point_end=self.end)

    def start(self, label: str, trial: int, total: int | None) -> None:
        if not self.live:
            return

        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        if self.bar is None:
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[status]}"),
                                console=self.console, transient=True)
            self.bar.start()
        if self.task is not None:
            self.bar.remove_task(self.task)
        self._t0, self._tokens, self._failed, self._retried = perf_counter(), 0, 0, 0
        desc = label if trial == 0 else f"{label} trial {trial}"
        self.task = self.bar.add_task(desc, total=total, status="")

    def done(self, rec) -> None:
        if self.bar is None or self.task is None:
            return

        if rec.ok:
            self._tokens += rec.output_tokens()[0]
        else:
            self._failed += 1
        self._retried += 1 if rec.retries else 0
        rate = self._tokens / max(perf_counter() - self._t0, 1e-9)
        status = f"{rate:,.1f} out tok/s, {self._failed} failed" + (f", {self._retried} retried" if self._retried else "")
        self.bar.update(self.task, advance=1, status=status)

    def end(self, point: PointResult) -> None:
        if not self.live:
            return
        s = point.summary.get("output_throughput_tps")
        med = f"{s.median:.1f}" if s and s.median is not None else "–"
        line = f"{point.label}: {med} output tok/s over {len(point.trials)} trial(s), {point.failed}/{point.requests} failed" + (
            " [INVALID: too many failures]" if not point.valid else "") + (" [client-bound]" if point.client_bound else "") + (
            f" [{point.error}]" if point.error else "")
        self.console.print(line, highlight=False, markup=False)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
