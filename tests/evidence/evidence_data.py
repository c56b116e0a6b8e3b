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
    """A 2-layer Llama GGUF with random weights and a byte-level SPM vocabulary (≈100 KB)."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(0)
    n_embd, n_layer, n_head, n_ff = 32, 2, 4, 64
    tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)] + [b"\xe2\x96\x81"]
    types = [2, 3, 3] + [6] * 256 + [1]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(512)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def rnd(*shape):
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    w.add_tensor("token_embd.weight", rnd(len(tokens), n_embd))
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, np.float32))
        for name in ("q", "k", "v", "output"):
            w.add_tensor(f"blk.{i}.attn_{name}.weight", rnd(n_embd, n_embd))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", rnd(n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_up.weight", rnd(n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_down.weight", rnd(n_embd, n_ff))
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    w.add_tensor("output.weight", rnd(len(tokens), n_embd))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


