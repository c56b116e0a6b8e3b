"""GGUF files as a model source for the roofline: the header (architecture, shapes, every
tensor's GGML type) read with the ``gguf`` package, turned into a config the roofline knows and
per-tensor bytes that add up to the file's.

Bits per weight of each GGML type come from ``gguf.constants.GGML_QUANT_SIZES`` (block size in
elements, bytes per block; the type traits of ggml/src/ggml.c): F16 16, Q8_0 8.5, Q6_K 6.5625,
Q5_K 5.5, Q4_K 4.5, Q4_0 4.5, IQ4_XS 4.25, MXFP4 4.25, ... A tensor's bytes are its element
count over the block size times the bytes per block, exactly what the file stores, so the model's
stored bytes equal the file's tensor data (the header — vocabulary, metadata — is not read per
token and is not counted).

Tensor names follow llama.cpp's ``gguf-py/gguf/tensor_mapping.py`` (``token_embd``, ``output``,
``blk.N.attn_q`` ...); each maps to the roofline's groups (embedding, lm_head, attention,
dense_ffn, experts, shared_experts, router, other) and tensor-parallel shard kinds.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infergap.errors import UserError

#: GGUF architecture name → the Hugging Face ``model_type`` the roofline's builder knows.
ARCH_MODEL_TYPE = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe",
                   "mistral3": "mistral", "gemma2": "gemma2", "gemma3": "gemma3", "phi3": "phi3", "gpt-oss": "gpt_oss",
                   "deepseek2": "deepseek_v3", "glm4moe": "glm4_moe"}


@dataclass
class GGUFTensor:
    """One tensor of a GGUF file: name, GGML type name (``Q4_K``), shape (ggml order), bytes."""

    name: str
    type: str
    shape: list[int]
    n_bytes: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= int(d)
        return n


@dataclass
class GGUFHeader:
    """What the roofline needs of a GGUF file: scalar metadata, tensors, file size."""

    path: str
    metadata: dict[str, Any]
    tensors: list[GGUFTensor]
    size: int | None = None
    data_offset: int | None = None
    vocab_tokens: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture") or "")

    @property
    def tensor_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)

    @classmethod
    def from_json(cls, d: dict[str, Any], path: str = "") -> "GGUFHeader":
        """From the JSON ``benchmarks/real_gpu/gguf_header.py`` prints (a file too large to keep)."""
        meta = dict(d.get("metadata") or {})
        toks = meta.get("tokenizer.ggml.tokens")
        n = None
        if isinstance(toks, str) and (m := re.match(r"<array of (\d+)>", toks)):
            n = int(m.group(1))
        return cls(path=path or str(d.get("file", "")), metadata=meta, size=d.get("size"), data_offset=d.get("data_offset"),
                   vocab_tokens=n, tensors=[GGUFTensor(t["name"], t["type"], list(t["shape"]), int(t["n_bytes"])) for t in d.get("tensors") or []])


def is_gguf(path: str | Path) -> bool:
    """True for an existing file that starts with the GGUF magic."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def read_header(path: str | Path) -> GGUFHeader:
    """Read a GGUF file's header with ``gguf.GGUFReader`` (memory-mapped: tensor data is not
    read). Raises :class:`UserError` for a file that is missing, not GGUF, or truncated."""
    try:
        from gguf import GGUFReader
        from gguf.constants import GGUFValueType
    except ImportError:  # pragma: no cover - a dependency
        raise UserError("--model: reading GGUF needs the gguf package (pip install gguf)") from None
    p = Path(path)
    if not is_gguf(p):
        raise UserError(f"--model {path}: not a GGUF file (no GGUF magic)" if p.exists() else f"--model {path}: no such file")
    try:
        r = GGUFReader(str(p))
    except Exception as e:  # the reader raises ValueError/IndexError/struct errors on damaged files
        raise UserError(f"--model {path}: unreadable GGUF ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    meta: dict[str, Any] = {}
    n_tok = None
    for f in r.fields.values():
        if not f.types:
            continue
        if f.types[0] == GGUFValueType.ARRAY:
            if f.name == "tokenizer.ggml.tokens":
                n_tok = len(f.data)
            continue
        try:
            meta[f.name] = f.contents()
        except Exception:
            continue
    tensors = [GGUFTensor(t.name, t.tensor_type.name, [int(x) for x in t.shape], int(t.n_bytes)) for t in r.tensors]
    return GGUFHeader(path=str(p), metadata=meta, tensors=tensors, size=os.path.getsize(p), data_offset=int(r.data_offset),
                      vocab_tokens=n_tok)


def bits_per_weight(ggml_type: str) -> float:
    """Bits per element of a GGML tensor type (``Q4_K`` → 4.5), from ``GGML_QUANT_SIZES``.
    Raises :class:`UserError` for an unknown type name."""
    block, size = _quant_sizes().get(ggml_type.upper(), (None, None))
    if block is None:
        raise UserError(f"GGUF type {ggml_type!r}: unknown (known: {', '.join(sorted(_quant_sizes()))})")
    return size * 8.0 / block


def _quant_sizes() -> dict[str, tuple[int, int]]:
    """``GGML_QUANT_SIZES`` of the ``gguf`` package by type name: (block elements, block bytes).
    Raises :class:`UserError` when the package is missing (a dependency; an install without it
    cannot size GGUF types, and must say so rather than call ``q4_k`` unknown)."""
    try:
        from gguf.constants import GGML_QUANT_SIZES
    except ImportError as e:
        raise UserError(f"GGUF tensor types need the 'gguf' package, which is not importable here ({e}); "
                        "reinstall infergap (pip install -e .) to get it") from None
    return {t.name: v for t, v in GGML_QUANT_SIZES.items()}


def ggml_types() -> list[str]:
    """GGML tensor type names the installed ``gguf`` package knows, lower case (``q4_k``)."""
    return sorted(k.lower() for k in _quant_sizes())


def _get(meta: dict[str, Any], arch: str, key: str) -> Any:
    v = meta.get(f"{arch}.{key}")
    if isinstance(v, list):  # per-layer arrays (head_count_kv on some models): the largest
        v = max(v) if v else None
    return v


def config_of(h: GGUFHeader) -> dict[str, Any]:
    """A Hugging Face-style config from the header's ``{arch}.*`` keys and tensor shapes.
    Raises :class:`UserError` naming the missing key."""
    arch = h.architecture
    if not arch:
        raise UserError(f"--model {h.path}: GGUF has no general.architecture")
    meta = h.metadata
    by = {t.name: t for t in h.tensors}

    def need(key: str) -> int:
        v = _get(meta, arch, key)
        if v is None:
            raise UserError(f"--model {h.path}: GGUF has no {arch}.{key}")
        return int(v)

    H, L, nh = need("embedding_length"), need("block_count"), need("attention.head_count")
    emb = by.get("token_embd.weight")
    vocab = _get(meta, arch, "vocab_size") or h.vocab_tokens or (emb.shape[1] if emb is not None and len(emb.shape) > 1 else None)
    if not vocab:
        raise UserError(f"--model {h.path}: GGUF gives no vocabulary size")
    cfg: dict[str, Any] = {
        "model_type": ARCH_MODEL_TYPE.get(arch, arch), "hidden_size": H, "num_hidden_layers": L, "num_attention_heads": nh,
        "num_key_value_heads": int(_get(meta, arch, "attention.head_count_kv") or nh), "vocab_size": int(vocab),
        "tie_word_embeddings": "output.weight" not in by, "max_position_embeddings": _get(meta, arch, "context_length"),
    }
    if _get(meta, arch, "attention.key_length"):
        cfg["head_dim"] = int(_get(meta, arch, "attention.key_length"))
    ff = _get(meta, arch, "feed_forward_length")
    n_exp = int(_get(meta, arch, "expert_count") or 0)
    if n_exp:
        cfg["num_local_experts"] = n_exp
        cfg["num_experts_per_tok"] = int(_get(meta, arch, "expert_used_count") or 0)
        cfg["moe_intermediate_size"] = int(_get(meta, arch, "expert_feed_forward_length") or ff or 0)
        dense = sum(1 for i in range(L) if f"blk.{i}.ffn_gate_inp.weight" not in by)
        cfg["first_k_dense_replace"] = dense if dense and all(f"blk.{i}.ffn_gate_inp.weight" not in by for i in range(dense)) else 0
        if ff:
            cfg["intermediate_size"] = int(ff)
        shexp = _get(meta, arch, "expert_shared_feed_forward_length")
        if shexp:
            cfg["shared_expert_intermediate_size"] = int(shexp)
    elif ff is not None:
        cfg["intermediate_size"] = int(ff)
    return cfg


_GROUPS = [  # (pattern on the name after "blk.N.", roofline group, shard)
    (re.compile(r"ffn_(gate|up|down|gate_up)_exps\b"), "experts", "experts"),
    (re.compile(r"ffn_(gate|up|down)_shexp\b"), "shared_experts", "tp"),
    (re.compile(r"ffn_gate_inp\b"), "router", "replicated"),
    (re.compile(r"attn_(k|v)\b|attn_kv\b"), "attention", "kv_heads"),
    (re.compile(r"attn_(q|qkv|output|q_a|q_b|kv_a_mqa|kv_b|k_b|v_b)\b"), "attention", "tp"),
    (re.compile(r"ffn_(gate|up|down)\b"), "dense_ffn", "tp"),
]


def roofline_tensors(h: GGUFHeader) -> list[dict[str, Any]]:
    """Each GGUF tensor as the roofline's tensor fields (name, group, params, layer, shard,
    n_experts, fmt = the GGML type in lower case)."""
    out = []
    for t in h.tensors:
        name = t.name.removesuffix(".weight")
        layer = None
        rest = name
        m = re.match(r"blk\.(\d+)\.(.+)$", name)
        if m:
            layer, rest = int(m.group(1)), m.group(2)
        if name == "token_embd":
            group, shard = "embedding", "vocab"
        elif name == "output":
            group, shard = "lm_head", "vocab"
        else:
            group, shard = "other", "replicated"
            if len(t.shape) > 1:
                for pat, g, sh in _GROUPS:
                    if pat.search(rest):
                        group, shard = g, sh
                        break
        n_exp = t.shape[2] if group == "experts" and len(t.shape) > 2 else 0
        out.append({"name": t.name, "group": group, "params": t.n_elements, "layer": layer, "shard": shard,
                    "n_experts": int(n_exp), "fmt": t.type.lower(), "n_bytes": t.n_bytes})
    return out


_QUANT_SUFFIX = re.compile(r"[-_.](?:ud-)?(i?q\d(?:_[a-z0-9]+)*|f16|f32|bf16|fp16|mxfp4)$", re.I)


def builtin_name(file_name: str) -> tuple[str, str | None]:
    """(model name, GGML type or None) from a GGUF file name: ``Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf``
    → (``llama-3.1-8b``, ``q4_k``). The type is the file type's main tensor type (a ``_K_M`` mix
    keeps some tensors at higher precision; reading the file itself is exact)."""
    base = Path(file_name).name.lower().removesuffix(".gguf")
    base = re.sub(r"-\d{5}-of-\d{5}$", "", base)  # split files
    q = None
    m = _QUANT_SUFFIX.search(base)
    if m:
        q = m.group(1).lower()
        base = base[: m.start()]
        q = re.sub(r"_(xs|s|m|l|xl|xxs)$", "", q) if q.startswith(("q", "iq")) and q.count("_") >= 2 else q
        q = {"fp16": "f16"}.get(q, q)
    base = re.sub(r"^meta-", "", base)
    base = re.sub(r"[-_.](instruct|chat|it|hf|base)$", "", base)
    return base, q
