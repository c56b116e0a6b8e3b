"""Facts from SGLang and vLLM server logs, read line by line.

Line formats are the engines' own: SGLang logs ``[YYYY-MM-DD HH:MM:SS TP0] …`` and prints the
resolved ``server_args=ServerArgs(…)`` at start (``python/sglang/srt/server_args.py`` repr),
``Capture cuda graph bs [...]``, ``KV Cache is allocated. #tokens: N``, ``Decode batch, #running-req:
N, … cuda graph: True|False``, ``KV cache pool is full. Retract requests.``
(``python/sglang/srt/managers/scheduler*.py``). vLLM logs ``INFO mm-dd hh:mm:ss [file.py:N]``,
``vLLM API server version X``, ``non-default args: {…}``, ``Initializing a V1 LLM engine (vX) with
config: k=v, …`` (``vllm/engine/arg_utils.py``, ``vllm/v1/engine/core.py``), ``GPU KV cache size: N
tokens``. Both print ``Custom allreduce is disabled because …``
(``custom_all_reduce.py``) and ``Using default MoE config. Performance might be sub-optimal!``
(``fused_moe.py``). Examples quoted from public reports are in the project's fixtures.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field

from infergap.errors import UserError
from infergap.guard import literal, loads

_SERVER_ARGS = re.compile(r"server_args=ServerArgs\(")
_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$")
_VLLM_ENGINE = re.compile(r"Initializing a V(\d) LLM engine \(v?([^)]+)\) with config: (.*)$")
_VLLM_VERSION = re.compile(r"vLLM API server version (\S+)")
_VLLM_NAMESPACE = re.compile(r"\bargs: Namespace\((.*)\)\s*$")
_SGL_VERSION = re.compile(r"\bsglang(?:==| version:? ?|, v)(\d+\.\d+\.\d+\S*)", re.I)
_CUSTOM_AR = re.compile(r"Custom ?[Aa]ll[Rr]educe(?:V2)? is disabled because (.+?)(?:\s*To silence this warning.*)?$")
_MOE_DEFAULT = re.compile(r"Using default MoE config\. Performance might be sub-optimal!(?: Config file not found at \[?'?([^'\]]+))?")
_MOE_SGL = re.compile(r"(?:Config file not found at (\S+?)\.? Fallback|Using MoE kernel config with down_moe=False\. Performance might be sub-optimal! Config file not found at (\S+?),)")
_CAPTURE_BS = re.compile(r"Capture cuda graph bs \[([\d,\s]+)\]")
_SGL_KV = re.compile(r"KV Cache is allocated\.(?: dtype: (\S+),)? #tokens: (\d+)")
_SGL_MAXTOK = re.compile(r"max_total_num_tokens=(\d+).*?max_running_requests=(\d+)")
_VLLM_KV = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_VLLM_CONC = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_DECODE = re.compile(r"Decode batch[.,] #running-req: (\d+),(?:.*?cuda graph: (True|False))?")
_USAGE = re.compile(r"token usage: ([\d.]+)")
_GEN_TPUT = re.compile(r"gen throughput \(token/s\): ([\d.]+)")
_QUEUE = re.compile(r"#queue-req: (\d+)")
_VLLM_CAPTURE = re.compile(r'"cudagraph_capture_sizes": ?\[([\d, ]+)')
_RETRACT = re.compile(r"KV cache pool is full\. Retract requests\.(?: #retracted_reqs: (\d+))?|Decode out of memory happened")
_PREEMPT = re.compile(r"is preempted by PreemptionMode|preempted by .*? because there is not enough KV cache space")
_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|out of memory", re.I)
_ATTN = re.compile(r"Using (\w[\w ]*?) (?:attention )?backend\b")
_VLLM_GRAPH = re.compile(r"Graph capturing finished in ([\d.]+) secs")
_VLLM_V1_STATS = re.compile(r"Running: (\d+) reqs?, Waiting: (\d+) reqs?.*?(?:GPU KV cache usage|KV cache usage): ([\d.]+)%")
_TS_SGL = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")

#: Most server-args lines joined when a paste wrapped the one-line ``ServerArgs(...)``.
MAX_ARG_LINES = 400


def parse_kv_repr(text: str) -> dict[str, Any]:
    """``k=v, k=v`` as Python's dataclass repr prints it, into a dict: values are literals when
    they parse (``'a'``, ``None``, ``0.9``, ``[1, 2]``), else the raw text (``torch.bfloat16``).

    >>> parse_kv_repr("model_path='m', tp_size=4, mem_fraction_static=0.9, cuda_graph_bs=[1, 2], dtype=torch.bfloat16")
    {'model_path': 'm', 'tp_size': 4, 'mem_fraction_static': 0.9, 'cuda_graph_bs': [1, 2], 'dtype': 'torch.bfloat16'}
    """
    out: dict[str, Any] = {}
    depth = 0
    quote: str | None = None
    start = 0
    items: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
        i += 1
    items.append(text[start:])
    for item in items:
        k, sep, v = item.strip().partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_]\w*", k.strip()):
            continue
        v = v.strip()
        try:
            val: Any = literal(v)
        except ValueError:
            try:
                val = loads(v, "argument")
            except UserError:
                val = v
        out[k.strip()] = val
    return out


class EngineLogFacts(BaseModel):
    """What one SGLang or vLLM log says. ``args`` are the resolved (SGLang) or non-default and
    config (vLLM) arguments the log printed, by the engine's own names."""

    engine: str | None = None
    version: str | None = None
    lines: int = 0
    args: dict[str, Any] = Field(default_factory=dict)
    custom_ar_disabled: list[str] = Field(default_factory=list)
    moe_default_configs: list[str] = Field(default_factory=list)
    moe_default_count: int = 0
    cuda_graph_bs: list[int] | None = None
    kv_tokens: int | None = None
    kv_dtype: str | None = None
    max_running_requests: int | None = None
    max_concurrency: float | None = None
    attention_backends: list[str] = Field(default_factory=list)
    decode_batches: int = 0
    decode_no_graph: int = 0
    decode_graph_known: int = 0
    max_running: int = 0
    max_running_graph: int | None = None
    min_running_no_graph: int | None = None
    max_token_usage: float | None = None
    max_queue: int = 0
    gen_throughput_max: float | None = None
    retractions: int = 0
    retracted_reqs: int = 0
    preemptions: int = 0
    oom_lines: int = 0
    oom_examples: list[str] = Field(default_factory=list)
    first_no_graph_line: str | None = None


def _set_engine(f: EngineLogFacts, engine: str) -> None:
    if f.engine is None:
        f.engine = engine


def parse_engine_log(lines: Iterable[str]) -> EngineLogFacts:
    """Parse an SGLang or vLLM log, streaming, into :class:`EngineLogFacts`.

    A ``ServerArgs(...)`` line wrapped by a terminal or a web page is joined back (up to
    :data:`MAX_ARG_LINES` lines) before parsing. Memory is bounded (counters and short lists).
    """
    f = EngineLogFacts()
    dec: dict[str, Any] = {"batches": 0, "known": 0, "no_graph": 0, "max_running": 0, "max_graph": 0, "min_no_graph": None,
                         "usage": -1.0, "tput": -1.0, "queue": 0}
    it = iter(lines)
    ar_seen: set[str] = set()
    moe_seen: set[str] = set()
    for line in it:
        f.lines += 1
        if "server_args=ServerArgs(" in line:
            _set_engine(f, "sglang")
            body = line.split("server_args=ServerArgs(", 1)[1]
            n = 0
            while body.count("(") + 1 > body.count(")") and n < MAX_ARG_LINES:
                nxt = next(it, None)
                if nxt is None:
                    break
                f.lines += 1
                n += 1
                if _TS_SGL.match(nxt):
                    break
                body += nxt.strip("\r\n")
            f.args.update(parse_kv_repr(body.rsplit(")", 1)[0] if body.count(")") >= body.count("(") + 1 else body))
            continue
        m = _VLLM_ENGINE.search(line) if "LLM engine" in line else None
        if m:
            _set_engine(f, "vllm")
            f.version = f.version or m.group(2).strip()
            for k, v in parse_kv_repr(m.group(3)).items():
                f.args.setdefault(k, v)
            cc = f.args.get("compilation_config")
            if isinstance(cc, dict) and f.cuda_graph_bs is None:
                sizes = cc.get("cudagraph_capture_sizes")
                if isinstance(sizes, list) and sizes:
                    f.cuda_graph_bs = sorted(int(x) for x in sizes)
            if f.cuda_graph_bs is None:
                # a wrapped or cut paste: take the sizes that are there (vLLM lists them largest first)
                body = m.group(3)
                for _ in range(3):
                    if '"cudagraph_capture_sizes"' in body:
                        break
                    nxt = next(it, None)
                    if nxt is None:
                        break
                    f.lines += 1
                    body += nxt.strip("\r\n")
                    for k, v in parse_kv_repr(nxt).items():
                        f.args.setdefault(k, v)
                cm = _VLLM_CAPTURE.search(body)
                if cm:
                    sizes = [int(x) for x in cm.group(1).split(",") if x.strip()]
                    if body[cm.end():cm.end() + 1] != "]" and sizes:
                        sizes.pop()  # the last number may be cut ("72,6" of "72,64")
                    if sizes:
                        f.cuda_graph_bs = sorted(sizes)
            continue
        if "NCCL INFO" in line:
            continue  # NCCL lines interleaved in an engine log: nothing for this parser
        m = _VLLM_VERSION.search(line) if "vLLM API" in line else None
        if m:
            _set_engine(f, "vllm")
            f.version = m.group(1)
            continue
        m = _NON_DEFAULT.search(line) if "non-default" in line else None
        if m:
            _set_engine(f, "vllm")
            try:
                d = literal(m.group(1))
                if isinstance(d, dict):
                    f.args.update({str(k): v for k, v in d.items()})
            except ValueError:
                pass
            continue
        m = _VLLM_NAMESPACE.search(line) if "Namespace(" in line else None
        if m:
            _set_engine(f, "vllm")
            for k, v in parse_kv_repr(m.group(1)).items():
                f.args.setdefault(k, v)
            continue
        if "Decode batch" in line:
            m = _DECODE.search(line)
            if m:
                run = int(m.group(1))
                dec["batches"] += 1
                if run > dec["max_running"]:
                    dec["max_running"] = run
                if m.group(2) is None:
                    pass  # older SGLang lines do not say whether the batch ran a CUDA graph
                else:
                    dec["known"] += 1
                if m.group(2) is None:
                    pass
                elif m.group(2) == "True":
                    if run > dec["max_graph"]:
                        dec["max_graph"] = run
                else:
                    dec["no_graph"] += 1
                    if dec["min_no_graph"] is None or run < dec["min_no_graph"]:
                        dec["min_no_graph"] = run
                    if f.first_no_graph_line is None:
                        f.first_no_graph_line = line.strip()[:300]
                for um in _USAGE.finditer(line):
                    dec["usage"] = max(dec["usage"], float(um.group(1)))
                gm = _GEN_TPUT.search(line)
                if gm:
                    dec["tput"] = max(dec["tput"], float(gm.group(1)))
                qm = _QUEUE.search(line)
                if qm:
                    dec["queue"] = max(dec["queue"], int(qm.group(1)))
                continue
        if "is disabled" in line and ("Custom allreduce" in line or "CustomAllreduce" in line or "CustomAllReduceV2" in line):
            m = _CUSTOM_AR.search(line)
            reason = (m.group(1) if m else "").strip().rstrip(".")
            if reason not in ar_seen:
                ar_seen.add(reason)
                f.custom_ar_disabled.append(reason)
            continue
        if "MoE" in line and ("sub-optimal" in line or "Config file not found" in line):
            m = _MOE_DEFAULT.search(line)
            m2 = None if m else _MOE_SGL.search(line)
            if m or m2:
                f.moe_default_count += 1
                path = (m.group(1) if m else (m2.group(1) or m2.group(2))) or ""
                name = path.rsplit("/", 1)[-1].strip().rstrip(".,")
                if name and name not in moe_seen and len(f.moe_default_configs) < 20:
                    moe_seen.add(name)
                    f.moe_default_configs.append(name)
                continue
        m = _CAPTURE_BS.search(line) if "Capture cuda graph bs" in line else None
        if m:
            _set_engine(f, "sglang")
            f.cuda_graph_bs = sorted(int(x) for x in m.group(1).replace(" ", "").split(",") if x)
            continue
        m = _SGL_KV.search(line) if "KV Cache is allocated" in line else None
        if m:
            _set_engine(f, "sglang")
            f.kv_tokens = int(m.group(2))
            if m.group(1):
                f.kv_dtype = m.group(1)
            continue
        m = _SGL_MAXTOK.search(line) if "max_total_num_tokens=" in line else None
        if m:
            f.kv_tokens = f.kv_tokens or int(m.group(1))
            f.max_running_requests = int(m.group(2))
            continue
        m = _VLLM_KV.search(line) if "KV cache size" in line else None
        if m:
            f.kv_tokens = int(m.group(1).replace(",", ""))
            continue
        m = _VLLM_CONC.search(line) if "Maximum concurrency" in line else None
        if m:
            f.max_concurrency = float(m.group(2))
            continue
        m = _RETRACT.search(line) if ("Retract" in line or "Decode out of memory" in line) else None
        if m:
            f.retractions += 1
            if m.group(1):
                f.retracted_reqs += int(m.group(1))
            continue
        if "preempt" in line and _PREEMPT.search(line):
            f.preemptions += 1
            continue
        m = _VLLM_V1_STATS.search(line) if "Running: " in line else None
        if m:
            f.max_running = max(f.max_running, int(m.group(1)))
            f.max_queue = max(f.max_queue, int(m.group(2)))
            f.max_token_usage = max(f.max_token_usage or 0.0, float(m.group(3)) / 100)
            continue
        if "emory" in line and _OOM.search(line):
            f.oom_lines += 1
            if len(f.oom_examples) < 5:
                f.oom_examples.append(line.strip()[:300])
            continue
        if "backend" in line:
            m = _ATTN.search(line)
            if m and ("ttention" in line or "Flash" in line) and m.group(1) not in f.attention_backends and len(f.attention_backends) < 10:
                f.attention_backends.append(m.group(1))
            continue
        m = _SGL_VERSION.search(line) if ("glang" in line and f.version is None) else None
        if m:
            f.version = m.group(1)
    if dec["batches"]:
        _set_engine(f, "sglang")
        f.decode_batches = dec["batches"]
        f.decode_no_graph = dec["no_graph"]
        f.decode_graph_known = dec["known"]
        f.max_running = max(f.max_running, dec["max_running"])
        f.max_running_graph = dec["max_graph"] or None
        f.min_running_no_graph = dec["min_no_graph"]
        f.max_queue = max(f.max_queue, dec["queue"])
    if dec["usage"] >= 0:
        f.max_token_usage = max(f.max_token_usage or 0.0, dec["usage"])
    if dec["tput"] >= 0:
        f.gen_throughput_max = dec["tput"]
    if f.engine == "sglang" and f.version is None and isinstance(f.args.get("version"), str):
        f.version = f.args["version"]
    return f
