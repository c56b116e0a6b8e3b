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
worker's CPU share (client-bound is judged per core), requests in flight summed.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
from dataclasses import dataclass

from infergap.errors import UserError

JOIN_TIMEOUT_S = 30.0


@dataclass
class ClientArgs:
    """What a worker needs to build its :class:`~infergap.bench.client.StreamClient`."""

    base: str
    model: str
    api: str
    stream: bool
    extra: dict
    length_fields: tuple
    timeout_s: float


def split(spec, prompts: list, procs: int, seed: int) -> list[tuple]:
    """The per-worker ``(LoadSpec, prompts, seed)`` of a trial (see the module docstring)."""
    from infergap.bench.runner import LoadSpec

    out = []
    for w in range(procs):
        mine = prompts[w::procs]
        if spec.mode == "concurrency":
            c = spec.concurrency // procs + (1 if w < spec.concurrency % procs else 0)
            if c == 0 or not mine:
                continue
            ws = LoadSpec("concurrency", c)
        elif spec.offsets is not None:
            ws = LoadSpec("rate", None, spec.rate / procs, "trace", spec.offsets[w::procs])
        else:
            cap = None if not spec.concurrency else max(1, spec.concurrency // procs)
            ws = LoadSpec("rate", cap, spec.rate / procs, spec.arrival)
        out.append((ws, mine, seed * 1009 + w))
    return out


def _child(args: ClientArgs, spec, prompts: list, seed: int, duration_s: float | None, barrier, conn) -> None:
    """Worker process: build the client, wait at the barrier, run the trial, send the records."""
    from infergap.bench.client import StreamClient
    from infergap.bench.runner import Runner, install_uvloop

    install_uvloop()

    async def go():
        c = StreamClient(args.base, args.model, args.api, args.stream, args.extra, args.length_fields,
                         connections=spec.concurrency or 0, timeout_s=args.timeout_s)
        await c.open()
        try:
            await asyncio.get_running_loop().run_in_executor(None, barrier.wait, JOIN_TIMEOUT_S)
            return await Runner(c).trial(spec, lambda i: prompts[i % len(prompts)], len(prompts) if spec.offsets is None else None,
                                         duration_s, seed=seed)
        finally:
            await c.close()

    try:
        tr = asyncio.run(go())
        conn.send(("ok", tr))
    except BaseException as e:  # every failure goes back to the parent as one line
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def run_trial(args: ClientArgs, spec, prompts: list, procs: int, duration_s: float | None = None, seed: int = 0):
    """Run one trial over ``procs`` worker processes and return the merged
    :class:`~infergap.bench.runner.TrialRun`. Blocking (call it from a thread when on a loop).
    Raises UserError when a worker fails or does not answer within the trial's time."""
    from infergap.bench.metrics import judge_client
    from infergap.bench.models import ClientHealth
    from infergap.bench.runner import TrialRun

    parts = split(spec, prompts, procs, seed)
    if not parts:
        raise UserError("--client-procs: nothing to run (no prompts)")
    ctx = mp.get_context("spawn")  # no fork: the parent has threads (NVML, /metrics sampling)
    barrier = ctx.Barrier(len(parts))
    pipes, procs_ = [], []
    for ws, mine, sd in parts:
        a, b = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_child, args=(args, ws, mine, sd, duration_s, barrier, b), daemon=True)
        p.start()
        b.close()
        pipes.append(a)
        procs_.append(p)
    results, errors = [], []
    limit = args.timeout_s + (duration_s or 0) + JOIN_TIMEOUT_S + 3600.0 * (spec.offsets is not None)
    for a, p in zip(pipes, procs_):
        if a.poll(limit):
            kind, val = a.recv()
            (results if kind == "ok" else errors).append(val)
        else:
            errors.append("no answer")
        p.join(timeout=5)
        if p.is_alive():
            p.terminate()
    if errors:
        raise UserError(f"--client-procs: a client process failed ({errors[0]})")
    records = [r for tr in results for r in tr.records]
    records.sort(key=lambda r: r.intended)
    hs = [tr.health for tr in results]

    def worst(attr):
        return max((getattr(h, attr) for h in hs), key=lambda s: s.p99 if s.p99 is not None else -1)

    target = spec.concurrency if spec.mode == "concurrency" else None
    health = ClientHealth(loop_lag_ms=worst("loop_lag_ms"), send_slip_ms=worst("send_slip_ms"),
                          cpu_frac=max(h.cpu_frac for h in hs), mean_in_flight=sum(h.mean_in_flight for h in hs),
                          max_in_flight=sum(h.max_in_flight for h in hs), target_in_flight=target)
    window = (min(tr.window[0] for tr in results), max(tr.window[1] for tr in results))
    return TrialRun(records, window, judge_client(health), stopped=any(tr.stopped for tr in results))


def cores() -> int:
    """CPUs this process may run on."""
    return len(os.sched_getaffinity(0))
