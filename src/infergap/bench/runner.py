"""The sweep: the load points of the settings (or those a capacity search picks), each a warm-up
and ``settings.trials`` trials of one load shape (:mod:`infergap.bench.shapes`), with GPU
telemetry and engine counters over the trials' windows, interruption and a dead server handled.

Entry points: :func:`run` (synchronous, with telemetry) and :func:`run_sweep` (on a running
loop) → :class:`~infergap.bench.results.BenchResult`; :func:`run_trial` → one trial of one point
as a :class:`~infergap.bench.results.PointResult`, the unit the A/B interleaving of
:mod:`infergap.bench.shapes.interleave` alternates.
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import secrets
import signal
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Iterable

import aiohttp
import uvloop

from infergap import __version__
from infergap.bench import datasets, engine_metrics, multiproc, slo, traces, workloads
from infergap.bench.client import ServerInfo, StreamClient, probe, split_url
from infergap.bench.datasets import Prompt
from infergap.bench.metrics import DEFINITIONS, RequestRecord, prompt_length_warning, settle_point, trial_metrics
from infergap.bench.results import BenchEnvironment, BenchResult, BenchSettings, ConnectionHealth, PointResult, TrialMetrics
from infergap.bench.server_tokens import server_tokenizer
from infergap.bench.shapes import MultiTurn, Shape, for_spec
from infergap.bench.telemetry import GPUSampler
from infergap.bench.trial import LoadSpec, Runner, TrialRun, install_uvloop
# Kept importable from here for callers of the sweep's former home (they moved to bench.trial).
from infergap.bench.trial import DEAD_FAILED as DEAD_FAILED
from infergap.bench.trial import DEAD_REFUSED as DEAD_REFUSED
from infergap.bench.trial import LagMonitor as LagMonitor
from infergap.bench.trial import frozen_heap as frozen_heap
from infergap.bench.workload_spec import DatasetSpec

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------- the sweep


@dataclass
class SweepProgress:
    """Hooks for a progress display: called on the event loop, must be cheap."""

    point_start: Callable[[str, int, int | None], None] = lambda label, trial, total: None
    request_done: Callable[[RequestRecord], None] = lambda rec: None
    point_end: Callable[[PointResult], None] = lambda point: None


def _client_host() -> dict[str, str]:
    return {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": str(len(os.sched_getaffinity(0))), "aiohttp": aiohttp.__version__,
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


def rate_spec(rate: float | None, cap: int | None, settings: BenchSettings,
              trace: list[traces.TraceRequest] | None) -> LoadSpec:
    """The open-loop load spec of one rate point. With a trace: the trace's arrival offsets,
    rescaled so that the mean rate is ``rate`` (``None``: the trace's own pace)."""
    if trace is None:
        return LoadSpec("rate", cap, rate, settings.arrival)
    offsets = traces.rescale_to_rate(trace, rate) if rate else [r.offset_s for r in trace]
    native = traces.mean_rate(trace)
    eff = rate or (native if native else float(len(trace)))
    return LoadSpec("rate", cap, round(eff, 4), "trace", offsets)



def _load_specs(settings: BenchSettings, trace: list[traces.TraceRequest] | None) -> tuple[list[LoadSpec], int, int | None]:
    """The sweep's load points, the connection pool size, and the cap on requests in flight of
    an open loop or a trace (``--concurrency`` given with a rate or a trace, else None)."""
    cap = settings.concurrency[0] if settings.concurrency and (settings.request_rate or trace) else None
    if settings.request_rate or settings.search == "rate":
        return [rate_spec(r, cap, settings, trace) for r in settings.request_rate], cap or 0, cap
    if trace is not None:  # the trace at its own pace (× --time-scale)
        return [rate_spec(None, cap, settings, trace)], cap or 0, cap
    conns = max(settings.concurrency) if settings.search is None else 0
    return [LoadSpec("concurrency", c) for c in settings.concurrency], conns, cap


@dataclass
class _Sweep:
    """What every point of one sweep shares: settings, the probe's answers, the runner, the
    workload (``wl``, ``trace``), the progress hooks and the samplers."""

    settings: BenchSettings
    info: ServerInfo
    extra: dict
    runner: Runner
    progress: SweepProgress
    tokenizer: Callable[[str], int] | None
    wl: DatasetSpec | None
    trace: list[traces.TraceRequest] | None
    engine: engine_metrics.EngineScraper | None
    sampler: GPUSampler | None

    async def _scrape(self) -> None:
        """Read the engine's counters (at a trial's edges), off the event loop."""
        if self.engine is not None and self.engine.available:
            await asyncio.get_running_loop().run_in_executor(None, self.engine.scrape)

    def _shape(self, k: int, t: int, spec: LoadSpec, src: Callable[[int], Prompt], n: int | None) -> Shape:
        """The load shape of trial ``t`` of point ``k``: multi-turn conversations, or the point's
        closed or open loop (:func:`~infergap.bench.shapes.for_spec`)."""
        settings, wl = self.settings, self.wl
        if wl is not None and wl.kind == "multi-turn":
            convs = workloads.conversations(max(spec.concurrency or 1, -(-(n or default_num_prompts(spec)) // wl.turns)), wl,
                                            settings.input_len, settings.output_len, seed=settings.seed,
                                            salt=f"{settings.salt}.{k}.{t}.")
            return MultiTurn(convs, spec.concurrency or 1, wl.think_s)
        return for_spec(spec, src, n, seed=settings.seed + 7919 * t + k)

    async def _trial(self, k: int, t: int, spec: LoadSpec, src: Callable[[int], Prompt], n: int | None) -> TrialRun:
        """Trial ``t`` of point ``k``: its shape on this event loop's runner, or over the client
        processes (``--client-procs``)."""
        settings = self.settings
        shape = self._shape(k, t, spec, src, n)
        if settings.client_procs > 1 and not isinstance(shape, MultiTurn):
            info = self.info
            args = multiproc.ClientArgs(info.base, info.model, settings.api, settings.stream, self.extra,
                                        tuple(info.length.fields), settings.timeout_s)
            prompts = [src(i) for i in range(n or default_num_prompts(spec))]
            return await multiproc.trial(self.runner, args, spec, prompts, settings.client_procs, settings.duration_s,
                                         settings.seed + 7919 * t + k)
        return await self.runner.run(shape, settings.duration_s)

    def _budget(self, spec: LoadSpec) -> int | None:
        """Requests per trial of ``spec``: ``--num-prompts``, none with ``--duration``, else
        :func:`default_num_prompts`; a trace's length at most."""
        settings = self.settings
        n = settings.num_prompts if settings.num_prompts else (None if settings.duration_s else default_num_prompts(spec))
        if spec.offsets is not None:
            n = min(n or len(spec.offsets), len(spec.offsets))
        return n

    async def _warm_up(self, k: int, spec: LoadSpec, point: PointResult) -> None:
        """``settings.warmup`` unmeasured requests in a closed loop before point ``k``;
        ``point.error`` says so when the server stopped answering meanwhile."""
        settings = self.settings
        if not settings.warmup or self.runner.stopping:
            return
        src = _prompt_source(settings, f"{settings.salt}.w{k}.", settings.warmup, self.tokenizer)
        self.progress.point_start(point.label + " warm-up", 0, settings.warmup)
        wt = await self.runner.run(for_spec(LoadSpec("concurrency", min(settings.warmup, spec.concurrency or settings.warmup)),
                                            src, settings.warmup), None)
        if wt.server_dead:
            point.error = f"server stopped answering during the warm-up: {wt.server_dead}"

    async def _measure(self, k: int, t: int, spec: LoadSpec, n: int | None, point: PointResult,
                       seen: tuple[list, list[RequestRecord]]) -> None:
        """Trial ``t`` of point ``k`` added to ``point`` (its window and records to ``seen``);
        ``point.error`` set when the server stopped answering (what was sent is counted, the rest
        was never sent)."""
        settings = self.settings
        src = _prompt_source(settings, f"{settings.salt}.{k}.{t}.", n or default_num_prompts(spec), self.tokenizer)
        self.progress.point_start(point.label, t + 1, n)
        await self._scrape()  # counters read at the trial's edges too
        tr = await self._trial(k, t, spec, src, n)
        seen[0].append(tr.window)
        seen[1].extend(tr.records)
        await self._scrape()
        tm = trial_metrics(t + 1, tr.records, window_start=tr.window[0], window_end=tr.window[1],
                           slo=settings.slo, client=tr.health)
        point.trials.append(tm)
        if tr.server_dead:
            planned = f" of {n}" if n else ""
            point.error = (f"server stopped answering: {tr.server_dead}; trial {t + 1} stopped early after "
                           f"{len(tr.records)}{planned} request(s)")
        elif _server_gone(tm):
            point.error = f"server stopped answering: {tm.error_examples[0] if tm.error_examples else 'connection errors'}"

    async def point(self, k: int, spec: LoadSpec, trials: Iterable[int] | None = None) -> PointResult:
        """Point ``k``: a warm-up, then trials ``trials`` (default: all ``settings.trials``) of
        ``spec`` (stopping early when the server stops answering), summarised and judged against
        the failure budget, with telemetry, engine counters and workload statistics over the
        trials' windows."""
        settings, runner = self.settings, self.runner
        point = PointResult(mode=spec.mode, concurrency=spec.concurrency, request_rate=spec.rate)
        n = self._budget(spec)
        seen: tuple[list, list[RequestRecord]] = ([], [])
        await self._warm_up(k, spec, point)
        for t in range(settings.trials) if trials is None else trials:
            if runner.stopping or point.error:
                break
            await self._measure(k, t, spec, n, point, seen)
        self._finish(point, spec, *seen)
        return point

    def _finish(self, point: PointResult, spec: LoadSpec, windows: list, records: list[RequestRecord]) -> None:
        """The point's summary and validity (:func:`~infergap.bench.metrics.settle_point`), its
        telemetry, engine counters and workload statistics over ``windows``."""
        settle_point(point, self.settings.max_error_rate)
        if self.sampler is not None:
            point.telemetry = self.sampler.summary(windows)
        if self.engine is not None:
            point.engine = self.engine.summary(windows)
        if self.wl is not None:
            point.workload = workloads.point_stats(self.wl.kind, records, schedule=spec.offsets is not None)
            if self.trace is not None:
                point.workload.scheduled = len(spec.offsets or [])
                point.workload.ideal_hit_rate = traces.shared_prefix_fraction(self.trace)
        if self.runner.stopping:
            point.error = point.error or "interrupted (SIGINT/SIGTERM)"


async def _open_sweep(url: str, model: str | None, settings: BenchSettings, progress: SweepProgress,
                      sampler: GPUSampler | None, tokenizer: Callable[[str], int] | None,
                      engine: engine_metrics.EngineScraper | None) -> tuple[_Sweep, BenchResult, list[LoadSpec], int | None]:
    """Probe the server and set up a sweep: the shared state, the result to fill, the load points
    and the open loop's cap. Raises UserError before any load (unreachable server, wrong path, a
    bad dataset or trace file)."""
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
    sizing = _prompt_sizer(info, settings, tokenizer, result)
    return _Sweep(settings, info, extra, runner, progress, sizing, wl, trace, engine, sampler), result, specs, cap


def _prompt_sizer(info: ServerInfo, settings: BenchSettings, tokenizer: Callable[[str], int] | None,
                  result: BenchResult) -> Callable[[str], int] | None:
    """What sizes the synthetic prompts: ``tokenizer`` (``--tokenizer``) when given, else the
    server's own ``/tokenize`` (:mod:`infergap.bench.server_tokens`: llama-server, vLLM), else
    none — words, about one token each, which the result's warnings then say (a byte-level
    vocabulary made 64 'tokens' 382). Only the prompts are sized with the server: counting the
    replies with it would add requests to the load being measured."""
    if settings.dataset != "random":
        return tokenizer
    if tokenizer is not None:
        result.environment.prompt_sizing = "--tokenizer"
        return tokenizer
    tok = server_tokenizer(info.base, info.model)
    if tok is not None:
        result.environment.prompt_sizing = f"server /tokenize ({tok.name})"
        return tok
    result.environment.prompt_sizing = "words"
    result.warnings.append("prompt lengths estimated as one token per word: the server has no /tokenize and no "
                           "--tokenizer was given (the server's own counts are compared after the run)")
    return None


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
    sweep, result, specs, cap = await _open_sweep(url, model, settings, progress, sampler, tokenizer, engine)
    runner, client = sweep.runner, sweep.runner.client
    search = None
    if settings.search is not None:
        first = (settings.request_rate or [1.0])[0] if settings.search == "rate" else (settings.concurrency or [1])[0]
        search = slo.Search(settings.search, settings.slo_targets, result.points, start=first,
                            make_spec=(lambda r: rate_spec(r, cap, settings, sweep.trace)) if settings.search == "rate"
                            else (lambda c: LoadSpec("concurrency", int(c))))
        specs = iter(search)
    restore = _stop_on_signals(runner.stop)
    await client.open()
    try:
        await _points(sweep, result, specs, on_partial)
    finally:
        await client.close()
        restore()
        if search is not None:  # a search left early (interrupt, dead server) still says where it stood
            search.stopped_by = "interrupted" if runner.stopping else (result.error or "stopped early")
            specs.close()
    _conclude(result, client, runner.stopping, search)
    return result


async def _points(sweep: _Sweep, result: BenchResult, specs: Iterable[LoadSpec],
                  on_partial: Callable[[BenchResult], None] | None) -> None:
    """Run the points one after another into ``result``; stop at an interruption or a point whose
    server stopped answering (``result.error``)."""
    runner = sweep.runner
    for k, spec in enumerate(specs):
        if runner.stopping:
            break
        point = await sweep.point(k, spec)
        result.points.append(point)
        sweep.progress.point_end(point)  # a terminal shows it; with -v the log says it too (a piped run was silent for minutes)
        log.info("point %s: %d request(s), %d failed, %d trial(s)%s", point.label, point.requests, point.failed,
                 len(point.trials), f" ({point.error})" if point.error else "")
        if on_partial is not None:
            on_partial(result)
        if point.error and not runner.stopping:
            result.error = f"{point.label}: {point.error}"
            break


def _conclude(result: BenchResult, client: StreamClient, interrupted: bool, search: slo.Search | None) -> None:
    """What a finished sweep adds to its result: the connections' health, each point's
    explanation, the prompt-length warning, the capacity found, the end time."""
    result.connections = ConnectionHealth(reused=client.reused, reuse_failures=client.reuse_failures,
                                          retry_failures=client.retry_failures,
                                          fresh_per_request=client.fresh_per_request, note=client.connection_note)
    _explain(result.points)
    warn = prompt_length_warning(result)
    if warn:
        result.warnings.append(warn)
    if search is not None:
        result.capacity = search.result
    result.interrupted = interrupted
    result.finished_at = datetime.now(timezone.utc).isoformat(timespec="seconds")


async def trial_once(url: str, model: str | None, settings: BenchSettings, *, trial: int = 0, point: int = 0,
                     progress: SweepProgress | None = None, sampler: GPUSampler | None = None,
                     tokenizer=None, engine: engine_metrics.EngineScraper | None = None) -> PointResult:
    """:func:`run_trial` on a running event loop (no telemetry of its own: pass ``sampler`` and
    ``engine`` to have them)."""
    progress = progress or SweepProgress()
    sweep, _, specs, _ = await _open_sweep(url, model, settings, progress, sampler, tokenizer, engine)
    if not 0 <= point < len(specs):
        raise ValueError(f"run_trial: point {point} is not among the settings' {len(specs)} load point(s)")
    restore = _stop_on_signals(sweep.runner.stop)
    await sweep.runner.client.open()
    try:
        p = await sweep.point(point, specs[point], trials=[trial])
    finally:
        await sweep.runner.client.close()
        restore()
    _explain([p])
    return p


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


def run(url: str, model: str | None, settings: BenchSettings, **kw) -> BenchResult:
    """Synchronous wrapper of :func:`run_sweep` on uvloop, with GPU telemetry sampled throughout."""
    return _with_telemetry(url, kw, lambda **k: run_sweep(url, model, settings, **k))


def run_trial(url: str, model: str | None, settings: BenchSettings, *, trial: int = 0, point: int = 0, **kw) -> PointResult:
    """One trial of one load point against the server at ``url``: the warm-up, then trial number
    ``trial`` (0-based; it picks the prompts' salt and an open loop's arrival seed exactly as
    trial ``trial`` of a sweep) of point ``point`` (0-based, among the points ``settings`` makes:
    ``settings.concurrency`` levels, ``request_rate`` rates, or the trace) — synchronous, with GPU
    telemetry and engine counters over its window, like :func:`run`.

    Returns a :class:`PointResult` holding that one trial (``trials[0].trial == trial + 1``), its
    summary, validity, telemetry, engine counters, workload statistics and explanation; ``error``
    says when the server stopped answering or the run was interrupted. The unit the A/B
    interleaving alternates (:func:`infergap.bench.shapes.interleave.interleave`); the prompts'
    salt is ``settings.salt``, drawn once and kept on ``settings`` when empty, so that every call
    with the same settings object draws from one run's prompts. Keyword arguments as
    :func:`run_sweep` (``progress``, ``tokenizer``, ``sampler``, ``engine``) but ``on_partial``.
    Raises UserError before any load (unreachable server, bad dataset), ValueError for a
    ``point`` the settings do not make. A capacity search (``settings.search``) has no fixed
    points: give its rates or levels as ``request_rate`` / ``concurrency`` instead."""
    return _with_telemetry(url, kw, lambda **k: trial_once(url, model, settings, trial=trial, point=point, **k))


def _with_telemetry(url: str, kw: dict, start: Callable[..., Awaitable]) -> Any:
    """Run ``start(**kw)`` on uvloop with the GPU sampler and the engine scraper (those in ``kw``,
    else new ones) running throughout, stopped after."""
    install_uvloop()
    sampler = kw.pop("sampler", None) or GPUSampler().start()
    engine = kw.pop("engine", None) or engine_metrics.EngineScraper(split_url(url)).start()
    try:
        return asyncio.run(start(sampler=sampler, engine=engine, **kw))
    finally:
        sampler.stop()
        engine.stop()
