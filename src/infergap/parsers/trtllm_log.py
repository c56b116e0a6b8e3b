"""Logs of TensorRT-LLM and of the Triton Inference Server that serves it.

Line shapes, from the sources: TensorRT-LLM's C++ logger prefixes ``[TensorRT-LLM][INFO] ``
(``cpp/tensorrt_llm/common/logger.cpp``: ``[TensorRT-LLM][%s] ``, level INFO, WARNING, ERROR,
DEBUG, VERBOSE, TRACE); its Python logger ``[TRT-LLM] [I] `` after a ``[mm/dd/yyyy-hh:mm:ss]``
time (``tensorrt_llm/logger.py``), and TensorRT's own logger ``[TRT] [W] `` (or ``[W] [TRT] ``
from ``trtexec``) there too; Triton uses glog's ``I1103 02:59:01.152656 81041
backend_model.cc:553] `` (level letter, date, time, thread id, C++ file and line).

What is read (the message texts are TensorRT-LLM's, ``cpp/tensorrt_llm/batch_manager`` and
``runtime``): the KV cache it allocated (``[MemUsageChange] Allocated 78.30 GiB for max tokens in
paged KV cache (3731744).``, older ``Using 10718 tokens in paged KV cache.`` and ``Max tokens in
paged KV cache: 117760.``), the engine it loaded (``Loaded engine size: 3404 MiB``), the model's
limits (``TRTGptModel maxBatchSize: 8``), the defaults it fell back to (``kv_cache_free_gpu_mem_fraction
is not specified, will use default value of 0.9``), its version, and out-of-memory errors
(``CUDA runtime error in ::cudaMallocAsync(…): out of memory``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from infergap.parsers.engine_log import EngineLogFacts

_TRTLLM = re.compile(r"^\[TensorRT-LLM\](?:\[(?:INFO|WARNING|ERROR|DEBUG|VERBOSE|TRACE)\])? "
                     r"|^\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\] (?:\[TRT-LLM\] \[[IWEVD]\]|\[TRT\] \[[IWEVD]\]|\[[IWEVD]\] \[TRT\]) ")
_TRITON = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6}\s{1,12}\d{1,10} [\w.\-]{1,80}\.(?:cc|h|cpp):\d{1,6}\] ")
_KV = (re.compile(r"Allocated (\d{1,6}(?:\.\d{1,3})?) GiB for max tokens in paged KV cache \((\d{1,12})\)"),
       re.compile(r"Using (\d{1,12}) tokens in paged KV cache"), re.compile(r"Max tokens in paged KV cache: (\d{1,12})"))
_MODEL = re.compile(r"TRTGptModel (maxBatchSize|maxNumTokens|maxSequenceLen|maxBeamWidth|maxNumSequences): (\d{1,12})\b")
_DEFAULT = re.compile(r"\] (\w{3,60}) is not specified, will use default value of ([\w.]{1,20})")
_ENGINE = re.compile(r"Loaded engine size: (\d{1,9}) MiB")
_VERSION = re.compile(r"TensorRT-LLM version: (\d{1,3}\.\d{1,3}\.\S{1,40})|\|\s{0,4}server_version\s{0,40}\|\s{0,4}(\d{1,3}\.\d{1,3}\.\d{1,3})")
#: TensorRT's builder skipping a tactic it has no memory for (``Skipping tactic 4 due to
#: insufficient memory``, or the older ``insuficient`` spelling): a warning, the build goes on.
_TACTIC = re.compile(r"Skipping tactic \S{1,40} due to insuf{1,2}icient memory")
_OOM = re.compile(r"out of memory|OutOfMemory|Requested amount of GPU memory \(\d+ bytes\) could not be allocated", re.I)
#: Out-of-memory lines kept as examples.
MAX_EXAMPLES = 3


def is_trtllm_line(line: str) -> bool:
    """Whether a cleaned line is a TensorRT-LLM or Triton log line.

    >>> is_trtllm_line("[TensorRT-LLM][INFO] Loaded engine size: 3404 MiB")
    True
    >>> is_trtllm_line("I0410 16:58:08.485508 1 model_lifecycle.cc:849] \\"successfully loaded 'tensorrt_llm'\\"")
    True
    """
    s = line.lstrip()
    return bool(s) and ((s[0] == "[" and _TRTLLM.match(s) is not None) or (s[0] in "IWEF" and _TRITON.match(s) is not None))


def _line(f: EngineLogFacts, s: str) -> None:
    """Read one line into ``f``."""
    for i, rx in enumerate(_KV):
        if (m := rx.search(s)) is not None:
            f.kv_tokens = int(m.group(2) if i == 0 else m.group(1))
            if i == 0:
                f.args["kv_cache_GiB"] = float(m.group(1))
            return
    if (m := _MODEL.search(s)) is not None:
        f.args[m.group(1)] = int(m.group(2))
    elif (m := _DEFAULT.search(s)) is not None:
        f.args.setdefault(m.group(1), f"{m.group(2)} (default)")
    elif (m := _ENGINE.search(s)) is not None:
        f.args["engine_size_MiB"] = int(m.group(1))
    elif (m := _VERSION.search(s)) is not None:
        f.version = m.group(1) or m.group(2)
    if _TACTIC.search(s):
        f.tactic_memory_skips += 1
        return
    if _OOM.search(s):
        f.oom_lines += 1
        if len(f.oom_examples) < MAX_EXAMPLES:
            f.oom_examples.append(s.strip()[:300])


def parse_trtllm_log(lines: Iterable[str]) -> EngineLogFacts:
    """What a TensorRT-LLM or Triton log says, as :class:`~infergap.parsers.engine_log.EngineLogFacts`
    (``engine`` ``tensorrt_llm``; ``kv_tokens``; ``args`` with the model limits, the defaults it
    fell back to, ``engine_size_MiB`` and ``kv_cache_GiB``; out-of-memory lines).

    triton-inference-server/tutorials#150 (``tests/fixtures/evidence/triton-tutorials150-trtllm-loaded.log``):

    >>> f = parse_trtllm_log(["[TensorRT-LLM][INFO] [MemUsageChange] Allocated 78.30 GiB for max tokens in paged KV cache (3731744).",
    ...                       "I0410 16:58:08.485508 1 model_lifecycle.cc:849] \\"successfully loaded 'tensorrt_llm'\\""])
    >>> f.engine, f.kv_tokens, f.args, f.lines
    ('tensorrt_llm', 3731744, {'kv_cache_GiB': 78.3}, 2)
    """
    f = EngineLogFacts(engine="tensorrt_llm")
    for raw in lines:
        s = raw.rstrip()
        if not s:
            continue
        f.lines += 1
        _line(f, s)
    return f
