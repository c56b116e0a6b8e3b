"""Closed loop: ``concurrency`` workers, each sending its next request as soon as the previous one
ended. The *intended* send time of a request is the moment its slot freed, so the worker's own
delay shows as send slip (ms, not clamped: a negative slip is the clock's resolution)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from time import perf_counter
from typing import Callable

from infergap.bench.datasets import Prompt
from infergap.bench.trial import Shape, TrialState


@dataclass
class ClosedLoop(Shape):
    """``concurrency`` workers over prompts ``get_prompt(0), get_prompt(1), …``; ``limit``
    requests at most (None: until the duration ends). The target in flight is
    ``min(concurrency, limit)``."""

    concurrency: int
    get_prompt: Callable[[int], Prompt]
    limit: int | None = None

    async def drive(self, st: TrialState) -> int:
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
                p = self.get_prompt(i)
                rec = st.record(p, intended)
                await st.one(p, rec)
                st.slips.append((rec.start - rec.intended) * 1e3)
                intended = rec.end

        workers = [asyncio.ensure_future(worker()) for _ in range(self.concurrency)]
        with st.runner.tracking(workers):
            await asyncio.gather(*workers, return_exceptions=True)
        return self.concurrency if self.limit is None else min(self.concurrency, self.limit)
