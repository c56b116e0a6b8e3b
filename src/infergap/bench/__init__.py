"""Serving benchmark: datasets, streaming client, load shapes, metrics, sweep, GPU telemetry.

Library entry points: :func:`infergap.bench.runner.run` (run a sweep → :class:`BenchResult`),
:func:`infergap.bench.runner.run_trial` (one trial of one load point → a :class:`PointResult`,
the unit of :func:`infergap.bench.shapes.interleave.interleave`), :func:`load_result` (a result
file read back) and :func:`compare_bench` (two results → :class:`BenchComparison`, used by
``infergap compare``). The layers of the package, bottom to top, are in docs/design.md ("The
bench").
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infergap.bench.compare import BenchComparison, compare_bench
    from infergap.bench.results import SCHEMA, BenchResult, BenchSettings, PointResult, TrialMetrics, load_result

#: Where each name of the package lives; imported when first used, so that importing one
#: submodule (``infergap.bench.slo`` for option parsing) does not import numpy and the client.
_LAZY = {"BenchComparison": "compare", "compare_bench": "compare", "SCHEMA": "results", "BenchResult": "results",
         "BenchSettings": "results", "PointResult": "results", "TrialMetrics": "results", "load_result": "results"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"infergap.bench.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'infergap.bench' has no attribute {name!r}")


__all__ = ["SCHEMA", "BenchComparison", "BenchResult", "BenchSettings", "PointResult", "TrialMetrics",
           "compare_bench", "load_result"]
