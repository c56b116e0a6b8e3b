"""Mine TensorRT-LLM's log messages (Python ``logger`` and C++ ``TLLM_LOG_*``) into ``data/messages/tensorrt_llm.yaml``.

``python tools/messages/mine_tensorrt_llm.py SOURCE TAG``: SOURCE is a clone of
github.com/NVIDIA/TensorRT-LLM (or a mirror of one of its release branches) read at TAG. Reads
the ``.py`` files of ``tensorrt_llm/`` (logger calls and ``raise X("…")``, as for vLLM) and the
C++/CUDA files of ``cpp/``: ``TLLM_LOG_WARNING``/``TLLM_LOG_ERROR``/``TLLM_LOG_INFO`` (format
first) and ``TLLM_CHECK_WITH_INFO(cond, format, …)`` / ``TLLM_THROW(format, …)`` (the failure text
of a check, level error). The runtime prints them as ``[TensorRT-LLM][WARNING] …``. Selection rules:
``tools/messages/engines.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.messages import common as c  # noqa: E402
from tools.messages.engines import PY_SKIP, Engine, Site, main, python_sites  # noqa: E402

MACROS = {"TLLM_LOG_WARNING": "warn", "TLLM_LOG_ERROR": "error", "TLLM_LOG_INFO": "info",
          "TLLM_CHECK_WITH_INFO": "error", "TLLM_THROW": "error"}
SUFFIXES = (".cpp", ".cc", ".cu", ".h", ".cuh")


def _cpp_sites(co: c.Checkout) -> list[Site]:
    out: list[Site] = []
    for rel in co.files("cpp", SUFFIXES):
        if "/3rdparty/" in rel or "/tests/" in rel or "cutlass_extensions" in rel:
            continue
        for cs in c.c_calls(rel, co.read(rel), MACROS):
            args = cs.args[1:] if cs.func == "TLLM_CHECK_WITH_INFO" else cs.args
            fmt = c.c_string(args[0]) if args else None
            if fmt and fmt.strip():
                out.append(Site(rel, cs.line, MACROS[cs.func], fmt, "printf"))
    return out


def find(co: c.Checkout) -> list[Site]:
    """TensorRT-LLM's Python and C++ log sites with a literal message, in path/line order."""
    return python_sites(co, "tensorrt_llm", PY_SKIP) + _cpp_sites(co)


ENGINE = Engine(component="tensorrt_llm", label="TensorRT-LLM", repo="NVIDIA/TensorRT-LLM", find=find)

if __name__ == "__main__":
    sys.exit(main(ENGINE))
