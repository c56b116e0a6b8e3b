"""The serving engine's configuration against the host: CUDA-graph limits vs the concurrency the
server runs, tensor parallelism over PCIe-only GPUs with custom all-reduce off, FP8 KV cache on
SM120 under a prefill-heavy load.

The configuration is ``ctx.server`` (from ``infergap audit --url URL``) or, without one, built
from the first engine log in the evidence (:func:`infergap.server.server_config_from_log`).
Severity model: decode beyond the captured CUDA-graph size runs eagerly (P1, flag flip); custom
all-reduce off on more than two PCIe-only GPUs is the engines' design (expected); FP8 KV buys
capacity, not speed — flat or slower in public reports, worse when prefill dominates (P2).
"""

from __future__ import annotations

from infergap import checks
from infergap.checks import finding
from infergap.facts import Facts
from infergap.findings import Finding, Remedy, Status, ev
from infergap.gpudata import sm_of
from infergap.investigators.base import facts_of
from infergap.investigators.interconnect import allreduce_from_server
from infergap.server import ServerConfig, fill_from_log, server_config_from_log

NAME = "server_config"


def _src(cfg: ServerConfig, field: str) -> str:
    return cfg.sources.get(field, cfg.url or "server")


def _summary(cfg: ServerConfig, subject: str) -> Finding:
    if cfg.reachable is False:
        return finding("server.config", Status.unknown, subject=subject,
                       title=f"Server {cfg.url} did not answer", evidence_=[ev(cfg.url or "server", e) for e in cfg.errors[:4]],
                       impact="Its configuration could not be read; the audit goes on without it.")
    fields = [k for k in ("engine", "version", "model", "tp_size", "dp_size", "ep_size", "pp_size", "attention_backend",
                          "moe_runner_backend", "cuda_graph_max_bs", "max_running_requests", "max_batched_tokens",
                          "enable_prefix_caching", "enable_chunked_prefill", "mem_fraction", "kv_cache_dtype", "kv_cache_bytes",
                          "kv_tokens", "context_length", "quantization", "n_slots") if getattr(cfg, k) is not None]
    status = Status.ok if fields else Status.unknown
    title = f"{cfg.engine or 'Unknown engine'} {cfg.version or ''}".strip() + (f" serving {cfg.model or cfg.served_model_name}" if (cfg.model or cfg.served_model_name) else "")
    evidence = [ev(_src(cfg, k), f"{k}={getattr(cfg, k)}") for k in fields[:20]]
    evidence += [ev(cfg.url or "server", e) for e in cfg.errors[:4]]
    impact = None if fields else (
        "The server answered, but none of the configuration endpoints read (SGLang /server_info, vLLM /version and "
        "/metrics, llama.cpp /props and /slots) named its engine or settings, so the checks of the engine's "
        "configuration did not run. Pass the engine's startup log with --evidence (or its admin key with --api-key).")
    return finding("server.config", status, subject=subject, title=title, evidence_=evidence, impact=impact,
                   details=cfg.model_dump(mode="json", exclude={"raw"}, exclude_none=True))


def _graph_limit(cfg: ServerConfig, subject: str, observed: int | None, observed_src: str | None) -> Finding | None:
    cap = cfg.cuda_graph_max_bs
    if cfg.disable_cuda_graph:
        return None  # reported by engine.cuda_graph from the log, or below as config
    if cap is None or observed is None:
        return None
    if observed > cap:
        new = 1
        while new < observed:
            new *= 2
        return finding("server.cuda_graph_max_bs", Status.actionable, subject=subject,
                       title=f"CUDA graphs cover batches up to {cap}, the server runs {observed} requests at once",
                       evidence_=[ev(_src(cfg, "cuda_graph_max_bs"), f"cuda_graph_max_bs={cap}"), ev(observed_src or "server", f"running requests: {observed}")],
                       expected_value=f"cuda_graph_max_bs ≥ {observed}",
                       impact="Decode steps of batches above the captured size run without CUDA graphs (launch-bound), which keeps requests "
                              "in flight longer and the batch large.",
                       remedy=checks.remedy("server.cuda_graph_max_bs", commands=[("restart", {"n": new})],
                                     note="Each captured size costs GPU memory taken from the KV cache."))
    return finding("server.cuda_graph_max_bs", Status.ok, subject=subject,
                   title=f"CUDA graphs cover the running batch ({observed} ≤ {cap})",
                   evidence_=[ev(_src(cfg, "cuda_graph_max_bs"), f"cuda_graph_max_bs={cap}"), ev(observed_src or "server", f"running requests: {observed}")])


def _is_sm120(facts: Facts) -> bool | None:
    """True when the GPUs are compute capability 12.x (NVML or torch), else when a GPU's name is an
    SM120 part in the GPU data; None when neither the capability nor a name is known."""
    caps = facts.compute_capabilities()
    if caps:
        return any(c.startswith("12.") for c in caps)
    names = facts.gpu_names()
    return any(sm_of(n) == 120 for n in names) if names else None


def _fp8_kv(cfg: ServerConfig, subject: str, facts: Facts, prefill_ratio: float | None) -> Finding | None:
    dt = (cfg.kv_cache_dtype or "").lower()
    if not dt.startswith("fp8"):
        return None
    sm120 = _is_sm120(facts)
    if not sm120:
        return None
    heavy = prefill_ratio is not None and prefill_ratio >= 4.0
    ev_ = [ev(_src(cfg, "kv_cache_dtype"), f"kv_cache_dtype={cfg.kv_cache_dtype}"), ev("host", "GPU compute capability 12.x (SM120)")]
    if prefill_ratio is not None:
        ev_.append(ev("load", f"prompt/generated tokens ≈ {prefill_ratio:.1f}"))
    if heavy:
        return finding("server.kv_fp8_sm120", Status.actionable, subject=subject, title="FP8 KV cache on SM120 under a prefill-heavy load",
                       evidence_=ev_, expected_value="kv_cache_dtype auto (BF16) unless KV capacity is the limit",
                       impact="FP8 KV doubles capacity but adds quantize/dequantize work in attention; public reports on SM120 show "
                              "prefill flat or slower. With long prompts and enough memory, BF16 KV is the faster choice.",
                       remedy=Remedy(commands=["restart with --kv-cache-dtype auto, and compare with a benchmark"]))
    return finding("server.kv_fp8_sm120", Status.expected, subject=subject,
                   title="FP8 KV cache on SM120: buys capacity, not speed", evidence_=ev_,
                   impact="Expected trade-off; revisit only if prefill dominates the load.")


def investigate(ctx: object) -> list[Finding]:
    """Findings from the live server's configuration (``ctx.server``) or, without one, from the
    first engine log's startup arguments; none when there is neither."""
    host = facts_of(ctx)
    cfg: ServerConfig | None = getattr(ctx, "server", None)
    logs = host.engine_logs()
    live = cfg is not None
    if cfg is None:
        if not logs:
            return []
        part, facts = logs[0]
        cfg = server_config_from_log(facts, part.label)
    elif logs:  # the same server's startup log fills what it does not serve (a copy: ctx.server is shared)
        part, facts = logs[0]
        cfg = cfg.model_copy(deep=True)
        fill_from_log(cfg, server_config_from_log(facts, part.label))
    subject = cfg.url or (logs[0][0].label if logs else "server")
    out = [_summary(cfg, subject)] if live else []
    if cfg.reachable is False:
        return out
    observed, observed_src = None, None
    if cfg.running_requests is not None:
        observed, observed_src = int(cfg.running_requests), cfg.sources.get("running_requests")
    for part, facts in logs:
        if facts.max_running and (observed is None or facts.max_running > observed):
            observed, observed_src = facts.max_running, part.label
    log_graph = any(f.decode_no_graph for _, f in logs)
    if live and not log_graph:
        x = _graph_limit(cfg, subject, observed, observed_src)
        if x:
            out.append(x)
    log_ar = any(f.custom_ar_disabled for _, f in logs)
    x = allreduce_from_server(cfg, subject, host, log_ar)
    if x:
        out.append(x)
    ratio = None
    prompt = cfg.raw.get("prompt_tokens_total")
    gen = cfg.raw.get("generation_tokens_total")
    if isinstance(prompt, (int, float)) and isinstance(gen, (int, float)) and gen > 0:
        ratio = prompt / gen
    x = _fp8_kv(cfg, subject, host, ratio)
    if x:
        out.append(x)
    return out
