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
import shlex
from dataclasses import dataclass
from collections.abc import Iterable, Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from infergap.errors import UserError
from infergap.guard import literal, loads
from infergap.parsers.rules import Rule, apply_first

# -- the shapes of the engines' log lines (the recogniser's line tests, named by their source records) --
_SGLANG_START = re.compile(r"\[(?:TP|DP|PP|EP)\d+(?: (?:TP|DP|PP|EP)\d+)*\] |\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[ ,]\S[^\]]*)?\] |\[\d\d:\d\d:\d\d(?: [A-Z]{2}\d+)*\] ")
_SGLANG_WORDS = ("server_args=ServerArgs(", "sglang.launch_server", "Decode batch. #running-req", "Decode batch, #running-req",
                 "Prefill batch. #new-seq", "Prefill batch, #new-seq")
_SGLANG_SCHED = re.compile(r"\[scheduler\w*\.py:\d+\] (?:Decode|Prefill) batch")
_VLLM = re.compile(r"(?:^|\) +)(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w./-]+\.py:\d+\]")
#: vLLM's version and engine lines, a pasted launch command (vLLM, or its fork Aphrodite), the
#: stats line of vLLM before 0.6 ("Avg prompt throughput: …, Running: 1 reqs, Swapped: 0 reqs").
_VLLM_WORDS = ("vLLM API server version", "LLM engine (v", "vllm serve ", "vllm.entrypoints.", "aphrodite run ",
               "Avg prompt throughput:")


def is_sglang_line(line: str) -> bool:
    """Whether a cleaned line (leading blanks removed) is a line of an SGLang server log: its
    ``[date time TP0]`` prefix, its launch and batch words, or a scheduler's batch line.

    >>> is_sglang_line("[2025-01-17 06:25:23 TP0] Decode batch. #running-req: 1, #token: 61, token usage: 0.00")
    True
    >>> is_sglang_line("INFO 05-15 11:07:08 [api_server.py:1] vLLM API server version 0.8.5")
    False
    """
    return ((line[:1] == "[" and _SGLANG_START.match(line) is not None) or any(w in line for w in _SGLANG_WORDS)
            or ("batch" in line and _SGLANG_SCHED.search(line) is not None))


def is_vllm_line(line: str) -> bool:
    """Whether a cleaned line (leading blanks removed) is a line of a vLLM server log: the
    ``INFO mm-dd hh:mm:ss [file.py:N]`` prefix (also behind a process prefix), or its version and
    engine words.

    >>> is_vllm_line("INFO 05-15 11:07:08 [api_server.py:1] vLLM API server version 0.8.5")
    True
    >>> is_vllm_line("(VllmWorker rank=1 pid=4100) INFO 05-15 11:07:20 [custom_all_reduce.py:195] Custom allreduce is disabled")
    True
    """
    if any(w in line for w in _VLLM_WORDS):
        return True
    return ((" INFO " in line or " WARNING " in line or " ERROR " in line or " DEBUG " in line
             or line.startswith(("INFO", "WARNING", "ERROR", "DEBUG", "CRITICAL"))) and _VLLM.search(line) is not None)


_USAGE = re.compile(r"token usage: ([\d.]+)")
_GEN_TPUT = re.compile(r"gen throughput \(token/s\): ([\d.]+)")
_QUEUE = re.compile(r"#queue-req: (\d+)")
_VLLM_CAPTURE = re.compile(r'"cudagraph_capture_sizes": ?\[([\d, ]+)')
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

    model_config = ConfigDict(defer_build=True)  # schema built on first use, not at import (start time)

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
    #: TensorRT builder tactics skipped for lack of memory (a warning: the build picks another).
    tactic_memory_skips: int = 0
    oom_examples: list[str] = Field(default_factory=list)
    first_no_graph_line: str | None = None
    #: Hosts the log names as its own, as printed (up to :data:`MAX_HOSTS`): the host name in
    #: NCCL's line prefix (``host:pid:tid [dev] NCCL INFO``) and the address in Ray's
    #: (``(RayWorkerWrapper pid=…, ip=A.B.C.D)``). Empty: the log does not say where it was written.
    hosts: list[str] = Field(default_factory=list)


@dataclass
class _Decode:
    """Running aggregates over SGLang's ``Decode batch`` lines (a dataclass: updated on every line)."""

    batches: int = 0
    known: int = 0
    no_graph: int = 0
    max_running: int = 0
    max_graph: int = 0
    min_no_graph: int | None = None
    usage: float = -1.0
    tput: float = -1.0
    queue: int = 0


class _State:
    """What the line rules of :func:`parse_engine_log` share: the facts, the line iterator (a
    wrapped line reads on), decode aggregates and the reasons/configs already listed."""

    def __init__(self, lines: Iterable[str]) -> None:
        self.f = EngineLogFacts()
        self.it: Iterator[str] = iter(lines)
        self.dec = _Decode()
        self.ar_seen: set[str] = set()
        self.moe_seen: set[str] = set()
        self.lines = 0  # counted here, not on the pydantic model: a plain attribute is cheaper per line

    def next_line(self) -> str | None:
        """The next line of the log (counted), or None at its end."""
        nxt = next(self.it, None)
        if nxt is not None:
            self.lines += 1
        return nxt


def _set_engine(f: EngineLogFacts, engine: str) -> None:
    if f.engine is None:
        f.engine = engine


def _server_args(st: _State, m: re.Match[str] | None, line: str) -> None:
    """SGLang's ``server_args=ServerArgs(…)``, joined back over lines a paste wrapped."""
    _set_engine(st.f, "sglang")
    body = line.split("server_args=ServerArgs(", 1)[1]
    n = 0
    while body.count("(") + 1 > body.count(")") and n < MAX_ARG_LINES:
        nxt = st.next_line()
        if nxt is None:
            break
        n += 1
        if _TS_SGL.match(nxt):
            break
        body += nxt.strip("\r\n")
    st.f.args.update(parse_kv_repr(body.rsplit(")", 1)[0] if body.count(")") >= body.count("(") + 1 else body))


#: Launch commands pasted with a log: the engine each names (the flags that follow are its arguments).
_LAUNCH = re.compile(r"(?:^|[\s`$])(?:python3? -m )?(vllm serve|vllm\.entrypoints\.\S+|sglang\.launch_server|aphrodite run)\b(.*)$")
#: Short flags of the launch commands, per engine (vLLM's and SGLang's ``--help``).
_SHORT_FLAGS = {"vllm": {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "dp": "data_parallel_size", "q": "quantization"},
                "sglang": {"tp": "tp_size", "dp": "dp_size", "ep": "ep_size", "pp": "pp_size"}}


def _flag_value(v: str) -> Any:
    """A command-line value as the engines parse it: int, float, else the string."""
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


def parse_launch_flags(cmd: str, engine: str) -> dict[str, Any]:
    """The ``--flag value`` / ``--flag=value`` / bare ``--flag`` (True) arguments of a pasted
    launch command, keyed as the engine logs them (dashes to underscores, ``-tp`` to
    ``tensor_parallel_size`` for vLLM or ``tp_size`` for SGLang). A quote the paste cut is read
    as whitespace-separated words.

    >>> parse_launch_flags("Qwen/Qwen2.5-7B --max-model-len 5000 --enforce-eager -tp 2", "vllm")
    {'max_model_len': 5000, 'enforce_eager': True, 'tensor_parallel_size': 2}
    """
    try:
        toks = shlex.split(cmd.replace("`", " "))
    except ValueError:
        toks = cmd.replace("`", " ").split()
    out: dict[str, Any] = {}
    i = 0
    while i < len(toks):
        t = toks[i]
        i += 1
        if not t.startswith("-") or t in ("-", "--") or re.fullmatch(r"-\d[\d.]*", t):
            continue
        name, eq, val = t.lstrip("-").partition("=")
        key = _SHORT_FLAGS.get(engine, {}).get(name) if not t.startswith("--") else None
        if key is None and not t.startswith("--"):
            continue  # an unknown short flag: its meaning is not known here
        key = key or name.replace("-", "_")
        if eq:
            out[key] = _flag_value(val)
        elif i < len(toks) and not (toks[i].startswith("-") and not re.fullmatch(r"-\d[\d.]*", toks[i])):
            out[key] = _flag_value(toks[i])
            i += 1
        else:
            out[key] = True
    return out


#: The engine arguments the checks judge (engine.config, engine.cuda_graph, allreduce.custom):
#: SGLang and vLLM names, and llama.cpp's (infergap.parsers.llamacpp_log).
JUDGED_ARGS = ("tp_size", "tensor_parallel_size", "dp_size", "data_parallel_size", "ep_size", "pp_size", "pipeline_parallel_size",
               "attention_backend", "cuda_graph_max_bs", "disable_cuda_graph", "enforce_eager", "max_running_requests", "max_num_seqs",
               "chunked_prefill_size", "max_num_batched_tokens", "mem_fraction_static", "gpu_memory_utilization", "kv_cache_dtype",
               "quantization", "moe_runner_backend", "moe_a2a_backend", "disable_custom_all_reduce", "speculative_algorithm",
               "offloaded_layers", "model_layers", "n_slots", "n_ctx_slot", "n_ctx", "kv_unified", "flash_attn", "type_k", "type_v",
               "max_model_len", "max_seq_len", "enable_prefix_caching", "enable_chunked_prefill", "kv_cache_memory_bytes",
               "device_config")


def _launch(st: _State, m: re.Match[str] | None, line: str) -> None:
    """A pasted launch command (``vllm serve …``, ``python -m sglang.launch_server …``): the judged
    flags (:data:`JUDGED_ARGS`) where the log itself does not say (the engine's own config lines
    win). Other flags are left out: a paste wraps or cuts a command anywhere (``--node-r``)."""
    assert m is not None
    engine = "sglang" if m.group(1).startswith("sglang") else "vllm"
    _set_engine(st.f, engine)
    for k, v in parse_launch_flags(m.group(2), engine).items():
        if k in JUDGED_ARGS:
            st.f.args.setdefault(k, v)


def _vllm_engine(st: _State, m: re.Match[str] | None, line: str) -> None:
    """vLLM's ``Initializing a V1 LLM engine (vX) with config: …``: version, arguments, graph sizes."""
    assert m is not None
    f = st.f
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
        _capture_sizes_from_paste(st, m.group(3))


def _capture_sizes_from_paste(st: _State, body: str) -> None:
    """CUDA graph sizes of a wrapped or cut engine-config paste: the numbers that are there (vLLM
    lists them largest first), reading on up to three lines."""
    f = st.f
    for _ in range(3):
        if '"cudagraph_capture_sizes"' in body:
            break
        nxt = st.next_line()
        if nxt is None:
            break
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


#: Distinct hosts kept per log (a multi-node log names one per node).
MAX_HOSTS = 8
#: NCCL's line prefix: ``hostname:pid:tid [cudaDev] NCCL INFO`` (NCCL's debug.cc prints the host name first).
_NCCL_HOST = re.compile(r"(?:^|[\s)\]])([A-Za-z0-9][\w.-]*):\d+:\d+ \[\d+\] NCCL (?:INFO|WARN)")
#: Ray's prefix on a worker's or a task's lines: ``(RayWorkerWrapper pid=3040, ip=192.0.2.191)``.
_RAY_IP = re.compile(r"\bpid=\d+, ip=([0-9A-Fa-f.:]+)\)")


def _add_host(f: EngineLogFacts, host: str) -> None:
    if host not in f.hosts and len(f.hosts) < MAX_HOSTS:
        f.hosts.append(host)


def _skip(st: _State, m: re.Match[str] | None, line: str) -> None:
    """NCCL lines interleaved in an engine log: only the host name of their prefix is kept."""
    if m is not None:
        _add_host(st.f, m.group(1))


def _vllm_version(st: _State, m: re.Match[str] | None, line: str) -> None:
    assert m is not None
    _set_engine(st.f, "vllm")
    st.f.version = m.group(1) or m.group(2)


def _non_default(st: _State, m: re.Match[str] | None, line: str) -> None:
    assert m is not None
    _set_engine(st.f, "vllm")
    try:
        d = literal(m.group(1))
    except ValueError:
        return
    if isinstance(d, dict):
        st.f.args.update({str(k): v for k, v in d.items()})


def _namespace(st: _State, m: re.Match[str] | None, line: str) -> None:
    assert m is not None
    _set_engine(st.f, "vllm")
    for k, v in parse_kv_repr(m.group(1)).items():
        st.f.args.setdefault(k, v)


def _decode(st: _State, m: re.Match[str] | None, line: str) -> None:
    """SGLang's ``Decode batch`` line: running requests, CUDA graph or not, usage, throughput, queue."""
    assert m is not None
    dec = st.dec
    run = int(m.group(1))
    dec.batches += 1
    dec.max_running = max(dec.max_running, run)
    graph = m.group(2)  # None: older SGLang lines do not say whether the batch ran a CUDA graph
    if graph == "True":
        dec.known += 1
        dec.max_graph = max(dec.max_graph, run)
    elif graph == "False":
        dec.known += 1
        dec.no_graph += 1
        if dec.min_no_graph is None or run < dec.min_no_graph:
            dec.min_no_graph = run
        if st.f.first_no_graph_line is None:
            st.f.first_no_graph_line = line.strip()[:300]
    for um in _USAGE.finditer(line):
        dec.usage = max(dec.usage, float(um.group(1)))
    gm = _GEN_TPUT.search(line)
    if gm:
        dec.tput = max(dec.tput, float(gm.group(1)))
    qm = _QUEUE.search(line)
    if qm:
        dec.queue = max(dec.queue, int(qm.group(1)))


def _custom_ar(st: _State, m: re.Match[str] | None, line: str) -> None:
    reason = (m.group(1) if m else "").strip().rstrip(".")
    if reason not in st.ar_seen:
        st.ar_seen.add(reason)
        st.f.custom_ar_disabled.append(reason)


def _moe_default(st: _State, m: re.Match[str] | None, line: str) -> None:
    """A MoE layer on the default kernel config: the config file that was not found (first 20)."""
    assert m is not None
    f = st.f
    f.moe_default_count += 1
    path = next((g for g in m.groups() if g), "")
    name = path.rsplit("/", 1)[-1].strip().rstrip(".,")
    if name and name not in st.moe_seen and len(f.moe_default_configs) < 20:
        st.moe_seen.add(name)
        f.moe_default_configs.append(name)


def _capture_bs(st: _State, m: re.Match[str] | None, line: str) -> None:
    assert m is not None
    _set_engine(st.f, "sglang")
    st.f.cuda_graph_bs = sorted(int(x) for x in m.group(1).replace(" ", "").split(",") if x)


def _sgl_kv(st: _State, m: re.Match[str] | None, line: str) -> None:
    assert m is not None
    _set_engine(st.f, "sglang")
    st.f.kv_tokens = int(m.group(2))
    if m.group(1):
        st.f.kv_dtype = m.group(1)


def _sgl_maxtok(st: _State, m: re.Match[str] | None, line: str) -> None:
    assert m is not None
    st.f.kv_tokens = st.f.kv_tokens or int(m.group(1))
    st.f.max_running_requests = int(m.group(2))


_VLLM_CONC = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


def _vllm_kv(st: _State, m: re.Match[str] | None, line: str) -> None:
    """vLLM's KV capacity, and the concurrency it allows when the same line says it (0.32 prints
    both on one line)."""
    assert m is not None
    st.f.kv_tokens = int(m.group(1).replace(",", ""))
    c = _VLLM_CONC.search(line)
    if c is not None:
        st.f.max_concurrency = float(c.group(2))


def _vllm_conc(st: _State, m: re.Match[str] | None, line: str) -> None:
    assert m is not None
    st.f.max_concurrency = float(m.group(2))


def _retract(st: _State, m: re.Match[str] | None, line: str) -> None:
    assert m is not None
    st.f.retractions += 1
    if m.group(1):
        st.f.retracted_reqs += int(m.group(1))


def _preempt(st: _State, m: re.Match[str] | None, line: str) -> None:
    st.f.preemptions += 1


def _vllm_stats(st: _State, m: re.Match[str] | None, line: str) -> None:
    assert m is not None
    f = st.f
    f.max_running = max(f.max_running, int(m.group(1)))
    f.max_queue = max(f.max_queue, int(m.group(2)))
    f.max_token_usage = max(f.max_token_usage or 0.0, float(m.group(3)) / 100)


def _oom(st: _State, m: re.Match[str] | None, line: str) -> None:
    st.f.oom_lines += 1
    if len(st.f.oom_examples) < 5:
        st.f.oom_examples.append(line.strip()[:300])


def _attention(st: _State, m: re.Match[str] | None, line: str) -> None:
    backends = st.f.attention_backends
    if m and ("ttention" in line or "Flash" in line) and m.group(1) not in backends and len(backends) < 10:
        backends.append(m.group(1))


def _sgl_version(st: _State, m: re.Match[str] | None, line: str) -> None:
    assert m is not None
    if st.f.version is None:
        st.f.version = m.group(1)


#: The line rules of an SGLang or vLLM log, in order: the first rule that takes a line ends it.
#: Each row: the pattern, its handler, the words a line needs before the pattern is tried.
RULES: tuple[Rule, ...] = (
    Rule(None, _server_args, words=("server_args=ServerArgs(",)),
    Rule(_LAUNCH, _launch, words=("vllm serve", "vllm.entrypoints", "sglang.launch_server", "aphrodite run")),
    Rule(re.compile(r"Initializing a V(\d) LLM engine \(v?([^)]+)\) with config: (.*)$"), _vllm_engine, words=("LLM engine",)),
    Rule(_NCCL_HOST, _skip, words=("NCCL INFO", "NCCL WARN"), always=True),
    # vLLM's version line: "vLLM API server version X" before 0.11, "vLLM server version X, serving
    # model M" in 0.32 with VLLM_DISABLE_LOG_LOGO, else the logo's "█ ▀▄▀ █  version X"
    # (vllm/entrypoints/serve/utils/api_utils.py log_version_and_model, v0.32.0)
    Rule(re.compile(r"vLLM (?:API )?server version (\S+?),?(?:\s|$)|█ ▀▄▀ █\s+version (\S+)"), _vllm_version,
         words=("vLLM API", "vLLM server", "▀▄▀")),
    Rule(re.compile(r"non-default args: (\{.*\})\s*$"), _non_default, words=("non-default",)),
    Rule(re.compile(r"\bargs: Namespace\((.*)\)\s*$"), _namespace, words=("Namespace(",)),
    Rule(re.compile(r"Decode batch[.,] #running-req: (\d+),(?:.*?cuda graph: (True|False))?"), _decode, words=("Decode batch",)),
    Rule(re.compile(r"Custom ?[Aa]ll[Rr]educe(?:V2)? is disabled because (.+?)(?:\s*To silence this warning.*)?$"), _custom_ar,
         words=("Custom allreduce", "CustomAllreduce", "CustomAllReduceV2"), need="is disabled", always=True),
    Rule(re.compile(r"Using default MoE config\. Performance might be sub-optimal!(?: Config file not found at \[?'?([^'\]]+))?"),
         _moe_default, words=("sub-optimal", "Config file not found"), need="MoE"),
    Rule(re.compile(r"(?:Config file not found at (\S+?)\.? Fallback|Using MoE kernel config with down_moe=False\. "
                    r"Performance might be sub-optimal! Config file not found at (\S+?),)"),
         _moe_default, words=("sub-optimal", "Config file not found"), need="MoE"),
    Rule(re.compile(r"Capture cuda graph bs \[([\d,\s]+)\]"), _capture_bs, words=("Capture cuda graph bs",)),
    Rule(re.compile(r"KV Cache is allocated\.(?: dtype: (\S+),)? #tokens: (\d+)"), _sgl_kv, words=("KV Cache is allocated",)),
    Rule(re.compile(r"max_total_num_tokens=(\d+).*?max_running_requests=(\d+)"), _sgl_maxtok, words=("max_total_num_tokens=",)),
    # "GPU KV cache size: N tokens"; 0.32 names the device ("CPU KV cache size", "XPU …", "GPU + host …";
    # vllm/v1/core/kv_cache_utils.py update_kv_cache_capacity)
    Rule(re.compile(r"(?:GPU|CPU|XPU|TPU|HPU|NPU)(?: \+ host)? KV cache size: ([\d,]+) tokens"), _vllm_kv, words=("KV cache size",)),
    Rule(_VLLM_CONC, _vllm_conc, words=("Maximum concurrency",)),
    Rule(re.compile(r"KV cache pool is full\. Retract requests\.(?: #retracted_reqs: (\d+))?|Decode out of memory happened"),
         _retract, words=("Retract", "Decode out of memory")),
    Rule(re.compile(r"is preempted by PreemptionMode|preempted by .*? because there is not enough KV cache space"), _preempt,
         words=("preempt",)),
    # vLLM's stats line; before 0.6 (and in forks) "Running: N reqs, Swapped: N reqs, Pending: N reqs"
    Rule(re.compile(r"Running: (\d+) reqs?, (?:Swapped: \d+ reqs?, )?(?:Waiting|Pending): (\d+) reqs?.*?(?:GPU KV cache usage|KV cache usage): ([\d.]+)%"), _vllm_stats,
         words=("Running: ",)),
    Rule(re.compile(r"CUDA out of memory|OutOfMemoryError|out of memory", re.I), _oom, words=("emory",)),
    Rule(re.compile(r"Using (\w[\w ]*?) (?:attention )?backend\b"), _attention, words=("backend",), always=True),
    Rule(re.compile(r"\bsglang(?:==| version:? ?|, v)(\d+\.\d+\.\d+\S*)", re.I), _sgl_version, words=("glang",)),
)


def _finish(st: _State) -> EngineLogFacts:
    """The facts with the decode aggregates folded in."""
    f, dec = st.f, st.dec
    f.lines = st.lines
    if dec.batches:
        _set_engine(f, "sglang")
        f.decode_batches = dec.batches
        f.decode_no_graph = dec.no_graph
        f.decode_graph_known = dec.known
        f.max_running = max(f.max_running, dec.max_running)
        f.max_running_graph = dec.max_graph or None
        f.min_running_no_graph = dec.min_no_graph
        f.max_queue = max(f.max_queue, dec.queue)
    if dec.usage >= 0:
        f.max_token_usage = max(f.max_token_usage or 0.0, dec.usage)
    if dec.tput >= 0:
        f.gen_throughput_max = dec.tput
    if f.engine == "sglang" and f.version is None and isinstance(f.args.get("version"), str):
        f.version = f.args["version"]
    return f


def parse_engine_log(lines: Iterable[str]) -> EngineLogFacts:
    """Parse an SGLang or vLLM log, streaming, into :class:`EngineLogFacts`: each line goes to
    the first of :data:`RULES` that takes it.

    A ``ServerArgs(...)`` line wrapped by a terminal or a web page is joined back (up to
    :data:`MAX_ARG_LINES` lines) before parsing. Memory is bounded (counters and short lists).
    A decode line of SGLang#13023 (``tests/fixtures/evidence/sglang-13023-decode-no-graph.log``):

    >>> f = parse_engine_log(["[2025-11-11 04:06:27] Decode batch, #running-req: 46, #token: 34901, token usage: 0.19, "
    ...                       "cuda graph: False, gen throughput (token/s): 1447.08, #queue-req: 0, "])
    >>> f.engine, f.decode_batches, f.decode_no_graph, f.min_running_no_graph, f.max_token_usage, f.gen_throughput_max
    ('sglang', 1, 1, 46, 0.19, 1447.08)
    """
    st = _State(lines)
    for line in st.it:
        st.lines += 1
        if "ip=" in line:  # a Ray prefix may lead any line, which a rule below then reads
            m = _RAY_IP.search(line)
            if m is not None:
                _add_host(st.f, m.group(1))
        apply_first(RULES, st, line)
    return _finish(st)
