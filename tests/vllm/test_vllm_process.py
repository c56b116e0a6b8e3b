"""The serving process behind a real vLLM 0.32 (CPU build), found from ``--url`` alone: its flags
read with vLLM's own argument table (``--max-num-seqs 2``, ``--enforce-eager``), its environment
kept; a vLLM started with the defaults gets no P0/P1 lever and no generic one."""

from __future__ import annotations

import pytest
from vllm_support import launch_vllm, stop_vllm, wait_vllm

from infergap.parsers.engine_args import parse_argv
from infergap.snapshot.process import serving_process

pytestmark = pytest.mark.slow
GENERIC = {"engine.host_overhead", "llamacpp.host_bound", "llamacpp.offload_all"}


def test_the_limited_vllm_is_found_from_its_url_and_its_flags_read(vllm_limited):
    ev, why = serving_process(vllm_limited.url, nvml=False)
    assert ev is not None, why
    assert ev.pid == vllm_limited.proc.pid and ev.port == int(vllm_limited.url.rsplit(":", 1)[1])
    p = parse_argv(ev.argv, ev.env)
    assert p.engine == "vllm" and p.unknown == [], p.unknown
    assert p.value("--max-num-seqs") == 2 and p.given["--max-num-seqs"] == "--max-num-seqs"
    assert p.value("--enforce-eager") is True and p.value("--max-model-len") == "2048" or p.value("--max-model-len") == 2048
    assert not p.is_given("--gpu-memory-utilization") and p.value("--gpu-memory-utilization") == 0.92
    assert ev.env.get("VLLM_CPU_KVCACHE_SPACE") == "1"


def test_a_vllm_with_the_defaults_gets_no_p0_p1_and_no_generic_lever(vllm_exe, vllm_model, tmp_path):
    from infergap.doctor import run_doctor

    s = wait_vllm(launch_vllm(vllm_exe, vllm_model, tmp_path, ("--max-model-len", "2048"), {"VLLM_CPU_KVCACHE_SPACE": "1"}))
    try:
        res = run_doctor(s.url, tmp_path / "out", quick=True, sweep=dict(concurrency=[1, 4], input_len=32, output_len=16, num_prompts=8))
    finally:
        stop_vllm(s)
    plan = res.plan
    assert next(st for st in res.stages if st.name == "process").status == "ran"
    assert not [x.id for x in plan.levers if x.priority in ("P0", "P1")], [(x.id, x.selected_by) for x in plan.levers]
    assert not GENERIC & {x.id for x in plan.levers}
    f = plan.facts
    assert f["engine.name"].value == "vllm" and f["server.enforce_eager"].value is False
    assert "not given: default" in f["server.enforce_eager"].source and "serving process" in f["server.enforce_eager"].source
    assert "server.max_running_requests" not in f or "serving process" not in f["server.max_running_requests"].source
