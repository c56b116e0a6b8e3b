"""The load shapes: how the requests of one trial are issued, one module per shape, all returning
the same :class:`~infergap.bench.trial.TrialRun` through :meth:`~infergap.bench.trial.Runner.run`.

=====================  ========================================  ==============================
shape                  module                                    chosen by the sweep when
=====================  ========================================  ==============================
closed loop            :mod:`~infergap.bench.shapes.closed_loop`  ``--concurrency`` levels
open loop, trace       :mod:`~infergap.bench.shapes.open_loop`    ``--request-rate``, a trace dataset
multi-turn             :mod:`~infergap.bench.shapes.multi_turn`   ``--dataset multi-turn:T``
A/B interleaving       :mod:`~infergap.bench.shapes.interleave`   (the tuner: trials of two configurations)
=====================  ========================================  ==============================

Below them, :mod:`infergap.bench.trial` (the record, the monitors, the dead-server watch); above
them, :mod:`infergap.bench.multiproc` (a closed or open loop split over client processes) and the
sweep, :mod:`infergap.bench.runner`, which picks a shape per point (:func:`for_spec`, or
:class:`MultiTurn` for conversations). A new shape is a module here with a :class:`Shape`
subclass (its ``concurrency``, ``limit`` and ``drive``), named in this table, and chosen in
``runner._Sweep._shape``.
"""

from __future__ import annotations

from typing import Callable

from infergap.bench.datasets import Prompt
from infergap.bench.shapes.closed_loop import ClosedLoop
from infergap.bench.shapes.interleave import Interleaved, interleave
from infergap.bench.shapes.multi_turn import MultiTurn
from infergap.bench.shapes.open_loop import OpenLoop
from infergap.bench.trial import LoadSpec, Shape

__all__ = ["ClosedLoop", "Interleaved", "MultiTurn", "OpenLoop", "Shape", "for_spec", "interleave"]


def for_spec(spec: LoadSpec, get_prompt: Callable[[int], Prompt], n: int | None, seed: int = 0) -> Shape:
    """The shape of a load point: a closed loop at ``spec.concurrency`` (``mode`` ``concurrency``)
    or an open loop at ``spec.rate`` / ``spec.offsets``; ``n`` requests at most (None: until the
    trial's duration ends); ``seed`` draws an open loop's arrivals."""
    if spec.mode == "concurrency":
        return ClosedLoop(spec.concurrency, get_prompt, n)
    return OpenLoop(spec, get_prompt, n, seed)
