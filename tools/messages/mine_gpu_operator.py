"""Mine the NVIDIA GPU operator's log messages into ``data/messages/gpu_operator.yaml``.

Usage: ``python tools/messages/mine_gpu_operator.py CHECKOUT TAG [--out FILE]``, CHECKOUT a clone
of https://github.com/NVIDIA/gpu-operator. Selection rules: :mod:`tools.messages.gomine`; curated
knowledge: ``tools/messages/curated/gpu_operator.yaml``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.messages.mine_k8s_device_plugin import main as _main  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Mine, merge curated knowledge, write the catalog."""
    return _main(argv, "gpu_operator", "NVIDIA GPU operator", "NVIDIA/gpu-operator", "tools/messages/mine_gpu_operator.py")


if __name__ == "__main__":
    sys.exit(main())
