"""Facts the plan reasons on, gathered from whatever inputs exist: an audit report, a roofline
result, a bench result, the server's configuration (live or from its log) and engine-log facts.

Every fact records where it was read. A fact no input supports is absent, and a lever that
depends on it becomes an *unknown* with the command that would find out (:data:`HOW_TO_FIND`).
Regime thresholds (stated so a reader can disagree): latency-bound when batch-1 throughput is
below half of the per-GPU memory bound (fixed per-step costs — launches, collectives,
synchronisation — then take at least as long as reading the weights); communication-bound when
the roofline puts at least 25 % of the batch-1 step in collectives; throughput-bound when the last
doubling of concurrency gained less than 10 % output tok/s; slots saturated when, past the
server's slot count, the median TTFT at least doubled while output tok/s gained less than 25 %
(requests wait for a slot instead of joining the batch); host-bound when the GPU was busy less
than 60 % of the time at a load that kept every slot occupied (the engine's CPU side — sampling,
the HTTP loop, batch assembly — paces the steps); weights not on the GPU when the GPU memory in
use under load stayed below 95 % of the model's weight bytes (a single server on the GPU can only
use less than its weights when some of them live in host memory).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from infergap.bench.regimes import HOST_BOUND_GPU_PCT, KNEE_GAIN
from infergap.gpudata import sm_of
from infergap.findings import Finding, Status
from infergap.investigators.bandwidth import MEASURED_GBPS, MEMORY_BANDWIDTH
from infergap.investigators.engine_log import KV_PRESSURE, MOE_CONFIG
from infergap.investigators.interconnect import NVLINK_TOPOLOGY
from infergap.plan.conditions import Fact

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.bench.results import BenchResult, PointResult
    from infergap.parsers.engine_log import EngineLogFacts
    from infergap.server import ServerConfig
    from infergap.synthesis import AuditHost, AuditReport
    from infergap.parsers.process import ProcessEvidence

LATENCY_BOUND_EFF = 0.5
COMM_BOUND_SHARE = 0.25
PLATEAU_GAIN = 1.10
SATURATION_TTFT = 2.0
WEIGHTS_ON_GPU = 0.95
#: Share of GPU memory llama.cpp can give weights + KV (the rest: compute buffers, CUDA context).
KV_USABLE = 0.9


#: Fact-name prefix → the command that establishes it.
HOW_TO_FIND: dict[str, str] = {
    "proc.": "infergap doctor --url URL   (on the machine that runs the server, as its user or root: reads the serving process)",
    "gpu.": "infergap audit --format json -o audit.json   (on the serving host; reads nvidia-smi topo -m)",
    "finding.": "infergap audit --format json -o audit.json",
    "audit.": "infergap audit --format json -o audit.json   (on the serving host)",
    "engine.": "infergap plan --url URL   (or --evidence <the server's startup log>)",
    "server.": "infergap plan --url URL   (or --evidence <the server's startup log>)",
    "par.": "infergap plan --url URL   (or --evidence <the server's startup log>)",
    "log.": "infergap plan --evidence <the server's log, covering start-up and load>",
    "model.": "infergap roofline -m <config.json or name> --format json -o roofline.json",
    "regime.": "infergap bench --url URL --concurrency 1,4,16,64 --format json -o bench.json   (with a roofline for the efficiency)",
    "load.": "infergap bench --url URL --concurrency 1,4,16,64 --format json -o bench.json",
}

#: Each fact a lever's condition tests, as the question it answers in a user's words: the plan's
#: UNKNOWN section leads with these, the fact's name following as a reference.
FACT_WORDS: dict[str, str] = {
    "audit.gpus_found": "how many NVIDIA GPUs the audit found on the host",
    "engine.name": "which serving engine runs (SGLang, vLLM, llama.cpp, transformers …)",
    "engine.version": "the serving engine's version",
    "finding.allreduce.custom": "whether the engine's own all-reduce is in use (the audit's all-reduce check)",
    "gpu.count": "how many GPUs the host has",
    "gpu.nvlink": "whether the GPUs are linked by NVLink",
    "gpu.sm": "the GPUs' architecture (compute capability)",
    "load.context_too_small": "whether requests were refused for a context window too small",
    "load.error_kind": "what kind of failure the failed requests had",
    "load.graph_overflow": "whether more requests ran at once than the engine's CUDA graphs cover",
    "load.knee_cause": "what stopped throughput from growing with load (KV cache, slots, the GPU, the host)",
    "load.kv_on_gpu": "whether the KV cache stayed in GPU memory under load",
    "load.kv_pressure": "whether the KV cache ran out under load (preemptions)",
    "load.max_concurrency": "how many requests at once the measurements reached",
    "load.queueing_tail": "whether requests waited in a queue at the highest load",
    "load.shared_prefix": "whether the requests share a prompt prefix",
    "load.slots_saturated": "whether requests waited for a free server slot",
    "load.tps_falling": "whether throughput fell as load grew",
    "log.decode_no_graph": "whether decode ran without CUDA graphs (the engine's log)",
    "log.moe_default": "whether the MoE kernels ran with a default, untuned configuration (the engine's log)",
    "model.fits_gpus": "whether the model's weights fit on the GPUs present",
    "model.min_gpus": "how many GPUs the model's weights need",
    "model.mla": "whether the model uses multi-head latent attention (MLA)",
    "model.moe": "whether the model is a mixture of experts",
    "model.mtp": "whether the model ships multi-token-prediction layers (a built-in draft)",
    "model.quant": "how the model's weights are quantised",
    "par.ep": "the expert-parallel size the server runs with",
    "par.tp": "the tensor-parallel size the server runs with",
    "proc.cpu_saturated": "whether the serving process used all the CPU it was allowed",
    "proc.read": "whether the serving process itself could be read",
    "regime.client_bound": "whether the benchmark client, not the server, set the pace",
    "regime.communication_bound": "whether GPU-to-GPU communication takes a large share of each step",
    "regime.host_bound": "whether the engine's CPU side paced the GPU",
    "regime.latency_bound": "whether one request at a time runs far below the memory bound",
    "regime.prefill_slow": "whether prompt processing (prefill) runs far below its bound",
    "regime.quant_kernel_bound": "whether the quantised decode kernels, not memory bandwidth, set the pace",
    "regime.throughput_bound": "whether more concurrent requests stopped adding throughput",
    "server.cont_batching": "whether the server batches requests continuously",
    "server.cuda_graph": "whether the server runs with CUDA graphs",
    "server.custom_ar_off": "whether the engine's own all-reduce was turned off",
    "server.dp_attention": "whether the server runs data-parallel attention",
    "server.flash_attn": "whether the server uses flash attention",
    "server.gpu_visible": "whether the serving process sees a GPU",
    "server.kv_cache_dtype": "the KV cache's data type",
    "server.kv_offload": "whether the server keeps its KV cache in host memory",
    "server.n_slots": "how many request slots the server has",
    "server.ngl_all": "whether every layer is offloaded to the GPU (llama.cpp -ngl)",
    "server.prefix_caching": "whether the server caches shared prompt prefixes",
    "server.spec": "whether the server uses speculative decoding",
    "server.ubatch": "the server's micro-batch size (llama.cpp -ub)",
    "server.ubatch_small": "whether the server's micro-batch is small (llama.cpp -ub)",
    "load.running_capped": "whether the sweep ran more requests at once than the server's running cap",
    "par.gpus_unused": "how many GPUs visible to the server its parallel sizes leave unused",
    "server.attention_slow": "whether the server runs its reference attention backend",
    "server.device": "which device the server runs on",
    "server.mem_fraction_low": "whether the server may use only a low share of GPU memory (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static)",
    "server.prefill_chunk": "the server's prefill budget per step (vLLM --max-num-batched-tokens, SGLang --chunked-prefill-size)",
    "server.prefill_chunk_small": "whether the server's prefill budget per step is small",
    "server.mem_fraction": "the share of GPU memory the server may use",
    "server.attention_backend": "which attention backend the server was started with",
    "server.enforce_eager": "whether the server was started without CUDA graphs (vLLM --enforce-eager, SGLang --disable-cuda-graph)",
    "proc.gpus_visible": "how many GPUs CUDA_VISIBLE_DEVICES shows the server",
    "server.weights_on_gpu": "whether the model's weights are all in GPU memory",
}


def fact_words(fact: str) -> str:
    """``fact`` as a question in words (:data:`FACT_WORDS`); a fact without words reads as its
    name with dots and underscores as spaces, never as an empty line.

    >>> fact_words("gpu.nvlink")
    'whether the GPUs are linked by NVLink'
    >>> fact_words("load.new_thing")
    'load new thing'
    """
    return FACT_WORDS.get(fact) or fact.replace(".", " ").replace("_", " ")


_STATUS_RANK = {Status.actionable: 0, Status.expected: 1, Status.unknown: 2, Status.ok: 3, Status.not_applicable: 4}


#: Fact-name prefix → (the input that would have established it, what to do when that input was
#: given and still does not establish the fact): the plan never asks for what it was given.
WHEN_GIVEN: dict[str, tuple[str, str]] = {
    "proc.": ("process", "the serving process was read but did not settle it: re-run infergap doctor on the server's machine during a sweep"),
    "gpu.": ("audit", "not in the audit given: run infergap audit --format json -o audit.json on the serving host itself"),
    "finding.": ("audit", "not in the audit given: run infergap audit --format json -o audit.json on the serving host itself"),
    "audit.": ("audit", "not in the audit given: run infergap audit --format json -o audit.json on the serving host itself"),
    "engine.": ("server", "the server given does not report it: add its startup log with --evidence"),
    "server.": ("server", "the server given does not report it: add its startup log with --evidence"),
    "par.": ("server", "the server given does not report it: add its startup log with --evidence"),
    "log.": ("logs", "not in the logs given: add a log that covers the server's start-up and a period under load"),
    "model.": ("roofline", "not in the roofline given: run infergap roofline -m <the served model's config.json> --format json"),
    "regime.": ("bench", "the bench given has no valid point that settles it: re-run infergap bench with more concurrency levels"),
    "load.": ("bench", "the bench given has no valid point that settles it: re-run infergap bench with more concurrency levels"),
}


def how_to_find(fact: str, given: set[str] | frozenset[str] = frozenset()) -> str:
    """The command that would establish ``fact``. ``given``: the inputs the plan had (``audit``,
    ``roofline``, ``bench``, ``server``, ``server-unreachable``, ``logs``); when the input that
    would establish the fact was among them, say what else would (never the command the user just ran)."""
    for p, cmd in HOW_TO_FIND.items():
        if fact.startswith(p):
            src, instead = WHEN_GIVEN.get(p, ("", ""))
            if src == "server" and "server-unreachable" in given:
                return "the server given could not be reached: re-run when it answers, or add its startup log with --evidence"
            if src and src in given:
                if src == "server" and "logs" in given:
                    return "neither the server nor the logs given report it: check the engine's launch arguments"
                return instead
            if src == "server" and "logs" in given:
                return "not in the logs given: infergap plan --url URL (the running server)"
            return cmd
    return "infergap doctor --url URL"




def _put(facts: dict[str, Fact], name: str, value: Any, source: str, overwrite: bool = False) -> None:
    if value is None or (name in facts and not overwrite):
        return
    facts[name] = Fact(value=value, source=source)


def _norm_kv(dt: str) -> str:
    d = dt.lower()
    return "fp8" if d in ("fp8",) else d


def from_audit(facts: dict[str, Fact], audit: AuditReport) -> None:
    """GPU facts from the audit's host summary and interconnect findings; every finding's worst
    status as ``finding.<id>``. ``audit`` is the validated report (a JSON document is validated
    by :func:`infergap.plan.build.build_plan` or :func:`infergap.plan.inputs.load_audit`); the
    check ids and detail keys read here are the writing investigators' constants."""
    _host_facts(facts, audit.host)
    worst: dict[str, Finding] = {}
    for f in audit.findings:
        cur = worst.get(f.id)
        if cur is None or _STATUS_RANK[f.status] < _STATUS_RANK[cur.status]:
            worst[f.id] = f
    for fid, f in worst.items():
        ev = f.evidence[0].source if f.evidence else None
        _put(facts, f"finding.{fid}", f.status.value, f"audit {fid}" + (f": {ev}" if ev else ""))
    bw = [f.details[MEASURED_GBPS] for f in audit.findings
          if f.id == MEMORY_BANDWIDTH and isinstance(f.details.get(MEASURED_GBPS), (int, float))]
    if bw:
        _put(facts, "gpu.measured_bw_GBps", round(min(bw), 1), f"audit {MEMORY_BANDWIDTH}: device-to-device copy {min(bw) / 1000:.2f} TB/s (slowest GPU)")
    if MOE_CONFIG in worst:
        _put(facts, "log.moe_default", worst[MOE_CONFIG].status == Status.actionable, f"audit {MOE_CONFIG}")
    if KV_PRESSURE in worst:
        _put(facts, "load.kv_pressure", worst[KV_PRESSURE].status == Status.actionable, f"audit {KV_PRESSURE}")
    nv = worst.get(NVLINK_TOPOLOGY)
    if nv is not None:
        e = nv.evidence[0] if nv.evidence else None
        src = f"audit {NVLINK_TOPOLOGY}: {e.source if e else ''} {e.value if e else ''}".strip()
        if nv.status == Status.ok:
            _put(facts, "gpu.nvlink", True, src)
        elif nv.status in (Status.expected, Status.actionable):
            _put(facts, "gpu.nvlink", False, src)


def _host_facts(facts: dict[str, Fact], host: AuditHost) -> None:
    """GPU count, name, architecture and memory from the audit's host summary (the first GPU's)."""
    gpus = [g for g in host.gpus if g.name]
    if host.gpus_read:
        _put(facts, "audit.gpus_found", len(gpus), "audit host.gpus")
    if not gpus:
        return
    g = gpus[0]
    if g.memory_total_B:
        _put(facts, "gpu.memory_B", g.memory_total_B, f"audit host.gpus: {g.name}")
    _put(facts, "gpu.count", len(gpus), "audit host.gpus")
    _put(facts, "gpu.name", g.name, "audit host.gpus")
    _put(facts, "gpu.sm", sm_of(g.name), f"compute capability of {g.name} (NVIDIA CUDA GPUs table)")
    if g.memory_total_B:
        _put(facts, "gpu.memory_GB", round(g.memory_total_B / 1e9, 1), "audit host.gpus")


def from_roofline(facts: dict[str, Fact], rl: dict[str, Any]) -> None:
    """Model facts (MoE, MLA, quantization, MTP head, GPUs a replica needs), GPU facts the audit
    did not give, the TP the bound assumed, and the collectives' share of the batch-1 step."""
    m = rl.get("model") or {}
    hw = rl.get("hardware") or {}
    src = f"roofline {m.get('name', '')}".strip()
    _put(facts, "model.name", m.get("name"), src)
    if "experts" in m:
        _put(facts, "model.moe", bool(m.get("experts")), f"{src}: {m.get('experts')} experts")
    if m.get("attention"):
        _put(facts, "model.mla", m["attention"].startswith("mla"), f"{src}: attention {m['attention']}")
    prec = m.get("precision") or {}
    q = prec.get("experts") or prec.get("dense_ffn") or prec.get("attention")
    _put(facts, "model.quant", q, f"{src}: {m.get('precision_source', 'precision')}")
    if "mtp_layers" in m:
        _put(facts, "model.mtp", bool(m["mtp_layers"]), f"{src}: {m['mtp_layers']} MTP layer(s)")
    _put(facts, "model.weight_bytes", m.get("stored_bytes"), f"{src}: stored bytes ({m.get('precision_source', 'precision')})")
    _put(facts, "model.layers", m.get("layers"), f"{src}: {m.get('layers')} layers")
    mm = rl.get("memory") or {}
    if mm.get("kv_per_seq_per_gpu_B") and mm.get("context"):
        _put(facts, "model.kv_bytes_per_token", mm["kv_per_seq_per_gpu_B"] / mm["context"], f"{src}: KV cache per token per GPU")
    if hw.get("memory_B"):
        _put(facts, "gpu.memory_B", hw["memory_B"], f"roofline hardware ({hw.get('memory_source', 'GPU table')})")
    stored, mem = m.get("stored_bytes"), hw.get("memory_B")
    if stored and mem:
        need = max(1, math.ceil(stored / (0.85 * mem)))
        _put(facts, "model.min_gpus", need, f"{src}: {stored / 1e9:.0f} GB of weights / 85 % of {mem / 1e9:.0f} GB per GPU")
    _put(facts, "gpu.count", hw.get("count"), f"roofline hardware ({hw.get('label')})")
    _put(facts, "gpu.name", hw.get("label"), "roofline hardware")
    if "gpu.sm" not in facts:
        _put(facts, "gpu.sm", sm_of(hw.get("label")), f"compute capability of {hw.get('label')} (NVIDIA CUDA GPUs table)")
    if "nvlink_GBps" in hw and (hw.get("count") or 1) > 1:
        _put(facts, "gpu.nvlink", bool(hw["nvlink_GBps"]), f"roofline GPU table: NVLink {hw['nvlink_GBps']:g} GB/s")
    par = rl.get("parallel") or {}
    _put(facts, "par.tp", par.get("tp"), "roofline --tp (assumed, not read from the server)")
    single = {b["name"]: b for b in rl.get("single_stream") or []}
    pg = single.get("per_gpu")
    if pg and pg.get("time_per_token_s"):
        share = (pg.get("collectives_s") or 0.0) / pg["time_per_token_s"]
        s = f"roofline: collectives {pg.get('collectives_s', 0) * 1e3:.2f} ms of a {pg['time_per_token_s'] * 1e3:.2f} ms per-GPU step"
        _put(facts, "regime.comm_share", round(share, 3), s)
        _put(facts, "regime.communication_bound", share >= COMM_BOUND_SHARE and (par.get("tp") or 1) > 1, s + f" (≥ {COMM_BOUND_SHARE:.0%} is communication-bound)")


def from_server(facts: dict[str, Fact], cfg: ServerConfig, overwrite: bool = False) -> None:
    """Engine, version, parallel sizes and serving flags from a :class:`~infergap.server.ServerConfig`."""
    def src(field: str) -> str:
        return cfg.sources.get(field) or cfg.url or "server"

    def put(name: str, value: Any, field: str) -> None:
        _put(facts, name, value, src(field), overwrite=overwrite)

    put("engine.name", cfg.engine, "engine")
    put("engine.version", cfg.version, "version")
    put("par.tp", cfg.tp_size, "tp_size")
    put("par.dp", cfg.dp_size, "dp_size")
    put("par.ep", cfg.ep_size if cfg.ep_size is not None else (cfg.tp_size if cfg.enable_expert_parallel else None), "ep_size")
    put("par.pp", cfg.pp_size, "pp_size")
    if cfg.disable_custom_all_reduce is not None:
        put("server.custom_ar_off", bool(cfg.disable_custom_all_reduce), "disable_custom_all_reduce")
    if getattr(cfg, "device", None):
        put("server.device", str(cfg.device).lower(), "device")
    if str(getattr(cfg, "device", None) or "").lower() == "cpu":
        pass  # vLLM's CPU build: no CUDA graphs, whatever enforce_eager says
    elif cfg.disable_cuda_graph is not None:
        put("server.cuda_graph", not cfg.disable_cuda_graph, "disable_cuda_graph")
    elif cfg.cuda_graph_max_bs or cfg.cuda_graph_bs:
        put("server.cuda_graph", True, "cuda_graph_max_bs" if cfg.cuda_graph_max_bs else "cuda_graph_bs")
    put("server.cuda_graph_max_bs", cfg.cuda_graph_max_bs, "cuda_graph_max_bs")
    put("server.max_running_requests", cfg.max_running_requests, "max_running_requests")
    if getattr(cfg, "enable_prefix_caching", None) is not None:
        put("server.prefix_caching", bool(cfg.enable_prefix_caching), "enable_prefix_caching")
    if cfg.speculative_algorithm:
        put("server.spec", str(cfg.speculative_algorithm).lower(), "speculative_algorithm")
    elif cfg.engine == "llama.cpp" and getattr(cfg, "speculative", None) is not None:
        put("server.spec", "draft" if cfg.speculative else "none", "speculative")
    elif cfg.engine in ("sglang", "vllm") and ("speculative_algorithm" in cfg.raw or "speculative_config" in cfg.raw):
        _put(facts, "server.spec", "none", cfg.sources.get("engine") or cfg.url or "server", overwrite=overwrite)
    if cfg.enable_dp_attention is not None:
        put("server.dp_attention", bool(cfg.enable_dp_attention), "enable_dp_attention")
    if cfg.kv_cache_dtype:
        put("server.kv_cache_dtype", _norm_kv(cfg.kv_cache_dtype), "kv_cache_dtype")
    put("server.n_slots", cfg.n_slots, "n_slots")
    put("server.slot_context", getattr(cfg, "slot_context", None), "slot_context")
    put("server.total_context", getattr(cfg, "total_context", None), "total_context")
    put("server.metrics", getattr(cfg, "metrics_enabled", None), "metrics_enabled")
    put("model.weight_bytes", getattr(cfg, "model_bytes", None), "model_bytes")
    put("server.offloaded_layers", getattr(cfg, "offloaded_layers", None), "offloaded_layers")
    put("server.model_layers", getattr(cfg, "model_layers", None), "offloaded_layers")
    if cfg.preemptions_total is not None:
        put("load.kv_pressure", cfg.preemptions_total > 0, "preemptions_total")


def from_engine_logs(facts: dict[str, Fact], logs: list[tuple[str, EngineLogFacts]]) -> None:
    """Facts only logs carry: decode batches without CUDA graphs, untuned MoE tables, the
    largest running batch, custom all-reduce disabled (and why)."""
    if not logs:
        return
    no_graph = sum(f.decode_no_graph for _, f in logs)
    label = logs[0][0]
    if any(f.decode_batches for _, f in logs):
        first = next((f.first_no_graph_line for _, f in logs if f.first_no_graph_line), None)
        _put(facts, "log.decode_no_graph", no_graph, f"{label}: " + (first or "every decode batch ran with CUDA graphs"))
        with_graph = sum(f.decode_graph_known - f.decode_no_graph for _, f in logs)
        if with_graph > 0:  # graphs were captured and replayed, whatever the server's flags
            _put(facts, "server.cuda_graph", True, f"{label}: {with_graph} decode batch(es) ran with 'cuda graph: True'")
    _put(facts, "log.moe_default", any(f.moe_default_count for _, f in logs), f"{label}: 'Using default MoE config' lines")
    if any(f.decode_batches or f.retractions or f.preemptions for _, f in logs):
        hit = [(lab, f) for lab, f in logs if f.retractions or f.preemptions or (f.max_token_usage or 0) >= 0.95]
        _put(facts, "load.kv_pressure", bool(hit), f"{(hit or logs)[0][0]}: " + (
            f"retractions {hit[0][1].retractions}, preemptions {hit[0][1].preemptions}, max token usage {hit[0][1].max_token_usage}" if hit
            else "no retraction, preemption or full KV cache in the decode lines"))
    runs = [f.max_running for _, f in logs if f.max_running]
    if runs:
        _put(facts, "load.running_max", max(runs), f"{label}: largest #running-req")
    for lab, f in logs:
        if f.custom_ar_disabled:
            _put(facts, "server.custom_ar_off", True, f"{lab}: Custom allreduce is disabled because {f.custom_ar_disabled[0]}", overwrite=True)
            break


#: An engine's answer to a request longer than a slot's context (llama.cpp
#: tools/server/server-context.cpp "exceeds the available context size"; vLLM/SGLang
#: "maximum context length").
_CTX_ERR = re.compile(r"exceeds the available context size|exceed_context_size|maximum context length|context length exceeded", re.I)
_CTX_TOKENS = re.compile(r"request \((\d+) tokens\) exceeds the available context size \((\d+)")


def _context_facts(facts: dict[str, Fact], bench: BenchResult) -> None:
    """Requests the server refused as longer than its context, and completed requests cut short
    (fewer output tokens than asked: a slot out of context stops generating)."""
    trials = [(p, t) for p in bench.points for t in p.trials]
    if not trials:
        return
    done = sum(t.completed for _, t in trials)
    cut = sum(t.truncated for _, t in trials)
    refused, longest, ex = 0, 0, None
    for _, t in trials:
        hits = [e for e in t.error_examples if _CTX_ERR.search(e)]
        if hits:
            ex = ex or hits[0]
            refused += sum(n for k, n in t.errors.items() if k.startswith("http_4")) or len(hits)
            for e in hits:
                m = _CTX_TOKENS.search(e)
                if m:
                    longest = max(longest, int(m.group(1)))
    total = sum(t.requests for _, t in trials)
    _put(facts, "load.context_refused", refused, "bench: " + (f"{refused} of {total} requests refused: {ex[:160]}" if refused else f"no request of {total} refused for its length"))
    if longest:
        _put(facts, "load.request_tokens_max", longest, f"bench: the server counted {longest} tokens in a refused request")
    if done:
        share = cut / done
        _put(facts, "load.truncated_share", round(share, 3), f"bench: {cut} of {done} completed requests produced fewer tokens than max_tokens")
    s = bench.settings
    if getattr(s, "input_len", None) and getattr(s, "output_len", None):
        _put(facts, "load.request_len", int(s.input_len) + int(s.output_len), f"bench settings: {s.input_len} prompt + {s.output_len} output tokens per request")


def from_bench_errors(facts: dict[str, Fact], bench: BenchResult) -> None:
    """The sweep's failed requests: ``load.error_rate`` (failed / sent over every point, requests
    cancelled with Ctrl-C not counted), ``load.error_kind`` (the most frequent kind; ``none``),
    ``load.error_cause`` (the most likely cause, :func:`infergap.bench.metrics.likely_cause`) and
    ``server.keep_alive`` (False when the server closed connections after streamed responses)."""
    from infergap.bench.metrics import likely_cause

    errors: dict[str, int] = {}
    sent = failed = 0
    for p in bench.points:
        for t in p.trials:
            cancelled = t.errors.get("cancelled", 0)
            sent += t.requests - cancelled
            failed += t.failed - cancelled
            for k, v in t.errors.items():
                if k != "cancelled":
                    errors[k] = errors.get(k, 0) + v
    conn = getattr(bench, "connections", None)
    if conn is not None and conn.fresh_per_request:
        _put(facts, "server.keep_alive", False, f"bench: {conn.note}")
    if sent <= 0:
        return
    invalid = [p.label for p in bench.points if not getattr(p, "valid", True)]
    kinds = ", ".join(f"{k} ×{v}" for k, v in sorted(errors.items(), key=lambda kv: -kv[1]))
    src = f"bench: {failed} of {sent} requests failed" + (f" ({kinds})" if kinds else "")
    if invalid:
        budget = getattr(bench.settings, "max_error_rate", 0.01)
        src += (f"; {len(invalid)} of {len(bench.points)} point(s) above the {budget:.1%} failure budget "
                f"({', '.join(invalid)}), left out of every other fact")
    _put(facts, "load.error_rate", round(failed / sent, 4), src)
    if errors:
        _put(facts, "load.error_kind", max(errors.items(), key=lambda kv: kv[1])[0], src)
        cause = likely_cause(errors)
        if cause:
            _put(facts, "load.error_cause", cause, src)
    else:
        _put(facts, "load.error_kind", "none", src)  # no failure: levers for a kind of failure do not apply


def from_bench(facts: dict[str, Fact], bench: BenchResult, roofline: dict[str, Any] | None) -> None:
    """Load and regime facts from the sweep (and the roofline, for batch-1 efficiency). Points
    above the failure budget (``valid`` False) or where no request completed are left out: their
    figures describe the requests that happened to succeed, or none."""
    _context_facts(facts, bench)
    pts = sorted([p for p in bench.points if p.mode == "concurrency" and p.concurrency and _tps(p) is not None
                  and getattr(p, "valid", True) and completed(p)], key=lambda p: p.concurrency)
    if not pts:
        return
    _put(facts, "load.max_concurrency", pts[-1].concurrency, f"bench: highest concurrency measured (c={pts[-1].concurrency})")
    ds = str(getattr(bench.settings, "dataset", "") or "")
    kind = ds.split(":", 1)[0]
    shared = kind in ("shared-prefix", "multi-turn", "mooncake")
    _put(facts, "load.shared_prefix", shared, f"bench --dataset {ds}: " + (
        "its prompts repeat a prefix (a shared system prompt, a conversation's history, a trace's shared blocks)"
        if shared else "no prompt prefix is shared by design"))
    cb = [p.label for p in bench.points if p.client_bound and getattr(p, "valid", True)]
    _put(facts, "regime.client_bound", bool(cb), "bench client health: " + (", ".join(cb) + " client-bound" if cb else "no point client-bound"))
    cpus = str((getattr(bench.environment, "client_host", None) or {}).get("cpus", ""))
    if cpus.isdigit() and int(cpus) > 0:
        _put(facts, "client.cpus", int(cpus), f"bench client host: {cpus} CPU(s) available to the client")
    if len(pts) >= 2 and pts[-1].concurrency >= 2 * pts[-2].concurrency:
        a, b = _tps(pts[-2]), _tps(pts[-1])
        if a:
            _put(facts, "regime.throughput_bound", b / a < PLATEAU_GAIN,
                 f"bench: c={pts[-2].concurrency} → c={pts[-1].concurrency} output tok/s {a:.1f} → {b:.1f} (×{b / a:.2f}; < ×{PLATEAU_GAIN} is a plateau)")
    used = [_mem_used_B(p) for p in pts]
    used = [u for u in used if u is not None]
    if used:
        _put(facts, "load.gpu_mem_used_B", max(used), "bench telemetry: most GPU memory in use during the sweep (all GPUs)")
    busy = [(p, u) for p in pts if (u := _util(p)) is not None]
    if busy:
        p, u = busy[-1]
        _put(facts, "load.gpu_util_at_max", round(u, 1), f"bench telemetry: GPU busy {u:.0f} % of the time at c={p.concurrency} (highest load)")
        _put(facts, "load.util_by_c", {q.concurrency: round(v, 1) for q, v in busy}, "bench telemetry: GPU utilisation per concurrency")
    ttft = {p.concurrency: t for p in pts if (t := _med(p, "ttft_p50_ms")) is not None}
    if ttft:
        _put(facts, "load.ttft_by_c", ttft, "bench: median TTFT (ms) per concurrency")
    _put(facts, "load.tps_by_c", {p.concurrency: _tps(p) for p in pts}, "bench: output tok/s per concurrency")
    from_engine_metrics(facts, bench)
    c1 = next((p for p in pts if p.concurrency == 1), None)
    if c1 is not None and roofline:
        single = {x["name"]: x for x in roofline.get("single_stream") or []}
        mem = single.get("per_gpu_memory") or single.get("aggregate")
        if mem:
            eff = _tps(c1) / mem["tok_s"]
            s = f"bench c=1 {_tps(c1):.2f} tok/s vs roofline {mem['name']} {mem['tok_s']:.1f} tok/s"
            _put(facts, "regime.batch1_eff", round(eff, 4), s)
            _put(facts, "regime.latency_bound", eff < LATENCY_BOUND_EFF, s + f" ({eff:.1%}; < {LATENCY_BOUND_EFF:.0%} is latency-bound)")
            bwf = facts.get("gpu.measured_bw_GBps")
            ds = ((roofline.get("hardware") or {}).get("bandwidth_GBps"))
            if bwf is not None and ds and mem.get("name") in ("aggregate", "per_gpu_memory"):
                at = mem["tok_s"] * bwf.value / ds
                _put(facts, "regime.batch1_eff_measured_bw", round(_tps(c1) / at, 4),
                     f"bench c=1 {_tps(c1):.2f} tok/s vs {at:.1f} tok/s, the bound at the {bwf.value / 1000:.2f} TB/s measured [{bwf.source}]")


def from_engine_metrics(facts: dict[str, Fact], bench: BenchResult) -> None:
    """Facts from the engine's /metrics during the sweep and the knee's explanation
    (:mod:`infergap.bench.engine_metrics`): what bent the curve (``load.knee_cause``: ``kv``,
    ``client``, ``running_limit``, ``host``, ``gpu``, ``scaling``, ``unknown``, or ``none`` when
    no point was a knee; the points of a result written without explanations are explained
    here from what it recorded), the most requests running and waiting, the fullest KV cache,
    preemptions and the prefix-cache hit rate."""
    explained = [(p, p.explanation) for p in bench.points if getattr(p, "explanation", None) is not None]
    if not explained:  # a result written before the bench explained its points: explain them from what it recorded
        from infergap.bench.engine_metrics import explain

        valid = [p for p in bench.points if getattr(p, "valid", True) and p.trials]
        explained = [(p, ex) for p, ex in zip(valid, explain(valid)) if ex is not None]
    knee = next(((p, ex) for p, ex in explained if ex.knee), None)
    if knee is not None:
        p, ex = knee
        _put(facts, "load.knee", p.label, f"bench {p.label}: {ex.line}")
        _put(facts, "load.knee_cause", ex.cause, f"bench {p.label}: {ex.line}")
    elif explained:
        labels = ", ".join(p.label for p, _ in explained)
        _put(facts, "load.knee_cause", "none", f"bench: throughput kept up with the load at every point ({labels})"
             if len(explained) > 1 else f"bench: one point ({labels}), no curve to bend")
    eng = [(p, p.engine) for p in bench.points if getattr(p, "engine", None) is not None and p.engine.available]
    for key, attr, fn in (("load.running_max", "running_max", max), ("load.waiting_max", "waiting_max", max),
                          ("load.kv_usage_max", "kv_usage_max", max), ("load.preemptions", "preemptions", sum)):
        vals = [(getattr(e, attr), p.label) for p, e in eng if getattr(e, attr) is not None]
        if vals:
            v = fn(x for x, _ in vals)
            where = max(vals)[1]
            _put(facts, key, int(v) if key != "load.kv_usage_max" else round(v, 3),
                 f"engine /metrics ({eng[0][1].engine}) during the sweep, largest at {where}" if fn is max
                 else f"engine /metrics ({eng[0][1].engine}) summed over the sweep's points")
    hits = [(e.prefix_hit_rate, p.label) for p, e in eng if e.prefix_hit_rate is not None]
    if hits:
        _put(facts, "load.prefix_hit_rate", round(max(hits)[0], 3), f"engine /metrics: prefix-cache hits at {max(hits)[1]}")


def derive(facts: dict[str, Fact]) -> None:
    """Facts computed from other facts: whether the running batch exceeds the captured CUDA-graph
    size; whether the weights are on the GPU, the slots saturated, the engine host-bound; how
    many slots the KV budget holds."""
    _derive_llamacpp(facts)
    _derive_engine_flags(facts)
    cap = facts.get("server.cuda_graph_max_bs")
    if cap is None:
        return
    seen = [(f.value, f.source) for k in ("load.running_max",) if (f := facts.get(k)) is not None]
    conc = facts.get("load.max_concurrency")
    if conc is not None:
        lim = facts.get("server.max_running_requests")
        v = min(conc.value, lim.value) if lim is not None else conc.value
        seen.append((v, conc.source + (f", capped by max_running_requests={lim.value}" if lim is not None and lim.value < conc.value else "")))
    if not seen:
        return
    v, s = max(seen, key=lambda x: x[0])
    _put(facts, "load.graph_overflow", v > cap.value, f"{s}: {v} running vs cuda_graph_max_bs={cap.value} [{cap.source}]")


def _derive_engine_flags(facts: dict[str, Fact]) -> None:
    """From vLLM's/SGLang's flags read in the serving process: CUDA graphs off (``--enforce-eager``,
    ``--disable-cuda-graph``) on a GPU server (the CPU build has none to turn on); the running
    cap (``--max-num-seqs``, ``--max-running-requests``) below the load the sweep ran; GPUs
    visible to the process that TP × DP × PP leaves unused."""
    v = {k: f.value for k, f in facts.items()}
    ee, dev = facts.get("server.enforce_eager"), v.get("server.device")
    gpu_known = dev not in (None, "cpu") or (dev is None and isinstance(v.get("gpu.count"), int) and v["gpu.count"] > 0)
    if ee is not None and ee.value is True and "server.cuda_graph" not in facts and gpu_known:
        _put(facts, "server.cuda_graph", False, ee.source + " (CUDA graphs off)")
    cap, conc = facts.get("server.max_running_requests"), facts.get("load.max_concurrency")
    if cap is not None and conc is not None and "serving process" in cap.source and isinstance(cap.value, int):
        _put(facts, "load.running_capped", conc.value > cap.value,
             f"{conc.source} against {cap.value} running at most [{cap.source}]")
    vis = v.get("proc.gpus_visible", v.get("gpu.count"))
    ranks = [x for x in (v.get("par.tp"), v.get("par.dp"), v.get("par.pp")) if isinstance(x, int) and x > 0]
    tp = facts.get("par.tp")
    if isinstance(vis, int) and vis > 0 and ranks and tp is not None and "serving process" in tp.source:
        used = 1
        for x in ranks:
            used *= x
        where = facts.get("proc.gpus_visible") or facts.get("gpu.count")
        _put(facts, "par.gpus_unused", max(0, vis - used),
             f"{' × '.join(map(str, ranks))} = {used} GPU(s) used of {vis} visible [{tp.source}; {where.source}]")


def _derive_llamacpp(facts: dict[str, Fact]) -> None:
    v = {k: f.value for k, f in facts.items()}
    if isinstance(v.get("model.min_gpus"), int) and isinstance(v.get("gpu.count"), int):
        _put(facts, "model.fits_gpus", v["model.min_gpus"] <= v["gpu.count"],
             f"{facts['model.min_gpus'].source}: {v['model.min_gpus']} GPU(s) needed, {v['gpu.count']} present")
    # weights on the GPU: the startup log's offload line first, else memory in use vs weight bytes
    off, layers = v.get("server.offloaded_layers"), v.get("server.model_layers")
    if isinstance(off, int) and isinstance(layers, int) and layers:
        _put(facts, "server.weights_on_gpu", off >= layers, f"{facts['server.offloaded_layers'].source}: offloaded {off}/{layers} layers to GPU")
    used, wb = v.get("load.gpu_mem_used_B"), v.get("model.weight_bytes")
    if used and wb:
        on = used >= WEIGHTS_ON_GPU * wb
        _put(facts, "server.weights_on_gpu", on,
             f"{facts['load.gpu_mem_used_B'].source}: {used / 1e9:.1f} GB in use vs {wb / 1e9:.1f} GB of weights "
             f"[{facts['model.weight_bytes'].source}]" + ("" if on else f" (< {WEIGHTS_ON_GPU:.0%}: part of the model is in host memory)"))
    # a slot's context too small for the requests: refused, or cut short at the slot's context
    ctx, refused, cut = v.get("server.slot_context"), v.get("load.context_refused"), v.get("load.truncated_share")
    if isinstance(ctx, int) and (refused is not None or cut is not None):
        need = max(v.get("load.request_tokens_max") or 0, v.get("load.request_len") or 0)
        small = bool(refused) or (cut is not None and cut >= 0.1 and need >= ctx)
        why = []
        if refused:
            why.append(facts["load.context_refused"].source)
        if cut:
            why.append(facts["load.truncated_share"].source)
        _put(facts, "load.context_too_small", small,
             f"{facts['server.slot_context'].source}: {ctx} tokens per slot; " + ("; ".join(why) or "no request refused or cut short"))
        if small and need:
            _put(facts, "load.context_needed", need, "largest request seen: " + (f"{need} tokens"))
    # slots saturated: past the slot count TTFT grows and throughput does not
    n, ttft, tps = v.get("server.n_slots"), v.get("load.ttft_by_c") or {}, v.get("load.tps_by_c") or {}
    if isinstance(n, int) and n >= 1 and ttft and tps:
        inside = [c for c in ttft if c <= n and tps.get(c)]
        past = [c for c in ttft if c > n and tps.get(c)]
        if not past:
            _put(facts, "load.slots_saturated", False, f"bench: no concurrency above the {n} slot(s) was measured")
        elif inside:
            a, b = max(inside), max(past)
            grew, gain = ttft[b] / max(ttft[a], 1e-9), tps[b] / max(tps[a], 1e-9)
            sat = grew >= SATURATION_TTFT and gain < 1 + KNEE_GAIN  # the bench's knee rule (bench/regimes.py)
            _put(facts, "load.slots_saturated", sat,
                 f"bench: c={a} → c={b} with {n} slot(s): median TTFT {ttft[a]:.0f} → {ttft[b]:.0f} ms (×{grew:.1f}), "
                 f"output tok/s {tps[a]:.0f} → {tps[b]:.0f} (×{gain:.2f})")
    waiting = facts.get("load.waiting_max")
    if waiting is not None and isinstance(waiting.value, int) and waiting.value > 0 and "load.slots_saturated" not in facts \
            and isinstance(n, int):
        _put(facts, "load.slots_saturated", True, f"{waiting.source}: up to {waiting.value} request(s) waiting for one of {n} slot(s)")
    # host-bound: every slot busy and the GPU mostly idle
    util = v.get("load.util_by_c") or {}
    if isinstance(n, int) and util:
        full = [c for c in util if c >= n]
        if full:
            c = min(full)
            _put(facts, "regime.host_bound", util[c] < HOST_BOUND_GPU_PCT,
                 f"bench telemetry: GPU busy {util[c]:.0f} % at c={c} with {n} slot(s) occupied (< {HOST_BOUND_GPU_PCT:.0f} % is host-bound)")
    kv_slots(facts, v, wb)


def kv_slots(facts: dict[str, Fact], v: dict[str, Any], wb: float | None) -> None:
    """``server.kv_slots_max``: the slots the KV budget holds at the current per-slot context
    (``KV_USABLE`` × GPU memory − weights, over KV bytes per token × tokens per slot). The GPU
    memory is the one the audit found; without an audit's GPU list it is the roofline's GPU (named
    with ``--gpu``), and ``server.kv_slots_assumed`` says so. An audit that found no GPU sizes
    nothing: an H200's memory says nothing of a host without one."""
    mem, kvt, ctx = v.get("gpu.memory_B"), v.get("model.kv_bytes_per_token"), v.get("server.slot_context")
    if v.get("audit.gpus_found") == 0 or not (mem and kvt and wb and isinstance(ctx, int) and ctx > 0):
        return
    budget = KV_USABLE * mem - wb
    if budget <= 0:
        return
    src = facts["gpu.memory_B"].source
    assumed = not (src.startswith("audit") or "host-reported" in src)
    note = f"; assumed: the {v.get('gpu.name') or 'GPU'} named with --gpu, no audit found it" if assumed else ""
    _put(facts, "server.kv_slots_max", int(budget // (kvt * ctx)),
         f"KV budget {budget / 1e9:.0f} GB ({KV_USABLE:.0%} of {mem / 1e9:.0f} GB GPU memory − {wb / 1e9:.1f} GB weights) "
         f"/ ({kvt / 1024:.0f} KiB per token × {ctx} tokens per slot){note}")
    if assumed:
        _put(facts, "server.kv_slots_assumed", True, src)


def completed(p: PointResult) -> int:
    """Requests of a bench point that completed (over its trials); a point where none did has no
    throughput to speak of (its 0 tok/s measures the failures, not the server)."""
    trials = getattr(p, "trials", None)
    return sum(t.completed for t in trials) if trials else 1


def _med(p: PointResult, key: str) -> float | None:
    s = p.summary.get(key)
    return s.median if s is not None else None


def _mem_used_B(p: PointResult) -> float | None:
    t = getattr(p, "telemetry", None)
    gs = [g for g in (t.gpus if t is not None else []) if g.mem_used_MiB_max is not None]
    return sum(g.mem_used_MiB_max for g in gs) * 1024 * 1024 if gs else None


def _util(p: PointResult) -> float | None:
    t = getattr(p, "telemetry", None)
    gs = [g.util_pct_mean for g in (t.gpus if t is not None else []) if g.util_pct_mean is not None]
    return sum(gs) / len(gs) if gs else None


def _tps(p: PointResult) -> float | None:
    s = p.summary.get("output_throughput_tps")
    return s.median if s is not None else None


def gpu_absent_from_logs(facts: dict[str, Fact], logs: list[tuple[str, EngineLogFacts]]) -> None:
    """``server.gpu_visible`` False from an engine log line that says the GPU is not there
    (llama.cpp: ``failed to initialize CUDA: no CUDA-capable device is detected``, ``no usable GPU
    found, --gpu-layers option will be ignored``; :mod:`infergap.parsers.llamacpp_log`)."""
    for label, f in logs:
        line = (getattr(f, "args", None) or {}).get("no_gpu_line")
        if line:
            _put(facts, "server.gpu_visible", False, f"{label}: {line!r}")
            return
