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

import random
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from infergap.bench import traces
from infergap.bench.datasets import _WORDS, Prompt
from infergap.bench.metrics import RequestRecord
from infergap.bench.results import BenchSettings, TurnTokens, WorkloadStats
# The --dataset grammar lives in workload_spec (light, for the settings' checks); kept importable from here.
from infergap.bench.workload_spec import DEFAULT_THINK_S as DEFAULT_THINK_S
from infergap.bench.workload_spec import WORKLOAD_KINDS as WORKLOAD_KINDS
from infergap.bench.workload_spec import DatasetSpec as DatasetSpec
from infergap.bench.workload_spec import parse_dataset as parse_dataset

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


def load_trace(spec: DatasetSpec, settings: BenchSettings) -> list[traces.TraceRequest] | None:
    """The trace of a trace dataset with ``--time-scale`` and ``--max-duration`` applied (``None``
    for other workloads). Raises UserError for an unreadable or malformed file."""
    if spec.kind not in traces.TRACE_KINDS:
        return None
    reqs = traces.load(spec.kind, spec.path)
    return traces.select(reqs, time_scale=settings.time_scale, max_duration_s=settings.max_duration_s)


def prompt_source(spec: DatasetSpec, settings: BenchSettings, salt: str, n: int) -> Callable[[int], Prompt]:
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


# ----------------------------------------------------------------------------- per-point statistics


def point_stats(kind: str, records: list[RequestRecord], schedule: bool = False) -> WorkloadStats:
    """Summarise the records of a point's trials for workload ``kind``: cache hits and turns over
    completed requests; with ``schedule`` (a trace replay), lateness over every request sent:
    the moment the client started sending it minus its scheduled arrival."""
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
