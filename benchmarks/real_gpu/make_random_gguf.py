"""Write a random-weight GGUF with a published Llama architecture, for serving with llama.cpp's
``llama-server`` on a machine that cannot download anything (the real-GPU run behind
docs/real-gpu/llama-server/).

The shapes come from the config files infergap ships for its roofline
(``src/infergap/data/models/<name>.json``), so the served file and the roofline describe the same
tensors. The vocabulary is a SentencePiece-style one of exactly ``vocab_size`` unique pieces
(``<unk>``, ``<s>``, ``</s>``, the 256 byte pieces ``<0x00>``…``<0xFF>`` llama.cpp needs for its
newline token, the words of the bench's synthetic prompts, then filler words). The rows of
``output.weight`` for the special and byte pieces are zero, so greedy decoding of the random
logits never picks them and never stops early.
The weights of one block are drawn once and written for every block: the bytes each token reads
are those of the real model, which is all a throughput measurement depends on.

Run: python benchmarks/real_gpu/make_random_gguf.py --model llama-3.1-8b --out /tmp/m.gguf
(needs numpy and the ``gguf`` package, e.g. llama.cpp's ``gguf-py`` on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-8b", help="name of a config in src/infergap/data/models/")
    ap.add_argument("--out", required=True)
    ap.add_argument("--type", default="f16", choices=("f16", "q8_0"),
                    help="weight type of the 2-D tensors: f16, or q8_0 (quantized here with gguf-py's reference "
                         "Q8_0 quantizer, every 2-D tensor as llama-quantize's Q8_0 file type does)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=INT", help="override a config field (a smaller model for a dry run)")
    a = ap.parse_args()

    import gguf
    import numpy as np

    t0 = time.time()
    cfg = json.loads((ROOT / "src/infergap/data/models" / f"{a.model}.json").read_text())
    for kv in a.set:
        k, _, v = kv.partition("=")
        cfg[k] = int(v)
    if cfg.get("model_type") != "llama":
        raise SystemExit(f"--model {a.model}: only Llama-architecture configs are supported (model_type {cfg.get('model_type')!r})")
    d, ff, n_layer = int(cfg["hidden_size"]), int(cfg["intermediate_size"]), int(cfg["num_hidden_layers"])
    n_head, n_kv = int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"])
    vocab_n = int(cfg["vocab_size"])
    hd = d // n_head

    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name(f"random {a.model}")
    w.add_context_length(int(cfg.get("max_position_embeddings", 8192)))
    w.add_embedding_length(d)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-5)))
    w.add_vocab_size(vocab_n)
    q8 = a.type == "q8_0"
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if q8 else gguf.LlamaFileType.MOSTLY_F16)

    T = gguf.TokenType
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    types = [T.UNKNOWN, T.CONTROL, T.CONTROL] + [T.BYTE] * 256
    n_special = len(tokens)
    # Pieces that the bench's synthetic prompts tokenize into (every prefix of "▁word", so the
    # SentencePiece merges reach whole words), printable characters, then filler words.
    from infergap.bench.datasets import _WORDS

    pieces = dict.fromkeys(["\u2581"] + [chr(c) for c in range(33, 127)])
    for word in _WORDS:
        for k in range(1, len(word) + 1):
            pieces["\u2581" + word[:k]] = None
    tokens += list(pieces)
    tokens += [f"\u2581w{i}" for i in range(len(tokens), vocab_n)]
    types += [T.NORMAL] * (vocab_n - n_special)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_types([int(t) for t in types])
    w.add_token_scores([0.0] * vocab_n)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_chat_template("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:")

    rng = np.random.default_rng(0)

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    emb = rand(vocab_n, d)
    out = rand(vocab_n, d)
    out[:n_special] = 0
    ones = np.ones(d, dtype=np.float32)
    blk = {"attn_q": rand(n_head * hd, d), "attn_k": rand(n_kv * hd, d), "attn_v": rand(n_kv * hd, d),
           "attn_output": rand(d, n_head * hd), "ffn_gate": rand(ff, d), "ffn_up": rand(ff, d), "ffn_down": rand(d, ff)}
    def conv(arr: np.ndarray) -> tuple[np.ndarray, dict]:
        if not q8:
            return arr, {}
        qt = gguf.GGMLQuantizationType.Q8_0
        return gguf.quants.quantize(arr.astype(np.float32), qt), {"raw_dtype": qt}

    emb, emb_kw = conv(emb)
    out, out_kw = conv(out)
    blk = {k: conv(v) for k, v in blk.items()}
    w.add_tensor("token_embd.weight", emb, **emb_kw)
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        for name, (arr, kw) in blk.items():
            w.add_tensor(f"blk.{i}.{name}.weight", arr, **kw)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", out, **out_kw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    size = Path(a.out).stat().st_size
    print(f"wrote {a.out}: {a.model}, {size / 1e9:.2f} GB, {a.type.upper()}, vocab {vocab_n}, in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
