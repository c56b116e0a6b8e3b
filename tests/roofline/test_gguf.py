"""GGUF files as a roofline model source: header read with the gguf package, per-tensor GGML types
with their exact bits per weight, bytes equal to the file's tensor data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from infergap.errors import UserError
from infergap.roofline.gguf import bits_per_weight, builtin_name, read_header
from infergap.roofline.model import load_model
from infergap.roofline.precision import normalize_format

ROOT = Path(__file__).resolve().parents[2]


def _write(path: Path, n_embd: int = 256, n_ff: int = 512, n_layer: int = 2, vocab: int = 320) -> Path:
    """A Llama GGUF whose tensors are Q8_0 (attention), Q4_0 (FFN), F16 (output), F32 (norms)."""
    import gguf
    import numpy as np
    from gguf import GGMLQuantizationType as T
    from gguf.quants import quantize

    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // 4)
    w.add_vocab_size(vocab)

    def q(name: str, rows: int, cols: int, t) -> None:
        a = rng.standard_normal((rows, cols)).astype(np.float32)
        if t in (T.F16, T.F32):
            w.add_tensor(name, a.astype(np.float16 if t == T.F16 else np.float32))
        else:
            w.add_tensor(name, quantize(a, t), raw_dtype=t)

    q("token_embd.weight", vocab, n_embd, T.Q8_0)
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, np.float32))
        q(f"blk.{i}.attn_q.weight", n_embd, n_embd, T.Q8_0)
        q(f"blk.{i}.attn_k.weight", n_embd // 2, n_embd, T.Q8_0)
        q(f"blk.{i}.attn_v.weight", n_embd // 2, n_embd, T.Q8_0)
        q(f"blk.{i}.attn_output.weight", n_embd, n_embd, T.Q8_0)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, np.float32))
        q(f"blk.{i}.ffn_gate.weight", n_ff, n_embd, T.Q4_0)
        q(f"blk.{i}.ffn_up.weight", n_ff, n_embd, T.Q4_0)
        q(f"blk.{i}.ffn_down.weight", n_embd, n_ff, T.Q4_0)
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    q("output.weight", vocab, n_embd, T.F16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_bits_per_weight_of_ggml_types():
    assert [bits_per_weight(t) for t in ("F16", "Q8_0", "Q6_K", "Q5_K", "Q4_K", "Q4_0", "IQ4_XS", "MXFP4")] == \
        [16.0, 8.5, 6.5625, 5.5, 4.5, 4.5, 4.25, 4.25]
    with pytest.raises(UserError, match="unknown"):
        bits_per_weight("Q9_K")


def test_gguf_model_bytes_are_the_files(tmp_path):
    path = _write(tmp_path / "mixed.gguf")
    h = read_header(path)
    spec = load_model(str(path))
    stored = sum(t.bytes for t in spec.tensors if t.stored)
    assert stored == h.tensor_bytes  # exact: every tensor in its own GGML type
    assert abs(stored - path.stat().st_size) / path.stat().st_size < 0.01
    assert (spec.layers, spec.heads, spec.kv_heads, spec.vocab, spec.attention) == (2, 4, 2, 320, "gqa")
    assert spec.precision["attention"] == "q8_0" and spec.precision["dense_ffn"] == "q4_0" and spec.precision["lm_head"] == "f16"
    assert spec.kv_format == "fp16" and "GGUF" in spec.precision_source


def test_roofline_cli_reads_a_gguf(tmp_path):
    path = _write(tmp_path / "m.gguf")
    r = subprocess.run([sys.executable, "-m", "infergap", "roofline", "--model", str(path), "--gpu", "h200", "--format", "json"],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert r.returncode == 0, r.stderr
    import json

    d = json.loads(r.stdout)
    assert d["model"]["precision"]["dense_ffn"] == "q4_0"


def test_a_damaged_gguf_is_one_line(tmp_path):
    path = _write(tmp_path / "m.gguf")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:2000])
    with pytest.raises(UserError, match=r"cut.gguf: unreadable GGUF"):
        load_model(str(cut))
    other = tmp_path / "x.gguf"
    other.write_text("not gguf")
    with pytest.raises(UserError, match="not a GGUF file"):
        load_model(str(other))


def test_weights_flag_takes_ggml_types():
    assert normalize_format("Q4_K") == "q4_k" and normalize_format("iq4_xs") == "iq4_xs" and normalize_format("f16") == "fp16"
    with pytest.raises(UserError, match="mixes tensor types"):
        normalize_format("Q4_K_M", what="--weights")
    spec = load_model("llama-3.1-8b", {"weights": "q4_k"})
    ffn = next(t for t in spec.tensors if t.group == "dense_ffn")
    assert ffn.bytes == ffn.params * 4.5 / 8


def test_a_gguf_name_resolves_to_its_model():
    assert builtin_name("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf") == ("llama-3.1-8b", "q4_k")
    assert builtin_name("qwen3-32b-q8_0.gguf") == ("qwen3-32b", "q8_0")
    assert builtin_name("llama-3.1-8b.gguf") == ("llama-3.1-8b", None)
    spec = load_model("/models/not-here/Meta-Llama-3.1-8B-Instruct-Q8_0.gguf")
    assert spec.name == "llama-3.1-8b" and spec.precision["dense_ffn"] == "q8_0" and "not on this machine" in spec.notes[-1]
    # the type is the file name's, not a flag the user gave; a flag given beside it stays a flag
    assert spec.precision_source.endswith("; the file name's type weights=q8_0") and "flags" not in spec.precision_source
    kv = load_model("/models/not-here/Meta-Llama-3.1-8B-Instruct-Q8_0.gguf", {"kv": "fp8"})
    assert kv.precision_source.endswith("; the file name's type weights=q8_0; flags kv=fp8")
    flag = load_model("/models/not-here/Meta-Llama-3.1-8B-Instruct-Q8_0.gguf", {"weights": "q4_k"})
    assert flag.precision_source.endswith("; flags weights=q4_k")
