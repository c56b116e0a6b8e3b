"""llama.cpp's ``llama-server`` log as evidence: how many layers went to the GPU, flash attention,
the KV cache's type and size, the total and per-slot context, the slots, graph reuse, decode speed.

Line shapes from llama.cpp's own sources (``src/llama-model.cpp`` "offloaded %d/%d layers to GPU",
``src/llama-context.cpp`` "n_ctx = ", "n_ctx_seq"/"n_ctx_per_seq", "flash_attn", "rounding down to",
``src/llama-kv-cache.cpp`` "K (f16): … MiB", ``tools/server/server-context.cpp`` "n_slots = …,
n_ctx_slot = …, kv_unified = …", "graphs reused", ``print_timing`` "eval time … tokens per
second") and from public logs (ggml-org/llama.cpp#12171, #17300). Releases since late 2025 print a
``0.03.126.586 I `` time-and-level prefix and, at the default verbosity, no model-loading lines:
then the offload and KV lines are absent and the facts say so (None), never "all on the GPU".
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from infergap.parsers.engine_log import EngineLogFacts

_PREFIX = re.compile(r"^\d+\.\d\d\.\d\d\d\.\d\d\d [IWEDT] ")
#: Lines only llama.cpp prints (after the optional time-and-level prefix).
_LINE = re.compile(
    r"^(?:srv +\w+: |slot +\w+: |llama_model_loader: |load_tensors: |llm_load_tensors: |llama_context: |"
    r"llama_init_from_model: |llama_new_context_with_model: |llama_kv_cache\w*: |ggml_cuda_init: |"
    r"common_init_from_params: |main: server is listening on |main: HTTP server is listening|"
    r"ggml_cuda_init: failed to initialize CUDA|warning: no usable GPU found|"
    r"cmn +\w+: |srv  llama_server: |"
    # the offload messages of src/llama-model.cpp, pasted without their function's prefix
    r"offloaded \d{1,5}/\d{1,5} layers to GPU$|offloading (?:output layer|\d{1,5} repeating layers) to (?:CPU|GPU)$)")

_OFFLOAD = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_SLOTS = re.compile(r"n_slots = (\d+)")
_SLOT_CTX = re.compile(r"n_ctx_slot = (\d+)|n_ctx_(?:per_)?seq\s*=\s*(\d+)")
_CTX = re.compile(r"(?:llama_context|llama_init_from_model|llama_new_context_with_model): n_ctx\s*=\s*(\d+)")
_ROUNDED = re.compile(r"n_ctx is not divisible by n_seq_max - rounding (?:down|up) to (\d+)")
_UNIFIED = re.compile(r"kv_unified = '(\w+)'")
_FA = re.compile(r"flash_attn\s*=\s*(\w+)|flash attention is (enabled|disabled)")
_KTYPE = re.compile(r"type_k = '(\w+)'|\bK \((\w+)\): ")
_VTYPE = re.compile(r"type_v = '(\w+)'|\bV \((\w+)\): ")
_GRAPHS = re.compile(r"graphs reused =\s*(\d+)")
_EVAL = re.compile(r"(?<!prompt )eval time =.*?([\d.]+) tokens per second")
_BUILD = re.compile(r"^(?:main: )?build: (\d+) \(([0-9a-f]+)\)|build_info: (b\S+)")
_MODEL = re.compile(r"loading model '([^']+)'")
#: Model weight buffers per backend ("CPU buffer size = 5459.93 MiB", "CUDA0 model buffer size = …",
#: "CPU_Mapped model buffer size = …"), and the GPU ggml_cuda_init found ("Device 0: NVIDIA H800, compute capability 9.0").
_BUFFER = re.compile(r"^(?:llm_)?load_tensors: +(\w+?)(?:_Mapped)?(?: model)? buffer size = +([\d.]+) MiB")
_DEVICE = re.compile(r"^Device \d+: (NVIDIA [^,]+), compute capability")
#: Lines that say the server has no GPU: ``common/arg.cpp`` (-ngl's handler, "no usable GPU found,
#: --gpu-layers option will be ignored") and ggml-cuda's ``ggml_cuda_init`` ("failed to initialize
#: CUDA: no CUDA-capable device is detected", the cudaGetErrorString text of cudaErrorNoDevice).
_NO_GPU = ("no usable GPU found", "failed to initialize CUDA", "no CUDA-capable device is detected")


def is_llamacpp_line(line: str) -> bool:
    """True for a line of a llama.cpp (``llama-server``) log.

    >>> is_llamacpp_line("0.03.126.586 I srv    load_model: initializing, n_slots = 16, n_ctx_slot = 2048, kv_unified = 'false'")
    True
    >>> is_llamacpp_line("load_tensors: offloaded 49/49 layers to GPU"), is_llamacpp_line("INFO 05-01 12:00:00 [api_server.py:1] x")
    (True, False)
    >>> is_llamacpp_line("offloaded 0/49 layers to GPU")  # the message alone, its prefix left out of a paste
    True
    """
    return bool(_LINE.match(_PREFIX.sub("", line.lstrip(), count=1)))


def parse_llamacpp_log(lines: Iterable[str]) -> EngineLogFacts:
    """Parse a ``llama-server`` log, streaming, into :class:`EngineLogFacts` with
    ``engine = "llama.cpp"``; what only llama.cpp says goes into ``args`` under these names:
    ``offloaded_layers``/``model_layers`` (the offload line), ``n_slots``, ``n_ctx_slot``,
    ``n_ctx`` (all slots), ``kv_unified``, ``flash_attn``, ``type_k``/``type_v``,
    ``graphs_reused_max``, ``eval_tok_s_median`` (decode speed of the requests it timed),
    ``ctx_rounded_to``, ``model``, ``weights_cpu_mib``/``weights_gpu_mib`` (model buffers in host
    and GPU memory, MiB), ``gpu_name`` (the first CUDA device) and ``no_gpu_line`` (the first
    line saying there is no usable GPU). A key is absent when the log
    does not say it.

    Lines of llama.cpp#12171 (``tests/fixtures/evidence/llamacpp-12171-offload-all.log``):

    >>> f = parse_llamacpp_log(["load_tensors: offloaded 49/49 layers to GPU",
    ...                         "llama_init_from_model: n_ctx         = 512",
    ...                         "llama_init_from_model: flash_attn    = 1"])
    >>> f.args, f.attention_backends
    ({'offloaded_layers': 49, 'model_layers': 49, 'n_ctx': 512, 'flash_attn': 'on'}, ['flash_attn'])
    """
    f = EngineLogFacts(engine="llama.cpp")
    a: dict[str, Any] = {}
    evals: list[float] = []
    for raw in lines:
        f.lines += 1
        s = _PREFIX.sub("", raw.strip(), count=1)
        if not s:
            continue
        if m := _OFFLOAD.search(s):
            a["offloaded_layers"], a["model_layers"] = int(m.group(1)), int(m.group(2))
        if "n_slots" in s and (m := _SLOTS.search(s)):
            a["n_slots"] = int(m.group(1))
        if "n_ctx" in s:
            if m := _SLOT_CTX.search(s):
                a["n_ctx_slot"] = int(m.group(1) or m.group(2))
            if m := _CTX.search(s):
                a["n_ctx"] = int(m.group(1))
            if m := _ROUNDED.search(s):
                a["ctx_rounded_to"] = a["n_ctx"] = int(m.group(1))
        if m := _UNIFIED.search(s):
            a["kv_unified"] = m.group(1) == "true"
        if "flash" in s and (m := _FA.search(s)):
            v = (m.group(1) or m.group(2)).lower()
            a["flash_attn"] = {"1": "on", "true": "on", "enabled": "on", "0": "off", "false": "off", "disabled": "off"}.get(v, v)
        if m := _KTYPE.search(s):
            a["type_k"] = m.group(1) or m.group(2)
        if m := _VTYPE.search(s):
            a["type_v"] = m.group(1) or m.group(2)
        if "graphs reused" in s and (m := _GRAPHS.search(s)):
            a["graphs_reused_max"] = max(a.get("graphs_reused_max", 0), int(m.group(1)))
        if "eval time" in s and (m := _EVAL.search(s)):
            evals.append(float(m.group(1)))
        if m := _BUILD.search(s):
            f.version = m.group(3) or f"b{m.group(1)}-{m.group(2)}"
        if m := _MODEL.search(s):
            a["model"] = m.group(1)
        if "buffer size" in s and (m := _BUFFER.match(s)):
            key = "weights_cpu_mib" if m.group(1).upper().startswith("CPU") else "weights_gpu_mib"
            a[key] = round(a.get(key, 0.0) + float(m.group(2)), 2)
        if "no_gpu_line" not in a and any(t in s for t in _NO_GPU):
            a["no_gpu_line"] = s.strip()[:300]
        if "compute capability" in s and (m := _DEVICE.match(s.strip())):
            a.setdefault("gpu_name", m.group(1).strip())
    if evals:
        evals.sort()
        a["eval_tok_s_median"] = evals[len(evals) // 2]
        a["requests_timed"] = len(evals)
    if "n_ctx" not in a and a.get("n_ctx_slot") and a.get("n_slots") and a.get("kv_unified") is False:
        a["n_ctx"] = a["n_ctx_slot"] * a["n_slots"]
    f.args = a
    if a.get("type_k"):
        f.kv_dtype = a["type_k"]
    if a.get("n_slots"):
        f.max_running_requests = a["n_slots"]
    if a.get("flash_attn") == "on":
        f.attention_backends = ["flash_attn"]
    return f


def apply_to_config(cfg: Any, facts: EngineLogFacts, source: str) -> None:
    """Fill a :class:`~infergap.server.ServerConfig` from a llama.cpp log's facts (every field
    sourced to ``source``, the log's evidence label)."""
    a = facts.args
    cfg.put("n_slots", a.get("n_slots"), source)
    cfg.put("slot_context", a.get("n_ctx_slot"), source)
    cfg.put("context_length", a.get("n_ctx_slot"), source)
    cfg.put("total_context", a.get("n_ctx"), source)
    cfg.put("offloaded_layers", a.get("offloaded_layers"), source)
    cfg.put("model_layers", a.get("model_layers"), source)
    cfg.put("model", a.get("model"), source)
    if a.get("type_k"):
        cfg.put("kv_cache_dtype", a["type_k"], source)
