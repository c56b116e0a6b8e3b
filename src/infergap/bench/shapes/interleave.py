"""A/B interleaving: the trials of two (or more) server configurations alternated, A B A B …, so
that a drift of the machine (clocks, temperature, a neighbour's load) falls on every arm alike
instead of on whichever configuration ran last.

The shape of the other shapes, one level up: they issue the requests of one trial; this one
orders whole trials. Each arm is a callable that puts its configuration in place (starting or
reconfiguring the server: the caller's business) and runs *one trial of the same workload
point*, returning that trial as a :class:`~infergap.bench.results.PointResult` holding one trial
— :func:`infergap.bench.runner.run_trial` does exactly that. :func:`interleave` calls the arms in
turn and merges each arm's trials into one point (summary, spread, validity recomputed as for a
sweep's point), ready for :func:`infergap.bench.compare.compare_metric`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal

from infergap.bench.metrics import settle_point
from infergap.bench.results import DEFAULT_MAX_ERROR_RATE, PointResult

#: One arm: ``run(k)`` sets up its configuration and runs trial ``k`` (the position in the whole
#: sequence, 0-based: distinct prompts per trial, the same lengths) → a point holding that trial.
ArmTrial = Callable[[int], PointResult]


@dataclass
class Interleaved:
    """What :func:`interleave` measured: ``points`` (arm → its trials merged into one point, in
    arm order), ``runs`` (every trial in the order it ran: arm name and its one-trial point, with
    that trial's telemetry and engine counters), ``error`` (why it stopped early, None if not)."""

    points: dict[str, PointResult] = field(default_factory=dict)
    runs: list[tuple[str, PointResult]] = field(default_factory=list)
    error: str | None = None


def sequence(arms: list[str], rounds: int, order: Literal["alternate", "balanced"] = "alternate") -> list[str]:
    """The order the arms' trials run in: ``alternate`` A B A B …; ``balanced`` A B B A A B …
    (each arm goes first as often as it goes second, for a drift within a round).

    >>> sequence(["A", "B"], 3)
    ['A', 'B', 'A', 'B', 'A', 'B']
    >>> sequence(["A", "B"], 2, "balanced")
    ['A', 'B', 'B', 'A']
    """
    out: list[str] = []
    for r in range(rounds):
        out += arms if order == "alternate" or r % 2 == 0 else arms[::-1]
    return out


def interleave(arms: dict[str, ArmTrial], rounds: int, *, order: Literal["alternate", "balanced"] = "alternate",
               max_error_rate: float = DEFAULT_MAX_ERROR_RATE) -> Interleaved:
    """Run ``rounds`` trials of every arm of ``arms`` (at least two, in the dict's order), in
    :func:`sequence` order; merge each arm's trials (:func:`merge`). A trial whose point carries an
    ``error`` (the server stopped answering, an interruption) ends the interleaving there:
    ``error`` names the arm and the trial, and the points hold what was measured.
    Raises ValueError for fewer than two arms or no round."""
    if len(arms) < 2 or rounds < 1:
        raise ValueError(f"interleave: needs two arms or more and a round at least (got {len(arms)} arm(s), {rounds} round(s))")
    out = Interleaved()
    for k, name in enumerate(sequence(list(arms), rounds, order)):
        point = arms[name](k)
        out.runs.append((name, point))
        if point.error:
            out.error = f"{name}, trial {k + 1}: {point.error}"
            break
    for name in arms:
        mine = [p for n, p in out.runs if n == name]
        if mine:
            out.points[name] = merge(mine, max_error_rate)
    return out


def merge(points: list[PointResult], max_error_rate: float = DEFAULT_MAX_ERROR_RATE) -> PointResult:
    """One point from several one-trial points of the same load: the trials renumbered 1 … n,
    the summary, spread, stability and validity computed as for a sweep's point. Telemetry and
    engine counters stay with each run (their windows are apart in time); the first error is kept."""
    first = points[0]
    merged = PointResult(mode=first.mode, concurrency=first.concurrency, request_rate=first.request_rate,
                         error=next((p.error for p in points if p.error), None))
    for i, t in enumerate(t for p in points for t in p.trials):
        merged.trials.append(t.model_copy(update={"trial": i + 1}))
    settle_point(merged, max_error_rate)
    return merged
