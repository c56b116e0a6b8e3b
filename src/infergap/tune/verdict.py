"""The verdict on one lever: the metric it targets, read from interleaved baseline (A) and variant
(B) runs of the same workload, judged against the spread those runs show. Pure.

Each run is one bench run (:func:`infergap.bench.runner.run_sweep`, one trial per load level) of
one configuration, right after a restart; the runs alternate A B A B …, so slow drift on a shared
machine (another job starting, thermal throttling, a cache warming) lands on both sides alike
instead of on one. The values of the A runs and of the B runs then give each side a median and a
min–max range, and the rule is the one ``infergap compare`` applies to two bench runs
(:func:`infergap.bench.compare.compare_metric`): the change is real only when each side's median
lies outside the other side's range and the medians differ by more than both ranges together
(the reference ``bench.md``: "refuse to call a change an improvement inside that spread").

Two more rules, with their reasons:

- fewer than :data:`MIN_RUNS` runs on a side: no range, no verdict (``not measured``);
- a change smaller than :data:`MIN_EFFECT_PCT` per cent is ``no effect within noise`` even
  when the ranges are narrower: three runs of a side underestimate its spread, and a lever
  is tried to find gains a user would act on, not a 1 % shift of a paced stub's timer.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from infergap.bench.compare import compare_metric
from infergap.bench.metrics import HIGHER_IS_BETTER, spread

Verdict = Literal["helps", "hurts", "no effect within noise", "refused", "not measured"]
VERDICTS: tuple[str, ...] = ("helps", "hurts", "no effect within noise", "refused", "not measured")

#: Runs of each configuration below which nothing is judged: one run has no spread.
MIN_RUNS = 2
#: Smallest change (per cent of the baseline median) that can be called helps or hurts.
MIN_EFFECT_PCT = 2.0

#: What each target means: the bench metric and where on the sweep it is read. ``knee``: the
#: load level where the baseline's median output throughput is highest (the plateau the curve
#: bends to; the only level of a one-level workload); ``lowest``: the lowest concurrency level
#: (the least queueing, so TTFT is the prompt's own cost and TPOT the decode step's).
TARGETS: dict[str, tuple[str, str]] = {
    "throughput": ("output_throughput_tps", "knee"),
    "ttft": ("ttft_p50_ms", "lowest"),
    "tpot": ("tpot_p50_ms", "lowest"),
}


class Side(BaseModel):
    """The values of one configuration's runs (one per run, in run order) and their spread."""

    values: list[float] = Field(default_factory=list)
    median: float | None = None
    min: float | None = None
    max: float | None = None


class Judgement(BaseModel):
    """The verdict on one lever's target metric at one load level (``level``, e.g. ``c=8``)."""

    target: str
    metric: str
    level: str | None = None
    baseline: Side = Field(default_factory=Side)
    variant: Side = Field(default_factory=Side)
    change_pct: float | None = None
    #: Both sides' ranges together, in per cent of the baseline median: the noise the change had to clear.
    noise_pct: float | None = None
    verdict: Verdict = "not measured"
    reason: str = ""


def side(values: list[float]) -> Side:
    """The :class:`Side` of ``values`` (one per run)."""
    s = spread(values)
    return Side(values=[round(v, 4) for v in values], median=s.median, min=s.min, max=s.max)


def judge(target: str, a: list[float], b: list[float], level: str | None = None) -> Judgement:
    """Judge ``target`` (a key of :data:`TARGETS`) from the baseline values ``a`` and the variant
    values ``b``, one per interleaved run.

    >>> judge("throughput", [100.0, 102.0, 101.0], [150.0, 149.0, 152.0]).verdict
    'helps'
    >>> judge("ttft", [50.0, 51.0], [80.0, 82.0]).verdict
    'hurts'
    >>> judge("throughput", [100.0, 110.0], [104.0, 108.0]).verdict
    'no effect within noise'
    >>> judge("throughput", [100.0], [200.0]).verdict
    'not measured'
    """
    metric, _ = TARGETS[target]
    j = Judgement(target=target, metric=metric, level=level, baseline=side(a), variant=side(b))
    if len(a) < MIN_RUNS or len(b) < MIN_RUNS:
        j.reason = f"{len(a)} baseline and {len(b)} variant run(s): at least {MIN_RUNS} of each are needed for a spread"
        return j
    sa, sb = spread(a), spread(b)
    m = compare_metric(metric, sa, sb)
    j.change_pct = round(m.change_pct, 2) if m.change_pct is not None else None
    if sa.median:
        j.noise_pct = round(((sa.max - sa.min) + (sb.max - sb.min)) / abs(sa.median) * 100.0, 2)
    if not m.significant:
        j.verdict, j.reason = "no effect within noise", "the medians differ by less than the two ranges together, or a median lies inside the other range"
    elif j.change_pct is not None and abs(j.change_pct) < MIN_EFFECT_PCT:
        j.verdict, j.reason = "no effect within noise", f"outside the ranges but smaller than {MIN_EFFECT_PCT:g} %"
    else:
        j.verdict = "helps" if m.verdict == "better" else "hurts"
        better = "higher" if metric in HIGHER_IS_BETTER else "lower"
        j.reason = f"each median outside the other range, the difference larger than both ranges together ({better} is better)"
    return j


def level_of(points: list[Any], where: str) -> Any:
    """The point of a baseline run at which a target is read (``knee`` or ``lowest``, see
    :data:`TARGETS`); None when the run has no valid point."""
    pts = [p for p in points if p.valid and p.summary.get("output_throughput_tps") is not None
           and p.summary["output_throughput_tps"].median is not None]
    if not pts:
        return None
    if where == "lowest":
        return min(pts, key=lambda p: (p.concurrency or 0, p.request_rate or 0))
    return max(pts, key=lambda p: p.summary["output_throughput_tps"].median)
