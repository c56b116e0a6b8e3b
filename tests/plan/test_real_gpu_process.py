"""The misconfigured H200 llama-server runs of tests/fixtures/real-gpu/h200-llama-process: the
doctor's first action there named each cause; re-planned from the same inputs with the serving
process it names the flag or variable, and without it (a remote server) the shape of the sweep
still names the cause, with its numbers."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from infergap.bench.results import BenchResult
from infergap.parsers.llamacpp_log import parse_llamacpp_log
from infergap.plan.build import build_plan
from infergap.server import ServerConfig
from infergap.parsers.process import ProcessEvidence

D = Path(__file__).resolve().parents[1] / "fixtures" / "real-gpu" / "h200-llama-process"
GENERIC = {"llamacpp.host_bound", "engine.host_overhead", "llamacpp.offload_all"}


def plan_of(case: str, process: bool = True, logs: bool = True):
    d = D / case
    proc = json.loads((d / "process.json").read_text())
    cpu = proc.pop("cpu_during_sweep", None)
    engine_logs = None
    if logs:
        with gzip.open(d / "server.log.gz", "rt", errors="replace") as f:
            engine_logs = [("evidence/server.log", parse_llamacpp_log(f))]
    return build_plan(audit=json.loads((d / "audit.json").read_text()), roofline=json.loads((d / "roofline.json").read_text()),
                      bench=BenchResult.model_validate_json((d / "bench.json").read_text()),
                      server=ServerConfig.model_validate_json((d / "server.json").read_text()), engine_logs=engine_logs,
                      process=ProcessEvidence.model_validate(proc) if process else None, process_cpu=cpu if process else None)


@pytest.mark.parametrize("case, lever, evidence", [
    ("nkvo", "llamacpp.kv_offload", "--no-kv-offload"),
    ("nocb", "llamacpp.cont_batching", "--no-cont-batching"),
    ("ub32", "llamacpp.ubatch", "-ub 32"),
    ("novis", "engine.gpu_not_visible", "no CUDA-capable device"),
])
def test_the_doctor_named_each_cause_first(case, lever, evidence):
    saved = json.loads((D / case / "plan.json").read_text())
    assert saved["levers"][0]["id"] == lever
    assert saved["levers"][0]["title"] in (D / case / "doctor.txt").read_text().split("top actions")[1].splitlines()[1]
    plan = plan_of(case)
    assert plan.levers[0].id == lever
    assert any(evidence in s for s in plan.levers[0].selected_by), plan.levers[0].selected_by
    assert not GENERIC & {x.id for x in plan.levers}, [x.id for x in plan.levers]


@pytest.mark.parametrize("case, lever, fact, numbers", [
    ("nkvo", "engine.throughput_falls", "load.tps_falling", "68 → 27 → 18"),
    ("nocb", "engine.queueing_tail", "load.queueing_tail", "p99 3718 ms vs p50 452 ms"),
    ("ub32", "engine.prefill_slow", "regime.prefill_slow", "2,883 tok/s"),
    ("novis", "engine.gpu_not_visible", "server.gpu_visible", "GPU busy at most 0 %"),
])
def test_without_the_process_the_sweep_names_the_cause(case, lever, fact, numbers):
    """A remote server: no process, no log; the behaviour against the bounds decides."""
    plan = plan_of(case, process=False, logs=False)
    assert plan.levers[0].id == lever, [(x.id, x.selected_by) for x in plan.levers]
    assert numbers in plan.facts[fact].source
    assert not GENERIC & {x.id for x in plan.levers}


def test_the_kv_cache_missing_from_gpu_memory_is_seen():
    f = plan_of("nkvo").facts
    assert f["load.kv_on_gpu"].value is False and "NVML" in f["load.kv_on_gpu"].source
    assert f["proc.gpu_memory_B"].value == 15799943168


def test_a_gpu_the_server_cannot_see_is_the_first_fact_with_the_log():
    plan = plan_of("novis", process=False)
    assert next(iter(plan.facts)) == "server.gpu_visible"
    assert "failed to initialize CUDA" in plan.facts["server.gpu_visible"].source
    assert "-ngl 999" not in " ".join(plan.top_actions)
    with_proc = plan_of("novis")
    assert "CUDA_VISIBLE_DEVICES=''" in with_proc.facts["server.gpu_visible"].source or \
        "failed to initialize CUDA" in with_proc.facts["server.gpu_visible"].source


def test_the_healthy_q8_0_server_is_kernel_bound_for_its_type():
    """The healthy Q8_0 run: no P0/P1, no generic lever; the lower efficiency is explained by the
    weight type, named, with its numbers, and llama-bench on the same build agrees (42.5 % of the
    bound against F16's 65.7 %)."""
    saved = json.loads((D / "q8" / "plan.json").read_text())
    assert saved["facts"]["model.quant"]["value"] == "q8_0"
    plan = plan_of("q8")
    assert not [x.id for x in plan.levers if x.priority in ("P0", "P1")], [(x.id, x.selected_by) for x in plan.levers]
    assert not GENERIC & {x.id for x in plan.levers}
    qk = plan.facts["regime.quant_kernel_bound"]
    assert qk.value is True and "kernel-bound for Q8_0" in qk.source and "184.93 tok/s" in qk.source
    assert "no.host_tuning_quant_kernels" in {x.id for x in plan.wont_help}
    assert "kernel-bound for Q8_0" in plan.gap.summary
    bench = json.loads((D / "q8" / "llama-bench-q8_0.json").read_text())[0]
    bound = plan.gap.headline[0]["bound_tok_s"]
    assert bench["model_type"] == "llama 8B Q8_0" and 0.40 < bench["avg_ts"] / bound < 0.45


def test_the_f16_twin_is_not_called_kernel_bound():
    f16 = Path(__file__).resolve().parents[1] / "fixtures" / "real-gpu" / "h200-llama-server" / "healthy-quick"
    plan = build_plan(audit=json.loads((f16 / "audit.json").read_text()), roofline=json.loads((f16 / "roofline.json").read_text()),
                      bench=BenchResult.model_validate_json((f16 / "bench.json").read_text()),
                      server=ServerConfig.model_validate_json((f16 / "server.json").read_text()))
    assert "regime.quant_kernel_bound" not in plan.facts and "kernel-bound" not in plan.gap.summary
