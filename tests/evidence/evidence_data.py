"""Shared by the evidence tests: fixture paths, a free 127.0.0.1 port, a tiny random GGUF."""

from __future__ import annotations

import socket
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "evidence"
H200 = ROOT / "tests" / "fixtures" / "hosts" / "h200-1gpu"
API_KEY = "test-admin-key-5d1e"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_tiny_gguf(path: Path) -> Path:
    """A 2-layer Llama GGUF with random weights (the bench tests' writer, smaller)."""
    from tests.bench.bench_tiny_models import write_llama_gguf

    return write_llama_gguf(path, n_embd=32, n_ff=64, n_ctx=512)


