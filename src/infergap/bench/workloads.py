"""Workloads that look like production: shared prefixes, multi-turn conversations, trace replay.

``--dataset`` values handled here (the others, ``random`` and ``sharegpt:FILE``, are in
:mod:`infergap.bench.datasets`):

- ``shared-prefix:GxP+S`` (or ``shared-prefix:groups=G,prefix=P,suffix=S``): G groups, each with
  a common system prompt of P tokens; every request is its group's prefix plus a unique suffix of
  S tokens (requests go to groups in turn). The prefix-cache case: after each group's first
  request, P of every P + S prompt tokens can come from the cache.
- ``multi-turn:T`` (or ``multi-turn:T,think=1s``, ``multi-turn:turns=T,think=1s``): conversations of T turns; each turn adds
  a user message of ``--input-len`` tokens to the whole history (earlier user messages and the
  server's real replies) and asks for ``--output-len`` tokens; after each reply the conversation
  waits the think time; one request per conversation in flight at a time. ``--concurrency`` is
  the number of conversations in flight.
- ``mooncake:FILE`` / ``azure:FILE``: trace replay (:mod:`infergap.bench.traces`) on the
  open-loop schedule of the trace's own timestamps, ``--time-scale``, ``--max-duration``,
  ``--token-scale``.

Per point, :func:`point_stats` reports what the workload is about: the prompt-cache hit rate the
server reported per request (``usage.prompt_tokens_details.cached_tokens`` over
``usage.prompt_tokens``, which counts every prompt token, the cached ones included — llama-server
fills them from its ``timings.cache_n`` and ``cache_n + prompt_n``; vLLM only when started with
``--enable-prompt-tokens-details``), prompt tokens by turn, and, for traces, how late requests were
sent against their schedule. The engine's own ``/metrics`` counters give the same rate
independently (:mod:`infergap.bench.engine_metrics`; their semantics per engine in
``data/engine_metrics.yaml``).
"""

from __future__ import annotations

import asyncio
import random
import re
from dataclasses import dataclass, field
from time import perf_counter, process_time
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from infergap.bench import traces
from infergap.bench.datasets import _WORDS, Prompt
from infergap.errors import UserError

if TYPE_CHECKING:  # pragma: no cover
    from infergap.bench.metrics import RequestRecord

WORKLOAD_KINDS = ("shared-prefix", "multi-turn", *traces.TRACE_KINDS)
DEFAULT_THINK_S = 1.0


@dataclass
class DatasetSpec:
    """A parsed ``--dataset`` value: ``kind`` and its parameters (``path`` for files)."""

    kind: str
    path: str | None = None
    groups: int = 0
    prefix: int = 0
    suffix: int = 0
    turns: int = 0
    think_s: float = 0.0
    params: dict = field(default_factory=dict)


_GPS = re.compile(r"^\s*(\d+)\s*[x×]\s*(\d+)\s*\+\s*(\d+)\s*$")


def _kv(text: str, what: str) -> dict[str, str]:
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, eq, v = part.partition("=")
        if not eq or not v.strip():
            raise UserError(f"--dataset {what}: {part!r} is not key=value")
        out[k.strip().lower()] = v.strip()
    return out


def _pos_int(v: str, what: str, key: str) -> int:
    try:
        n = int(v)
    except ValueError:
        raise UserError(f"--dataset {what}: {key}={v!r} is not a whole number") from None
    if n < 1:
        raise UserError(f"--dataset {what}: {key} must be at least 1")
    return n


def parse_dataset(text: str) -> DatasetSpec | None:
    """Parse a workload ``--dataset`` value; ``None`` for ``random``/``sharegpt:`` (handled
    elsewhere). Raises UserError with one line naming the value and what is wrong."""
    kind, _, rest = text.partition(":")
    kind = kind.strip().lower()
    if kind in ("random", "sharegpt"):
        return None
    if kind not in WORKLOAD_KINDS:
        raise UserError(f"--dataset {text!r}: expected random, sharegpt:FILE, shared-prefix:GxP+S, "
                        f"multi-turn:T, mooncake:FILE or azure:FILE")
    if kind in traces.TRACE_KINDS:
        if not rest.strip():
            raise UserError(f"--dataset {text!r}: give the trace file, {kind}:FILE")
        return DatasetSpec(kind, path=rest.strip())
    if kind == "shared-prefix":
        m = _GPS.match(rest)
        if m:
            g, p, s = m.groups()
            kv = {"groups": g, "prefix": p, "suffix": s}
        else:
            kv = _kv(rest, text)
            if set(kv) - {"groups", "prefix", "suffix"} or len(kv) < 3:
                raise UserError(f"--dataset {text!r}: expected shared-prefix:GxP+S, e.g. shared-prefix:4x512+64")
        return DatasetSpec(kind, groups=_pos_int(kv["groups"], text, "groups"),
                           prefix=_pos_int(kv["prefix"], text, "prefix"), suffix=_pos_int(kv["suffix"], text, "suffix"))
    # multi-turn
    from infergap.bench.slo import parse_duration_ms

    head, comma, tail = rest.partition(",")
    if head.strip().isdigit():  # multi-turn:T or multi-turn:T,think=1s
        kv = {"turns": head.strip(), **(_kv(tail, text) if comma else {})}
    else:
        kv = _kv(rest, text)
    if set(kv) - {"turns", "think"} or "turns" not in kv:
        raise UserError(f"--dataset {text!r}: expected multi-turn:T or multi-turn:turns=T,think=1s")
    think = parse_duration_ms(kv["think"], "--dataset think") / 1e3 if "think" in kv else DEFAULT_THINK_S
    return DatasetSpec(kind, turns=_pos_int(kv["turns"], text, "turns"), think_s=think)


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(_WORDS, k=max(n, 1)))


def shared_prefix(n: int, spec: DatasetSpec, output_len: int, *, seed: int = 0, salt: str = "",
                  start: int = 0) -> list[Prompt]:
    """Prompts ``start … start + n − 1`` of a shared-prefix workload: request ``i`` belongs to
    group ``i mod G``; its text is the group's prefix (the salt, the group number and P − 2 words,
    the same for every request of the group) followed by a unique suffix of S words."""
    out = []
    prefixes = {}
    for i in range(start, start + n):
        g = i % spec.groups
        if g not in prefixes:
            prefixes[g] = f"{salt}g{g}: " + _words(random.Random(f"{seed}/{salt}/g{g}"), spec.prefix - 2)
        suffix = f"q{i}: " + _words(random.Random(f"{seed}/{salt}/s{i}"), spec.suffix - 1)
        out.append(Prompt(prefixes[g] + "\n" + suffix, spec.prefix + spec.suffix, output_len, tag=f"g{g}"))
    return out


@dataclass
class Conversation:
    """One multi-turn conversation: its id, the user messages to send and the history so far."""

    cid: int
    user_turns: list[str]
    output_len: int
    history: list[dict] = field(default_factory=list)

    def prompt(self, t: int) -> Prompt:
        """The request of turn ``t`` (0-based): the whole history plus user message ``t``."""
        msgs = self.history + [{"role": "user", "content": self.user_turns[t]}]
        text = "\n".join(m["content"] for m in msgs)
        est = sum(len(m["content"].split()) for m in msgs)
        return Prompt(text, est, self.output_len, messages=msgs, tag=f"t{t + 1}")

    def answered(self, t: int, reply: str) -> None:
        self.history += [{"role": "user", "content": self.user_turns[t]}, {"role": "assistant", "content": reply}]


def conversations(n: int, spec: DatasetSpec, input_len: int, output_len: int, *, seed: int = 0,
                  salt: str = "") -> list[Conversation]:
    """``n`` seeded conversations of ``spec.turns`` user messages of ``input_len`` words each."""
    out = []
    for c in range(n):
        rng = random.Random(f"{seed}/{salt}/c{c}")
        turns = [f"{salt}c{c}t{t + 1}: " + _words(rng, input_len - 1) for t in range(spec.turns)]
        out.append(Conversation(c, turns, output_len))
    return out


def load_trace(spec: DatasetSpec, settings) -> list[traces.TraceRequest] | None:
    """The trace of a trace dataset with ``--time-scale`` and ``--max-duration`` applied (``None``
    for other workloads). Raises UserError for an unreadable or malformed file."""
    if spec.kind not in traces.TRACE_KINDS:
        return None
    reqs = traces.load(spec.kind, spec.path)
    return traces.select(reqs, time_scale=settings.time_scale, max_duration_s=settings.max_duration_s)


def rate_spec(rate: float | None, cap: int | None, settings, trace: list[traces.TraceRequest] | None):
    """The open-loop load spec of one rate point. With a trace: the trace's arrival offsets,
    rescaled so that the mean rate is ``rate`` (``None``: the trace's own pace)."""
    from infergap.bench.runner import LoadSpec

    if trace is None:
        return LoadSpec("rate", cap, rate, settings.arrival)
    offsets = traces.rescale_to_rate(trace, rate) if rate else [r.offset_s for r in trace]
    native = traces.mean_rate(trace)
    eff = rate or (native if native else float(len(trace)))
    return LoadSpec("rate", cap, round(eff, 4), "trace", offsets)


def prompt_source(spec: DatasetSpec, settings, salt: str, n: int):
    """``i → Prompt`` for the shared-prefix and trace workloads (multi-turn conversations are
    built per trial by :func:`conversations`; this source gives their first turns, for warm-up)."""
    if spec.kind == "shared-prefix":
        pool = shared_prefix(max(n, 1), spec, settings.output_len, seed=settings.seed, salt=salt)
        extra: dict[int, Prompt] = {}

        def get(i: int) -> Prompt:
            if i < len(pool):
                return pool[i]
            if i not in extra:
                extra[i] = shared_prefix(1, spec, settings.output_len, seed=settings.seed, salt=salt, start=i)[0]
            return extra[i]

        return get
    if spec.kind == "multi-turn":
        convs = conversations(max(n, 1), spec, settings.input_len, settings.output_len, seed=settings.seed, salt=salt)
        return lambda i: convs[i % len(convs)].prompt(0)
    trace = load_trace(spec, settings)
    pool = traces.prompts(trace, salt=salt, token_scale=settings.token_scale)
    return lambda i: pool[i % len(pool)]


async def multi_turn_trial(runner, spec: DatasetSpec, convs: list[Conversation], concurrency: int,
                           duration_s: float | None = None):
    """Run conversations ``convs`` with ``concurrency`` in flight (closed loop over conversations):
    each worker takes the next conversation and sends its turns one after another, waiting
    ``spec.think_s`` after each reply. The intended send time of a turn is the previous reply's
    end plus the think time, so a client that falls behind shows as send slip.

    Returns the same :class:`~infergap.bench.runner.TrialRun` as ``Runner.trial`` (records in
    send order); ``runner.stop()`` cancels it like any trial."""
    from infergap.bench.metrics import RequestRecord, judge_client, stats
    from infergap.bench.results import ClientHealth
    from infergap.bench.runner import DEAD_FAILED, LagMonitor, TrialRun

    client = runner.client
    runner.watch_reset()
    dead_limit = max(DEAD_FAILED, concurrency)
    records: list[RequestRecord] = []
    slips: list[float] = []
    lag = LagMonitor()
    lag.start()
    queue = list(reversed(convs))
    cpu0, t0 = process_time(), perf_counter()
    deadline = t0 + duration_s if duration_s else None

    async def worker() -> None:
        while queue and not runner.stopping and not runner.dead:
            conv = queue.pop()
            intended = perf_counter()
            for t in range(len(conv.user_turns)):
                if runner.stopping or runner.dead or (deadline is not None and perf_counter() >= deadline):
                    return
                delay = intended - perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                p = conv.prompt(t)
                rec = RequestRecord(intended=intended, max_tokens=p.output_tokens, prompt_estimate=p.input_tokens,
                                    keep_reply=True, tag=p.tag)
                records.append(rec)
                await client.request(p, rec)
                runner.watch(rec, dead_limit)
                slips.append(max(0.0, (rec.start - rec.intended) * 1e3))
                if runner.on_request is not None:
                    runner.on_request(rec)
                if rec.error is not None:
                    break  # a conversation whose turn failed has no history to go on with
                conv.answered(t, rec.reply or "")
                intended = rec.end + spec.think_s

    tasks = [asyncio.ensure_future(worker()) for _ in range(max(1, concurrency))]
    runner._tasks.update(tasks)
    try:
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        runner._tasks.difference_update(tasks)
    t1 = perf_counter()
    await lag.stop()
    started = [r for r in records if r.start]
    busy = sum(max(0.0, r.end - r.start) for r in started)
    health = ClientHealth(loop_lag_ms=stats(lag.lags_ms), send_slip_ms=stats(slips),
                          cpu_frac=(process_time() - cpu0) / max(t1 - t0, 1e-9),
                          mean_in_flight=busy / max(t1 - t0, 1e-9),
                          max_in_flight=min(concurrency, len(convs)), target_in_flight=None)
    window = (min((r.start for r in started), default=t0), max((r.end for r in started), default=t1))
    return TrialRun(records, window, judge_client(health, records), stopped=runner.stopping, server_dead=runner.dead)


# ----------------------------------------------------------------------------- per-point statistics


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


def point_stats(kind: str, records: list, schedule: bool = False) -> WorkloadStats:
    """Summarise the records of a point's trials for workload ``kind``: cache hits and turns over
    completed requests; with ``schedule`` (a trace replay), lateness over every request sent:
    the moment the client started sending it minus its scheduled arrival."""
    import numpy as np

    ws = WorkloadStats(kind=kind, requests=len(records))
    by_turn: dict[int, list[int]] = {}
    for r in records:
        if r.error is not None:
            continue
        tag = r.tag
        if r.usage_cached is not None and r.usage_prompt:
            ws.cache_reported += 1
            ws.prompt_tokens += r.usage_prompt
            ws.cached_tokens += r.usage_cached
        if tag and tag.startswith("t") and tag[1:].isdigit() and r.usage_prompt is not None:
            by_turn.setdefault(int(tag[1:]), []).append(r.usage_prompt)
    if ws.cache_reported:
        ws.cache_hit_rate = ws.cached_tokens / max(ws.prompt_tokens, 1)
    ws.turns = [TurnTokens(turn=t, requests=len(v), prompt_tokens_mean=float(np.mean(v)))
                for t, v in sorted(by_turn.items())]
    late = [(r.start - r.intended) * 1e3 for r in records if r.start] if schedule else []
    if late:
        a = np.maximum(np.asarray(late), 0.0)
        ws.lateness_ms = {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)), "max": float(a.max())}
    return ws


def describe(ws: WorkloadStats) -> str:
    """One line for the text report: hit rate, per-turn prompt growth, lateness."""
    parts = []
    if ws.cache_hit_rate is not None:
        parts.append(f"prompt cache hit rate {ws.cache_hit_rate * 100:.0f} % "
                     f"({ws.cached_tokens} of {ws.prompt_tokens} prompt tokens, server-reported)")
    elif ws.kind in ("shared-prefix", "multi-turn", "mooncake"):
        parts.append("prompt cache hit rate: not reported by the server")
    if ws.ideal_hit_rate is not None:
        parts.append(f"trace's own prefix reuse {ws.ideal_hit_rate * 100:.0f} %")
    if ws.turns:
        parts.append("prompt tokens by turn " + " → ".join(
            f"{t.prompt_tokens_mean:.0f}" for t in ws.turns if t.prompt_tokens_mean is not None))
    if ws.lateness_ms:
        parts.append(f"sent late vs the trace's schedule: p50 {ws.lateness_ms['p50']:.1f} ms, "
                     f"p99 {ws.lateness_ms['p99']:.1f} ms, max {ws.lateness_ms['max']:.1f} ms"
                     + (f" ({ws.scheduled} arrivals)" if ws.scheduled else ""))
    if ws.note:
        parts.append(ws.note)
    return "; ".join(parts)
