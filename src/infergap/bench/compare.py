"""Compare two bench runs point by point, refusing to call a change real inside the noise. Pure.

A change is *significant* only when each run's median lies outside the other run's min–max range
over its trials and the medians differ by more than the two ranges together (the same configuration measured 38 and 66 tok/s on two days: a single number
proves nothing; the reference ``bench.md`` asks to refuse to call a change an improvement inside
the spread).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from infergap.bench.metrics import HIGHER_IS_BETTER
from infergap.bench.results import BenchResult, PointResult, Spread

DEFAULT_METRICS = ("output_throughput_tps", "request_throughput_rps", "total_throughput_tps",
                   "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "itl_p99_ms")


class MetricChange(BaseModel):
    """One metric of one point in runs *a* (before) and *b* (after)."""

    metric: str
    a: Spread
    b: Spread
    change_pct: float | None = None
    significant: bool = False
    verdict: Literal["better", "worse", "within noise", "missing"] = "missing"


class PointComparison(BaseModel):
    """A point present in both runs (matched by mode and level)."""

    label: str
    mode: str
    concurrency: int | None = None
    request_rate: float | None = None
    metrics: list[MetricChange] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class BenchComparison(BaseModel):
    """Result of :func:`compare_bench`: matched points, and the levels only one run has."""

    a_model: str
    b_model: str
    points: list[PointComparison] = Field(default_factory=list)
    only_in_a: list[str] = Field(default_factory=list)
    only_in_b: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def _key(p: PointResult) -> tuple:
    return (p.mode, p.concurrency if p.mode == "concurrency" else p.request_rate,
            p.concurrency if p.mode == "rate" else None)


def compare_metric(name: str, a: Spread, b: Spread) -> MetricChange:
    """Compare one metric's trial spreads. Significant when ``b.median`` is outside
    ``[a.min, a.max]``, ``a.median`` is outside ``[b.min, b.max]``, and the medians differ by more
    than both runs' own trial-to-trial ranges together (``(a.max − a.min) + (b.max − b.min)``,
    in the metric's unit): one run at the low end of its range and the other at the high end of
    its own already differ that much with nothing changed, so a difference inside it is noise
    whatever its size in per cent. The direction is judged with higher-is-better for
    throughputs and lower-is-better for latencies."""
    m = MetricChange(metric=name, a=a, b=b)
    if a.median is None or b.median is None:
        return m
    m.change_pct = (b.median - a.median) / abs(a.median) * 100.0 if a.median else None
    outside_a = not (a.min <= b.median <= a.max)
    outside_b = not (b.min <= a.median <= b.max)
    noise = (a.max - a.min) + (b.max - b.min)
    m.significant = outside_a and outside_b and abs(b.median - a.median) > noise
    if not m.significant:
        m.verdict = "within noise"
    else:
        up = b.median > a.median
        m.verdict = "better" if up == (name in HIGHER_IS_BETTER) else "worse"
    return m


def compare_bench(a: BenchResult, b: BenchResult, metrics: tuple[str, ...] = DEFAULT_METRICS) -> BenchComparison:
    """Compare run ``a`` (baseline) with run ``b`` point by point.

    Points are matched by mode and level (concurrency, or rate and cap). Each metric gets a
    :class:`MetricChange` whose verdict is ``better``/``worse`` only outside the spread of both
    runs. Notes flag comparisons that should not be trusted: single-trial points (no spread),
    client-bound or unstable points, different models or settings; a point above the failure
    budget in either run is never called better or worse.
    """
    out = BenchComparison(a_model=a.environment.model, b_model=b.environment.model)
    if a.environment.model != b.environment.model:
        out.notes.append(f"different models: {a.environment.model} vs {b.environment.model}")
    for f in ("api", "input_len", "output_len", "len_spread", "dataset", "stream"):
        va, vb = getattr(a.settings, f), getattr(b.settings, f)
        if va != vb:
            out.notes.append(f"different {f}: {va} vs {vb}")
    bmap = {_key(p): p for p in b.points}
    amap = {_key(p): p for p in a.points}
    for k, pa in amap.items():
        pb = bmap.get(k)
        if pb is None:
            out.only_in_a.append(pa.label)
            continue
        pc = PointComparison(label=pa.label, mode=pa.mode, concurrency=pa.concurrency, request_rate=pa.request_rate)
        for name in metrics:
            pc.metrics.append(compare_metric(name, pa.summary.get(name, Spread()), pb.summary.get(name, Spread())))
        if min(len(pa.trials), len(pb.trials)) < 2:
            pc.notes.append("fewer than 2 trials in a run: no spread, nothing can be called significant")
            for m in pc.metrics:
                m.significant, m.verdict = False, ("within noise" if m.verdict != "missing" else "missing")
        bad = [(tag, p) for tag, p in (("baseline", pa), ("new", pb)) if not p.valid]
        for tag, p in bad:
            pc.notes.append(f"{tag} run is invalid at this point ({p.invalid_reason}): nothing can be called significant")
        if bad:
            for m in pc.metrics:
                m.significant, m.verdict = False, ("within noise" if m.verdict != "missing" else "missing")
        for tag, p in (("baseline", pa), ("new", pb)):
            if p.client_bound:
                pc.notes.append(f"{tag} run was client-bound at this point")
            if p.unstable:
                pc.notes.append(f"{tag} run was unstable at this point ({', '.join(p.unstable_metrics)})")
            if p.error:
                pc.notes.append(f"{tag} run: {p.error}")
        out.points.append(pc)
    out.only_in_b = [p.label for k, p in bmap.items() if k not in amap]
    return out
