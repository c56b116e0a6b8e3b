"""Pydantic models of a benchmark run: settings, per-trial metrics, per-point summaries, the result.

The JSON written by ``infergap bench --format json`` is :class:`BenchResult` (``"schema":
"infergap.bench/1"``). Downstream stages (plan, report, ledger) read it with
``BenchResult.model_validate_json``. Times are in milliseconds (``*_ms``) or seconds (``*_s``),
throughputs in requests or tokens per second (``*_rps``, ``*_tps``), power in watts.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from infergap.bench.engine_metrics import EngineSummary, Explanation
from infergap.bench.slo import Capacity, SLOTarget
from infergap.bench.workloads import WorkloadStats

SCHEMA = "infergap.bench/1"

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
    search (:mod:`infergap.bench.slo`); ``client_procs`` client processes share the load."""

    api: Literal["chat", "completions"] = "chat"
    stream: bool = True
    concurrency: list[int] = Field(default_factory=list)
    request_rate: list[float] = Field(default_factory=list)
    arrival: Literal["poisson", "constant"] = "poisson"
    num_prompts: int | None = None
    duration_s: float | None = None
    input_len: int = 256
    output_len: int = 128
    len_spread: float = 0.0
    dataset: str = "random"
    trials: int = 3
    warmup: int = 4
    seed: int = 0
    salt: str = ""
    slo: SLO | None = None
    timeout_s: float = 600.0
    tokenizer: str | None = None
    #: Failure budget: a point whose failed / sent requests exceeds it is invalid (0.01 = 1 %).
    max_error_rate: float = 0.01
    time_scale: float = 1.0
    max_duration_s: float | None = None
    token_scale: float = 1.0
    slo_targets: list[SLOTarget] = Field(default_factory=list)
    search: Literal["rate", "concurrency"] | None = None
    client_procs: int = 1


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


class TelemetrySummary(BaseModel):
    """GPU telemetry for one point; ``available`` is False (with ``reason``) without NVML/GPUs."""

    available: bool
    reason: str | None = None
    interval_ms: float | None = None
    gpus: list[GPUTelemetry] = Field(default_factory=list)


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
        from infergap.bench.metrics import judge_point

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
