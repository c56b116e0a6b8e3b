"""Open loop and trace replay: requests sent on an absolute arrival schedule drawn up front
(``t0 + Σ gaps``; Poisson: exponential gaps, constant: 1/rate; a trace: its own offsets), so a
late dispatcher does not shift later arrivals. The intended send time is the scheduled arrival,
and waiting for a concurrency cap counts in the latency measured from it (coordinated omission
stays visible)."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from time import perf_counter
from typing import Callable

from infergap.bench.datasets import Prompt
from infergap.bench.trial import LoadSpec, Shape, TrialState


@dataclass
class OpenLoop(Shape):
    """Arrivals at ``spec.rate`` req/s (``spec.arrival``: ``poisson`` or ``constant``, seeded by
    ``seed``) or at ``spec.offsets`` (trace replay), at most ``spec.concurrency`` in flight when
    given; ``n`` requests at most (a trace: at most its length). No target in flight: send slip is
    an open loop's health signal."""

    spec: LoadSpec
    get_prompt: Callable[[int], Prompt]
    n: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        self.concurrency = self.spec.concurrency
        offsets = self.spec.offsets
        self.limit = self.n if offsets is None else (len(offsets) if self.n is None else min(self.n, len(offsets)))

    async def drive(self, st: TrialState) -> None:
        spec, t0 = self.spec, st.t0
        rng = random.Random(self.seed)
        sem = asyncio.Semaphore(spec.concurrency) if spec.concurrency else None
        pending: set[asyncio.Task] = set()
        t_next = t0
        i = 0
        while st.more(i):
            delay = t_next - perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
                if st.runner.stopping:
                    break
            st.slips.append(max(0.0, (perf_counter() - t_next) * 1e3))
            if sem is not None:
                await sem.acquire()
            p = self.get_prompt(i)
            rec = st.record(p, t_next)

            async def run(p=p, rec=rec):
                try:
                    await st.one(p, rec)
                finally:
                    if sem is not None:
                        sem.release()

            task = asyncio.ensure_future(run())
            pending.add(task)
            st.runner.track(task)
            task.add_done_callback(pending.discard)
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
