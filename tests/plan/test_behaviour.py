"""The shape of what was measured, held against the bounds, on real sweeps: the H200 llama-server
runs of tests/fixtures/real-gpu/h200-llama-server. Healthy servers get no P0/P1 and no generic
lever; the misconfigured ones get the lever that names them, with the numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infergap.bench.results import BenchResult
from infergap.plan.behaviour import FALL_SHARE, TAIL_RATIO
from infergap.plan.build import build_plan
from infergap.server import ServerConfig

GPU = Path(__file__).resolve().parents[1] / "fixtures" / "real-gpu" / "h200-llama-server"
#: Levers that only earned evidence may select (the engine's CPU side as the limit).
GENERIC = {"llamacpp.host_bound", "engine.host_overhead"}


def plan_of(folder: Path, **kw):
    a = json.loads((folder / "audit.json").read_text())
    r = json.loads((folder / "roofline.json").read_text())
    b = BenchResult.model_validate_json((folder / "bench.json").read_text())
    s = ServerConfig.model_validate_json((folder / "server.json").read_text())
    return build_plan(audit=a, roofline=r, bench=b, server=s, **kw)


@pytest.mark.parametrize("name", ["healthy", "healthy-quick", "kv-fits"])
def test_healthy_runs_get_no_p0_p1_and_no_generic_lever(name):
    plan = plan_of(GPU / name)
    assert not [x.id for x in plan.levers if x.priority in ("P0", "P1")]
    assert not GENERIC & {x.id for x in plan.levers}
    f = plan.facts
    assert f["load.tps_falling"].value is False and f["load.tps_fall_share"].value >= FALL_SHARE
    assert f["load.queueing_tail"].value is False and f["load.ttft_tail_ratio"].value < TAIL_RATIO
    assert "proc.cpu_saturated" in {u.fact for u in plan.unknowns}  # what would earn the host-bound lever


def test_healthy_kv_cache_is_seen_in_gpu_memory():
    f = plan_of(GPU / "healthy").facts
    assert f["load.kv_on_gpu"].value is True
    assert "4.0 GiB of KV cache" in f["load.kv_on_gpu"].source and "15.0 GiB of weights" in f["load.kv_on_gpu"].source


def test_short_prompts_do_not_judge_prefill():
    """128-token prompts: TTFT is the first decode step and the round trip, not prefill."""
    f = plan_of(GPU / "healthy").facts
    assert "regime.prefill_eff" not in f


def test_layers_off_the_gpu_stay_the_first_action():
    plan = plan_of(GPU / "ngl16")
    assert plan.levers[0].id == "llamacpp.offload_all"
    assert "-ngl 999" in plan.top_actions[0]


def test_one_slot_is_still_named():
    plan = plan_of(GPU / "p1")
    assert plan.levers[0].id == "llamacpp.parallel"
    assert "load.tps_falling" not in plan.facts  # judged inside the slots only: flat past one slot is a limit, not a fall



def test_no_kv_on_the_gpu_advice_for_a_host_whose_audit_found_no_gpu():
    """A llama-server on a CPU-only host (the audit: no NVIDIA GPU) whose throughput fell under
    load got the P0 'keep the KV cache on the GPU … every layer on the GPU (-ngl all)'."""
    from infergap.plan.conditions import Fact

    base = {"engine.name": Fact(value="llama.cpp", source="test"), "load.tps_falling": Fact(value=True, source="bench")}
    with_gpu = build_plan(facts={**base, "audit.gpus_found": Fact(value=1, source="audit host.gpus")})
    cpu = build_plan(facts={**base, "audit.gpus_found": Fact(value=0, source="audit host.gpus")})
    assert "engine.throughput_falls" in {x.id for x in with_gpu.levers}
    assert "engine.throughput_falls" not in {x.id for x in cpu.levers + cpu.wont_help}
    assert not any("GPU" in t for t in cpu.top_actions), cpu.top_actions
