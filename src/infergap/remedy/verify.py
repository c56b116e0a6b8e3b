"""Before/after proof of a fix: the same short bench sweep before the changes and after them.

``infergap fix --apply --url URL`` measures the server with :func:`measure`, applies the
changes, measures again, and compares the two with :func:`infergap.bench.compare_bench`: a change
counts only outside both runs' spread over their trials, so a short sweep that cannot separate the
two says "within noise" rather than claiming an improvement. Both sweeps are recorded in the
ledger as ``bench`` runs whose parent is the fix run.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from infergap.bench import BenchComparison, BenchResult, BenchSettings, compare_bench
from infergap.errors import UserError
from infergap.ledger import Ledger


class VerifyResult(BaseModel):
    """The two sweeps, their ledger run ids and the comparison (after vs before)."""

    before: BenchResult
    after: BenchResult
    before_run_id: int
    after_run_id: int
    comparison: BenchComparison


def verify_settings(concurrency: int = 4, trials: int = 3, num_prompts: int | None = None, input_len: int = 128,
                    output_len: int = 64) -> BenchSettings:
    """Settings of the short sweep: one closed-loop level, ``trials`` repetitions (at least 2, so
    each point has a spread to judge a change against), short prompts and outputs, ``num_prompts``
    requests per trial (default 4 × concurrency, at least 16)."""
    return BenchSettings(concurrency=[concurrency], trials=max(2, trials), input_len=input_len, output_len=output_len,
                         num_prompts=num_prompts or max(16, 4 * concurrency), warmup=2)


def measure(url: str, model: str | None, settings: BenchSettings) -> BenchResult:
    """One sweep with the bench library (:func:`infergap.bench.runner.run`); raises
    :class:`~infergap.errors.UserError` when the server is unreachable, before any load."""
    from infergap.bench.runner import run

    return run(url, model, settings)


def record_pair(ledger: Ledger, before: BenchResult, after: BenchResult, fix_run_id: int | None) -> VerifyResult:
    """Record both sweeps in the ledger (kind ``bench``, parent the fix run) and compare them."""
    ids: list[int] = []
    for res in (before, after):
        ids.append(ledger.record("bench", res.to_json(), None, parent_id=fix_run_id))
    return VerifyResult(before=before, after=after, before_run_id=ids[0], after_run_id=ids[1],
                        comparison=compare_bench(before, after))


def summary(v: VerifyResult) -> dict[str, Any]:
    """What the fix run's payload keeps of the verification: run ids and significant changes."""
    changes = [{"point": p.label, "metric": m.metric, "change_pct": m.change_pct, "verdict": m.verdict}
               for p in v.comparison.points for m in p.metrics if m.verdict in ("better", "worse")]
    return {"before_run": v.before_run_id, "after_run": v.after_run_id, "significant_changes": changes,
            "notes": v.comparison.notes + [n for p in v.comparison.points for n in p.notes]}


def apply_verified(apply: Any, ledger: Ledger, url: str, model: str | None, settings: BenchSettings,
                   on_after: Any = None) -> tuple[Any, VerifyResult | None, str | None]:
    """Measure, run ``apply()`` (returns a :class:`~infergap.remedy.engine.FixResult`), measure
    again (calling ``on_after()`` first, for progress), record and compare. Returns (fix result,
    verification or ``None``, why there is none).

    The first sweep runs before anything is changed: an unreachable server raises
    :class:`~infergap.errors.UserError` with the system untouched. When nothing was applied there
    is no second sweep. When the second sweep fails, the first is still recorded and the reason
    returned.
    """
    before = measure(url, model, settings)
    res = apply()
    if res.run_id is None:
        ledger.record("bench", before.to_json(), None)
        return res, None, "nothing was applied, so there is nothing to measure after"
    if on_after is not None:
        on_after()
    try:
        after = measure(url, before.environment.model, settings)
    except UserError as e:
        ledger.record("bench", before.to_json(), None, parent_id=res.run_id)
        return res, None, f"the measurement after the changes failed: {e}"
    v = record_pair(ledger, before, after, res.run_id)
    run = ledger.get(res.run_id)
    payload = dict(run.payload) if isinstance(run.payload, dict) else {}
    payload["verify"] = summary(v)
    ledger.update_run(res.run_id, payload=payload)
    return res, v, None
