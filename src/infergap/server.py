"""The serving engine's own configuration: read from the live server, or from its startup log.

:func:`introspect` asks a running server (SGLang, vLLM, llama.cpp's ``llama-server`` or
llama-cpp-python's server) for its resolved configuration over HTTP and returns one
:class:`ServerConfig`; :func:`server_config_from_log` builds the same object from an engine log,
so the plan stage gets one shape either way. Every field is optional and records where it came
from (``ServerConfig.sources``).

Endpoints (from the engines' code; see ``tests/fixtures/evidence/servers/ABOUT.md``):
SGLang ``GET /server_info`` (older ``/get_server_info``: every ``ServerArgs`` field, the scheduler
info ``max_total_num_tokens``, ``internal_states`` and ``version``), ``/model_info``
(``/get_model_info``); vLLM ``GET /version`` (``{"version"}``), ``/metrics`` (Prometheus text,
``vllm:cache_config_info`` labels), ``/server_info`` when ``VLLM_SERVER_DEV_MODE=1``; llama.cpp
``GET /props`` (``default_generation_settings.n_ctx`` per slot, ``total_slots``, ``model_path``,
``model_ftype``, ``build_info``, ``endpoint_metrics``/``endpoint_slots``), ``/slots`` (one object
per slot: ``n_ctx``, ``speculative``, ``is_processing``), ``/metrics`` (501 unless started with
``--metrics``), ``/v1/models`` ``meta`` (``n_params``, ``size`` in bytes, ``n_ctx_train``) — field
names from ``tools/server/server-context.cpp``; all: ``GET /v1/models``. An admin API key is sent as
``Authorization: Bearer``; it is never logged or stored.
"""

from __future__ import annotations

import logging
import os
import re
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from infergap.errors import UserError
from infergap.guard import loads

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.parsers.engine_log import EngineLogFacts

log = logging.getLogger(__name__)

#: Query strings sent with an endpoint: vLLM's ``/server_info`` (dev mode) answers its config as one
#: repr string by default and as sections of fields with ``config_format=json``
#: (``vllm/entrypoints/serve/dev/server_info/api_router.py``, v0.32.0); SGLang ignores the query.
QUERIES = {"/server_info": "?config_format=json"}

#: Endpoints asked, in the order their answers are applied (earlier wins for a field).
ENDPOINTS = ("/server_info", "/get_server_info", "/model_info", "/get_model_info", "/version", "/props", "/slots", "/metrics", "/v1/models", "/openapi.json")

#: SGLang ``ServerArgs`` / vLLM engine-arg names -> ServerConfig field.
_ARG_MAP: dict[str, str] = {
    "model_path": "model", "model": "model", "served_model_name": "served_model_name",
    "tp_size": "tp_size", "tensor_parallel_size": "tp_size",
    "pp_size": "pp_size", "pipeline_parallel_size": "pp_size",
    "dp_size": "dp_size", "data_parallel_size": "dp_size",
    "ep_size": "ep_size", "expert_parallel_size": "ep_size",
    "enable_expert_parallel": "enable_expert_parallel",
    "attention_backend": "attention_backend",
    "moe_runner_backend": "moe_runner_backend", "moe_backend": "moe_runner_backend",
    "moe_a2a_backend": "moe_a2a_backend", "all2all_backend": "moe_a2a_backend",
    "cuda_graph_max_bs": "cuda_graph_max_bs", "max_cudagraph_capture_size": "cuda_graph_max_bs",
    "cuda_graph_bs": "cuda_graph_bs", "cuda_graph_sizes": "cuda_graph_bs",
    "disable_cuda_graph": "disable_cuda_graph", "enforce_eager": "disable_cuda_graph",
    "max_running_requests": "max_running_requests", "max_num_seqs": "max_running_requests",
    "chunked_prefill_size": "chunked_prefill_size", "max_num_batched_tokens": "max_batched_tokens",
    "enable_prefix_caching": "enable_prefix_caching", "enable_chunked_prefill": "enable_chunked_prefill",
    "kv_cache_memory_bytes": "kv_cache_bytes",
    "mem_fraction_static": "mem_fraction", "gpu_memory_utilization": "mem_fraction",
    "kv_cache_dtype": "kv_cache_dtype", "cache_dtype": "kv_cache_dtype",
    "quantization": "quantization", "dtype": "dtype", "device_config": "device", "device": "device",
    "context_length": "context_length", "max_model_len": "context_length", "max_seq_len": "context_length",
    "max_total_num_tokens": "kv_tokens",
    "disable_custom_all_reduce": "disable_custom_all_reduce",
    "enable_dp_attention": "enable_dp_attention",
    "speculative_algorithm": "speculative_algorithm",
    "enable_torch_compile": "torch_compile",
    "disable_overlap_schedule": "disable_overlap_schedule",
    "schedule_policy": "schedule_policy",
}


class ServerConfig(BaseModel):
    """What the serving engine runs with. Units: tokens, requests, fractions of GPU memory.

    ``sources`` maps each set field to where it was read (``GET /server_info``,
    ``evidence/sglang.log``); ``errors`` lists endpoints that failed and why (one line each);
    ``raw`` keeps the engine's own argument names and values.
    """

    model_config = ConfigDict(defer_build=True)  # schema built on first use, not at import (start time)

    url: str | None = None
    reachable: bool | None = None
    engine: str | None = None
    version: str | None = None
    model: str | None = None
    served_model_name: str | None = None
    tp_size: int | None = None
    pp_size: int | None = None
    dp_size: int | None = None
    ep_size: int | None = None
    enable_expert_parallel: bool | None = None
    enable_dp_attention: bool | None = None
    attention_backend: str | None = None
    moe_runner_backend: str | None = None
    moe_a2a_backend: str | None = None
    cuda_graph_max_bs: int | None = None
    cuda_graph_bs: list[int] | None = None
    disable_cuda_graph: bool | None = None
    #: vLLM's device ("cuda", "cpu", ...): the CPU build has no CUDA graphs to capture.
    device: str | None = None
    torch_compile: bool | None = None
    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None
    #: vLLM: tokens one engine step may schedule (``max_num_batched_tokens``; the prefill chunk
    #: size when chunked prefill is on), prefix caching and chunked prefill on or off, and the KV
    #: cache size asked for in bytes (``--kv-cache-memory-bytes``, ``VLLM_CPU_KVCACHE_SPACE``).
    max_batched_tokens: int | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    kv_cache_bytes: int | None = None
    mem_fraction: float | None = None
    kv_cache_dtype: str | None = None
    kv_tokens: int | None = None
    quantization: str | None = None
    dtype: str | None = None
    context_length: int | None = None
    disable_custom_all_reduce: bool | None = None
    speculative_algorithm: str | None = None
    disable_overlap_schedule: bool | None = None
    schedule_policy: str | None = None
    n_slots: int | None = None
    #: llama.cpp: context (tokens) of one slot, and of all slots together when known.
    slot_context: int | None = None
    total_context: int | None = None
    #: llama.cpp: the model's training context, parameter count, file size (bytes) and type
    #: (``model_ftype``: "F16", "Q4_K - Medium", ...).
    train_context: int | None = None
    n_params: int | None = None
    model_bytes: int | None = None
    model_type: str | None = None
    #: llama.cpp: slots busy when asked, and whether any slot can speculate.
    slots_processing: int | None = None
    speculative: bool | None = None
    #: Whether the engine's /metrics endpoint is on (False: llama-server without ``--metrics``).
    metrics_enabled: bool | None = None
    #: llama.cpp startup log: layers offloaded to the GPU, of the model's (``offloaded N/M layers``).
    offloaded_layers: int | None = None
    model_layers: int | None = None
    running_requests: float | None = None
    waiting_requests: float | None = None
    preemptions_total: float | None = None
    sources: dict[str, str] = Field(default_factory=dict)
    errors: list[str] = Field(default_factory=list)
    raw: dict[str, Any] = Field(default_factory=dict)

    def put(self, field: str, value: Any, source: str, overwrite: bool = False) -> None:
        """Set ``field`` to ``value`` (coerced to the field's type) unless it is already set or
        ``value`` is None; record ``source``. A value that does not coerce is ignored."""
        if value is None or (not overwrite and getattr(self, field) is not None):
            return
        ann = type(self).model_fields[field].annotation
        try:
            if ann == (int | None):
                value = int(float(value)) if not isinstance(value, bool) else None
            elif ann == (float | None):
                value = float(value)
            elif ann == (bool | None):
                value = value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes")
            elif ann == (str | None):
                value = str(value)
            elif ann == (list[int] | None):
                value = sorted(int(x) for x in value) if isinstance(value, (list, tuple)) else None
        except (TypeError, ValueError):
            return
        if value is None:
            return
        setattr(self, field, value)
        self.sources[field] = source

    def apply_args(self, args: dict[str, Any], source: str) -> None:
        """Fill fields from engine arguments by their engine names (:data:`_ARG_MAP`)."""
        for k, v in args.items():
            if k in _ARG_MAP and v is not None and v != "":
                self.put(_ARG_MAP[k], v, source)
            if isinstance(v, (str, int, float, bool)) or v is None:
                self.raw.setdefault(k, v)
        if self.disable_cuda_graph is None and args.get("enforce_eager") is not None:
            self.put("disable_cuda_graph", args["enforce_eager"], source)


# -- Prometheus text ----------------------------------------------------------------------------
_PROM = re.compile(r'^([a-zA-Z_:][\w:]*)(\{([^}]*)\})?\s+(\S+)')
_LABEL = re.compile(r'(\w{1,128})="((?:[^"\\]|\\.){0,4096})"')


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Prometheus exposition text as (name, labels, value) samples; comments skipped.

    >>> parse_prometheus('vllm:num_requests_running{model_name="m"} 3.0')
    [('vllm:num_requests_running', {'model_name': 'm'}, 3.0)]
    """
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _PROM.match(line)
        if not m:
            continue
        try:
            val = float(m.group(4))
        except ValueError:
            continue
        out.append((m.group(1), dict(_LABEL.findall(m.group(3) or "")), val))
    return out


def _apply_metrics(cfg: ServerConfig, text: str, source: str) -> None:
    samples = parse_prometheus(text)
    names = {s[0] for s in samples}
    if any(n.startswith("vllm:") for n in names):
        cfg.put("engine", "vllm", source)
    elif any(n.startswith("sglang:") for n in names):
        cfg.put("engine", "sglang", source)
    elif any(n.startswith("llamacpp:") for n in names):
        cfg.put("engine", "llama.cpp", source)
    sums: dict[str, float] = {}
    for name, labels, val in samples:
        if name == "vllm:cache_config_info":
            cfg.put("kv_cache_dtype", labels.get("cache_dtype"), source)
            cfg.put("mem_fraction", labels.get("gpu_memory_utilization"), source)
            cfg.put("enable_prefix_caching", labels.get("enable_prefix_caching"), source)
            if (labels.get("kv_cache_memory_bytes") or "None").isdigit():
                cfg.put("kv_cache_bytes", labels["kv_cache_memory_bytes"], source)
            try:
                blocks, bs = int(labels.get("num_gpu_blocks", "")), int(labels.get("block_size", ""))
                cfg.put("kv_tokens", blocks * bs, source)
            except ValueError:
                pass
            for k, v in labels.items():
                cfg.raw.setdefault(f"cache_config_info.{k}", v)
        elif name in ("vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing"):
            sums["running"] = sums.get("running", 0.0) + val
        elif name in ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred"):
            sums["waiting"] = sums.get("waiting", 0.0) + val
        elif name in ("vllm:num_preemptions_total", "vllm:num_preemptions"):
            sums["preempt"] = sums.get("preempt", 0.0) + val
        elif name in ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total", "llamacpp:prompt_tokens_total"):
            sums["prompt"] = sums.get("prompt", 0.0) + val
        elif name in ("vllm:generation_tokens_total", "sglang:generation_tokens_total", "llamacpp:tokens_predicted_total"):
            sums["gen"] = sums.get("gen", 0.0) + val
    cfg.put("running_requests", sums.get("running"), source)
    cfg.put("waiting_requests", sums.get("waiting"), source)
    cfg.put("preemptions_total", sums.get("preempt"), source)
    if "prompt" in sums and "gen" in sums:
        cfg.raw["prompt_tokens_total"] = sums["prompt"]
        cfg.raw["generation_tokens_total"] = sums["gen"]


def _apply(cfg: ServerConfig, path: str, data: Any, text: str) -> None:
    """Fill ``cfg`` from one endpoint's answer (``data`` its JSON, ``text`` its body)."""
    src = f"GET {path}"
    if path in ("/server_info", "/get_server_info") and isinstance(data, dict):
        _apply_server_info(cfg, data, src)
    elif path in ("/model_info", "/get_model_info") and isinstance(data, dict):
        cfg.put("model", data.get("model_path"), src)
    elif path == "/version" and isinstance(data, dict):
        cfg.put("version", data.get("version"), src)
        cfg.put("engine", "vllm", src)
    elif path == "/props" and isinstance(data, dict):
        _apply_props(cfg, data, src)
    elif path == "/slots" and isinstance(data, list):
        _apply_slots(cfg, data, src)
    elif path == "/metrics":
        _apply_metrics(cfg, text, src)
    elif path == "/v1/models" and isinstance(data, dict):
        _apply_models(cfg, data, src)
    elif path == "/openapi.json" and isinstance(data, dict):
        title = str((data.get("info") or {}).get("title", ""))
        paths = data.get("paths") if isinstance(data.get("paths"), dict) else {}
        if "/load_model" in paths and "/reset" in paths and "/v1/chat/completions" in paths:
            # transformers serve (transformers/cli/serving/server.py registers /load_model and /reset)
            cfg.put("engine", "transformers", src)
        elif "llama" in title.lower():
            # llama-cpp-python's server (``python -m llama_cpp.server``) titles its FastAPI app
            # "🦙 llama.cpp Python API" with the package's version (llama_cpp/server/app.py); it is
            # its own engine, with its own options, not llama.cpp's llama-server.
            cfg.put("engine", "llama-cpp-python" if "python" in title.lower() else "llama.cpp", src)
            cfg.put("version", (data.get("info") or {}).get("version"), src)


def _apply_server_info(cfg: ServerConfig, data: dict[str, Any], src: str) -> None:
    """SGLang's ``/server_info`` (its server args and first scheduler's internal states) or
    vLLM's (``vllm_config`` as sections or as its repr string)."""
    if "tp_size" in data or "internal_states" in data or "model_path" in data:
        cfg.put("engine", "sglang", src)
    elif "vllm_config" in data or "vllm_env" in data:
        cfg.put("engine", "vllm", src)
    cfg.put("version", data.get("version"), src)
    args = dict(data)
    vc = data.get("vllm_config")
    if isinstance(vc, dict):
        for sect in vc.values():
            if isinstance(sect, dict):
                args.update({k: v for k, v in sect.items() if k not in args})
    elif isinstance(vc, str):
        from infergap.parsers.engine_log import parse_kv_repr

        args.update(parse_kv_repr(vc))
    cfg.apply_args(args, src)
    states = data.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        cfg.apply_args(states[0], src)


def _apply_props(cfg: ServerConfig, data: dict[str, Any], src: str) -> None:
    """llama.cpp's ``/props``: slots, model, build, metrics endpoint and the slot context."""
    cfg.put("engine", "llama.cpp", src)
    cfg.put("n_slots", data.get("total_slots"), src)
    cfg.put("max_running_requests", data.get("total_slots"), src)
    cfg.put("model", data.get("model_path"), src)
    cfg.put("version", data.get("build_info"), src)
    cfg.put("model_type", data.get("model_ftype"), src)
    if isinstance(data.get("endpoint_metrics"), bool):
        cfg.put("metrics_enabled", data["endpoint_metrics"], src)
    gen = data.get("default_generation_settings")
    if isinstance(gen, dict):
        cfg.put("context_length", gen.get("n_ctx"), src)
        cfg.put("slot_context", gen.get("n_ctx"), src)


def _apply_slots(cfg: ServerConfig, data: list[Any], src: str) -> None:
    """llama.cpp's ``/slots``: how many, their context, how many are busy, speculation."""
    slots = [x for x in data if isinstance(x, dict)]
    if slots and all("n_ctx" in x for x in slots):
        cfg.put("engine", "llama.cpp", src)
        cfg.put("n_slots", len(slots), src)
        cfg.put("slot_context", slots[0].get("n_ctx"), src)
        cfg.put("slots_processing", sum(1 for x in slots if x.get("is_processing")), src)
        cfg.put("speculative", any(bool(x.get("speculative")) for x in slots), src)
        ctxs = [x.get("n_ctx") for x in slots]
        if all(isinstance(c, int) for c in ctxs):
            cfg.raw["slot_contexts"] = ctxs


def _apply_models(cfg: ServerConfig, data: dict[str, Any], src: str) -> None:
    """``/v1/models``: the served name and context, the engine from ``owned_by``, and
    llama.cpp's model metadata."""
    items = data.get("data")
    if isinstance(items, list) and items and isinstance(items[0], dict):
        m = items[0]
        cfg.put("served_model_name", m.get("id"), src)
        cfg.put("context_length", m.get("max_model_len"), src)
        if m.get("owned_by") == "vllm":
            cfg.put("engine", "vllm", src)
        elif m.get("owned_by") == "sglang":
            cfg.put("engine", "sglang", src)
        elif m.get("owned_by") == "llamacpp":
            cfg.put("engine", "llama.cpp", src)
        elif m.get("owned_by") == "local" and isinstance(m.get("status"), dict):
            # transformers serve (transformers/cli/serving: model entries carry a load status)
            cfg.put("engine", "transformers", src)
        meta = m.get("meta")
        if isinstance(meta, dict):
            cfg.put("context_length", meta.get("n_ctx"), src)
            cfg.put("slot_context", meta.get("n_ctx"), src)
            cfg.put("train_context", meta.get("n_ctx_train"), src)
            cfg.put("n_params", meta.get("n_params"), src)
            cfg.put("model_bytes", meta.get("size"), src)


async def _fetch(client: Any, base: str, path: str, headers: dict[str, str], timeout_s: float) -> tuple[str, int | None, str, str | None]:
    """GET base+path (with its :data:`QUERIES` string): (path, status, body text, error). No
    redirect is followed (a 3xx is an error naming its target); the body is read under 8 MiB decompressed (more is an error);
    ``timeout_s`` bounds the whole request (:mod:`infergap.httpsafe`)."""
    import asyncio  # here, not at the top: an audit reads server configs from logs without an event loop

    import aiohttp

    from infergap.httpsafe import MAX_JSON_BYTES, BodyTooLarge, read_body, redirect_error

    try:
        async with client.get(base + path + QUERIES.get(path, ""), headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s), allow_redirects=False) as r:
            moved = redirect_error(r.status, r.headers.get("Location"), f"GET {path}")
            if moved:
                return path, None, "", moved.removeprefix(f"GET {path} ")
            return path, r.status, (await read_body(r, MAX_JSON_BYTES, f"GET {path}")).decode("utf-8", "replace"), None
    except BodyTooLarge as e:
        return path, None, "", str(e).removeprefix(f"GET {path}: ")
    except asyncio.TimeoutError:
        return path, None, "", f"timed out after {timeout_s:g} s"
    except aiohttp.ClientError as e:
        return path, None, "", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'connection failed'}"


async def introspect_async(url: str, api_key: str | None = None, timeout_s: float = 5.0) -> ServerConfig:
    """Ask the server at ``url`` (``http://host:port``) every endpoint of :data:`ENDPOINTS` at
    once, each with ``timeout_s``, and merge the answers into a :class:`ServerConfig`.

    Never raises for what the server does: a 401/403 ("needs an admin API key"), an HTML page
    instead of JSON, a timeout or a refused connection become one line each in
    ``ServerConfig.errors``; 404 means "not exposed" and is not an error. ``reachable`` is False
    when no endpoint answered at all. Raises ValueError for a URL that is not http(s).
    """
    import asyncio

    import aiohttp

    base = url.rstrip("/")
    if not re.match(r"^https?://[^/\s]+", base):
        raise ValueError(f"--url {url}: not an http:// or https:// URL")
    key = api_key if api_key is not None else os.environ.get("INFERGAP_API_KEY")
    headers = {"Accept": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    cfg = ServerConfig(url=base)
    answered = False
    async with aiohttp.ClientSession() as client:
        results = await asyncio.gather(*[_fetch(client, base, p, headers, timeout_s) for p in ENDPOINTS])
    conn_errors = []
    by_path = {}
    for path, status, text, err in results:
        if err:
            conn_errors.append(f"GET {path}: {err}")
            continue
        answered = True
        if status in (401, 403):
            cfg.errors.append(f"GET {path}: HTTP {status}, needs an admin API key (--api-key or INFERGAP_API_KEY)")
            continue
        if status == 404 or status == 405:
            continue
        if status == 501 and path in ("/metrics", "/slots"):
            # llama-server answers 501 for an endpoint switched off (--metrics, --slots)
            if path == "/metrics":
                cfg.put("metrics_enabled", False, f"GET {path}: HTTP 501", overwrite=True)
            else:
                cfg.raw["slots_endpoint"] = "off"
            continue
        if status is None or status >= 400:
            cfg.errors.append(f"GET {path}: HTTP {status}")
            continue
        data: Any = None
        if path != "/metrics":
            try:
                data = loads(text, f"GET {path}")
            except UserError as e:
                if "nested" in str(e) or "number" in str(e):
                    cfg.errors.append(str(e))
                    continue
                kind = "an HTML page" if "<html" in text[:2000].lower() or "<!doctype" in text[:200].lower() else "text"
                cfg.errors.append(f"GET {path}: answered {kind}, not JSON")
                continue
        elif "<html" in text[:2000].lower():
            cfg.errors.append(f"GET {path}: answered an HTML page, not Prometheus metrics")
            continue
        by_path[path] = (data, text)
    for path in ENDPOINTS:
        if path in by_path:
            _apply(cfg, path, *by_path[path])
    finish(cfg)
    if not answered:
        # the same failure on every path says one thing: the server is not there
        first = conn_errors[0].split(": ", 1)[1] if conn_errors else "no answer"
        cfg.errors = [f"{base}: no answer ({first})"]
    else:
        cfg.errors.extend(e for e in conn_errors)
    cfg.reachable = answered
    return cfg


def finish(cfg: ServerConfig) -> None:
    """Derived fields once every answer is in: llama.cpp's total context is the per-slot context
    times the slots (each slot owns ``n_ctx / n_parallel`` unless the KV cache is unified, when
    the startup log's ``n_ctx`` is the one to trust; a log-derived value is never overwritten);
    a llama.cpp server whose /metrics answered is ``metrics_enabled``."""
    if cfg.engine == "llama.cpp":
        if cfg.total_context is None and cfg.slot_context and cfg.n_slots:
            cfg.put("total_context", cfg.slot_context * cfg.n_slots, "per-slot context × slots")
        if cfg.metrics_enabled is None and cfg.running_requests is not None:
            cfg.put("metrics_enabled", True, cfg.sources.get("running_requests", "GET /metrics"))


def introspect(url: str, api_key: str | None = None, timeout_s: float = 5.0) -> ServerConfig:
    """Synchronous :func:`introspect_async` (runs its own event loop)."""
    import asyncio

    return asyncio.run(introspect_async(url, api_key=api_key, timeout_s=timeout_s))


def fill_from_log(cfg: ServerConfig, log_cfg: ServerConfig) -> list[str]:
    """Fill the fields a live server left unset (vLLM outside dev mode does not serve
    ``max_num_seqs`` or ``max_num_batched_tokens``) from the same server's startup log, each
    sourced to the log. The log counts as the same server only when it names the same engine and,
    where both say, the same model (the path or the served name). Returns the fields filled."""
    if cfg.reachable is False or not log_cfg.engine or log_cfg.engine != cfg.engine:
        return []
    live = {cfg.model, cfg.served_model_name} - {None}
    logged = {log_cfg.model, log_cfg.served_model_name} - {None}
    if live and logged and not live & logged:
        return []
    filled = []
    for field, source in log_cfg.sources.items():
        if field in type(cfg).model_fields and getattr(cfg, field) is None and getattr(log_cfg, field) is not None:
            cfg.put(field, getattr(log_cfg, field), source)
            filled.append(field)
    return filled


def server_config_from_log(facts: EngineLogFacts, source: str) -> ServerConfig:
    """A :class:`ServerConfig` from :class:`infergap.parsers.engine_log.EngineLogFacts` (an engine
    startup log), every field sourced to ``source`` (the log's evidence label)."""
    cfg = ServerConfig(engine=facts.engine, version=facts.version)
    if facts.engine == "llama.cpp":
        from infergap.parsers.llamacpp_log import apply_to_config

        apply_to_config(cfg, facts, source)
    if facts.engine:
        cfg.sources["engine"] = source
    if facts.version:
        cfg.sources["version"] = source
    cfg.apply_args(facts.args, source)
    if facts.cuda_graph_bs:
        cfg.put("cuda_graph_bs", facts.cuda_graph_bs, source)
        cfg.put("cuda_graph_max_bs", max(facts.cuda_graph_bs), source)
    cfg.put("kv_tokens", facts.kv_tokens, source)
    cfg.put("max_running_requests", facts.max_running_requests, source)
    if facts.kv_dtype:
        cfg.raw.setdefault("kv_dtype_allocated", facts.kv_dtype)
    if facts.attention_backends:
        cfg.put("attention_backend", facts.attention_backends[0], source)
    if facts.custom_ar_disabled:
        cfg.put("disable_custom_all_reduce", True, source, overwrite=True)
    return cfg
