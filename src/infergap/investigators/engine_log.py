"""SGLang and vLLM server logs: resolved arguments, custom all-reduce, CUDA graphs, MoE configs,
KV-cache pressure, out-of-memory.

Severity model: decode batches that run without CUDA graphs pay kernel-launch overhead on every
step (public: 1.7–4× TPOT at small and medium batch) (P1, a flag flip); retractions and
preemptions recompute work and collapse throughput (a public SGLang report: ~14× after
retraction) (P1); "Using default MoE config" means an untuned Triton MoE table (P2, a small
change: tune it); custom all-reduce disabled on more than two PCIe-only GPUs is by design
(expected); disabled because P2P is unavailable is a host problem (P1).
"""

from __future__ import annotations

from infergap import checks
from infergap.checks import finding
from infergap.findings import Finding, Remedy, Severity, Status, ev
from infergap.investigators.base import facts_of
from infergap.investigators.interconnect import allreduce_from_engine_log
from infergap.parsers.engine_log import JUDGED_ARGS, EngineLogFacts

NAME = "engine_log"
#: Check ids other stages read from this module's findings (the plan: ``finding.<id>`` facts).
MOE_CONFIG = "engine.moe_config"
KV_PRESSURE = "engine.kv_pressure"


def _next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _config(label: str, f: EngineLogFacts) -> Finding | None:
    a = f.args
    keys = JUDGED_ARGS
    shown = {k: a[k] for k in keys if k in a}
    if f.cuda_graph_bs:
        shown["cuda_graph_bs_captured"] = f"{min(f.cuda_graph_bs)}..{max(f.cuda_graph_bs)} ({len(f.cuda_graph_bs)} sizes)"
    if f.kv_tokens:
        shown["kv_cache_tokens"] = f.kv_tokens
    if f.attention_backends:
        shown["attention_backends_logged"] = ", ".join(f.attention_backends)
    engine = {"sglang": "SGLang", "vllm": "vLLM", "tensorrt_llm": "TensorRT-LLM"}.get(f.engine or "", f.engine or "engine")
    if not shown and not f.version and not a:
        return None  # a log excerpt without startup lines: the other findings say what it shows
    # What the finding reports must be cited: the judged arguments, else the others, else the version line.
    cited = shown or {k: v for k, v in a.items() if isinstance(v, (str, int, float, bool)) or v is None}
    evidence = [ev(label, f"{k}={v}") for k, v in list(cited.items())[:16]] or [ev(label, f"{engine} version {f.version}" if f.version else f"{len(a)} arguments logged")]
    return finding("engine.config", Status.ok, subject=label,
                   title=f"{engine} {f.version or '(version not in log)'}" + (f": {len(a)} arguments logged" if a else ""),
                   evidence_=evidence,
                   details={"engine": f.engine, "version": f.version, "args": {k: v for k, v in a.items() if isinstance(v, (str, int, float, bool)) or v is None}})


def _cuda_graph(label: str, f: EngineLogFacts) -> Finding | None:
    if str(f.args.get("device_config", "")).lower() == "cpu":
        return None  # vLLM's CPU build (device_config=cpu in its engine config line): there are no CUDA graphs to capture
    off = f.args.get("disable_cuda_graph") is True or f.args.get("enforce_eager") is True
    if off:
        return finding("engine.cuda_graph", Status.actionable, subject=label, severity=Severity.P1, title="CUDA graphs are disabled",
                       evidence_=[ev(label, "disable_cuda_graph=True" if f.args.get("disable_cuda_graph") is True else "enforce_eager=True")],
                       expected_value="CUDA graphs on for decode",
                       impact="Every decode step launches each kernel from Python; at small and medium batch this costs 1.7–4× TPOT in public measurements.",
                       remedy=Remedy(commands=["restart without --disable-cuda-graph (SGLang) / --enforce-eager (vLLM)"]))
    if not f.decode_graph_known:
        return None  # no decode lines, or lines that do not say (older SGLang)
    if f.decode_no_graph:
        cap = max(f.cuda_graph_bs) if f.cuda_graph_bs else f.args.get("cuda_graph_max_bs")
        cap_txt = f"captured up to batch {cap}" if cap else "the captured maximum"
        new = _next_pow2(max(f.max_running, 1))
        share = f.decode_no_graph / f.decode_batches
        return finding("engine.cuda_graph", Status.actionable, subject=label,
            severity=Severity.P1 if share >= 0.05 else Severity.P2,
            title=f"{f.decode_no_graph} of {f.decode_batches} decode batches ran without CUDA graphs (running batch up to {f.max_running}, {cap_txt})",
            evidence_=[ev(label, f.first_no_graph_line or "cuda graph: False")]
                     + ([ev(label, f"Capture cuda graph bs [..., {max(f.cuda_graph_bs)}]")] if f.cuda_graph_bs else [])
                     + [ev(label, f"largest decode batch with graphs: {f.max_running_graph}, smallest without: {f.min_running_no_graph}")],
            expected_value=f"cuda_graph_max_bs ≥ the running batch ({f.max_running})",
            impact="Batches larger than the largest captured graph run eagerly: each step pays kernel-launch overhead, steps get slower, "
                   "requests stay longer and the batch stays large — a self-sustaining slow state.",
            remedy=checks.remedy("engine.cuda_graph", commands=[("restart_bs", {"n": new})],
                          note="Larger graphs cost GPU memory taken from the KV cache; or cap --max-running-requests at the captured size."),
            details={"decode_batches": f.decode_batches, "without_graph": f.decode_no_graph, "max_running": f.max_running,
                     "cuda_graph_bs": f.cuda_graph_bs})
    return finding("engine.cuda_graph", Status.ok, subject=label,
                   title=f"All {f.decode_graph_known} decode batches ran with CUDA graphs (running batch up to {f.max_running})",
                   evidence_=[ev(label, f"max running-req {f.max_running}, cuda graph: True")])


def _moe(label: str, f: EngineLogFacts) -> Finding | None:
    if not f.moe_default_count:
        return None
    return finding(MOE_CONFIG, Status.actionable, subject=label, title="Fused-MoE kernels run with an untuned default config",
                   evidence_=[ev(label, f"Config file not found: {c}") for c in f.moe_default_configs[:4]] or [ev(label, "Using default MoE config. Performance might be sub-optimal!")],
                   expected_value="a tuned Triton MoE config for this GPU, expert count and dtype",
                   impact="The Triton MoE kernel falls back to generic tile sizes for this GPU and shape; tuned tables are often "
                          "faster, though not always (measure before and after).",
                   remedy=Remedy(commands=["SGLang: python benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py --model <model> --tp-size <tp>",
                                           "vLLM: python benchmarks/kernels/benchmark_moe.py --model <model> --tp-size <tp> --tune"],
                                 note="Copy the generated JSON into the engine's fused_moe configs directory (the path in the log line) and restart."),
                   details={"configs": f.moe_default_configs, "lines": f.moe_default_count})


def _kv(label: str, f: EngineLogFacts) -> Finding | None:
    if f.retractions or f.preemptions:
        n = f.retractions + f.preemptions
        what = "retracted" if f.retractions else "preempted"
        return finding(KV_PRESSURE, Status.actionable, subject=label, severity=Severity.P1,
                       title=f"KV cache ran full: requests {what} {n} time(s)",
                       evidence_=[ev(label, f"KV cache pool is full. Retract requests. ×{f.retractions}" if f.retractions else f"preempted ×{f.preemptions}")]
                                + ([ev(label, f"max token usage {f.max_token_usage:.2f}")] if f.max_token_usage is not None else []),
                       expected_value="no retractions or preemptions at the served load",
                       impact="Retracted or preempted requests are recomputed later; throughput drops and tail latency grows "
                              "(one public SGLang report: decode fell ~14× after retraction).",
                       remedy=Remedy(commands=["raise --mem-fraction-static (SGLang) / --gpu-memory-utilization (vLLM), keeping 5-8 GB free",
                                               "or cap --max-running-requests / --max-num-seqs",
                                               "or --kv-cache-dtype fp8 for twice the KV capacity"]),
                       details={"retractions": f.retractions, "retracted_reqs": f.retracted_reqs, "preemptions": f.preemptions,
                                "kv_tokens": f.kv_tokens, "max_token_usage": f.max_token_usage})
    if f.max_token_usage is not None and f.max_token_usage >= 0.95:
        return finding(KV_PRESSURE, Status.actionable, subject=label, severity=Severity.P2, title=f"KV cache usage reached {f.max_token_usage:.0%}",
                       evidence_=[ev(label, f"token usage: {f.max_token_usage:.2f}")],
                       impact="At full KV cache new requests queue and running ones may be retracted.")
    if f.decode_batches:
        return finding(KV_PRESSURE, Status.ok, subject=label,
                       title="No KV-cache retractions or preemptions in the log",
                       evidence_=[ev(label, f"max token usage {f.max_token_usage:.2f}" if f.max_token_usage is not None else f"{f.decode_batches} decode batches")])
    return None


def _oom(label: str, f: EngineLogFacts) -> Finding | None:
    if not f.oom_lines and f.tactic_memory_skips:
        # NVIDIA/TensorRT-LLM#493, the maintainer: "it is a warning. As long as the TensorRT engine is built successfully, it's not a problem."
        return finding("engine.oom", Status.expected, subject=label, title=f"TensorRT skipped {f.tactic_memory_skips} tactic(s) for lack of memory while building: a warning, not an out-of-memory",
                       evidence_=[ev(label, f"{f.tactic_memory_skips} × Skipping tactic … due to insufficient memory")],
                       impact="The builder times candidate kernels and skips those whose workspace does not fit; it builds the engine with another. "
                              "Only a build that fails, or an engine that does not load, is an out-of-memory.",
                       references=["https://github.com/NVIDIA/TensorRT-LLM/issues/493"])
    if not f.oom_lines:
        return None
    cmds = (["lower kv_cache_free_gpu_mem_fraction (default 0.9) in the tensorrt_llm model's config.pbtxt, or max_tokens_in_paged_kv_cache",
             "or rebuild the engine with a smaller --max_batch_size / --max_num_tokens (trtllm-build): its activation buffers are sized for them"]
            if f.engine == "tensorrt_llm" else ["lower --mem-fraction-static / --gpu-memory-utilization, --cuda-graph-max-bs or --chunked-prefill-size"])
    return finding("engine.oom", Status.actionable, subject=label, title=f"Out-of-memory reported {f.oom_lines} time(s)", evidence_=[ev(label, x) for x in f.oom_examples[:3]],
                   impact="The engine ran out of GPU memory (weights + KV pool + CUDA graphs + activations exceed it).", remedy=Remedy(commands=cmds))


def _offload(label: str, f: EngineLogFacts) -> Finding | None:
    """``engine.offload`` from a llama.cpp log's ``offloaded N/M layers to GPU``: every layer on the
    GPU is ok; layers left on the CPU are actionable (P1): each decode step reads their weights at
    host-memory bandwidth, an order of magnitude below the GPU's. Whether the rest would fit in
    VRAM is in the log only as its weight buffers; the GPU's memory is the host's to tell."""
    a = f.args
    if f.engine == "ollama" and a.get("no_gpu"):
        return _ollama_cpu(label, f)
    off, total = a.get("offloaded_layers"), a.get("model_layers")
    if not isinstance(off, int) or not isinstance(total, int) or total <= 0:
        return None  # only the llama.cpp and Ollama parsers set these
    who = "Ollama" if f.engine == "ollama" else f.engine
    line = ev(label, f"offloaded {off}/{total} layers to GPU")
    if off >= total:
        return finding("engine.offload", Status.ok, subject=label, title=f"All {total} layers run on the GPU", evidence_=[line])
    cpu_mib, gpu_mib = a.get("weights_cpu_mib"), a.get("weights_gpu_mib")
    bufs = [ev(label, f"model buffers: {cpu_mib or 0:.0f} MiB in host memory, {gpu_mib or 0:.0f} MiB on the GPU")] if cpu_mib or gpu_mib else []
    gpu = [ev(label, f"GPU: {a['gpu_name']}")] if a.get("gpu_name") else []
    mem = [ev(label, f"memory.required.full {a['memory_required_full_GiB']:g} GiB (KV cache {a.get('memory_required_kv_GiB') or 0:g} GiB) "
                     f"against memory.available {a['memory_available_GiB']:g} GiB")] \
        if a.get("memory_required_full_GiB") is not None and a.get("memory_available_GiB") is not None else []
    return finding("engine.offload", Status.actionable, subject=label, severity=Severity.P1,
                   title=f"{total - off} of {total} layers run on the CPU ({who} offloaded {off})",
                   evidence_=[line] + mem + bufs + gpu, expected_value=f"offloaded {total}/{total} layers to GPU",
                   impact="Layers left on the CPU are computed there: every decode step reads their weights from host memory, "
                          "an order of magnitude slower than GPU memory, and the GPU waits. Unless the model is larger than the "
                          "GPU's memory, this is the first thing to change.",
                   remedy=Remedy(commands=(["set a smaller num_ctx (the Modelfile's PARAMETER num_ctx, or the request's options): the KV cache is memory.required.kv",
                                            "OLLAMA_NUM_PARALLEL=1 ollama serve   # each parallel slot multiplies the KV cache"] if f.engine == "ollama" else [])
                                          + ["restart llama-server with -ngl 999 (--n-gpu-layers: every layer on the GPU)",
                                           "nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv   # room for the weights and the KV cache"],
                                 note="If the weights do not fit, keep the layer count the GPU holds and shrink the rest (a smaller quantization, "
                                      "a shorter context) rather than leaving most layers on the CPU."),
                   references=["https://github.com/ggml-org/llama.cpp/blob/master/tools/server/README.md", "https://github.com/simonw/llm-llama-cpp/issues/19"],
                   details={"offloaded_layers": off, "model_layers": total, "weights_cpu_mib": cpu_mib, "weights_gpu_mib": gpu_mib})


def _ollama_cpu(label: str, f: EngineLogFacts) -> Finding:
    """``engine.offload`` P0 when Ollama found no GPU it can use and runs the model on the CPU."""
    return finding("engine.offload", Status.actionable, subject=label, severity=Severity.P0,
                   title="Ollama found no usable GPU: every layer runs on the CPU",
                   evidence_=[ev(label, "no compatible GPUs were discovered (or inference compute library=cpu)")],
                   expected_value="inference compute library=cuda with the GPU named",
                   impact="Without a GPU Ollama computes every layer on the CPU, one to two orders of magnitude slower per token.",
                   remedy=Remedy(commands=["nvidia-smi   # the driver sees the GPU", "docker run --gpus=all …   # in a container: the NVIDIA runtime",
                                           "OLLAMA_DEBUG=1 ollama serve   # discovery lines name the library it tried and why it failed"]),
                   references=["https://github.com/ollama/ollama/blob/main/docs/troubleshooting.md"])


def investigate(ctx: object) -> list[Finding]:
    """Findings from every SGLang, vLLM, llama.cpp or Ollama log in the snapshot's evidence."""
    out: list[Finding] = []
    for part, f in facts_of(ctx).engine_logs():
        label = part.label
        for fn in (_config, allreduce_from_engine_log, _cuda_graph, _moe, _kv, _oom, _offload):
            x = fn(label, f)
            if x:
                out.append(x)
    return out
