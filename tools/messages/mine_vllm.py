"""Mine vLLM's warning/error (and backend/memory info) log messages into ``data/messages/vllm.yaml``.

``python tools/messages/mine_vllm.py SOURCE TAG [--archive NAME]``: SOURCE is a clone of
github.com/vllm-project/vllm read at TAG (``v0.32.0``), or the unpacked release archive (PyPI sdist
``vllm-0.32.0.tar.gz``) with TAG naming it. Reads every ``logger.warning/warning_once/error/
exception/critical/info/info_once`` call (and ``warnings.warn``) with a literal, %-style, ``.format``
or f-string message in ``vllm/`` (tests, examples, tool-call and reasoning parsers left out); the
selection rules are those of ``tools/messages/engines.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.messages import common as c  # noqa: E402
from tools.messages.engines import PY_SKIP, Engine, Site, main, python_sites  # noqa: E402


def find(co: c.Checkout) -> list[Site]:
    """vLLM's log call sites under ``vllm/`` at the checkout's tag, in path/line order."""
    return python_sites(co, "vllm", PY_SKIP)


ENGINE = Engine(component="vllm", label="vLLM", repo="vllm-project/vllm", find=find)

if __name__ == "__main__":
    sys.exit(main(ENGINE))
