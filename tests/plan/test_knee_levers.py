"""The plan's first action follows from what bent the sweep's curve (``load.knee_cause``).

The llama.cpp cases run against a real llama-server in tests/bench/test_llama_server_knees.py
(slots full, a slot's context full) and the client-bound case against a paced stub in
tests/bench/test_workloads_servers.py; here every cause meets every engine through the facts the
bench gives the plan, to pin the mapping from cause to lever in the catalog.
"""

from __future__ import annotations

import pytest

from infergap.plan import build_plan
from infergap.plan.conditions import Fact


def facts(engine: str | None, cause: str, **extra) -> dict[str, Fact]:
    out = {"load.knee_cause": Fact(value=cause, source=f"bench c=64: throughput flattened ({cause})"),
           "load.max_concurrency": Fact(value=64, source="bench: highest concurrency measured (c=64)"),
           "load.running_max": Fact(value=48, source="engine /metrics during the sweep, largest at c=64")}
    if engine is not None:
        out["engine.name"] = Fact(value=engine, source="GET /v1/models")
    if engine == "llama.cpp":
        out["server.n_slots"] = Fact(value=4, source="GET /props total_slots")
    out.update({k.replace("__", "."): Fact(value=v, source="test") for k, v in extra.items()})
    return out


@pytest.mark.parametrize("engine, cause, first, flag", [
    ("llama.cpp", "running_limit", "llamacpp.more_slots", "--parallel"),
    ("vllm", "running_limit", "batch.max_running", "--max-num-seqs 64"),
    ("sglang", "running_limit", "batch.max_running", "--max-running-requests 64"),
    ("vllm", "kv", "batch.kv_memory", "--gpu-memory-utilization"),
    ("sglang", "kv", "batch.kv_memory", "--mem-fraction-static"),
    ("llama.cpp", "host", "llamacpp.host_bound", "--backend-sampling"),
    ("vllm", "host", "engine.host_overhead", "--async-scheduling"),
    ("sglang", "host", "engine.host_overhead", "--disable-overlap-schedule"),
    ("vllm", "client", "bench.client_procs", "--client-procs"),
    ("llama.cpp", "client", "bench.client_procs", "--client-procs"),
    (None, "client", "bench.client_procs", "--client-procs"),
])
def test_the_first_action_follows_from_the_knee_cause(engine, cause, first, flag):
    # the host as the cause is earned only with a server thread that ran flat out
    plan = build_plan(facts=facts(engine, cause, **({"proc__cpu_saturated": True} if cause == "host" else {})))
    assert plan.levers[0].id == first, [x.id for x in plan.levers]
    assert "load.knee_cause" in plan.levers[0].facts
    assert any(f"load.knee_cause = {cause}" in s for s in plan.levers[0].selected_by), plan.levers[0].selected_by
    assert flag in plan.top_actions[0], plan.top_actions


def test_client_processes_are_no_more_than_the_client_has_cores():
    """A client-bound knee on a 2-core client was told to re-run with --client-procs 4."""
    two = build_plan(facts=facts(None, "client", client__cpus=2))
    assert "--client-procs 2 " in two.top_actions[0] and "--client-procs 4" not in two.top_actions[0], two.top_actions
    assert "--client-procs 4 " in build_plan(facts=facts(None, "client", client__cpus=16)).top_actions[0]


def test_a_knee_lever_outranks_a_better_scored_lever_of_an_earlier_tier():
    # Slots saturated alone would select llamacpp.more_slots too; here the host bent the curve,
    # so its (small-change) lever comes before the flag flip.
    plan = build_plan(facts=facts("llama.cpp", "host", load__slots_saturated=True, proc__cpu_saturated=True))
    ids = [x.id for x in plan.levers]
    assert ids[:2] == ["llamacpp.host_bound", "llamacpp.more_slots"], ids
    assert plan.top_actions[0].startswith("[small change]") and "--backend-sampling" in plan.top_actions[0]


def test_a_misconfiguration_still_comes_before_the_knee():
    plan = build_plan(facts=facts("llama.cpp", "running_limit", load__context_too_small=True))
    assert [x.id for x in plan.levers][:2] == ["llamacpp.context_size", "llamacpp.more_slots"]
    assert plan.top_actions[0].startswith("[P0")


@pytest.mark.parametrize("cause", ["none", "gpu", "scaling", "unknown"])
def test_no_lever_claims_a_knee_the_sweep_did_not_explain(cause):
    for engine in ("llama.cpp", "vllm", "sglang"):
        plan = build_plan(facts=facts(engine, cause))
        assert not [x.id for x in plan.levers if "load.knee_cause" in x.facts], (engine, cause)


def test_no_knee_in_a_sweep_is_a_fact_not_an_unknown():
    from infergap.bench.engine_metrics import explain
    from infergap.plan.signals import gather
    from plan_support import constructed_bench

    bench = constructed_bench([(1, 10.0, None), (2, 20.0, None), (4, 40.0, None)])  # throughput keeps up
    for p, ex in zip(bench.points, explain(bench.points)):
        p.explanation = ex
    f = gather(bench=bench)
    assert f["load.knee_cause"].value == "none" and "c=1, c=2, c=4" in f["load.knee_cause"].source
    assert "load.knee_cause" not in [u.fact for u in build_plan(bench=bench).unknowns]


@pytest.mark.parametrize("engine, lever", [("llama.cpp", "llamacpp.host_bound"), ("vllm", "engine.host_overhead")])
def test_the_host_is_not_blamed_without_a_saturated_server_thread(engine, lever):
    """A knee the telemetry calls host-bound, without the process's CPU: not a lever, an unknown."""
    plan = build_plan(facts=facts(engine, "host"))
    assert lever not in [x.id for x in plan.levers]
    assert lever in next(u.decides for u in plan.unknowns if u.fact == "proc.cpu_saturated")
    plan = build_plan(facts=facts(engine, "host", proc__cpu_saturated=False))
    assert lever not in [x.id for x in plan.levers] and lever not in [d for u in plan.unknowns for d in u.decides]


def test_the_host_is_not_blamed_for_what_a_flag_explains():
    plan = build_plan(facts=facts("llama.cpp", "host", proc__cpu_saturated=True, server__kv_offload=False, proc__read=True))
    ids = [x.id for x in plan.levers]
    assert ids[0] == "llamacpp.kv_offload" and "llamacpp.host_bound" not in ids
