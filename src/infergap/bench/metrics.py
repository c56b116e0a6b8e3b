"""Per-request records → per-trial metrics, and trials → point summaries. Pure: no clock, no network.

Definitions follow the common practice of SGLang's ``bench_serving``, vLLM's ``vllm bench serve``
and NVIDIA genai-perf (see shared reference ``bench.md``); :data:`DEFINITIONS` is printed in every
report so that a reader knows exactly what each figure means.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from infergap.bench.results import SLO, ClientHealth, PointResult, Spread, Stats, TrialMetrics
# A point's totals and validity live with the schemas (a result read back is judged there too).
from infergap.bench.results import DEFAULT_MAX_ERROR_RATE as DEFAULT_MAX_ERROR_RATE
from infergap.bench.results import MIN_TAIL_SAMPLES as MIN_TAIL_SAMPLES
from infergap.bench.results import judge_point as judge_point

DEFINITIONS: dict[str, str] = {
    "TTFT": "time from sending the request to the first streamed chunk carrying content "
    "(content, reasoning_content or text); role-only and empty deltas are not tokens",
    "TPOT": "per request, (E2E - TTFT) / (output_tokens - 1); requests with one output token have none",
    "ITL": "gap between successive content chunks of a request, divided by the tokens a chunk "
    "carries when the server bundles several tokens per chunk (output_tokens / content chunks)",
    "E2E": "time from sending the request to the last byte of its response",
    "from intended": "the same latency measured from the time the schedule meant the request to "
    "be sent (open loop: its arrival time; closed loop: when its slot freed), so queueing in the "
    "client is not hidden (coordinated omission)",
    "req/s": "completed requests / measured window (first send to last response byte)",
    "output tok/s": "output tokens of completed requests / measured window",
    "total tok/s": "(input + output tokens) of completed requests / measured window",
    "goodput": "completed requests per second that met every --slo bound",
    "failed": "HTTP error, timeout, connection loss, error event, stream cut before its end, or a stream "
    "the server ended ([DONE]) before any finish_reason and short of max_tokens (interrupted)",
    "retried": "requests sent again, once, on a fresh connection because the re-used keep-alive "
    "connection failed before any response byte (the server had closed it; what curl and browsers do)",
    "error rate": "failed / requests of a point over its trials; above the failure budget "
    "(--max-error-rate, default 1 %) the point is invalid: shown, but not plotted nor used by the plan",
    "few samples": "p99 (and p90/p95) of fewer than 20 completed requests is about their maximum; "
    "the reports show it as 'max … (n=K)', not as a tail percentile",
    "truncated": "completed requests that produced fewer output tokens than their max_tokens",
    "percentiles": "p50/p90/p95/p99 with linear interpolation over requests (ITL over gaps)",
    "stability": "each point is run --trials times; a point is unstable when (max - min) / median "
    "of req/s or output tok/s exceeds 10 %",
    "client-bound": "the load generator limited the run, by its own evidence: its process CPU "
    ">= 90 % of a core or its send slip p99 > 20 ms (event-loop lag and fewer than 95 % of the "
    "target in flight are named beside it, never alone: other processes on a busy host cause them "
    "too); its throughput is not the server's",
}

UNSTABLE_SPREAD_PCT = 10.0
"""Spread above which a point is called unstable (brief of the bench command; run-to-run variance
of 38 vs 66 tok/s observed on the same configuration is far above it)."""

STABILITY_METRICS = ("request_throughput_rps", "output_throughput_tps")


@dataclass(slots=True)
class RequestRecord:
    """What the client saw of one request. Times are ``time.perf_counter()`` seconds.

    ``chunk_times`` holds the arrival time of every content-bearing chunk. ``usage_*`` are the
    server's counts (``None`` when it sent none; ``usage_cached``: prompt tokens served from its
    prefix cache); ``tokenizer_*`` the local tokenizer's. ``tag`` is the workload's label of the
    prompt (turn, group); with ``keep_reply`` the response text is kept in ``reply``.
    """

    intended: float
    start: float = 0.0
    first: float | None = None
    end: float = 0.0
    chunk_times: list[float] = field(default_factory=list)
    usage_prompt: int | None = None
    usage_completion: int | None = None
    tokenizer_prompt: int | None = None
    tokenizer_completion: int | None = None
    prompt_estimate: int = 0
    max_tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None
    error_detail: str | None = None
    text: list[str] | None = None
    retries: int = 0
    retry_detail: str | None = None
    reused: bool = False
    usage_cached: int | None = None
    tag: str | None = None
    keep_reply: bool = False
    reply: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def output_tokens(self) -> tuple[int, str]:
        """Best output-token count and its source: usage > tokenizer > chunks."""
        if self.usage_completion is not None:
            return self.usage_completion, "usage"
        if self.tokenizer_completion is not None:
            return self.tokenizer_completion, "tokenizer"
        return len(self.chunk_times), "chunks"

    def input_tokens(self) -> tuple[int, str]:
        """Best input-token count and its source: usage > tokenizer > prompt_estimate."""
        if self.usage_prompt is not None:
            return self.usage_prompt, "usage"
        if self.tokenizer_prompt is not None:
            return self.tokenizer_prompt, "tokenizer"
        return self.prompt_estimate, "prompt_estimate"


def stats(values) -> Stats:
    """Summarise a sequence of floats (mean, p50/p90/p95/p99, min, max); empty → ``Stats(n=0)``."""
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        return Stats()
    p50, p90, p95, p99 = np.percentile(a, [50, 90, 95, 99])
    return Stats(n=int(a.size), mean=float(a.mean()), p50=float(p50), p90=float(p90), p95=float(p95),
                 p99=float(p99), min=float(a.min()), max=float(a.max()))


@dataclass
class _Tally:
    """Per-request figures of one trial's completed requests (ms), accumulated by :meth:`add`."""

    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    ttft_i: list[float] = field(default_factory=list)
    e2e_i: list[float] = field(default_factory=list)
    in_tok: int = 0
    out_tok: int = 0
    truncated: int = 0
    disagree: int = 0
    good: int = 0
    in_src: dict[str, int] = field(default_factory=dict)
    out_src: dict[str, int] = field(default_factory=dict)
    finish: dict[str, int] = field(default_factory=dict)

    def add(self, r: RequestRecord, slo: SLO | None) -> None:
        """Count one completed request: tokens and their source, truncation, count
        disagreements, TTFT/TPOT/ITL/E2E (from the send and from the intended send), goodput."""
        fr = r.finish_reason or "none"
        self.finish[fr] = self.finish.get(fr, 0) + 1
        n_out, s_out = r.output_tokens()
        n_in, s_in = r.input_tokens()
        self.out_src[s_out] = self.out_src.get(s_out, 0) + 1
        self.in_src[s_in] = self.in_src.get(s_in, 0) + 1
        self.in_tok += n_in
        self.out_tok += n_out
        if r.max_tokens and n_out < r.max_tokens:
            self.truncated += 1
        self.disagree += _disagrees(r, n_out, s_out)
        lat = r.end - r.start
        self.e2e.append(lat * 1e3)
        self.e2e_i.append((r.end - r.intended) * 1e3)
        t_first = None
        if r.first is not None:
            t_first = (r.first - r.start) * 1e3
            self.ttft.append(t_first)
            self.ttft_i.append((r.first - r.intended) * 1e3)
        t_pot = None
        if r.first is not None and n_out > 1:
            t_pot = (r.end - r.first) * 1e3 / (n_out - 1)
            self.tpot.append(t_pot)
        ct = r.chunk_times
        if len(ct) > 1:
            per_chunk = max(n_out / len(ct), 1.0)
            g = np.diff(np.asarray(ct)) * (1e3 / per_chunk)
            self.itl.extend(g.tolist())
        if slo is not None:
            self.good += _meets_slo(slo, t_first, t_pot, lat * 1e3)


def _disagrees(r: RequestRecord, n_out: int, s_out: str) -> bool:
    """Whether the output token counts disagree: more stream chunks than usage tokens (fewer is
    normal bundling), or the local tokenizer's count differs from the usage's."""
    if s_out == "usage" and n_out != len(r.chunk_times) and r.tokenizer_completion is None:
        return len(r.chunk_times) > n_out
    return r.tokenizer_completion is not None and r.usage_completion is not None \
        and r.tokenizer_completion != r.usage_completion


def _meets_slo(slo: SLO, t_first: float | None, t_pot: float | None, e2e_ms: float) -> bool:
    """Whether one request meets every bound of ``slo`` (a request without a first token fails
    a TTFT bound; one without a TPOT passes a TPOT bound)."""
    if slo.ttft_ms is not None and (t_first is None or t_first > slo.ttft_ms):
        return False
    if slo.tpot_ms is not None and (t_pot is not None and t_pot > slo.tpot_ms):
        return False
    if slo.e2e_ms is not None and e2e_ms > slo.e2e_ms:
        return False
    return True


def trial_metrics(trial: int, records: list[RequestRecord], *, window_start: float | None = None,
                  window_end: float | None = None, slo: SLO | None = None,
                  client: ClientHealth | None = None) -> TrialMetrics:
    """Compute :class:`TrialMetrics` from the records of one trial.

    The measured window runs from the first actual send to the last response byte, unless given.
    Throughputs count completed requests only; failed requests are counted by error kind.
    """
    done = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    errors: dict[str, int] = {}
    examples: list[str] = []
    for r in failed:
        errors[r.error] = errors.get(r.error, 0) + 1
        if r.error_detail and len(examples) < 5 and r.error_detail not in examples:
            examples.append(r.error_detail)
    retried = sum(1 for r in records if r.retries)
    if records:
        ws = window_start if window_start is not None else min(r.start for r in records)
        we = window_end if window_end is not None else max(r.end for r in records)
    else:
        ws = we = 0.0
    duration = max(we - ws, 1e-9)
    t = _Tally()
    for r in done:
        t.add(r, slo)
    return TrialMetrics(
        trial=trial, duration_s=duration, requests=len(records), completed=len(done),
        failed=len(failed), truncated=t.truncated, errors=errors, error_examples=examples, retried=retried,
        input_tokens=t.in_tok, output_tokens=t.out_tok, input_token_source=t.in_src,
        output_token_source=t.out_src, count_disagreements=t.disagree, finish_reasons=t.finish,
        request_throughput_rps=len(done) / duration, output_throughput_tps=t.out_tok / duration,
        total_throughput_tps=(t.in_tok + t.out_tok) / duration,
        goodput_rps=(t.good / duration) if slo is not None else None,
        ttft_ms=stats(t.ttft), tpot_ms=stats(t.tpot), itl_ms=stats(t.itl), e2e_ms=stats(t.e2e),
        ttft_from_intended_ms=stats(t.ttft_i), e2e_from_intended_ms=stats(t.e2e_i),
        client=client or ClientHealth())


#: metric name → how to read it from a TrialMetrics. Latencies are p50/p99 of the per-request values.
SUMMARY_METRICS: dict[str, tuple[str, str | None]] = {
    "request_throughput_rps": ("request_throughput_rps", None),
    "output_throughput_tps": ("output_throughput_tps", None),
    "total_throughput_tps": ("total_throughput_tps", None),
    "goodput_rps": ("goodput_rps", None),
    "ttft_p50_ms": ("ttft_ms", "p50"),
    "ttft_p99_ms": ("ttft_ms", "p99"),
    "tpot_p50_ms": ("tpot_ms", "p50"),
    "tpot_p99_ms": ("tpot_ms", "p99"),
    "itl_p50_ms": ("itl_ms", "p50"),
    "itl_p99_ms": ("itl_ms", "p99"),
    "e2e_p50_ms": ("e2e_ms", "p50"),
    "e2e_p99_ms": ("e2e_ms", "p99"),
    "ttft_from_intended_p99_ms": ("ttft_from_intended_ms", "p99"),
    "failed": ("failed", None),
}

HIGHER_IS_BETTER = {"request_throughput_rps", "output_throughput_tps", "total_throughput_tps", "goodput_rps"}


def metric_value(t: TrialMetrics, name: str) -> float | None:
    """Read summary metric ``name`` (a key of :data:`SUMMARY_METRICS`) from a trial."""
    attr, sub = SUMMARY_METRICS[name]
    v = getattr(t, attr)
    if sub is not None:
        v = getattr(v, sub)
    return None if v is None else float(v)


def spread(values: list[float]) -> Spread:
    """Median, min, max and (max − min) / median × 100 of the trial values (``None`` when empty)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return Spread()
    med = float(np.median(vals))
    lo, hi = float(min(vals)), float(max(vals))
    pct = (hi - lo) / abs(med) * 100.0 if med else (0.0 if hi == lo else None)
    return Spread(median=med, min=lo, max=hi, spread_pct=pct)


def summarize_trials(trials: list[TrialMetrics]) -> tuple[dict[str, Spread], list[str]]:
    """Per-metric :class:`Spread` over trials, and the stability metrics whose spread exceeds
    :data:`UNSTABLE_SPREAD_PCT` (only meaningful with two or more trials)."""
    summary = {name: spread([metric_value(t, name) for t in trials]) for name in SUMMARY_METRICS}
    unstable = []
    if len(trials) >= 2:
        for name in STABILITY_METRICS:
            s = summary[name]
            if s.spread_pct is not None and s.spread_pct > UNSTABLE_SPREAD_PCT:
                unstable.append(name)
    return summary, unstable


#: Error kind → the most likely cause, in words a user can act on (what each engine does is in
#: the comments; order: the first kind present that has a cause wins, after the most frequent).
ERROR_CAUSES: dict[str, str] = {
    # llama-cpp-python's server ends a stream with [DONE] when another request waits for the
    # model (its --interrupt_requests, on by default: llama_cpp/server/app.py, get_event_publisher).
    "interrupted": "the server ends a streaming request early when another one arrives (llama-cpp-python's "
                   "server does so unless started with --interrupt_requests False); it serves one request at a time",
    "http_503": "the server refused requests it had no free slot or queue room for (llama-server: raise --parallel; "
                "vLLM/SGLang: max running requests or queue limits)",
    "http_429": "the server (or a proxy in front of it) rate-limits: raise its limit or lower the load",
    "timeout": "requests waited longer than --timeout: the server queues more requests than it has slots for "
               "(raise its slots/batch size, lower the concurrency, or raise --timeout)",
    "connection": "connections were refused, reset or closed before any answer: a connection limit (ulimit -n, a "
                  "proxy's max connections), a server that closes connections, or a server that is down (see its log)",
    "cut": "the server (or a proxy) closed the connection in the middle of an answer, without an error event: a "
           "server that crashed or restarted, or a proxy's read timeout or response size limit (see their logs)",
    "incomplete_stream": "streams stopped before their end without an error: a proxy timeout or a server that drops "
                         "requests under load (see its log)",
    "stream_error": "the server reported an error inside the stream (see its log: often out of KV cache or context)",
    "http_400": "the server rejected the requests (context too long for a slot, or a field it does not accept): "
                "check --input-len + --output-len against its context size per slot",
}


def settle_point(point: PointResult, max_error_rate: float = DEFAULT_MAX_ERROR_RATE) -> None:
    """Fill what a point's trials decide once they all ran: the summary over trials and the
    metrics that are unstable (:func:`summarize_trials`), totals and validity
    (:func:`judge_point`), and whether any trial was client-bound."""
    point.summary, point.unstable_metrics = summarize_trials(point.trials)
    judge_point(point, max_error_rate)
    point.unstable = bool(point.unstable_metrics)
    point.client_bound = any(t.client.client_bound for t in point.trials)


def likely_cause(errors: dict[str, int]) -> str | None:
    """The most likely cause of a point's failures from their kinds (see :data:`ERROR_CAUSES`):
    the cause of the most frequent kind that has one; HTTP 5xx without one → the server's log."""
    for kind, _ in sorted(errors.items(), key=lambda kv: -kv[1]):
        if kind == "cancelled":
            continue
        if kind in ERROR_CAUSES:
            return ERROR_CAUSES[kind]
        if kind.startswith("http_5"):
            return f"the server answered HTTP {kind[5:]}: see its log"
        if kind.startswith("http_4"):
            return ERROR_CAUSES["http_400"]
    return None


CPU_BOUND_FRAC = 0.90
LAG_BOUND_MS = 20.0
IN_FLIGHT_FRAC = 0.95
#: Failed share of a trial's requests above which its in-flight reading says nothing of the client.
IN_FLIGHT_FAILED_FRAC = 0.01


def judge_client(h: ClientHealth, records: list[RequestRecord] | None = None) -> ClientHealth:
    """Set ``client_bound`` and ``reasons`` from the health readings (thresholds in
    :data:`DEFINITIONS`; a 20 ms delay is above the inter-token latency of every GPU server).

    Only the client's *own* evidence makes it the limit: its process CPU seconds per wall second
    (:data:`CPU_BOUND_FRAC`) or its own send slip. Event-loop lag and empty slots are also what
    other processes on a busy host cause (a loop that is not scheduled wakes late, at c=1 too), so
    they are named beside that evidence, never alone. The in-flight reading is not used when more
    than :data:`IN_FLIGHT_FAILED_FRAC` of ``records`` failed: a refused or cut request ends early
    whatever the client does (a server that died in the middle of a point was called a client limit)."""
    own = _own_evidence(h)
    h.reasons = own + _strain(h, records) if own else []
    h.client_bound = bool(own)
    return h


def _own_evidence(h: ClientHealth) -> list[str]:
    """Readings that only the client's own work produces: its CPU share and its send slip."""
    out = []
    if h.cpu_frac >= CPU_BOUND_FRAC:
        out.append(f"client CPU {h.cpu_frac * 100:.0f} % of a core")
    if h.send_slip_ms.p99 is not None and h.send_slip_ms.p99 > LAG_BOUND_MS:
        out.append(f"send slip p99 {h.send_slip_ms.p99:.1f} ms")
    return out


def _strain(h: ClientHealth, records: list[RequestRecord] | None) -> list[str]:
    """Readings that a strained client shows but a busy host shows as well (context only)."""
    out = []
    failed = sum(1 for r in records or () if r.error is not None)
    fails = bool(records) and failed > IN_FLIGHT_FAILED_FRAC * len(records)
    if h.loop_lag_ms.p99 is not None and h.loop_lag_ms.p99 > LAG_BOUND_MS:
        out.append(f"event-loop lag p99 {h.loop_lag_ms.p99:.1f} ms")
    if h.target_in_flight and h.mean_in_flight < IN_FLIGHT_FRAC * h.target_in_flight and not fails:
        out.append(f"only {h.mean_in_flight:.1f} of {h.target_in_flight} requests in flight")
    return out


#: Relative difference between the prompt length asked (``--input-len``) and the server's own
#: count (``usage.prompt_tokens``) above which the run says so: the salt and a chat template add a
#: few tokens; more than this is a tokenizer that counts the synthetic words differently.
PROMPT_LEN_TOLERANCE = 0.05


def prompt_length_warning(result) -> str | None:
    """One line when the prompts' mean length by the server's count (``usage.prompt_tokens``,
    over every trial whose completed requests all carried it) differs from ``--input-len`` by
    more than :data:`PROMPT_LEN_TOLERANCE`; None when they agree, when the server gave no counts,
    or for datasets whose lengths are not ``--input-len`` (ShareGPT, traces)."""
    s = result.settings
    if s.dataset != "random" or not s.input_len:
        return None
    trials = [t for p in result.points for t in p.trials
              if t.completed and t.input_token_source.get("usage") == t.completed]
    done = sum(t.completed for t in trials)
    if not done:
        return None
    mean = sum(t.input_tokens for t in trials) / done
    off = mean / s.input_len - 1
    if abs(off) <= PROMPT_LEN_TOLERANCE:
        return None
    sizing = getattr(result.environment, "prompt_sizing", "")
    if sizing.startswith("server") or sizing == "--tokenizer":  # the text was exact: the rest is the chat template
        how = (f"the prompts' text was sized to {s.input_len} by the {sizing}, so the rest is what the server adds "
               "(its chat template)" + ("; --api completions sends the text alone" if s.api == "chat" else ""))
    else:
        how = "pass --tokenizer with the served model's tokenizer to size the prompts exactly"
    return (f"prompts averaged {mean:.0f} prompt tokens by the server's count (usage.prompt_tokens) for --input-len "
            f"{s.input_len} ({off:+.0%}): the reports count the server's tokens; {how}")
