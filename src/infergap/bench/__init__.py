"""Serving benchmark: datasets, streaming client, load schedules, metrics, sweep, GPU telemetry.

Library entry points: :func:`infergap.bench.runner.run` (run a sweep → :class:`BenchResult`) and
:func:`compare_bench` (two results → :class:`BenchComparison`, used by ``infergap compare``).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infergap.bench.compare import BenchComparison, compare_bench
    from infergap.bench.results import SCHEMA, BenchResult, BenchSettings, PointResult, TrialMetrics

#: Where each name of the package lives; imported when first used, so that importing one
#: submodule (``infergap.bench.slo`` for option parsing) does not import numpy and the client.
_LAZY = {"BenchComparison": "compare", "compare_bench": "compare", "SCHEMA": "results", "BenchResult": "results",
         "BenchSettings": "results", "PointResult": "results", "TrialMetrics": "results"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"infergap.bench.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'infergap.bench' has no attribute {name!r}")


__all__ = ["SCHEMA", "BenchComparison", "BenchResult", "BenchSettings", "PointResult", "TrialMetrics",
           "compare_bench", "load_result"]


def load_result(path) -> "BenchResult":
    """Read a ``infergap.bench/1`` JSON file. Raises UserError naming the file when it is not one."""
    from pathlib import Path

    from pydantic import ValidationError

    from infergap.bench.results import SCHEMA, BenchResult
    from infergap.errors import UserError

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"{p}: cannot read ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise UserError(f"{p}: not text (not UTF-8); expected an {SCHEMA} JSON result") from None
    try:
        r = BenchResult.model_validate_json(text)
    except ValidationError as e:
        raise UserError(f"{p}: not an {SCHEMA} result ({e.error_count()} problem(s), first: {e.errors()[0]['msg']})") from None
    if r.schema_ != SCHEMA:
        raise UserError(f"{p}: schema {r.schema_!r}, expected {SCHEMA!r}")
    return r
