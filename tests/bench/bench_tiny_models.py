"""Tiny random-weight models written at test time for real servers (no downloads).

- :func:`write_llama_gguf`: a 2-layer Llama GGUF (≈0.5 MB) with an SPM vocabulary of byte tokens
  and word pieces, for llama-cpp-python's server. The output rows of control and byte tokens are
  zero, so greedy decoding never ends a sequence early or emits partial UTF-8.
- :func:`write_hf_llama`: a 2-layer ``LlamaForCausalLM`` with a byte-level BPE tokenizer trained
  here on a small corpus, for ``transformers serve`` and vLLM.
"""

from __future__ import annotations

from pathlib import Path

WORDS = ("the of and to in is was for on as with by at from his an were are which this be or has had "
         "not but one all they their its also new first more after who other two been may time").split()


def write_llama_gguf(path: Path, seed: int = 0, n_embd: int = 64, n_layer: int = 2, n_head: int = 4,
                     n_ff: int = 128, n_ctx: int = 4096) -> Path:
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)]
    types = [2, 3, 3] + [6] * 256
    pieces = sorted({"\u2581" + w for w in WORDS} | set("abcdefghijklmnopqrstuvwxyz0123456789.:") | {"\u2581"})
    tokens += [p.encode() for p in pieces]
    types += [1] * len(pieces)
    scores = [0.0] * 259 + [-0.001 * i for i in range(len(pieces))]
    n_vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def rnd(*shape):
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    w.add_tensor("token_embd.weight", rnd(n_vocab, n_embd))
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, np.float32))
        for name in ("q", "k", "v", "output"):
            w.add_tensor(f"blk.{i}.attn_{name}.weight", rnd(n_embd, n_embd))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", rnd(n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_up.weight", rnd(n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_down.weight", rnd(n_embd, n_ff))
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    out = rnd(n_vocab, n_embd)
    out[:259] = 0.0
    w.add_tensor("output.weight", out)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_hf_llama(out: Path, seed: int = 0, hidden_size: int = 32, num_heads: int = 4) -> Path:
    """The tiny Llama with its tokenizer in ``out``. ``hidden_size / num_heads`` is the head size:
    8 by default; vLLM's CPU attention needs one of 32, 64, 80, … (``CPUAttentionBackend.
    get_supported_head_sizes``, vllm/v1/attention/backends/cpu_attn.py v0.32.0), so its tests
    ask for 64 / 2."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    corpus = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(20)) for i in range(200)]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    ft = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="</s>")
    ft.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    ft.save_pretrained(str(out))
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(ft), hidden_size=hidden_size, intermediate_size=2 * hidden_size, num_hidden_layers=2,
                      num_attention_heads=num_heads, num_key_value_heads=num_heads, max_position_embeddings=4096,
                      bos_token_id=0, eos_token_id=1, pad_token_id=1)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.lm_head.weight[:2] = 0  # never emit <s> or </s>: generation runs to max_tokens
    model.save_pretrained(str(out))
    return out
