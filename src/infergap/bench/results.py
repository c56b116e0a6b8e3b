"""Pydantic models of a benchmark run: settings, per-trial metrics, per-point summaries, the result.

The bottom of the bench: it imports only pydantic and the bench's parsers of option values
(:mod:`~infergap.bench.slo`, :mod:`~infergap.bench.workload_spec`), so that reading a result
(``plan``, ``compare``, the ledger) loads no client, no numpy and no scraper. The settings check
their own combinations (:meth:`BenchSettings._combinations`); :func:`settings_error` makes one
line of a failed check.

The JSON written by ``infergap bench --format json`` is :class:`BenchResult` (``"schema":
"infergap.bench/1"``). Downstream stages (plan, report, ledger) read it with
``BenchResult.model_validate_json``. Times are in milliseconds (``*_ms``) or seconds (``*_s``),
throughputs in requests or tokens per second (``*_rps``, ``*_tps``), power in watts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from infergap.bench.slo import Capacity, SLOTarget
from infergap.bench.workload_spec import parse_dataset
from infergap.errors import UserError

SCHEMA = "infergap.bench/1"

MIN_TAIL_SAMPLES = 20
"""Completed requests below which a trial's p90/p95/p99 are shown as the maximum of K values:
with linear interpolation, p99 of fewer than 20 values lies between the two largest."""

DEFAULT_MAX_ERROR_RATE = 0.01
"""Failure budget of a point (failed / requests): one failure in a hundred requests already makes
the surviving requests' latencies a biased sample (a failed request frees its slot early)."""

#: Where a token count came from. ``usage``: the server's own ``usage`` object; ``tokenizer``: the
#: model's tokenizer run locally on the text; ``chunks``: one token per streamed content chunk
#: (undercounts when the server bundles tokens); ``prompt_estimate``: the prompt generator's own
#: word count (input only, used only when nothing better exists, and said so in the report).
TokenSource = Literal["usage", "tokenizer", "chunks", "prompt_estimate"]


class Stats(BaseModel):
    """Distribution of one per-request quantity: count, mean and percentiles (nearest-rank on
    numpy's ``linear`` interpolation). ``None`` when there were no samples."""

    n: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None


class SLO(BaseModel):
    """Service-level objective for goodput: a request is *good* when every stated bound holds."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None


class BenchSettings(BaseModel):
    """What was asked for. ``concurrency`` and ``request_rate`` are the sweep levels; with a rate
    sweep, ``concurrency`` holds at most one value, the cap on requests in flight. Trace replay:
    ``time_scale`` multiplies arrival times, ``max_duration_s`` keeps the first seconds,
    ``token_scale`` multiplies token lengths. ``slo_targets`` with ``search`` run the SLO capacity
    search (:mod:`infergap.bench.slo`); ``client_procs`` client processes share the load.

    Each value is checked against its own bounds (counts ≥ 1, durations and scales > 0, the
    failure budget 0 … 1; the command line's upper caps stay with its options) and the whole
    against the combinations a sweep can run (:meth:`_combinations`); :meth:`checked` builds one
    with a refusal as one line."""

    api: Literal["chat", "completions"] = "chat"
    stream: bool = True
    concurrency: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list)
    request_rate: list[Annotated[float, Field(gt=0)]] = Field(default_factory=list)
    arrival: Literal["poisson", "constant"] = "poisson"
    num_prompts: int | None = Field(None, ge=1)
    duration_s: float | None = Field(None, gt=0)
    input_len: int = Field(256, ge=1)
    output_len: int = Field(128, ge=1)
    len_spread: float = Field(0.0, ge=0, lt=1)
    dataset: str = "random"
    trials: int = Field(3, ge=1)
    warmup: int = Field(4, ge=0)
    seed: int = 0
    salt: str = ""
    slo: SLO | None = None
    timeout_s: float = Field(600.0, gt=0)
    tokenizer: str | None = None
    #: Failure budget: a point whose failed / sent requests exceeds it is invalid (0.01 = 1 %).
    max_error_rate: float = Field(DEFAULT_MAX_ERROR_RATE, ge=0, le=1)
    time_scale: float = Field(1.0, gt=0)
    max_duration_s: float | None = Field(None, gt=0)
    token_scale: float = Field(1.0, gt=0)
    slo_targets: list[SLOTarget] = Field(default_factory=list)
    search: Literal["rate", "concurrency"] | None = None
    client_procs: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _combinations(self) -> "BenchSettings":
        """Refuse the combinations no sweep can run (ValueError, one line naming the options as the
        command line spells them), then fill the closed-loop levels when nothing else sets the load
        (:data:`DEFAULT_LEVELS`). Checked wherever settings are built: ``infergap bench``,
        ``doctor``, a library caller, a result read back."""
        problem = _combination_problem(self)
        if problem:
            raise ValueError(problem)
        if not (self.concurrency or self.request_rate or self.search or _is_trace(self.dataset)):
            self.concurrency = list(DEFAULT_LEVELS)
        return self

    @classmethod
    def checked(cls, **fields) -> "BenchSettings":
        """``BenchSettings(**fields)``; a refused value or combination raises UserError with one
        line (:func:`settings_error`) instead of pydantic's report."""
        try:
            return cls(**fields)
        except ValidationError as e:
            raise UserError(settings_error(e)) from None


#: Closed-loop levels of a sweep given no --concurrency, --request-rate, trace or --search.
DEFAULT_LEVELS = (1, 2, 4, 8, 16, 32, 64)


def _is_trace(dataset: str) -> bool:
    try:
        wl = parse_dataset(dataset)
    except UserError:
        return False
    return wl is not None and wl.path is not None


def _combination_problem(s: BenchSettings) -> str | None:
    """What is wrong with the combination of ``s``'s options, or None (the rules the command line
    applied before they moved here; a malformed ``dataset`` is named by its parser)."""
    if s.num_prompts is not None and s.duration_s is not None:
        return "--num-prompts and --duration: give one, not both"
    try:
        wl = parse_dataset(s.dataset)
    except UserError as e:
        return str(e)
    multi_turn, trace = wl is not None and wl.kind == "multi-turn", wl is not None and wl.path is not None
    if s.client_procs > 1 and (s.duration_s is not None or multi_turn):
        return "--client-procs above 1 needs a request count (not --duration) and a dataset other than multi-turn"
    if s.search and not s.slo_targets:
        return "--search needs --slo with percentile bounds, e.g. --slo ttft_p99=2s,tpot_p99=80ms"
    if multi_turn and (s.request_rate or s.search == "rate"):
        return "--dataset multi-turn runs conversations in a closed loop: use --concurrency, not a rate"
    if (s.request_rate or trace or s.search == "rate") and len(s.concurrency) > 1:
        return "--concurrency with --request-rate (or a trace) is one cap on requests in flight, not a list"
    if s.search == "concurrency" and (s.request_rate or trace):
        return "--search concurrency is a closed-loop search: drop --request-rate / use a non-trace dataset, or --search rate"
    return None


def settings_error(e: ValidationError) -> str:
    """One line for a failed :class:`BenchSettings` validation: the first problem, prefixed with
    the field it concerns when it concerns one (``bench settings: trials: Input should be …``)."""
    err = e.errors()[0]
    ctx = err.get("ctx") or {}
    msg = str(ctx["error"]) if isinstance(ctx.get("error"), ValueError) else err["msg"]
    loc = ".".join(str(x) for x in err["loc"])
    more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
    return (f"bench settings: {loc}: {msg}" if loc else msg) + more


class ClientHealth(BaseModel):
    """Self-monitoring of the load generator during one trial.

    ``loop_lag_ms``: how late a 10 ms timer on the client's event loop fired (a busy loop delays
    every timestamp it takes). ``send_slip_ms``: actual send time minus intended send time.
    ``cpu_frac``: client process CPU seconds per wall second (1.0 = one core saturated).
    ``mean_in_flight``: time-weighted mean of requests in flight while the load was being issued.
    ``issue_s``: seconds from the trial's start until it stopped issuing requests (with
    ``--duration``, at or past the duration by construction; the measured window, from the first
    send to the last response byte, may be a little shorter or longer).
    ``client_bound``: the client, not the server, limited this trial; ``reasons`` says why.
    """

    loop_lag_ms: Stats = Field(default_factory=Stats)
    send_slip_ms: Stats = Field(default_factory=Stats)
    cpu_frac: float = 0.0
    mean_in_flight: float = 0.0
    issue_s: float | None = None
    max_in_flight: int = 0
    target_in_flight: int | None = None
    client_bound: bool = False
    reasons: list[str] = Field(default_factory=list)


class TrialMetrics(BaseModel):
    """Metrics of one trial of one load point (definitions: :data:`infergap.bench.metrics.DEFINITIONS`)."""

    trial: int
    duration_s: float
    requests: int
    completed: int
    failed: int
    truncated: int
    errors: dict[str, int] = Field(default_factory=dict)
    error_examples: list[str] = Field(default_factory=list)
    #: Requests sent a second time on a fresh connection because the re-used one failed before
    #: any response byte (they count once in ``requests``; failed only if the retry failed too).
    retried: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    input_token_source: dict[str, int] = Field(default_factory=dict)
    output_token_source: dict[str, int] = Field(default_factory=dict)
    count_disagreements: int = 0
    finish_reasons: dict[str, int] = Field(default_factory=dict)
    request_throughput_rps: float = 0.0
    output_throughput_tps: float = 0.0
    total_throughput_tps: float = 0.0
    goodput_rps: float | None = None
    ttft_ms: Stats = Field(default_factory=Stats)
    tpot_ms: Stats = Field(default_factory=Stats)
    itl_ms: Stats = Field(default_factory=Stats)
    e2e_ms: Stats = Field(default_factory=Stats)
    ttft_from_intended_ms: Stats = Field(default_factory=Stats)
    e2e_from_intended_ms: Stats = Field(default_factory=Stats)
    client: ClientHealth = Field(default_factory=ClientHealth)


class Spread(BaseModel):
    """Median and range of one metric over the trials of a point; ``spread_pct`` is
    (max − min) / median × 100."""

    median: float | None = None
    min: float | None = None
    max: float | None = None
    spread_pct: float | None = None


class GPUTelemetry(BaseModel):
    """One GPU's NVML readings summarised over a point's measured windows."""

    index: int
    name: str = ""
    samples: int = 0
    power_W_mean: float | None = None
    power_W_max: float | None = None
    power_limit_W: float | None = None
    sm_clock_MHz_mean: float | None = None
    sm_clock_MHz_max_rated: float | None = None
    mem_clock_MHz_mean: float | None = None
    util_pct_mean: float | None = None
    mem_util_pct_mean: float | None = None
    mem_used_MiB_max: float | None = None
    mem_total_MiB: float | None = None
    throttle_reasons: list[str] = Field(default_factory=list)


#: A sample's clock-event reasons count as throttling only when its SM clock is below this share of
#: the maximum: NVML sets sw_power_cap whenever the power controller is engaged, also at full clocks.
THROTTLED_CLOCK_SHARE = 0.97


def throttled(reasons: list[str], sm_mhz: float | None, max_mhz: float | None) -> list[str]:
    """``reasons`` when the clocks were actually held down (``sm_mhz`` below
    :data:`THROTTLED_CLOCK_SHARE` of ``max_mhz``, or either unknown), else none.

    >>> throttled(["sw_power_cap"], 1976.0, 1980.0), throttled(["sw_power_cap"], 1500.0, 1980.0)
    ([], ['sw_power_cap'])
    """
    if reasons and sm_mhz is not None and max_mhz and sm_mhz >= THROTTLED_CLOCK_SHARE * max_mhz:
        return []
    return list(reasons)


class TelemetrySummary(BaseModel):
    """GPU telemetry for one point; ``available`` is False (with ``reason``) without NVML/GPUs."""

    available: bool
    reason: str | None = None
    interval_ms: float | None = None
    gpus: list[GPUTelemetry] = Field(default_factory=list)


class EngineSummary(BaseModel):
    """The engine's metrics over one point's measured windows (``available`` False, with
    ``reason``, when the server has no usable ``/metrics``).

    ``running_*``/``waiting_*``: requests running / queued (mean and largest sample);
    ``kv_usage_*``: KV cache in use, 0–1; ``preemptions``: preemptions during the point;
    ``prefix_hit_rate``: prefix-cache hit rate during the point (hits / lookups, cached / all
    prompt tokens, or the engine's gauge); ``prompt_tokens``/``cached_tokens``: the prompt tokens
    the engine counted during the point (cached ones included) and those it reused from its cache,
    when it exposes both counters; ``tokens_max``: longest sequence the server has seen since it
    started (llama.cpp keeps a running maximum, not one per point); ``slots``/``slot_ctx``: llama.cpp's
    ``total_slots`` and per-slot context from ``/props``.
    """

    available: bool
    reason: str | None = None
    engine: str | None = None
    samples: int = 0
    running_mean: float | None = None
    running_max: float | None = None
    waiting_mean: float | None = None
    waiting_max: float | None = None
    kv_usage_mean: float | None = None
    kv_usage_max: float | None = None
    preemptions: float | None = None
    prefix_hit_rate: float | None = None
    prompt_tokens: float | None = None
    cached_tokens: float | None = None
    tokens_max: float | None = None
    slots: int | None = None
    slot_ctx: int | None = None


class Explanation(BaseModel):
    """Why a point's throughput is what it is: ``cause`` (``client``, ``kv``, ``running_limit``,
    ``host``, ``gpu``, ``scaling`` or ``unknown``), one ``line`` citing the evidence, and whether
    the point is the sweep's ``knee``."""

    cause: str
    line: str
    knee: bool = False


class TurnTokens(BaseModel):
    """Prompt tokens the server counted for one turn number of a multi-turn workload."""

    turn: int
    requests: int
    prompt_tokens_mean: float | None = None


class WorkloadStats(BaseModel):
    """What a workload point shows beyond the common metrics.

    ``cache_hit_rate``: cached prompt tokens / prompt tokens over the completed requests whose
    ``usage`` carried ``prompt_tokens_details.cached_tokens`` (``cache_reported`` of them);
    ``None`` when the server reported none. ``lateness_ms``: for a trace, actual send time minus
    scheduled arrival (p50/p99/max over requests; the schedule is met when these are small).
    ``ideal_hit_rate``: the trace's own prefix reuse with an unbounded cache.
    """

    kind: str
    requests: int = 0
    cache_reported: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_hit_rate: float | None = None
    turns: list[TurnTokens] = Field(default_factory=list)
    lateness_ms: dict[str, float] = Field(default_factory=dict)
    scheduled: int | None = None
    ideal_hit_rate: float | None = None
    note: str | None = None


class PointResult(BaseModel):
    """One load level (a concurrency or a request rate) and its trials."""

    mode: Literal["concurrency", "rate"]
    concurrency: int | None = None
    request_rate: float | None = None
    trials: list[TrialMetrics] = Field(default_factory=list)
    summary: dict[str, Spread] = Field(default_factory=dict)
    unstable: bool = False
    unstable_metrics: list[str] = Field(default_factory=list)
    client_bound: bool = False
    telemetry: TelemetrySummary | None = None
    engine: EngineSummary | None = None
    workload: WorkloadStats | None = None
    explanation: Explanation | None = None
    error: str | None = None
    #: Totals over the trials (warm-up excluded); ``errors`` is failed requests by kind.
    requests: int = 0
    completed: int = 0
    failed: int = 0
    retried: int = 0
    errors: dict[str, int] = Field(default_factory=dict)
    #: failed / requests (requests the user cancelled with Ctrl-C not counted); None without requests.
    error_rate: float | None = None
    #: False when ``error_rate`` exceeds the failure budget (``settings.max_error_rate``): the
    #: point's figures describe the requests that happened to succeed, not the server's capacity;
    #: it is left out of plots and of the plan's facts.
    valid: bool = True
    invalid_reason: str | None = None
    #: Fewest completed requests of a trial; below ``metrics.MIN_TAIL_SAMPLES`` the per-request
    #: p90/p95/p99 are the largest of a few values, not tail percentiles.
    min_completed: int | None = None
    #: True when some trial completed fewer than ``MIN_TAIL_SAMPLES`` requests.
    few_samples: bool = False

    @property
    def label(self) -> str:
        """``c=64`` or ``r=12.5/s`` (with ``,c≤N`` when a rate point is capped)."""
        if self.mode == "concurrency":
            return f"c={self.concurrency}"
        cap = f",c≤{self.concurrency}" if self.concurrency else ""
        return f"r={self.request_rate:g}/s{cap}"


def judge_point(point: PointResult, max_error_rate: float = DEFAULT_MAX_ERROR_RATE) -> None:
    """Fill a :class:`~infergap.bench.results.PointResult`'s totals, error rate and validity from
    its trials. Requests cancelled by the user (Ctrl-C) are not counted as sent."""
    ts = point.trials
    errors: dict[str, int] = {}
    for t in ts:
        for k, v in t.errors.items():
            errors[k] = errors.get(k, 0) + v
    point.errors = errors
    point.requests = sum(t.requests for t in ts)
    point.completed = sum(t.completed for t in ts)
    point.failed = sum(t.failed for t in ts)
    point.retried = sum(t.retried for t in ts)
    point.min_completed = min((t.completed for t in ts), default=None)
    point.few_samples = point.min_completed is not None and point.min_completed < MIN_TAIL_SAMPLES
    sent = point.requests - errors.get("cancelled", 0)
    failed = point.failed - errors.get("cancelled", 0)
    point.error_rate = failed / sent if sent > 0 else None
    point.valid = point.error_rate is None or point.error_rate <= max_error_rate
    point.invalid_reason = None
    if not point.valid:
        kinds = ", ".join(f"{k} ×{v}" for k, v in sorted(errors.items(), key=lambda kv: -kv[1]))
        point.invalid_reason = f"{failed} of {sent} requests failed ({point.error_rate:.1%} > {max_error_rate:.1%}): {kinds}"


class LengthControl(BaseModel):
    """How the server was made to generate exactly ``max_tokens``: the request fields it accepted
    (``ignore_eos``, ``min_tokens``) and whether it streams ``usage``."""

    fields: list[str] = Field(default_factory=list)
    rejected: dict[str, str] = Field(default_factory=dict)
    stream_usage: bool = False
    stream_options_accepted: bool = False


class BenchEnvironment(BaseModel):
    """Where and against what the run took place."""

    url: str
    endpoint: str
    model: str
    server_versions: dict[str, str] = Field(default_factory=dict)
    client_host: dict[str, str] = Field(default_factory=dict)
    length_control: LengthControl = Field(default_factory=LengthControl)
    probe_requests: int = 0
    #: How the synthetic prompts were sized: "server /tokenize (llama.cpp)", "--tokenizer", or
    #: "words" (about one token each: neither was available); empty for a dataset or trace.
    prompt_sizing: str = ""


class ConnectionHealth(BaseModel):
    """How the server treated the client's pooled connections.

    ``reuse_failures``: requests whose re-used keep-alive connection failed before any response
    byte (the server had closed it), each retried once on a fresh connection. ``fresh_per_request``:
    the client stopped re-using connections after seeing the server close them after streamed
    responses. ``note``: the plain-words finding, None when nothing was seen.
    """

    reused: int = 0
    reuse_failures: int = 0
    retry_failures: int = 0
    fresh_per_request: bool = False
    note: str | None = None


class BenchResult(BaseModel):
    """A whole ``infergap bench`` run. ``interrupted``/``error`` say why it may be partial."""

    schema_: str = Field(SCHEMA, alias="schema")
    infergap_version: str
    started_at: str
    finished_at: str | None = None
    environment: BenchEnvironment
    settings: BenchSettings
    definitions: dict[str, str] = Field(default_factory=dict)
    points: list[PointResult] = Field(default_factory=list)
    connections: ConnectionHealth = Field(default_factory=ConnectionHealth)
    capacity: Capacity | None = None
    interrupted: bool = False
    error: str | None = None
    #: What the run measured that the reader should know before the numbers (one line each):
    #: prompts whose length by the server's count differs from the one asked.
    warnings: list[str] = Field(default_factory=list)

    model_config = {"populate_by_name": True}

    @model_validator(mode="after")
    def _totals(self) -> "BenchResult":
        """Results written before points carried their totals get them (and their validity)
        from their trials, so an old file's failures are not hidden either."""
        for p in self.points:
            if not p.requests and any(t.requests for t in p.trials):
                judge_point(p, self.settings.max_error_rate)
        return self

    @property
    def invalid_points(self) -> list[PointResult]:
        """Points above the failure budget."""
        return [p for p in self.points if not p.valid]

    def to_json(self) -> str:
        """The JSON document (``"schema": "infergap.bench/1"``)."""
        return self.model_dump_json(by_alias=True, indent=2)


def load_result(path) -> "BenchResult":
    """Read a ``infergap.bench/1`` JSON file. Raises UserError naming the file when it is not one."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"{p}: cannot read ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise UserError(f"{p}: not text (not UTF-8); expected an {SCHEMA} JSON result") from None
    try:
        r = BenchResult.model_validate_json(text)
    except ValidationError as e:
        raise UserError(f"{p}: not an {SCHEMA} result ({e.error_count()} problem(s), first: {e.errors()[0]['msg']})") from None
    if r.schema_ != SCHEMA:
        raise UserError(f"{p}: schema {r.schema_!r}, expected {SCHEMA!r}")
    return r
