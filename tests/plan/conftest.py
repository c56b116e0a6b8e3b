"""Fixtures of the plan tests (helpers and the seed case's inputs: ``plan_support``)."""

from __future__ import annotations

import pytest

from plan_support import SEED, SEED_LOG, SEED_POINTS, constructed_bench, llama_server  # noqa: F401  (llama_server: a fixture)


@pytest.fixture(scope="session")
def seed_inputs():
    """(audit report, engine logs, roofline result, bench result) of the seed case."""
    from infergap.audit import run_audit
    from infergap.evidence.overlay import open_with_evidence
    from infergap.plan.inputs import engine_logs_from
    from infergap.roofline import Parallel, Workload, bounds, load_hardware, load_model

    snap = open_with_evidence(str(SEED), [str(SEED_LOG)])
    try:
        audit = run_audit(snap)
        logs = engine_logs_from(snap)
    finally:
        snap.close()
    rl = bounds(load_model("glm-5-nvfp4"), load_hardware("rtx-pro-6000-server", 8), Parallel(tp=8),
                Workload(batches=[1, 10, 64, 256, 2048]))
    return audit, logs, rl, constructed_bench(SEED_POINTS)
