"""engine_log investigator: engine.config, engine.cuda_graph, engine.moe_config, engine.kv_pressure,
engine.oom and its allreduce.custom lines, from public SGLang and vLLM logs."""

from __future__ import annotations

from pathlib import Path

from tests.investigators.memsnap import audit_ids, evidence_text, one, pasted, pasted_text, replaced


def _log(name: str) -> dict:
    return audit_ids(pasted(name), "engine_log")


def test_sglang_server_args_are_reported_ok_with_the_judged_arguments() -> None:
    f = one(_log("sglang-9856-server-args-wrapped.log"), "engine.config")
    assert f.status == "ok" and f.title == "SGLang (version not in log): 46 arguments logged"
    assert f.evidence[0].source == "evidence/sglang-9856-server-args-wrapped.log" and f.evidence[0].value == "tp_size=8"
    assert f.details["args"]["tp_size"] == 8


def test_vllm_config_line_with_version() -> None:
    f = one(_log("vllm-15036-engine-config.log"), "engine.config")
    assert f.status == "ok" and f.title == "vLLM 0.8.0rc2.dev9+g6eaf1e5c: 33 arguments logged"
    assert f.evidence[0].value == "tensor_parallel_size=4"


def test_version_line_alone_is_ok_citing_it(tmp_path: Path) -> None:
    line = next(l for l in evidence_text("vllm-24162-nondefault.log").splitlines() if "API server version" in l)
    f = one(audit_ids(pasted_text(tmp_path, "vllm.log", line + "\n"), "engine_log"), "engine.config")
    assert f.status == "ok" and [e.value for e in f.evidence] == ["vLLM version 0.10.2.dev378+g4d7fe40fc.d20250829"]


def test_no_engine_log_no_finding() -> None:
    assert _log("nccl-1817-shm-8gpu.log") == {}


def test_decode_batches_beyond_the_graphs_are_p1() -> None:
    f = one(_log("sglang-13023-decode-no-graph.log"), "engine.cuda_graph")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "runtime")
    assert f.title.startswith("2 of 8 decode batches ran without CUDA graphs (running batch up to 46")
    assert "--cuda-graph-max-bs 64" in f.remedy.commands[0] and f.details["without_graph"] == 2


def test_every_decode_batch_with_graphs_is_ok() -> None:
    f = one(_log("sglang-26248-kv-full.log"), "engine.cuda_graph")
    assert f.status == "ok" and f.title == "All 3 decode batches ran with CUDA graphs (running batch up to 4)"


def test_enforce_eager_is_p1(tmp_path: Path) -> None:
    text = replaced(evidence_text("vllm-15036-engine-config.log"), "enforce_eager=False", "enforce_eager=True")
    f = one(audit_ids(pasted_text(tmp_path, "vllm.log", text), "engine_log"), "engine.cuda_graph")
    assert (f.status, f.severity) == ("actionable", "P1") and f.evidence[0].value == "enforce_eager=True"


def test_graphs_not_judged_without_decode_lines() -> None:
    assert "engine.cuda_graph" not in _log("vllm-15036-engine-config.log")  # enforce_eager=False, no decode lines


def test_default_moe_config_is_p2_software() -> None:
    f = one(_log("vllm-17619-moe-default.log"), "engine.moe_config")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P2", "software")
    assert f.evidence[0].source == "evidence/vllm-17619-moe-default.log" and f.details["lines"] >= 1
    assert "engine.moe_config" not in _log("sglang-26248-kv-full.log")  # no MoE line: never ok


def test_preemption_is_p1_and_full_usage_p2() -> None:
    f = one(_log("vllm-546-swap-preempt.log"), "engine.kv_pressure")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "runtime") and f.details["preemptions"] == 1
    f = one(_log("sglang-6778-token-usage.log"), "engine.kv_pressure")
    assert (f.status, f.severity) == ("actionable", "P2") and f.title == "KV cache usage reached 96%"


def test_decode_without_pressure_is_ok_citing_usage() -> None:
    f = one(_log("sglang-13023-decode-no-graph.log"), "engine.kv_pressure")
    assert f.status == "ok" and f.evidence[0].source == "evidence/sglang-13023-decode-no-graph.log"


def test_retraction_is_p1(tmp_path: Path) -> None:
    # The decode lines of a real SGLang log, then the retraction warning as SGLang's hyperparameter-tuning
    # guide quotes it (https://docs.sglang.ai/advanced_features/hyperparameter_tuning.html).
    log = evidence_text("sglang-26248-kv-full.log")
    stamp = log.splitlines()[1].split("]", 1)[0]
    retract = stamp + "] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_token_ratio: 0.9998 -> 1.0000\n"
    f = one(audit_ids(pasted_text(tmp_path, "sglang.log", log + retract), "engine_log"), "engine.kv_pressure")
    assert (f.status, f.severity) == ("actionable", "P1") and f.details["retractions"] == 1 and "retracted" in f.title


def test_custom_allreduce_lines() -> None:
    f = one(_log("vllm-13719-custom-ar.log"), "allreduce.custom")
    assert f.status == "expected" and f.severity is None
    f = one(_log("vllm-4770-custom-ar-no-p2p.log"), "allreduce.custom")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "runtime")  # the log does not say why P2P failed
    assert f.evidence[0].value.startswith("Custom allreduce is disabled because")


def test_out_of_memory_is_p1_with_the_line() -> None:
    f = one(_log("vllm-15039-lora-oom.log"), "engine.oom")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "runtime") and f.title == "Out-of-memory reported 1 time(s)"
    assert "CUDA out of memory. Tried to allocate 128.00 MiB" in f.evidence[0].value
    assert "engine.oom" not in _log("sglang-26248-kv-full.log")  # no OOM line: never an ok


def test_pasted_launch_command_gives_the_judged_flags() -> None:
    # dphnAI/sonar#1114: the command line is the only place the paste says --enforce-eager.
    f = one(_log("aphrodite-1114-enforce-eager.log"), "engine.cuda_graph")
    assert (f.status, f.severity) == ("actionable", "P1") and f.evidence[0].value == "enforce_eager=True"
    cfg = one(_log("aphrodite-1114-enforce-eager.log"), "engine.config")
    assert cfg.details["args"]["tensor_parallel_size"] == 2 and "served_model_name" not in cfg.details["args"]


def test_old_vllm_stats_line_gives_kv_usage() -> None:
    from infergap.parsers.engine_log import parse_engine_log

    f = parse_engine_log(["INFO:     Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 31.4 tokens/s, Running: 1 reqs, "
                          "Swapped: 0 reqs, Pending: 3 reqs, GPU KV cache usage: 96.5%, CPU KV cache usage: 0.0%."])
    assert (f.max_running, f.max_queue, f.max_token_usage) == (1, 3, 0.965)


def test_llamacpp_layers_on_the_cpu_are_actionable_and_all_on_the_gpu_ok() -> None:
    f = one(_log("llmllamacpp-19-one-layer.log"), "engine.offload")
    assert (f.status, f.severity) == ("actionable", "P1") and f.evidence[0].value == "offloaded 1/35 layers to GPU"
    assert any("-ngl 999" in c for c in f.remedy.commands)
    f = one(_log("llamacpp-6787-offload-none.log"), "engine.offload")
    assert f.title.startswith("33 of 33 layers run on the CPU")
    assert [e.value for e in f.evidence[1:]] == ["model buffers: 5460 MiB in host memory, 0 MiB on the GPU", "GPU: NVIDIA H800"]
    ok = one(_log("llamacpp-12171-offload-all.log"), "engine.offload")
    assert ok.status == "ok" and ok.evidence[0].value == "offloaded 49/49 layers to GPU"


def test_ollama_partial_offload_is_p1_with_the_memory_it_lacked() -> None:
    """ollama#9181: the scheduler placed 44 of 81 layers; 127.4 GiB needed against 88 GiB available."""
    from tests.investigators.memsnap import audit_ids, one, pasted

    f = one(audit_ids(pasted("ollama-9181-partial-offload.log"), "engine_log"), "engine.offload")
    assert (f.status, f.severity, f.title) == ("actionable", "P1", "37 of 81 layers run on the CPU (Ollama offloaded 44)")
    assert f.evidence[1].value == "memory.required.full 127.4 GiB (KV cache 19.5 GiB) against memory.available 88 GiB"
    assert "num_ctx" in f.remedy.commands[0]


# -- TensorRT-LLM and Triton logs -------------------------------------------------------------

def test_trtllm_out_of_memory_under_triton_is_engine_oom_with_its_own_levers() -> None:
    """TensorRT-LLM#260: the model instance fails with cudaMallocAsync out of memory; the fix of the
    same error in tensorrtllm_backend#281 was a smaller max_batch_size at build time."""
    from tests.investigators.memsnap import audit_ids, one, pasted

    f = one(audit_ids(pasted("trtllm-260-triton-oom.log"), "engine_log"), "engine.oom")
    assert (f.status, f.severity) == ("actionable", "P1")
    assert any("--max_batch_size" in c for c in f.remedy.commands) and not any("--gpu-memory-utilization" in c for c in f.remedy.commands)


def test_trtllm_kv_cache_of_a_loaded_model_is_reported() -> None:
    """tutorials#150: the KV cache TensorRT-LLM allocated is in the engine's configuration finding."""
    from tests.investigators.memsnap import audit_ids, one, pasted

    f = one(audit_ids(pasted("triton-tutorials150-trtllm-loaded.log"), "engine_log"), "engine.config")
    assert f.status == "ok" and f.title.startswith("TensorRT-LLM") and any(e.value == "kv_cache_tokens=3731744" for e in f.evidence)


def test_tensorrt_tactics_skipped_for_memory_are_expected_not_an_oom() -> None:
    """ultralytics#22271: TensorRT's builder skips tactics it has no workspace for on an Orin;
    TensorRT-LLM#493's maintainer: a warning, no problem while the engine builds."""
    from tests.investigators.memsnap import audit_ids, one, pasted

    f = one(audit_ids(pasted("ultralytics-22271-trt-tactic-skip.log"), "engine_log"), "engine.oom")
    assert f.status == "expected" and "5 tactic(s)" in f.title
