"""Mine SGLang's warning/error (and backend/memory info) log messages into ``data/messages/sglang.yaml``.

``python tools/messages/mine_sglang.py SOURCE TAG [--archive NAME]``: SOURCE is a clone of
github.com/sgl-project/sglang read at TAG (``v0.5.23``; the Python package lives in ``python/``), or
the unpacked release archive (the PyPI wheel ``sglang-0.5.23-….whl`` holds the same ``sglang/``
tree) with TAG naming it. Reads every logger call and ``raise X("…")`` with a literal message in
``sglang/srt/`` (the serving runtime; tests, benchmarks, tool-call and reasoning parsers left out);
selection rules: ``tools/messages/engines.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.messages import common as c  # noqa: E402
from tools.messages.engines import PY_SKIP, Engine, Site, main, python_sites  # noqa: E402


def find(co: c.Checkout) -> list[Site]:
    """SGLang's log and raise sites under ``sglang/srt`` (``python/sglang/srt`` in a clone)."""
    root = "python/sglang/srt" if co.files("python/sglang/srt", (".py",))[:1] else "sglang/srt"
    return python_sites(co, root, PY_SKIP)


ENGINE = Engine(component="sglang", label="SGLang", repo="sgl-project/sglang", find=find)

if __name__ == "__main__":
    sys.exit(main(ENGINE))
