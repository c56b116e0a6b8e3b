"""Mine llama.cpp's log messages (ggml, libllama, common, llama-server) into ``data/messages/llamacpp.yaml``.

``python tools/messages/mine_llamacpp.py SOURCE TAG [--archive NAME]``: SOURCE is a clone of
github.com/ggml-org/llama.cpp read at TAG (``b6500``), or an unpacked copy of its source (the one
vendored in the llama-cpp-python release archive, ``vendor/llama.cpp``) with TAG naming it. Reads the
C/C++/CUDA/Objective-C files of ``src/``, ``ggml/src/`` (every backend), ``common/`` and
``tools/server/`` and every call of the log macros below whose format is a string literal
(``SLT_*`` take the slot first, the format second), and ``fprintf(stderr, …)`` (its level from
its words: ``warning`` → warn, ``error``/``failed`` → error, else info). Levels: ``*_WRN``/``*_WARN`` warn,
``*_ERR``/``*_ERROR`` error, ``GGML_ABORT`` fatal, ``*_INF``/``*_INFO`` info (kept by the rules of
``tools/messages/engines.py``). The 2023 layout (:data:`OLD_DIRS`) is read when SOURCE has no
``src/``, so an old release can be mined with ``--also-tag`` (its ``llama_model_load_internal:``
and ``ggml_init_cublas:`` lines are what pastes of 2023 hold).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.messages import common as c  # noqa: E402
from tools.messages.engines import Engine, Site, main  # noqa: E402

MACROS = {
    "LOG_WRN": "warn", "LLAMA_LOG_WARN": "warn", "GGML_LOG_WARN": "warn", "SRV_WRN": "warn",
    "SLT_WRN": "warn", "QUE_WRN": "warn",
    "LOG_ERR": "error", "LLAMA_LOG_ERROR": "error", "GGML_LOG_ERROR": "error", "SRV_ERR": "error",
    "SLT_ERR": "error", "QUE_ERR": "error",
    "GGML_ABORT": "fatal",
    "LOG_INF": "info", "LLAMA_LOG_INFO": "info", "GGML_LOG_INFO": "info", "SRV_INF": "info",
    "SLT_INF": "info",
}
#: String macros that stand inside formats, as the CUDA build (``ggml/src/ggml-cuda/vendors/``)
#: defines them; the ROCm and MUSA builds print "ROCm"/"MUSA" there instead.
STRING_MACROS = {"GGML_CUDA_NAME": '"CUDA"', "GGML_CUBLAS_NAME": '"cuBLAS"'}
DIRS = ("src", "ggml/src", "common", "tools/server")
#: The 2023 layout (before ``src/`` and ``ggml/src/``, e.g. the ``master-*`` and ``b10xx`` tags and
#: llama-cpp-python 0.1.x's vendored copy): ``llama.cpp``, ``ggml*.c``/``ggml-cuda.cu`` at the top,
#: the common code and the server under ``examples/``. Read when SOURCE has no ``src/``.
OLD_DIRS = ("", "examples/common", "examples/server")
SUFFIXES = (".c", ".cpp", ".cc", ".cu", ".cuh", ".h", ".hpp", ".m", ".mm")


def _format_of(site: c.CallSite) -> str | None:
    args = site.args[1:] if site.func.startswith("SLT_") or site.func == "fprintf" else site.args
    if not args:
        return None
    expr = args[0]
    for name, text in STRING_MACROS.items():
        expr = expr.replace(name, text)
    return c.c_string(expr)


def _fprintf_level(fmt: str) -> str:
    """Level of an ``fprintf(stderr, …)`` message from its own words (llama.cpp prints
    ``warning: …`` / ``error: …`` there); info otherwise."""
    low = fmt.lower()
    if "warning" in low:
        return "warn"
    if "error" in low or "failed" in low:
        return "error"
    return "info"


def find(co: c.Checkout) -> list[Site]:
    """llama.cpp's log call sites with a literal format, in path/line order."""
    out: list[Site] = []
    old = not co.files("src", SUFFIXES)
    for under in OLD_DIRS if old else DIRS:
        for rel in co.files(under, SUFFIXES):
            if old and not under and "/" in rel:
                continue  # the top of the old layout: its own files only (examples/, tests/ apart)
            for cs in c.c_calls(rel, co.read(rel), (*MACROS, "fprintf")):
                if cs.func == "fprintf" and (not cs.args or cs.args[0] != "stderr"):
                    continue
                fmt = _format_of(cs)
                if fmt is None or not fmt.strip():
                    continue
                level = _fprintf_level(fmt) if cs.func == "fprintf" else MACROS[cs.func]
                out.append(Site(rel, cs.line, level, fmt, "printf"))
    return out


ENGINE = Engine(component="llamacpp", label="llama.cpp", repo="ggml-org/llama.cpp", find=find)

if __name__ == "__main__":
    sys.exit(main(ENGINE))
