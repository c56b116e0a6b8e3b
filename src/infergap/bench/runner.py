"""Load generation and the sweep: closed-loop concurrency, open-loop request rate, trials, warm-up,
self-monitoring, telemetry windows, interruption.

Closed loop: ``concurrency`` workers each send their next request as soon as the previous one
ended; the *intended* send time of a request is the moment its slot freed, so the worker's own
delay shows as send slip. Open loop: arrival times are drawn up front on an absolute schedule
(``t0 + Σ gaps``; Poisson: exponential gaps, constant: 1/rate), so a late dispatcher does not
shift later arrivals; the intended send time is the scheduled arrival, and waiting for a
concurrency cap counts in the latency measured from it (coordinated omission stays visible).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import platform
import random
import secrets
import signal
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from time import perf_counter, process_time
from typing import Any, Callable

import aiohttp

from infergap import __version__
from infergap.bench import datasets, engine_metrics, multiproc, slo, workloads
from infergap.bench.client import StreamClient, probe, split_url
from infergap.bench.datasets import Prompt
from infergap.bench.metrics import (DEFINITIONS, RequestRecord, judge_client, judge_point, prompt_length_warning, stats,
                                    summarize_trials, trial_metrics)
from infergap.bench.results import (BenchEnvironment, BenchResult, BenchSettings, ClientHealth, ConnectionHealth, PointResult,
                                   TrialMetrics)
from infergap.bench.telemetry import GPUSampler

log = logging.getLogger(__name__)

LAG_TICK_S = 0.010


class LagMonitor:
    """Measures event-loop lag: a task sleeps ``LAG_TICK_S`` repeatedly and records how late it
    woke up (ms). A loop busy parsing streams wakes late, and so does every timestamp it takes."""

    def __init__(self) -> None:
        self.lags_ms: list[float] = []
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        while True:
            t = perf_counter()
            await asyncio.sleep(LAG_TICK_S)
            self.lags_ms.append(max(0.0, (perf_counter() - t - LAG_TICK_S) * 1e3))

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass


@dataclass
class LoadSpec:
    """One load point: closed loop at ``concurrency``, or open loop at ``rate`` req/s (optionally
    capped at ``concurrency`` in flight)."""

    mode: str
    concurrency: int | None = None
    rate: float | None = None
    arrival: str = "poisson"
    offsets: list[float] | None = None
    """Trace replay: the arrival time of request ``i`` is ``t0 + offsets[i]`` (seconds); the trial
    ends after ``len(offsets)`` requests."""


@dataclass
class TrialRun:
    """Raw outcome of one trial: records, window, and the client's health readings; ``server_dead``
    says why the trial stopped early when the server stopped answering (None otherwise)."""

    records: list[RequestRecord]
    window: tuple[float, float]
    health: ClientHealth
    stopped: bool = False
    server_dead: str | None = None


#: Consecutive requests whose connection was refused (nothing listens any more) after which the
#: server is taken for dead and the point stops: one refusal can be a restart's blink, three are not.
DEAD_REFUSED = 3
#: Consecutive requests that failed on the connection or timed out, with no answer of any kind
#: between them, after which the server is taken for dead (at least this many, and at least the
#: concurrency, so that one burst of in-flight requests cut together is not enough). A hung server
#: or one behind a proxy that still accepts connections otherwise costs every remaining request
#: its whole timeout.
DEAD_FAILED = 8


@dataclass
class _InFlight:
    n: int = 0
    peak: int = 0
    area: float = 0.0
    last: float = 0.0

    def change(self, d: int) -> None:
        now = perf_counter()
        self.area += self.n * (now - self.last)
        self.last = now
        self.n += d
        if self.n > self.peak:
            self.peak = self.n


@dataclass
class Runner:
    """Runs trials against one :class:`StreamClient`. ``stop()`` (SIGINT) cancels the requests in
    flight; the trial then returns what it has, marked stopped."""

    client: StreamClient
    on_request: Callable[[RequestRecord], None] | None = None
    stopping: bool = False
    #: Why the server is taken for dead (set by :meth:`watch`; the trial stops issuing requests).
    dead: str | None = None
    _tasks: set = field(default_factory=set)
    _failed_run: int = 0
    _refused_run: int = 0

    def stop(self) -> None:
        self.stopping = True
        for t in list(self._tasks):
            t.cancel()

    def watch_reset(self) -> None:
        """Start a trial with no verdict on the server and no failures counted."""
        self.dead, self._failed_run, self._refused_run = None, 0, 0

    def watch(self, rec: RequestRecord, limit: int) -> None:
        """Count connection failures and timeouts since the server last answered; past
        :data:`DEAD_REFUSED` refusals or ``limit`` failures with no answer between them the server is dead: say why, and cancel
        the requests in flight (each would only wait its timeout)."""
        if rec.error in ("connection", "timeout"):
            self._failed_run += 1
            refused = rec.error == "connection" and (rec.error_detail or "").startswith("ClientConnectorError")
            # A refusal counts until the server answers again: the requests that were in flight when
            # it died end with other connection errors (reset, disconnected) in any order among them.
            self._refused_run += refused
            if self.dead is None and (self._refused_run >= DEAD_REFUSED or self._failed_run >= limit):
                what = (f"{self._refused_run} connections refused with no answer between them"
                        if self._refused_run >= DEAD_REFUSED
                        else f"{self._failed_run} consecutive requests failed (connection or timeout) with no answer between them")
                self.dead = f"{what}; last: {rec.error_detail or rec.error}"
                for t in list(self._tasks):
                    t.cancel()
        elif rec.error not in ("cancelled", "cut"):  # any answer, even an HTTP error, shows the server is there
            # (a cut stream neither: the streams in flight when a server dies are cut, and a
            # server that cuts streams but answers new requests is alive, not dead)
            self._failed_run = self._refused_run = 0

    async def trial(self, spec: LoadSpec, get_prompt: Callable[[int], Prompt], n: int | None,
                    duration_s: float | None, seed: int = 0) -> TrialRun:
        """Run one trial of ``n`` requests (or for ``duration_s`` seconds) at ``spec``: the closed
        loop (:meth:`_closed_loop`) or the open loop (:meth:`_open_loop`), with the event-loop lag,
        CPU time and requests in flight read throughout (:func:`_client_health`)."""
        with frozen_heap():
            return await self._trial(spec, get_prompt, n, duration_s, seed)

    async def _trial(self, spec: LoadSpec, get_prompt: Callable[[int], Prompt], n: int | None,
                     duration_s: float | None, seed: int) -> TrialRun:
        infl = _InFlight()
        lag = LagMonitor()
        lag.start()
        await asyncio.sleep(0)
        cpu0, t0 = process_time(), perf_counter()
        infl.last = t0
        self.watch_reset()
        st = _Trial(self, spec, get_prompt, n, t0, t0 + duration_s if duration_s else None, infl,
                    dead_limit=max(DEAD_FAILED, spec.concurrency or 0))
        if spec.mode == "concurrency":
            target = await self._closed_loop(st)
        else:
            target = await self._open_loop(st, seed)
        t1 = perf_counter()
        cpu = process_time() - cpu0
        await lag.stop()
        infl.change(0)
        health = _client_health(st, lag.lags_ms, cpu, t1, target)
        started = [r for r in st.records if r.start]
        window = (min((r.start for r in started), default=t0), max((r.end for r in started), default=t1))
        return TrialRun(st.records, window, judge_client(health, st.records), stopped=self.stopping, server_dead=self.dead)

    async def _closed_loop(self, st: _Trial) -> int | None:
        """``spec.concurrency`` workers, each sending its next request when the previous one ended
        (the intended send time is that end). Returns the target number in flight."""
        spec, n = st.spec, st.n
        counter = [0]

        async def worker() -> None:
            intended = st.t0
            while True:
                i = counter[0]
                if not st.more(i):
                    if st.issued_end is None:
                        st.issued_end = perf_counter()
                    return
                counter[0] = i + 1
                p = st.get_prompt(i)
                rec = RequestRecord(intended=intended, max_tokens=p.output_tokens, prompt_estimate=p.input_tokens)
                st.records.append(rec)
                await st.one(p, rec)
                st.slips.append((rec.start - rec.intended) * 1e3)
                intended = rec.end

        workers = [asyncio.ensure_future(worker()) for _ in range(spec.concurrency)]
        self._tasks.update(workers)
        try:
            await asyncio.gather(*workers, return_exceptions=True)
        finally:
            self._tasks.difference_update(workers)
        return spec.concurrency if n is None else min(spec.concurrency, n)

    async def _open_loop(self, st: _Trial, seed: int) -> None:
        """Requests sent on an absolute arrival schedule (trace offsets, Poisson or constant gaps
        at ``spec.rate``), optionally capped at ``spec.concurrency`` in flight. An open loop has
        no target in flight (send slip is its health signal): returns None."""
        spec, t0 = st.spec, st.t0
        rng = random.Random(seed)
        sem = asyncio.Semaphore(spec.concurrency) if spec.concurrency else None
        pending: set[asyncio.Task] = set()
        t_next = t0
        i = 0
        while st.more(i):
            delay = t_next - perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
                if self.stopping:
                    break
            st.slips.append(max(0.0, (perf_counter() - t_next) * 1e3))
            if sem is not None:
                await sem.acquire()
            p = st.get_prompt(i)
            rec = RequestRecord(intended=t_next, max_tokens=p.output_tokens, prompt_estimate=p.input_tokens)
            st.records.append(rec)

            async def run(p=p, rec=rec):
                try:
                    await st.one(p, rec)
                finally:
                    if sem is not None:
                        sem.release()

            task = asyncio.ensure_future(run())
            pending.add(task)
            self._tasks.add(task)
            task.add_done_callback(pending.discard)
            task.add_done_callback(self._tasks.discard)
            i += 1
            if spec.offsets is not None:
                t_next = t0 + spec.offsets[min(i, len(spec.offsets) - 1)]
            else:
                t_next += rng.expovariate(spec.rate) if spec.arrival == "poisson" else 1.0 / spec.rate
            if delay <= 0 and i % 64 == 0:
                await asyncio.sleep(0)
        st.issued_end = perf_counter()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        return None


@dataclass
class _Trial:
    """The state of one trial, shared by the closed and the open loop."""

    runner: Runner
    spec: LoadSpec
    get_prompt: Callable[[int], Prompt]
    n: int | None
    t0: float
    deadline: float | None
    infl: _InFlight
    dead_limit: int = DEAD_FAILED
    records: list[RequestRecord] = field(default_factory=list)
    slips: list[float] = field(default_factory=list)
    issued_end: float | None = None

    def more(self, i: int) -> bool:
        """Whether request ``i`` is still to be sent (not stopped, the server not dead, within n, the
        trace, the duration)."""
        if self.runner.stopping or self.runner.dead:
            return False
        if self.n is not None and i >= self.n:
            return False
        if self.spec.offsets is not None and i >= len(self.spec.offsets):
            return False
        if self.deadline is not None and perf_counter() >= self.deadline:
            return False
        return True

    async def one(self, p: Prompt, rec: RequestRecord) -> None:
        """Send one request, counting it in flight while it runs and watching for a dead server."""
        self.infl.change(1)
        try:
            await self.runner.client.request(p, rec)
        finally:
            self.infl.change(-1)
            self.runner.watch(rec, self.dead_limit)
            if self.runner.on_request is not None:
                self.runner.on_request(rec)


def _client_health(st: _Trial, lags_ms: list[float], cpu: float, t1: float, target: int | None) -> ClientHealth:
    """The client's readings over one trial: loop lag, send slip, CPU share and the mean number
    in flight while requests were still being issued (recomputed from the records, exact)."""
    steady_end = st.issued_end or t1
    area = 0.0
    for r in st.records:
        a, b = r.start, min(r.end, steady_end)
        if r.start and b > a:
            area += b - a
    span = max(steady_end - st.t0, 1e-9)
    return ClientHealth(loop_lag_ms=stats(lags_ms), send_slip_ms=stats(st.slips),
                        cpu_frac=cpu / max(t1 - st.t0, 1e-9), mean_in_flight=area / span, issue_s=round(span, 4),
                        max_in_flight=st.infl.peak, target_in_flight=target)


# ----------------------------------------------------------------------------- the sweep


@dataclass
class SweepProgress:
    """Hooks for a progress display: called on the event loop, must be cheap."""

    point_start: Callable[[str, int, int | None], None] = lambda label, trial, total: None
    request_done: Callable[[RequestRecord], None] = lambda rec: None
    point_end: Callable[[PointResult], None] = lambda point: None


def _client_host() -> dict[str, str]:
    import uvloop

    return {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": str(len(__import__("os").sched_getaffinity(0))), "aiohttp": aiohttp.__version__,
            "uvloop": uvloop.__version__}


def default_num_prompts(spec: LoadSpec) -> int:
    """Requests per trial when neither --num-prompts nor --duration is given: enough for every
    slot to turn over several times (4 × concurrency, at least 32), or 30 s of arrivals."""
    if spec.mode == "concurrency":
        return max(32, 4 * spec.concurrency)
    return max(32, int(spec.rate * 30))


def _prompt_source(settings: BenchSettings, salt: str, n: int, tokenizer) -> Callable[[int], Prompt]:
    wl = workloads.parse_dataset(settings.dataset)
    if wl is not None:
        return workloads.prompt_source(wl, settings, salt, n)
    if settings.dataset.startswith("sharegpt:"):
        pool = datasets.sharegpt(settings.dataset.split(":", 1)[1], max(n, 1),
                                 output_len=settings.output_len if settings.output_len else None,
                                 seed=settings.seed, salt=salt)
        return lambda i: pool[i % len(pool)]
    pool = datasets.synthetic(n, settings.input_len, settings.output_len, spread=settings.len_spread,
                              seed=settings.seed, salt=salt, tokenizer=tokenizer)
    extra: dict[int, Prompt] = {}

    def get(i: int) -> Prompt:
        if i < len(pool):
            return pool[i]
        if i not in extra:  # duration mode beyond the pre-generated pool: fresh, still salted
            extra[i] = datasets.synthetic(1, settings.input_len, settings.output_len, spread=settings.len_spread,
                                          seed=settings.seed * 1_000_003 + i, salt=f"{salt}x{i}",
                                          tokenizer=tokenizer)[0]
        return extra[i]

    return get


def _load_specs(settings: BenchSettings, trace) -> tuple[list[LoadSpec], int, int | None]:
    """The sweep's load points, the connection pool size, and the cap on requests in flight of
    an open loop or a trace (``--concurrency`` given with a rate or a trace, else None)."""
    cap = settings.concurrency[0] if settings.concurrency and (settings.request_rate or trace) else None
    if settings.request_rate or settings.search == "rate":
        return [workloads.rate_spec(r, cap, settings, trace) for r in settings.request_rate], cap or 0, cap
    if trace is not None:  # the trace at its own pace (× --time-scale)
        return [workloads.rate_spec(None, cap, settings, trace)], cap or 0, cap
    conns = max(settings.concurrency) if settings.search is None else 0
    return [LoadSpec("concurrency", c) for c in settings.concurrency], conns, cap


@dataclass
class _Sweep:
    """What every point of one sweep shares: settings, the probe's answers, the runner, the
    workload (``wl``, ``trace``), the progress hooks and the samplers."""

    settings: BenchSettings
    info: Any
    extra: dict
    runner: Runner
    progress: SweepProgress
    tokenizer: Any
    wl: Any
    trace: Any
    engine: engine_metrics.EngineScraper | None
    sampler: GPUSampler | None

    async def _scrape(self) -> None:
        """Read the engine's counters (at a trial's edges), off the event loop."""
        if self.engine is not None and self.engine.available:
            await asyncio.get_running_loop().run_in_executor(None, self.engine.scrape)

    async def _trial(self, k: int, t: int, spec: LoadSpec, src: Callable[[int], Prompt], n: int | None) -> TrialRun:
        """Trial ``t`` of point ``k``: multi-turn conversations, the client processes, or this
        event loop's runner."""
        settings, wl = self.settings, self.wl
        if wl is not None and wl.kind == "multi-turn":
            convs = workloads.conversations(max(spec.concurrency or 1, -(-(n or default_num_prompts(spec)) // wl.turns)), wl,
                                            settings.input_len, settings.output_len, seed=settings.seed,
                                            salt=f"{settings.salt}.{k}.{t}.")
            return await workloads.multi_turn_trial(self.runner, wl, convs, spec.concurrency or 1, settings.duration_s)
        if settings.client_procs > 1:
            info = self.info
            args = multiproc.ClientArgs(info.base, info.model, settings.api, settings.stream, self.extra,
                                        tuple(info.length.fields), settings.timeout_s)
            prompts = [src(i) for i in range(n or default_num_prompts(spec))]
            return await multiproc.trial(self.runner, args, spec, prompts, settings.client_procs, settings.duration_s,
                                         settings.seed + 7919 * t + k)
        return await self.runner.trial(spec, src, n, settings.duration_s, seed=settings.seed + 7919 * t + k)

    async def point(self, k: int, spec: LoadSpec) -> PointResult:
        """Point ``k``: a warm-up, then ``settings.trials`` trials of ``spec`` (stopping early when
        the server stops answering), summarised and judged against the failure budget, with
        telemetry, engine counters and workload statistics over the trials' windows."""
        settings, runner, engine = self.settings, self.runner, self.engine
        point = PointResult(mode=spec.mode, concurrency=spec.concurrency, request_rate=spec.rate)
        n = settings.num_prompts if settings.num_prompts else (None if settings.duration_s else default_num_prompts(spec))
        if spec.offsets is not None:
            n = min(n or len(spec.offsets), len(spec.offsets))
        windows = []
        records: list[RequestRecord] = []
        if settings.warmup and not runner.stopping:
            src = _prompt_source(settings, f"{settings.salt}.w{k}.", settings.warmup, self.tokenizer)
            wspec = LoadSpec("concurrency", min(settings.warmup, spec.concurrency or settings.warmup))
            self.progress.point_start(point.label + " warm-up", 0, settings.warmup)
            wt = await runner.trial(wspec, src, settings.warmup, None)
            if wt.server_dead:
                point.error = f"server stopped answering during the warm-up: {wt.server_dead}"
        for t in range(settings.trials):
            if runner.stopping or point.error:
                break
            src = _prompt_source(settings, f"{settings.salt}.{k}.{t}.", n or default_num_prompts(spec), self.tokenizer)
            self.progress.point_start(point.label, t + 1, n)
            await self._scrape()  # counters read at the trial's edges too
            tr = await self._trial(k, t, spec, src, n)
            windows.append(tr.window)
            records += tr.records
            await self._scrape()
            tm = trial_metrics(t + 1, tr.records, window_start=tr.window[0], window_end=tr.window[1],
                               slo=settings.slo, client=tr.health)
            point.trials.append(tm)
            if tr.server_dead:  # stopped early: what was sent is counted, the rest was never sent
                planned = f" of {n}" if n else ""
                point.error = (f"server stopped answering: {tr.server_dead}; trial {t + 1} stopped early after "
                               f"{len(tr.records)}{planned} request(s)")
                break
            if _server_gone(tm):
                point.error = f"server stopped answering: {tm.error_examples[0] if tm.error_examples else 'connection errors'}"
                break
        _finish_point(point, self.sampler, windows, settings.max_error_rate)
        if engine is not None:
            point.engine = engine.summary(windows)
        if self.wl is not None:
            point.workload = workloads.point_stats(self.wl.kind, records, schedule=spec.offsets is not None)
            if self.trace is not None:
                point.workload.scheduled = len(spec.offsets or [])
                point.workload.ideal_hit_rate = workloads.traces.shared_prefix_fraction(self.trace)
        if runner.stopping:
            point.error = point.error or "interrupted (SIGINT/SIGTERM)"
        return point


async def run_sweep(url: str, model: str | None, settings: BenchSettings, *,
                    progress: SweepProgress | None = None, sampler: GPUSampler | None = None,
                    on_partial: Callable[[BenchResult], None] | None = None,
                    tokenizer=None, engine: engine_metrics.EngineScraper | None = None) -> BenchResult:
    """Probe the server, then run every point of the sweep ``settings.trials`` times
    (:meth:`_Sweep.point`), or the points a capacity search (``settings.search``) picks.

    Returns the :class:`BenchResult`; on SIGINT the result holds what was measured and
    ``interrupted=True``; when the server stops answering, ``error`` says so and the sweep ends.
    Raises UserError only before any load (unreachable server, wrong path, bad dataset).
    """
    progress = progress or SweepProgress()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    info = await probe(url, model, settings.api, output_len=settings.output_len, timeout_s=min(settings.timeout_s, 60))
    if not settings.salt:
        settings.salt = secrets.token_hex(4)
    if settings.dataset.startswith("sharegpt:"):  # fail on a bad file before any load
        datasets.sharegpt(settings.dataset.split(":", 1)[1], 1, seed=settings.seed)
    wl = workloads.parse_dataset(settings.dataset)
    trace = workloads.load_trace(wl, settings) if wl is not None else None
    specs, conns, cap = _load_specs(settings, trace)
    result = BenchResult(
        infergap_version=__version__, started_at=started, settings=settings, definitions=DEFINITIONS,
        environment=BenchEnvironment(url=url, endpoint=info.endpoint, model=info.model,
                                     server_versions=info.versions, client_host=_client_host(),
                                     length_control=info.length, probe_requests=info.requests))
    extra = {"stream_options": {"include_usage": True}} if (settings.stream and info.length.stream_options_accepted) else {}
    client = StreamClient(info.base, info.model, settings.api, settings.stream, extra, tuple(info.length.fields),
                          connections=conns, timeout_s=settings.timeout_s, count_tokens=tokenizer)
    runner = Runner(client, on_request=progress.request_done)
    search = None
    if settings.search is not None:
        first = (settings.request_rate or [1.0])[0] if settings.search == "rate" else (settings.concurrency or [1])[0]
        search = slo.Search(settings.search, settings.slo_targets, result.points, start=first,
                            make_spec=(lambda r: workloads.rate_spec(r, cap, settings, trace)) if settings.search == "rate"
                            else (lambda c: LoadSpec("concurrency", int(c))))
        specs = iter(search)
    sweep = _Sweep(settings, info, extra, runner, progress, tokenizer, wl, trace, engine, sampler)
    restore = _stop_on_signals(runner.stop)
    await client.open()
    try:
        for k, spec in enumerate(specs):
            if runner.stopping:
                break
            point = await sweep.point(k, spec)
            result.points.append(point)
            progress.point_end(point)  # a terminal shows it; with -v the log says it too (a piped run was silent for minutes)
            log.info("point %s: %d request(s), %d failed, %d trial(s)%s", point.label, point.requests, point.failed,
                     len(point.trials), f" ({point.error})" if point.error else "")
            if on_partial is not None:
                on_partial(result)
            if point.error and not runner.stopping:
                result.error = f"{point.label}: {point.error}"
                break
    finally:
        await client.close()
        restore()
        if search is not None:  # a search left early (interrupt, dead server) still says where it stood
            search.stopped_by = "interrupted" if runner.stopping else (result.error or "stopped early")
            specs.close()
    result.connections = ConnectionHealth(reused=client.reused, reuse_failures=client.reuse_failures,
                                          retry_failures=client.retry_failures,
                                          fresh_per_request=client.fresh_per_request, note=client.connection_note)
    _explain(result.points)
    warn = prompt_length_warning(result)
    if warn:
        result.warnings.append(warn)
    if search is not None:
        result.capacity = search.result
    result.interrupted = runner.stopping
    result.finished_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return result


def _stop_on_signals(stop: Callable[[], None]) -> Callable[[], None]:
    """Make SIGINT and SIGTERM (``timeout``, ``kill``, a service manager) call ``stop`` on the
    running loop, so a sweep ends with the points it measured reported and recorded; returns the
    function that puts back the handlers in place before (the CLI's). Outside the main thread
    (no signal handlers there) nothing is changed."""
    loop = asyncio.get_running_loop()
    sigs = (signal.SIGINT, signal.SIGTERM)
    before = {s: signal.getsignal(s) for s in sigs}
    try:
        for s in sigs:
            loop.add_signal_handler(s, stop)
    except (NotImplementedError, RuntimeError, ValueError):
        return lambda: None

    def restore() -> None:
        for s in sigs:
            loop.remove_signal_handler(s)
            signal.signal(s, before[s] if before[s] is not None else signal.SIG_DFL)
    return restore


def _explain(points: list[PointResult]) -> None:
    """Attach what explains each point: the knee among the valid points (a knee found in failed
    requests would explain nothing); an invalid point keeps only a full context (KV) as cause."""
    valid = [p for p in points if p.valid]
    for p, ex in zip(valid, engine_metrics.explain(valid)):
        p.explanation = ex
    for p in points:
        if not p.valid and p.trials:
            ex = engine_metrics.cause_of(p)
            p.explanation = ex if ex.cause == "kv" else None


def _server_gone(tm: TrialMetrics) -> bool:
    """Every request of the trial failed on the connection (refused, or its stream cut), with at
    least one refused or reset before any answer: the server is down, stop the sweep."""
    return tm.requests > 0 and tm.completed == 0 and set(tm.errors) <= {"connection", "cut", "cancelled"} \
        and tm.errors.get("connection", 0) > 0


def _finish_point(point: PointResult, sampler: GPUSampler | None, windows, max_error_rate: float) -> None:
    point.summary, point.unstable_metrics = summarize_trials(point.trials)
    judge_point(point, max_error_rate)
    point.unstable = bool(point.unstable_metrics)
    point.client_bound = any(t.client.client_bound for t in point.trials)
    if sampler is not None:
        point.telemetry = sampler.summary(windows)


@contextmanager
def frozen_heap():
    """Move every object alive before a trial (prompts, modules, the connection pool) out of the
    garbage collector's reach until the trial ends (``gc.freeze``), then hand them back.

    A full collection scans every tracked object and stops the event loop meanwhile: before,
    one of about 45 ms during a c=512 trial stalled every stream at once and showed as a
    server-side inter-token gap (largest gap 133 ms against a stub pacing 20 ms; 63 ms with the
    collector off; ``benchmarks/bench_client.py``). Objects made during the trial are still
    collected. No ``gc.collect()`` first: on a large heap it takes hundreds of milliseconds, which
    would delay the trial's start (a trace replay's schedule starts when the trial is called);
    garbage frozen with the rest is freed after the trial."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def install_uvloop() -> None:
    """Use uvloop's event loop when available (a faster loop raises the client's ceiling)."""
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:  # pragma: no cover - uvloop is a dependency
        log.debug("uvloop not available; using asyncio's default loop")


def run(url: str, model: str | None, settings: BenchSettings, **kw) -> BenchResult:
    """Synchronous wrapper of :func:`run_sweep` on uvloop, with GPU telemetry sampled throughout."""
    install_uvloop()
    sampler = kw.pop("sampler", None) or GPUSampler().start()
    engine = kw.pop("engine", None) or engine_metrics.EngineScraper(split_url(url)).start()
    try:
        return asyncio.run(run_sweep(url, model, settings, sampler=sampler, engine=engine, **kw))
    finally:
        sampler.stop()
        engine.stop()

