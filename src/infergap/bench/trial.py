"""One trial, whatever its load shape: the record every shape returns (:class:`TrialRun`), the
client's self-monitoring while it runs, and the watch for a server that stopped answering.

A *load shape* (:mod:`infergap.bench.shapes`) says only how the requests of one trial are issued:
it subclasses :class:`Shape` and implements :meth:`Shape.drive`. :meth:`Runner.run` does the rest
for every shape alike: the event-loop lag monitor (:class:`LagMonitor`), CPU time, requests in
flight, the dead-server watch (:meth:`Runner.watch`, :data:`DEAD_REFUSED`, :data:`DEAD_FAILED`),
the measured window, the client's health judged (:func:`~infergap.bench.metrics.judge_client`),
and the garbage collector kept off the heap that existed before the trial (:func:`frozen_heap`).
"""

from __future__ import annotations

import asyncio
import gc
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from time import perf_counter, process_time
from typing import Callable, Iterable

import uvloop

from infergap.bench.client import StreamClient
from infergap.bench.datasets import Prompt
from infergap.bench.metrics import RequestRecord, judge_client, stats
from infergap.bench.results import ClientHealth

log = logging.getLogger(__name__)

LAG_TICK_S = 0.010

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
class LoadSpec:
    """One load point: closed loop at ``concurrency``, or open loop at ``rate`` req/s (optionally
    capped at ``concurrency`` in flight). ``mode`` is the point's ``mode`` in the result
    (``concurrency`` or ``rate``)."""

    mode: str
    concurrency: int | None = None
    rate: float | None = None
    arrival: str = "poisson"
    offsets: list[float] | None = None
    """Trace replay: the arrival time of request ``i`` is ``t0 + offsets[i]`` (seconds); the trial
    ends after ``len(offsets)`` requests."""


@dataclass
class TrialRun:
    """The record of one trial, the same for every load shape: the requests (in send order), the
    measured window ``(first send, last response byte)`` on ``perf_counter``'s clock, and the
    client's health readings; ``stopped`` when it was interrupted, ``server_dead`` says why the
    trial stopped early when the server stopped answering (None otherwise)."""

    records: list[RequestRecord]
    window: tuple[float, float]
    health: ClientHealth
    stopped: bool = False
    server_dead: str | None = None


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
class InFlight:
    """Requests in flight: the current number and the largest seen."""

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
class TrialState:
    """What a shape's :meth:`Shape.drive` works with during one trial: the runner, the request
    budget (``limit`` requests at most, None for no count), the start ``t0`` and the ``deadline``
    (``perf_counter`` seconds, None without a duration), and what it fills: the records in send
    order, the send slips (ms) and when it stopped issuing (``issued_end``)."""

    runner: Runner
    limit: int | None
    t0: float
    deadline: float | None
    infl: InFlight
    dead_limit: int = DEAD_FAILED
    records: list[RequestRecord] = field(default_factory=list)
    slips: list[float] = field(default_factory=list)
    issued_end: float | None = None

    def halted(self) -> bool:
        """The trial is over before its budget: stopped (SIGINT), the server dead, or the duration spent."""
        r = self.runner
        return r.stopping or r.dead is not None or (self.deadline is not None and perf_counter() >= self.deadline)

    def more(self, i: int) -> bool:
        """Whether request ``i`` is still to be sent (not halted, within the budget)."""
        return not (self.limit is not None and i >= self.limit) and not self.halted()

    def record(self, p: Prompt, intended: float, **kw) -> RequestRecord:
        """A new request's record (intended send time ``intended``), kept in send order."""
        rec = RequestRecord(intended=intended, max_tokens=p.output_tokens, prompt_estimate=p.input_tokens, **kw)
        self.records.append(rec)
        return rec

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


class Shape:
    """A load shape: how the requests of one trial are issued (:mod:`infergap.bench.shapes`).

    A subclass sets ``concurrency`` (what it keeps in flight, or None: the dead-server watch
    allows at least that many failures in a row) and ``limit`` (requests at most, or None) and
    implements :meth:`drive`; it may replace :meth:`health` when its own notion of "in flight"
    differs (conversations)."""

    concurrency: int | None
    limit: int | None

    async def drive(self, st: TrialState) -> int | None:
        """Issue the trial's requests through ``st`` (:meth:`TrialState.record`,
        :meth:`TrialState.one`) until :meth:`TrialState.more` says no, registering every task it
        creates with :meth:`Runner.tracking` so that ``stop()`` cancels it; return the number it
        meant to keep in flight (None for an open loop)."""
        raise NotImplementedError

    def health(self, st: TrialState, lags_ms: list[float], cpu: float, t1: float, target: int | None) -> ClientHealth:
        """The client's readings over the trial (default: :func:`client_health`)."""
        return client_health(st, lags_ms, cpu, t1, target)


def client_health(st: TrialState, lags_ms: list[float], cpu: float, t1: float, target: int | None) -> ClientHealth:
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


@dataclass
class Runner:
    """Runs trials against one :class:`StreamClient`, one :class:`Shape` at a time
    (:meth:`run`). ``stop()`` (SIGINT) cancels the requests in flight; the trial then returns what
    it has, marked stopped."""

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

    @contextmanager
    def tracking(self, tasks: Iterable[asyncio.Future]):
        """Let :meth:`stop` (and a dead server) cancel ``tasks`` while the block runs."""
        tasks = set(tasks)
        self._tasks.update(tasks)
        try:
            yield
        finally:
            self._tasks.difference_update(tasks)

    def track(self, task: asyncio.Future) -> None:
        """Let :meth:`stop` cancel ``task`` until it is done."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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

    async def run(self, shape: Shape, duration_s: float | None = None) -> TrialRun:
        """Run one trial of ``shape`` (for ``duration_s`` seconds at most when given), with the
        event-loop lag, CPU time and requests in flight read throughout; returns its
        :class:`TrialRun`. A dead server or ``stop()`` ends it early (``server_dead``, ``stopped``)."""
        with frozen_heap():
            return await self._run(shape, duration_s)

    async def _run(self, shape: Shape, duration_s: float | None) -> TrialRun:
        infl = InFlight()
        lag = LagMonitor()
        lag.start()
        await asyncio.sleep(0)
        cpu0, t0 = process_time(), perf_counter()
        infl.last = t0
        self.watch_reset()
        st = TrialState(self, shape.limit, t0, t0 + duration_s if duration_s else None, infl,
                        dead_limit=max(DEAD_FAILED, shape.concurrency or 0))
        target = await shape.drive(st)
        t1 = perf_counter()
        cpu = process_time() - cpu0
        await lag.stop()
        infl.change(0)
        health = shape.health(st, lag.lags_ms, cpu, t1, target)
        started = [r for r in st.records if r.start]
        window = (min((r.start for r in started), default=t0), max((r.end for r in started), default=t1))
        return TrialRun(st.records, window, judge_client(health, st.records), stopped=self.stopping, server_dead=self.dead)


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
    """Use uvloop's event loop (a faster loop raises the client's ceiling)."""
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
