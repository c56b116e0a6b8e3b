"""A trial spread over several client processes: one event loop per process, a shared start
barrier, the per-request records merged.

One asyncio loop on one core parses every streamed chunk of every request; at high concurrency
that core, not the server, sets the ceiling (and a busy machine lowers it). With ``procs`` worker
processes the load is split: closed loop, the concurrency (worker ``w`` gets ``c // procs``, the
first ``c % procs`` workers one more) and the prompts ``w, w + procs, …``; open loop, the rate
(each worker ``rate / procs`` with its own seed: the sum of independent Poisson streams is a
Poisson stream of the total rate); trace replay, the arrivals ``w, w + procs, …`` at their own
times. Each worker opens its own connections, then waits at a :class:`multiprocessing.Barrier`
so that all start together; ``time.perf_counter`` is the system-wide monotonic clock on Linux,
so the records of all workers share one time base and merge into one trial.

Client health of the merged trial: the worst worker's event-loop lag and send slip, the busiest
worker's CPU share (client-bound is judged per core), requests in flight summed. Everything else
(requests, completed, failed, retried, error kinds, lateness) is computed from the merged records
exactly as for one process; the connection counters of the workers' clients (re-used connections,
retries, a server found closing connections) are added to the parent's client. While the trial
runs, each worker sends a summary of every finished request (error kind, output tokens, retries)
about every :data:`PROGRESS_EVERY_S` so that the live progress advances; Ctrl-C (SIGINT) or the parent
stopping makes every worker stop its trial and send back what it measured.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import signal
from dataclasses import dataclass
from multiprocessing.connection import wait
from time import perf_counter

from infergap.bench.client import StreamClient
from infergap.bench.metrics import RequestRecord, judge_client
from infergap.bench.results import ClientHealth
from infergap.bench.shapes import for_spec
from infergap.bench.trial import LoadSpec, Runner, TrialRun, install_uvloop
from infergap.errors import UserError

JOIN_TIMEOUT_S = 30.0
PROGRESS_EVERY_S = 0.2


@dataclass
class ClientArgs:
    """What a worker needs to build its :class:`~infergap.bench.client.StreamClient`
    (``force_close``: a new connection per request, the server having been seen closing them)."""

    base: str
    model: str
    api: str
    stream: bool
    extra: dict
    length_fields: tuple
    timeout_s: float
    force_close: bool = False


def split(spec: LoadSpec, prompts: list, procs: int, seed: int) -> list[tuple]:
    """The per-worker ``(LoadSpec, prompts, seed)`` of a trial (see the module docstring)."""
    out = []
    for w in range(procs):
        mine = prompts[w::procs]
        cap = None if not spec.concurrency else max(1, spec.concurrency // procs)
        if spec.mode == "concurrency":
            c = spec.concurrency // procs + (1 if w < spec.concurrency % procs else 0)
            if c == 0 or not mine:
                continue
            ws = LoadSpec("concurrency", c)
        elif spec.offsets is not None:
            if not spec.offsets[w::procs]:
                continue
            ws = LoadSpec("rate", cap, spec.rate / procs, "trace", spec.offsets[w::procs])
        else:
            ws = LoadSpec("rate", cap, spec.rate / procs, spec.arrival)
        out.append((ws, mine, seed * 1009 + w))
    return out


def _summary(rec: RequestRecord) -> tuple:
    """What the progress display needs of a finished request: error kind, output tokens, retries."""
    return rec.error, rec.output_tokens()[0], rec.retries


def _child(args: ClientArgs, spec: LoadSpec, prompts: list, seed: int, duration_s: float | None, barrier, stop_ev,
           conn) -> None:
    """Worker process: build the client, wait at the barrier, run the trial, send progress batches
    (``("progress", [summary, …])``) while it runs, then ``("ok", (TrialRun, counts))`` or
    ``("error", line)``. The trial stops when ``stop_ev`` is set or on SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # until the loop's handler stops the trial cleanly
    install_uvloop()
    done: list[tuple] = []

    def flush() -> None:
        if done:
            conn.send(("progress", done[:]))
            done.clear()

    async def ticker(runner) -> None:
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)
            flush()
            if stop_ev.is_set() and not runner.stopping:
                runner.stop()

    async def go():
        c = StreamClient(args.base, args.model, args.api, args.stream, args.extra, args.length_fields,
                         connections=spec.concurrency or 0, timeout_s=args.timeout_s)
        await c.open(force_close=args.force_close)
        c.fresh_per_request = args.force_close
        runner = Runner(c, on_request=lambda rec: done.append(_summary(rec)))
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, runner.stop)
        tick = loop.create_task(ticker(runner))
        try:
            await loop.run_in_executor(None, barrier.wait, JOIN_TIMEOUT_S)
            if stop_ev.is_set():
                runner.stop()
            shape = for_spec(spec, lambda i: prompts[i % len(prompts)], len(prompts) if spec.offsets is None else None, seed)
            tr = await runner.run(shape, duration_s)
            return tr, c.counts()
        finally:
            tick.cancel()
            await c.close()

    try:
        result = asyncio.run(go())
        flush()
        conn.send(("ok", result))
    except BaseException as e:  # every failure goes back to the parent as one line
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


class MultiTrial:
    """One trial over several worker processes (see :func:`run_trial`); :meth:`interrupt` may
    be called from another thread."""

    def __init__(self, args: ClientArgs, spec: LoadSpec, prompts: list, procs: int, duration_s: float | None = None,
                 seed: int = 0, on_progress=None) -> None:
        self.args, self.spec, self.duration_s = args, spec, duration_s
        self.parts = split(spec, prompts, procs, seed)
        if not self.parts:
            raise UserError("--client-procs: nothing to run (no prompts)")
        self.on_progress = on_progress
        self.counts: dict = {"reused": 0, "reuse_failures": 0, "retry_failures": 0, "fresh_per_request": False}
        self.interrupted = False
        self._procs: list = []
        self._stop = None

    def interrupt(self) -> None:
        """Ask every worker to stop its trial and send back what it measured."""
        self.interrupted = True
        if self._stop is not None:
            self._stop.set()

    def run(self) -> TrialRun:
        """Start the workers, collect progress and results; return the merged TrialRun.
        Raises UserError when a worker fails or does not answer within the trial's time
        (after an interruption, the workers that answered make the trial, marked stopped)."""
        ctx = mp.get_context("spawn")  # no fork: the parent has threads (NVML, /metrics sampling)
        barrier = ctx.Barrier(len(self.parts))
        self._stop = ctx.Event()
        if self.interrupted:
            self._stop.set()
        pending: dict = {}
        for ws, mine, sd in self.parts:
            a, b = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_child, args=(self.args, ws, mine, sd, self.duration_s, barrier, self._stop, b), daemon=True)
            p.start()
            b.close()
            pending[a] = p
            self._procs.append(p)
        results, errors = [], []
        limit = self.args.timeout_s + (self.duration_s or 0) + JOIN_TIMEOUT_S + 3600.0 * (self.spec.offsets is not None)
        deadline = perf_counter() + limit
        while pending:
            ready = wait(list(pending), timeout=max(0.0, deadline - perf_counter()))
            if not ready:
                errors += ["no answer"] * len(pending)
                break
            for a in ready:
                try:
                    kind, val = a.recv()
                except (EOFError, OSError):
                    kind, val = "error", f"exited with code {pending[a].exitcode} without a result"
                if kind == "progress":
                    if self.on_progress is not None:
                        self.on_progress(val)
                    continue
                (results if kind == "ok" else errors).append(val)
                del pending[a]
        for p in pending.values():  # a worker that answered is exiting; one that did not is stopped
            p.terminate()
            p.join(timeout=5)
        if errors and not self.interrupted:  # interrupted (Ctrl-C): a worker still starting has nothing to lose
            raise UserError(f"--client-procs: a client process failed ({errors[0]})")
        for _, counts in results:
            self.counts["reused"] += counts["reused"]
            self.counts["reuse_failures"] += counts["reuse_failures"]
            self.counts["retry_failures"] += counts["retry_failures"]
            self.counts["fresh_per_request"] = self.counts["fresh_per_request"] or counts["fresh_per_request"]
        trs = [tr for tr, _ in results]
        records = [r for tr in trs for r in tr.records]
        records.sort(key=lambda r: r.intended)
        if not trs:
            now = perf_counter()
            return TrialRun([], (now, now), merge_health([], self.spec), stopped=True)
        window = (min(tr.window[0] for tr in trs), max(tr.window[1] for tr in trs))
        stopped = self.interrupted or bool(errors) or any(tr.stopped for tr in trs)
        return TrialRun(records, window, merge_health([tr.health for tr in trs], self.spec, records), stopped=stopped)


def merge_health(hs: list[ClientHealth], spec: LoadSpec, records: list[RequestRecord] | None = None) -> ClientHealth:
    """Client health of a trial from its workers' (see the module docstring)."""
    def worst(attr):
        return max((getattr(h, attr) for h in hs), key=lambda s: s.p99 if s.p99 is not None else -1)

    target = spec.concurrency if spec.mode == "concurrency" else None
    if not hs:
        return ClientHealth(target_in_flight=target)
    health = ClientHealth(loop_lag_ms=worst("loop_lag_ms"), send_slip_ms=worst("send_slip_ms"),
                          cpu_frac=max(h.cpu_frac for h in hs), mean_in_flight=sum(h.mean_in_flight for h in hs),
                          max_in_flight=sum(h.max_in_flight for h in hs), target_in_flight=target,
                          issue_s=max((h.issue_s for h in hs if h.issue_s is not None), default=None))
    return judge_client(health, records)


def run_trial(args: ClientArgs, spec: LoadSpec, prompts: list, procs: int, duration_s: float | None = None, seed: int = 0,
              on_progress=None) -> TrialRun:
    """Run one trial over ``procs`` worker processes and return the merged
    :class:`~infergap.bench.trial.TrialRun`. Blocking (call it from a thread when on a loop).
    ``on_progress`` (optional) gets each batch of finished-request summaries ``(error kind or
    None, output tokens, retries)``, on this thread. Raises UserError when a worker fails or does
    not answer within the trial's time."""
    return MultiTrial(args, spec, prompts, procs, duration_s, seed, on_progress).run()


async def trial(runner: Runner, args: ClientArgs, spec: LoadSpec, prompts: list, procs: int, duration_s: float | None = None,
                seed: int = 0) -> TrialRun:
    """:func:`run_trial` from a running sweep: ``runner.on_request`` advances the progress with
    each finished request (a record holding its error kind, output tokens and retries), the
    connection counters are added to ``runner.client``'s, and ``runner.stop()`` interrupts the
    workers, whose measured requests are kept (the trial is marked stopped)."""
    loop = asyncio.get_running_loop()
    on_request = runner.on_request

    def deliver(batch: list) -> None:
        for err, n, retries in batch:
            on_request(RequestRecord(intended=0.0, error=err, usage_completion=n, retries=retries))

    on_progress = None if on_request is None else (lambda batch: loop.call_soon_threadsafe(deliver, batch))
    args.force_close = args.force_close or runner.client.fresh_per_request
    mt = MultiTrial(args, spec, prompts, procs, duration_s, seed, on_progress)
    fut = loop.run_in_executor(None, mt.run)
    while not fut.done():
        await asyncio.wait({fut}, timeout=PROGRESS_EVERY_S)
        if runner.stopping and not mt.interrupted:
            mt.interrupt()
    tr = fut.result()
    runner.client.add_counts(mt.counts)
    return tr


def cores() -> int:
    """CPUs this process may run on."""
    return len(os.sched_getaffinity(0))
