"""Multi-turn conversations: a closed loop over conversations. Each of ``concurrency`` workers
takes the next conversation and sends its turns one after another, waiting the think time after
each reply; one request per conversation is in flight at a time. The intended send time of a turn
is the previous reply's end plus the think time, so a client that falls behind shows as send slip.
A conversation whose turn failed has no history to go on with and ends there."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from time import perf_counter

from infergap.bench.metrics import stats
from infergap.bench.results import ClientHealth
from infergap.bench.trial import Shape, TrialState
from infergap.bench.workloads import Conversation


@dataclass
class MultiTurn(Shape):
    """Conversations ``convs`` (:func:`infergap.bench.workloads.conversations`), ``concurrency``
    in flight, ``think_s`` seconds between a reply and the next turn. Its health counts requests
    in flight over the whole trial, up to ``min(concurrency, len(convs))``, with no target (a
    conversation thinking is not a free slot)."""

    convs: list[Conversation]
    concurrency: int
    think_s: float
    limit = None  # as many requests as the conversations' turns

    async def drive(self, st: TrialState) -> None:
        queue = list(reversed(self.convs))

        async def worker() -> None:
            while queue and not st.halted():
                await self._converse(st, queue.pop())

        tasks = [asyncio.ensure_future(worker()) for _ in range(max(1, self.concurrency))]
        with st.runner.tracking(tasks):
            await asyncio.gather(*tasks, return_exceptions=True)
        return None

    async def _converse(self, st: TrialState, conv: Conversation) -> None:
        """Send ``conv``'s turns in order (until the trial halts or a turn fails)."""
        intended = perf_counter()
        for t in range(len(conv.user_turns)):
            if st.halted():
                return
            delay = intended - perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            p = conv.prompt(t)
            rec = st.record(p, intended, keep_reply=True, tag=p.tag)
            await st.one(p, rec)
            st.slips.append(max(0.0, (rec.start - rec.intended) * 1e3))
            if rec.error is not None:
                return
            conv.answered(t, rec.reply or "")
            intended = rec.end + self.think_s

    def health(self, st: TrialState, lags_ms: list[float], cpu: float, t1: float, target: int | None) -> ClientHealth:
        started = [r for r in st.records if r.start]
        busy = sum(max(0.0, r.end - r.start) for r in started)
        span = max(t1 - st.t0, 1e-9)
        return ClientHealth(loop_lag_ms=stats(lags_ms), send_slip_ms=stats(st.slips), cpu_frac=cpu / span,
                            mean_in_flight=busy / span, max_in_flight=min(self.concurrency, len(self.convs)),
                            target_in_flight=None)
