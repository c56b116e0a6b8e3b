"""Report lines for what the sweep found beyond its table: the SLO capacity, and per point why the
curve bends there (engine metrics beside the GPU telemetry, workload statistics)."""

from __future__ import annotations

from infergap.bench.engine_metrics import EngineSummary
from infergap.bench.results import BenchResult


def _n(v: float | None, fmt: str = "{:.0f}") -> str:
    return "–" if v is None else fmt.format(v)


def engine_line(e: EngineSummary | None) -> str:
    """``vllm: running 31.2 (max 48), waiting max 210, KV 98 % (max), 120 preemptions, prefix hits
    43 %`` or why there is none."""
    if e is None:
        return "engine metrics not scraped"
    if not e.available:
        return f"engine metrics unavailable ({e.reason})" if e.reason else "engine metrics unavailable"
    parts = [f"{e.engine}: running {_n(e.running_mean, '{:.1f}')} (max {_n(e.running_max)})",
             f"waiting max {_n(e.waiting_max)}"]
    if e.slots:
        parts.append(f"{e.slots} slots of {_n(e.slot_ctx)} tokens")
    if e.kv_usage_max is not None:
        parts.append(f"KV {e.kv_usage_max * 100:.0f} % (max)")
    if e.tokens_max is not None:
        parts.append(f"longest sequence {e.tokens_max:.0f} tokens")
    if e.preemptions is not None:
        parts.append(f"{e.preemptions:.0f} preemptions")
    if e.prefix_hit_rate is not None:
        of = (f" ({e.cached_tokens:.0f} of {e.prompt_tokens:.0f} prompt tokens from the cache)"
              if e.prompt_tokens is not None and e.cached_tokens is not None else "")
        parts.append(f"prefix-cache hits {e.prefix_hit_rate * 100:.0f} %{of}")
    parts.append(f"{e.samples} sample(s)")
    return ", ".join(parts)


def head_lines(result: BenchResult) -> list[str]:
    """The capacity line (when an SLO search ran) and the knee, first in the report."""
    out = []
    if result.capacity is not None:
        out.append(result.capacity.line())
    knee = next((p for p in result.points if p.explanation is not None and p.explanation.knee), None)
    if knee is not None:
        out.append(f"knee: {knee.explanation.line}")
    return out


def point_lines(result: BenchResult) -> list[str]:
    """Per point: why it behaves as it does, the engine's metrics and the workload's statistics."""
    from infergap.bench.workloads import describe

    out = []
    unexplained: dict[str, list[str]] = {}  # one line for the points that share "no engine metrics (why)"
    for p in result.points:
        ex = p.explanation
        if ex is not None and ex.cause == "unknown" and not ex.knee:
            if ex.line not in unexplained:
                out.append(ex.line)
            unexplained.setdefault(ex.line, []).append(p.label)
        elif ex is not None:
            out.append(ex.line if p.label in ex.line and not ex.knee else f"{p.label}{' (knee)' if ex.knee else ''}: {ex.line}")
        if p.engine is not None and p.engine.available:
            out.append(f"{p.label} engine: {engine_line(p.engine)}")
        if p.workload is not None:
            d = describe(p.workload)
            if d:
                out.append(f"{p.label} workload: {d}")
    out = [f"{', '.join(unexplained[x])}: {x}" if x in unexplained else x for x in out]
    missing = {engine_line(p.engine) for p in result.points if p.engine is not None and not p.engine.available}
    out += sorted(missing)
    return out
