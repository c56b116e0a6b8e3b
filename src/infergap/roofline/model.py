"""A transformer's tensors, their sizes, how tensor parallelism splits them and what each token
reads, built from a Hugging Face ``config.json``.

Supported: dense and GQA/MHA attention, MLA (DeepSeek-V2/V3, GLM-5) with an optional DSA indexer,
MoE with routed and shared experts and leading dense layers (``first_k_dense_replace``,
``mlp_only_layers``/``decoder_sparse_step``, ``mlp_layer_types``), sliding-window layers
(``layer_types``/``sliding_window``), tied and untied embeddings.

Parameter formulas (per layer, H hidden, nh heads, d head dim; kipply, "Transformer Inference
Arithmetic"; DeepSeek-V3 technical report, section 2.1.1 for MLA):

- GQA attention: H·nh·d (q) + 2·H·n_kv·d (k, v) + nh·d·H (o)
- MLA: H·q_lora + q_lora·nh·(nope+rope) + H·(kv_lora+rope) + kv_lora·nh·(nope+v) + nh·v·H
- DSA indexer: q_lora·n_idx·d_idx (wq_b) + H·d_idx (wk) + H·n_idx (weights_proj)
- gated FFN: 3·H·I; a MoE layer holds E routed experts of 3·H·I_moe, shared experts and an H·E router.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, Field

from infergap.errors import UserError
from infergap.guard import read_json
from infergap.roofline.gguf import config_of, is_gguf, roofline_tensors
from infergap.roofline.precision import (
    KV_FORMATS,
    QuantScheme,
    bytes_per_param,
    dtype_format,
    module_matches,
    normalize_format,
    parse_quant_config,
)

log = logging.getLogger(__name__)

#: Tensor groups that carry their own precision. ``other`` is norms, biases and sinks (kept in
#: the base dtype); ``indexer`` is DeepSeek Sparse Attention's lightning indexer.
GROUPS = ("attention", "indexer", "router", "dense_ffn", "shared_experts", "experts", "lm_head", "embedding", "other")

#: Groups an override key sets. ``weights`` sets every weight group read per token (the input
#: embedding, a lookup, keeps its format unless ``embedding`` is given); ``attention`` includes the indexer.
OVERRIDE_GROUPS: dict[str, tuple[str, ...]] = {
    "weights": ("attention", "indexer", "router", "dense_ffn", "shared_experts", "experts", "lm_head"),
    "attention": ("attention", "indexer"),
    "indexer": ("indexer",),
    "router": ("router",),
    "dense_ffn": ("dense_ffn",),
    "shared_experts": ("shared_experts",),
    "experts": ("experts",),
    "ffn": ("dense_ffn", "shared_experts", "experts"),
    "lm_head": ("lm_head",),
    "embedding": ("embedding",),
}

Shard = Literal["replicated", "tp", "kv_heads", "vocab", "experts"]


class Tensor(BaseModel):
    """One weight (or a set of same-shaped weights) of the model.

    ``params`` counts all elements stored (for ``experts``: all routed experts of the layer);
    ``shard`` says how tensor parallelism splits it (``replicated``: read in full on every rank;
    ``tp``: split over heads/columns; ``kv_heads``: split over at most n_kv ranks; ``vocab``:
    split over the vocabulary; ``experts``: routed experts, split by EP then by TP within EP).
    ``stored`` is False for an ``lm_head`` tied to the embedding (counted once). ``dsa_query``
    marks the indexer's query-side projections, which can be skipped while the context is no
    longer than ``index_topk``.
    """

    name: str
    group: str
    params: int
    layer: int | None = None
    shard: Shard = "replicated"
    n_experts: int = 0
    stored: bool = True
    dsa_query: bool = False
    fmt: str = "bf16"

    @property
    def bytes(self) -> float:
        """Stored bytes of this tensor in its format (scales included)."""
        return self.params * bytes_per_param(self.fmt)


class LayerKind(BaseModel):
    """Attention window (None: full context) and whether the layer's FFN is a MoE."""

    window: int | None = None
    moe: bool = False


class ModelSpec(BaseModel):
    """A model as the roofline sees it: dimensions, per-layer kinds, every tensor with its
    resolved precision, the KV-cache format. Build it with :func:`load_model`."""

    name: str
    source: str
    model_type: str = ""
    attention: Literal["mha", "gqa", "mla"]
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    vocab: int
    tied_embeddings: bool
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    index_heads: int | None = None
    index_head_dim: int | None = None
    index_topk: int | None = None
    n_experts: int = 0
    top_k: int = 0
    expert_params: int = 0
    layer_kinds: list[LayerKind]
    tensors: list[Tensor]
    kv_format: str = "bf16"
    precision: dict[str, str] = Field(default_factory=dict)
    precision_source: str = "config.json torch_dtype"
    mtp_layers: int = 0
    notes: list[str] = Field(default_factory=list)

    # -- counts -------------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def moe_layers(self) -> int:
        return sum(1 for k in self.layer_kinds if k.moe)

    @property
    def dsa(self) -> bool:
        return bool(self.index_topk and self.index_heads and self.index_head_dim)

    def total_params(self) -> int:
        """All stored parameters (embedding, lm_head when untied, every expert; MTP layers excluded)."""
        return sum(t.params for t in self.tensors if t.stored)

    def active_params(self, include_embedding: bool = False) -> float:
        """Parameters used per token at batch 1: every non-expert weight, ``top_k`` of the routed
        experts of each MoE layer, the lm_head; the input embedding only if ``include_embedding``
        (it is a one-row lookup; publishers differ on whether they count it)."""
        total = 0.0
        for t in self.tensors:
            if t.group == "embedding":
                total += t.params if include_embedding else 0
            elif t.group == "experts":
                total += t.params * self.top_k / t.n_experts
            else:
                total += t.params
        return total

    def group_params(self) -> dict[str, int]:
        """Stored parameters per tensor group."""
        out: dict[str, int] = {}
        for t in self.tensors:
            if t.stored:
                out[t.group] = out.get(t.group, 0) + t.params
        return out

    # -- KV cache ------------------------------------------------------------------------------
    def kv_entry_bytes(self, tp: int = 1) -> float:
        """Bytes of one token's KV entry in one layer, on one rank of a TP group of ``tp``.

        GQA/MHA: 2·n_kv·d·b split over min(tp, n_kv) ranks (replicated beyond n_kv). MLA: the
        latent (kv_lora + rope)·b, replicated on every rank (no data-parallel attention modelled).
        """
        b = bytes_per_param(self.kv_format)
        if self.attention == "mla":
            return (self.kv_lora_rank or 0) * b + (self.qk_rope_head_dim or 0) * b
        per_rank_heads = self.kv_heads / min(tp, self.kv_heads)
        return 2 * per_rank_heads * self.head_dim * b

    def index_key_bytes(self) -> float:
        """Bytes of one token's DSA indexer key in one layer: d_idx FP8 values + one fp32 scale
        (SGLang's NSA index-k buffer layout), replicated on every rank; 0 without DSA."""
        if not self.dsa:
            return 0.0
        return float(self.index_head_dim or 0) + 4.0

    def kv_read_bytes(self, context: int, tp: int = 1, *, optimistic: bool = True) -> float:
        """KV bytes one rank reads to decode one token at ``context`` tokens, all layers.

        Sliding-window layers read min(context, window) entries. With DSA the main attention
        reads min(context, index_topk) latent entries and the indexer scores every key; while the
        context is no longer than ``index_topk`` the optimistic form skips the scoring (the top-k
        keeps every key), the strict one does not.
        """
        total = 0.0
        entry = self.kv_entry_bytes(tp)
        for k in self.layer_kinds:
            n = context if k.window is None else min(context, k.window)
            if self.dsa:
                total += min(n, self.index_topk or n) * entry
                if context > (self.index_topk or 0) or not optimistic:
                    total += n * self.index_key_bytes()
            else:
                total += n * entry
        return total

    def kv_stored_bytes(self, context: int, tp: int = 1) -> float:
        """KV bytes one sequence of ``context`` tokens holds on one rank, all layers (windowed
        layers hold their window; DSA holds the latent plus the indexer key of every token)."""
        total = 0.0
        entry = self.kv_entry_bytes(tp) + self.index_key_bytes()
        for k in self.layer_kinds:
            n = context if k.window is None else min(context, k.window)
            total += n * entry
        return total


# -- loading ------------------------------------------------------------------------------------

REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


def builtin_models() -> list[str]:
    """Names of the model configs shipped in ``infergap/data/models``."""
    base = resources.files("infergap") / "data" / "models"
    return sorted(p.name[:-5] for p in base.iterdir() if p.name.endswith(".json"))


def _read_json(path: Path, what: str) -> dict[str, Any]:
    data = read_json(path, what, max_bytes=64 * 1024 * 1024)
    if not isinstance(data, dict):
        raise UserError(f"{what} {path}: not a JSON object")
    return data


def config_display_name(cfg: dict[str, Any], path: Path) -> str:
    """A name for a model read from ``path`` that is never empty: the config's ``_name_or_path``
    (its last component, as Hugging Face writes ``org/name``), else the directory holding a
    ``config.json`` or the file's stem, else the first of ``architectures``, else ``model_type``."""
    hf = cfg.get("_name_or_path")
    if isinstance(hf, str) and hf.strip().strip("/"):
        return hf.strip().rstrip("/").rsplit("/", 1)[-1]
    stem = path.stem if path.name != "config.json" else path.resolve().parent.name
    if stem and stem != "config":
        return stem
    arch = cfg.get("architectures")
    if isinstance(arch, list) and arch and isinstance(arch[0], str) and arch[0]:
        return arch[0]
    return str(cfg.get("model_type") or "model")


def _resolve_source(name_or_path: str) -> tuple[dict[str, Any], dict[str, Any] | None, str, str]:
    """(config, hf_quant_config or None, display name, source label)."""
    p = Path(name_or_path)
    if p.is_dir():
        cfg_path = p / "config.json"
        if not cfg_path.is_file():
            raise UserError(f"--model {name_or_path}: directory has no config.json")
        hq = p / "hf_quant_config.json"
        cfg = _read_json(cfg_path, "config")
        return cfg, (_read_json(hq, "hf_quant_config") if hq.is_file() else None), config_display_name(cfg, cfg_path), str(cfg_path)
    if p.is_file():
        hq = p.parent / "hf_quant_config.json"
        cfg = _read_json(p, "config")
        return cfg, (_read_json(hq, "hf_quant_config") if hq.is_file() else None), config_display_name(cfg, p), str(p)
    key = name_or_path.strip().lower()
    names = builtin_models()
    if key in names:
        ref = resources.files("infergap") / "data" / "models" / f"{key}.json"
        return json.loads(ref.read_text()), None, key, f"built-in {key}"

    close = difflib.get_close_matches(key, names, n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; built-in models: {', '.join(names)}"
    raise UserError(f"--model {name_or_path}: no such file and not a built-in model{hint}")


#: Upper limits that keep a malformed config from making the model loop for ever.
MAX_DIM = 1 << 31
MAX_LAYERS = 4096


def _int(cfg: dict[str, Any], key: str, source: str, default: int | None = None, *, limit: int = MAX_DIM) -> int:
    v = cfg.get(key, default)
    if v is None:
        raise UserError(f"{source}: missing required field {key!r}")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= limit or int(v) != v:
        raise UserError(f"{source}: field {key!r} must be an integer from 0 to {limit}, got {v!r}")
    return int(v)


def _opt_int(cfg: dict[str, Any], source: str, *keys: str, limit: int = MAX_DIM) -> int | None:
    """The first of ``keys`` present (not null) as a checked integer, or None."""
    for k in keys:
        if cfg.get(k) is not None:
            return _int(cfg, k, source, limit=limit)
    return None


def _first(cfg: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return None


def _layer_kinds(cfg: dict[str, Any], layers: int, n_experts: int, source: str) -> list[LayerKind]:
    kinds = [LayerKind() for _ in range(layers)]
    layer_types = cfg.get("layer_types")
    window = _opt_int(cfg, source, "sliding_window")
    if isinstance(layer_types, list) and layer_types:
        if len(layer_types) != layers:
            raise UserError(f"{source}: layer_types has {len(layer_types)} entries for {layers} layers")
        for k, t in zip(kinds, layer_types):
            if isinstance(t, str) and "sliding" in t and isinstance(window, int) and window > 0:
                k.window = window
    elif isinstance(window, int) and window > 0 and cfg.get("use_sliding_window", True):
        for k in kinds:
            k.window = window
    if n_experts:
        mlp_types = cfg.get("mlp_layer_types")
        first_dense = _opt_int(cfg, source, "first_k_dense_replace", limit=MAX_LAYERS)
        only = cfg.get("mlp_only_layers") or []
        if not isinstance(only, list):
            raise UserError(f"{source}: mlp_only_layers must be a list of layer indices")
        step = _opt_int(cfg, source, "decoder_sparse_step", limit=MAX_LAYERS) or 1
        freq = _opt_int(cfg, source, "moe_layer_freq", limit=MAX_LAYERS) or 1
        for i, k in enumerate(kinds):
            if isinstance(mlp_types, list) and len(mlp_types) == layers:
                k.moe = str(mlp_types[i]).lower() in ("sparse", "moe")
            elif first_dense is not None:
                k.moe = i >= first_dense and i % freq == 0
            else:
                k.moe = i not in only and (i + 1) % step == 0
    return kinds


def _names(model_type: str) -> dict[str, str]:
    """Representative module names (HF checkpoint naming) used to match quantization exclusions."""
    mt = model_type.lower()
    if mt == "mixtral":
        return {"router": "block_sparse_moe.gate", "experts": "block_sparse_moe.experts.0.w1", "shared": "block_sparse_moe.shared_experts.gate_proj"}
    if mt == "gpt_oss":
        return {"router": "mlp.router", "experts": "mlp.experts.gate_up_proj", "shared": "mlp.shared_experts.gate_proj"}
    if mt.startswith("qwen2_moe") or mt.startswith("qwen3_moe") or mt.startswith("qwen"):
        return {"router": "mlp.gate", "experts": "mlp.experts.0.gate_proj", "shared": "mlp.shared_expert.gate_proj"}
    return {"router": "mlp.gate", "experts": "mlp.experts.0.gate_proj", "shared": "mlp.shared_experts.gate_proj"}


def load_model(name_or_path: str, overrides: dict[str, str] | None = None) -> ModelSpec:
    """Load a model from a ``config.json`` path (or its directory, where an ``hf_quant_config.json``
    next to it is read too), a GGUF file (:func:`model_from_gguf`; a ``.gguf`` name that is not on
    this machine resolves to the built-in model it names, with the file name's tensor type), or a
    built-in name (:func:`builtin_models`), and resolve the precision of every tensor.

    Precision, lowest to highest priority: the config's ``torch_dtype``; its
    ``quantization_config`` / ``hf_quant_config.json`` (quantized format for linears not matched by
    ``ignore``/``exclude_modules``/``modules_to_not_convert``; the router, embedding and lm_head
    stay in the base dtype unless a flag says otherwise); then ``overrides``: keys of
    :data:`OVERRIDE_GROUPS` plus ``kv``, values format names (``bf16``, ``fp8``, ``fp8-block``,
    ``nvfp4``, ``mxfp4``, ``int4-g128``...).

    Raises :class:`UserError` for an unreadable file, a missing or ill-typed required field, an
    unknown format, or an unknown built-in name (with the closest names).
    """
    p = Path(name_or_path)
    if p.suffix.lower() == ".gguf" or (p.is_file() and p.name != "config.json" and _is_gguf(p)):
        from infergap.roofline.gguf import builtin_name, read_header

        if p.is_file():
            return model_from_gguf(read_header(p), overrides)
        base, q = builtin_name(p.name)
        if base not in builtin_models():
            raise UserError(f"--model {name_or_path}: no such file, and its name ({base}) is not a built-in model")
        ov = dict(overrides or {})
        if q and "weights" not in ov:
            ov["weights"] = q
        spec = load_model(base, ov)
        w = ov.get("weights")
        if q and w == q:  # the type came from the file name, not from a flag the user gave
            spec.precision_source = _name_typed(spec.precision_source)
        spec.notes.append(f"{p.name} is not on this machine: the built-in {base}" + (f" with {w} weights" if w else "")
                          + (" (the file name's type)" if q and w == q else ""))
        return spec
    cfg, hf_quant, name, source = _resolve_source(name_or_path)
    return _build(cfg, hf_quant, name, source, overrides)


def _name_typed(source: str) -> str:
    """``precision_source`` of a GGUF name resolved to a built-in model whose weight type the file
    name gave: ``...; flags weights=q4_k[, kv=fp8]`` becomes ``...; the file name's type
    weights=q4_k[; flags kv=fp8]`` (no --weights flag was given)."""
    return re.sub(r"flags weights=([^,;]+)(, )?",
                  lambda m: f"the file name's type weights={m[1]}" + ("; flags " if m[2] else ""), source, count=1)


def _is_gguf(p: Path) -> bool:
    return is_gguf(p)


def model_from_gguf(header: Any, overrides: dict[str, str] | None = None) -> ModelSpec:
    """A :class:`ModelSpec` from a GGUF header (:class:`infergap.roofline.gguf.GGUFHeader`):
    dimensions from its metadata, and the file's own tensors with their GGML types, so the
    stored bytes are the file's tensor data. KV cache f16 (llama.cpp's default ``-ctk/-ctv``).
    Raises :class:`UserError` for metadata the roofline cannot use."""
    cfg = config_of(header)
    name = Path(header.path).name.removesuffix(".gguf") or "gguf"
    spec = _build({**cfg, "torch_dtype": "float16"}, None, name, f"GGUF {header.path}", {})
    spec.tensors = [Tensor(**{k: v for k, v in t.items() if k != "n_bytes"}) for t in roofline_tensors(header)]
    spec.tied_embeddings = bool(cfg.get("tie_word_embeddings"))
    if spec.tied_embeddings:  # the lm_head reads the embedding matrix
        emb = next((t for t in spec.tensors if t.group == "embedding"), None)
        if emb is not None:
            spec.tensors.append(Tensor(name="output (tied to token_embd)", group="lm_head", params=emb.params, shard="vocab",
                                       stored=False, fmt=emb.fmt))
    spec.kv_format = "fp16"
    spec.precision_source = f"GGUF tensor types (file type {_file_type(header.metadata.get('general.file_type'))})"
    _apply_overrides(spec, overrides or {})
    _summarize_precision(spec)
    return spec


def _file_type(ft: Any) -> str:
    """GGUF ``general.file_type`` as llama.cpp names it (1 → ``MOSTLY_F16``)."""
    try:
        from gguf.constants import LlamaFileType

        return LlamaFileType(int(ft)).name
    except (ImportError, TypeError, ValueError):
        return str(ft)


@dataclass
class _Shape:
    """The dimensions of a config the tensor list is built from, read and checked once
    (:func:`_read_shape`); names follow the formulas in the module docstring."""

    H: int
    L: int
    nh: int
    V: int
    nkv: int
    model_type: str
    tied: bool
    n_experts: int
    top_k: int
    kinds: list[LayerKind]
    inter: int
    moe_inter: int
    attention: str = "gqa"
    head_dim: int = 0
    v_dim: int = 0
    q_lora: int | None = None
    kv_lora: int | None = None
    nope: int | None = None
    rope: int | None = None
    idx_heads: int | None = None
    idx_dim: int | None = None
    idx_topk: int | None = None

    @property
    def mla(self) -> bool:
        return self.attention == "mla"

    @property
    def expert_params(self) -> int:
        """Parameters of one routed expert: gated FFN, plus gpt-oss's gate_up and down biases."""
        return 3 * self.H * self.moe_inter + ((2 * self.moe_inter + self.H) if self.model_type == "gpt_oss" else 0)


def _read_shape(cfg: dict[str, Any], source: str) -> _Shape:
    """Model dimensions, experts, layer kinds and FFN sizes of ``cfg``; the attention geometry is
    read by :func:`_read_attention`. Raises UserError for a missing or inconsistent field."""
    missing = [k for k in REQUIRED if cfg.get(k) is None]
    if missing:
        raise UserError(f"{source}: missing required field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    H = _int(cfg, "hidden_size", source)
    L = _int(cfg, "num_hidden_layers", source, limit=MAX_LAYERS)
    nh = _int(cfg, "num_attention_heads", source)
    V = _int(cfg, "vocab_size", source)
    if min(H, L, nh, V) == 0:
        raise UserError(f"{source}: hidden_size, num_hidden_layers, num_attention_heads and vocab_size must be > 0")
    nkv = _opt_int(cfg, source, "num_key_value_heads") or nh
    n_experts = _opt_int(cfg, source, "n_routed_experts", "num_experts", "num_local_experts", limit=1 << 16) or 0
    top_k = _opt_int(cfg, source, "num_experts_per_tok", "experts_per_token", "moe_topk", limit=1 << 16) or 0
    if n_experts and not top_k:
        raise UserError(f"{source}: {n_experts} experts but no num_experts_per_tok")
    if n_experts and top_k > n_experts:
        raise UserError(f"{source}: num_experts_per_tok {top_k} exceeds the {n_experts} experts")
    kinds = _layer_kinds(cfg, L, n_experts, source)
    inter = _opt_int(cfg, source, "intermediate_size")
    moe_inter = _opt_int(cfg, source, "moe_intermediate_size") or (inter if n_experts else None)
    if any(not k.moe for k in kinds) and inter is None:
        raise UserError(f"{source}: missing required field intermediate_size")
    if n_experts and moe_inter is None:
        raise UserError(f"{source}: missing required field moe_intermediate_size")
    return _Shape(H=H, L=L, nh=nh, V=V, nkv=nkv, model_type=str(cfg.get("model_type") or ""),
                  tied=bool(cfg.get("tie_word_embeddings", False)), n_experts=n_experts, top_k=top_k, kinds=kinds,
                  inter=inter or 0, moe_inter=moe_inter or 0)


def _read_attention(cfg: dict[str, Any], source: str, s: _Shape) -> None:
    """Fill the attention geometry of ``s``: MLA ranks and head dims (with the DSA indexer's), or
    the GQA/MHA head dim. Raises UserError for heads that do not divide."""
    if cfg.get("kv_lora_rank") is not None:
        s.attention = "mla"
        s.q_lora = _opt_int(cfg, source, "q_lora_rank")
        s.kv_lora = _int(cfg, "kv_lora_rank", source)
        s.nope = _int(cfg, "qk_nope_head_dim", source)
        s.rope = _int(cfg, "qk_rope_head_dim", source)
        s.v_dim = _int(cfg, "v_head_dim", source)
        s.head_dim = s.nope + s.rope
        s.idx_heads = _opt_int(cfg, source, "index_n_heads")
        s.idx_dim = _opt_int(cfg, source, "index_head_dim")
        s.idx_topk = _opt_int(cfg, source, "index_topk")
        return
    s.head_dim = _opt_int(cfg, source, "head_dim") or (s.H // s.nh)
    if s.head_dim == 0:
        raise UserError(f"{source}: head_dim is 0 (hidden_size {s.H} < num_attention_heads {s.nh})")
    s.v_dim = s.head_dim
    s.attention = "mha" if s.nkv == s.nh else "gqa"
    if s.nkv == 0 or s.nh % s.nkv:
        raise UserError(f"{source}: num_attention_heads {s.nh} is not a multiple of num_key_value_heads {s.nkv}")


_Add = Callable[..., None]


def _mla_tensors(s: _Shape, p: str, i: int, add: _Add) -> None:
    """One MLA layer's attention tensors (DeepSeek-V3 report, 2.1.1), with the DSA indexer."""
    assert s.kv_lora is not None and s.nope is not None and s.rope is not None
    H, nh, q_lora = s.H, s.nh, s.q_lora
    if q_lora:
        add(p + "self_attn.q_a_proj", "attention", H * q_lora, i, "replicated")
        add(p + "self_attn.q_a_layernorm", "other", q_lora, i, "replicated")
        add(p + "self_attn.q_b_proj", "attention", q_lora * nh * (s.nope + s.rope), i, "tp")
    else:
        add(p + "self_attn.q_proj", "attention", H * nh * (s.nope + s.rope), i, "tp")
    add(p + "self_attn.kv_a_proj_with_mqa", "attention", H * (s.kv_lora + s.rope), i, "replicated")
    add(p + "self_attn.kv_a_layernorm", "other", s.kv_lora, i, "replicated")
    add(p + "self_attn.kv_b_proj", "attention", s.kv_lora * nh * (s.nope + s.v_dim), i, "tp")
    add(p + "self_attn.o_proj", "attention", nh * s.v_dim * H, i, "tp")
    if s.idx_heads and s.idx_dim and s.idx_topk:
        qsrc = q_lora or H
        add(p + "self_attn.indexer.wq_b", "indexer", qsrc * s.idx_heads * s.idx_dim, i, "replicated", dsa_query=True)
        add(p + "self_attn.indexer.weights_proj", "indexer", H * s.idx_heads, i, "replicated", dsa_query=True)
        add(p + "self_attn.indexer.wk", "indexer", H * s.idx_dim, i, "replicated")
        add(p + "self_attn.indexer.k_norm", "other", 2 * s.idx_dim, i, "replicated")


def _gqa_tensors(s: _Shape, p: str, i: int, add: _Add, attn_bias: bool) -> None:
    """One GQA/MHA layer's attention tensors, with Qwen3's q/k norms and gpt-oss's sinks."""
    H, nh, nkv, d = s.H, s.nh, s.nkv, s.head_dim
    add(p + "self_attn.q_proj", "attention", H * nh * d, i, "tp")
    add(p + "self_attn.k_proj", "attention", 2 * H * nkv * d, i, "kv_heads")  # k and v
    add(p + "self_attn.o_proj", "attention", nh * d * H, i, "tp")
    if attn_bias:
        add(p + "self_attn.q_proj.bias", "other", nh * d + 2 * nkv * d + H, i, "replicated")
    if s.model_type.startswith("qwen3"):
        add(p + "self_attn.q_norm", "other", 2 * d, i, "replicated")
    if s.model_type == "gpt_oss":
        add(p + "self_attn.sinks", "other", nh, i, "replicated")


def _moe_tensors(cfg: dict[str, Any], source: str, s: _Shape, p: str, i: int, add: _Add) -> None:
    """One MoE layer's router, routed experts and shared experts."""
    H, moe_inter, names = s.H, s.moe_inter, _names(s.model_type)
    add(p + names["router"], "router", H * s.n_experts, i, "replicated")
    if s.model_type == "gpt_oss":
        add(p + names["router"] + ".bias", "other", s.n_experts, i, "replicated")
    add(p + names["experts"], "experts", s.n_experts * s.expert_params, i, "experts", n_experts=s.n_experts)
    shared = (_opt_int(cfg, source, "n_shared_experts", limit=1 << 16) or 0) * 3 * H * moe_inter
    shared += 3 * H * (_opt_int(cfg, source, "shared_expert_intermediate_size") or 0)
    add(p + names["shared"], "shared_experts", shared, i, "tp")
    if cfg.get("shared_expert_intermediate_size"):
        add(p + "mlp.shared_expert_gate", "other", H, i, "replicated")


def _tensors(cfg: dict[str, Any], source: str, s: _Shape) -> list[Tensor]:
    """Every tensor of the model in checkpoint order: embedding, per layer norms, attention and
    FFN (dense or MoE), final norm and lm_head (not stored when tied)."""
    attn_bias = bool(cfg.get("attention_bias", False))
    tensors: list[Tensor] = []

    def add(name: str, group: str, params: int, layer: int | None, shard: Shard, **kw: Any) -> None:
        if params:
            tensors.append(Tensor(name=name, group=group, params=int(params), layer=layer, shard=shard, **kw))

    tensors.append(Tensor(name="model.embed_tokens", group="embedding", params=s.V * s.H, shard="vocab"))
    for i, kind in enumerate(s.kinds):
        p = f"model.layers.{i}."
        add(p + "input_layernorm", "other", 2 * s.H, i, "replicated")  # + post_attention_layernorm
        if s.mla:
            _mla_tensors(s, p, i, add)
        else:
            _gqa_tensors(s, p, i, add, attn_bias)
        if kind.moe:
            _moe_tensors(cfg, source, s, p, i, add)
        else:
            add(p + "mlp.gate_proj", "dense_ffn", 3 * s.H * s.inter, i, "tp")
    tensors.append(Tensor(name="model.norm", group="other", params=s.H, shard="replicated"))
    tensors.append(Tensor(name="lm_head", group="lm_head", params=s.V * s.H, shard="vocab", stored=not s.tied))
    return tensors


def _build(cfg: dict[str, Any], hf_quant: dict[str, Any] | None, name: str, source: str, overrides: dict[str, str] | None) -> ModelSpec:
    """The :class:`ModelSpec` of a config: shape (:func:`_read_shape`, :func:`_read_attention`),
    tensors (:func:`_tensors`), then every tensor's precision (:func:`_resolve_precision`)."""
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers keep the LM in text_config
        cfg = {**cfg["text_config"], "quantization_config": cfg.get("quantization_config")}
    s = _read_shape(cfg, source)
    _read_attention(cfg, source, s)
    tensors = _tensors(cfg, source, s)
    spec = ModelSpec(
        name=name, source=source, model_type=s.model_type, attention=s.attention, hidden=s.H, layers=s.L,
        heads=s.nh, kv_heads=s.nkv if not s.mla else s.nh, head_dim=s.head_dim, v_head_dim=s.v_dim, vocab=s.V,
        tied_embeddings=s.tied, q_lora_rank=int(s.q_lora) if s.q_lora else None, kv_lora_rank=s.kv_lora,
        qk_nope_head_dim=s.nope, qk_rope_head_dim=s.rope, index_heads=int(s.idx_heads) if s.idx_heads else None,
        index_head_dim=int(s.idx_dim) if s.idx_dim else None, index_topk=int(s.idx_topk) if s.idx_topk else None,
        n_experts=s.n_experts, top_k=s.top_k, expert_params=s.expert_params if s.n_experts else 0,
        layer_kinds=s.kinds, tensors=tensors,
        mtp_layers=_opt_int(cfg, source, "num_nextn_predict_layers", limit=MAX_LAYERS) or 0,
    )
    _resolve_precision(spec, cfg, hf_quant, source, overrides or {})
    if spec.mtp_layers:
        spec.notes.append(f"{spec.mtp_layers} MTP layer(s) not counted: they run only with speculative decoding")
    return spec


def _resolve_precision(spec: ModelSpec, cfg: dict[str, Any], hf_quant: dict[str, Any] | None, source: str, overrides: dict[str, str]) -> None:
    try:
        base = dtype_format(_first(cfg, "torch_dtype", "dtype"), source)
    except UserError:
        if not overrides.get("weights"):
            raise
        base = "bf16"  # every weight's precision is given; KV follows --kv or stays bf16
    scheme: QuantScheme | None = None
    if hf_quant:
        scheme = parse_quant_config(hf_quant, "hf_quant_config.json")
    elif cfg.get("quantization_config"):
        scheme = parse_quant_config(cfg["quantization_config"], f"{source} quantization_config")
    never_quantized = {"router", "embedding", "lm_head", "other"}
    for t in spec.tensors:
        t.fmt = base
        if scheme and scheme.fmt and t.group not in never_quantized and not module_matches(t.name, scheme.exclude):
            t.fmt = scheme.fmt
    spec.kv_format = base if base in KV_FORMATS else "bf16"
    if scheme:
        spec.precision_source = scheme.source
        if scheme.kv:
            spec.kv_format = scheme.kv
    _apply_overrides(spec, overrides)
    _summarize_precision(spec)


def _apply_overrides(spec: ModelSpec, overrides: dict[str, str]) -> None:
    applied: list[str] = []
    for key in ("weights", *[k for k in OVERRIDE_GROUPS if k != "weights"]):
        val = overrides.get(key)
        if not val:
            continue
        fmt = normalize_format(val, what=f"--{key.replace('_', '-')}")
        for t in spec.tensors:
            if t.group in OVERRIDE_GROUPS[key]:
                t.fmt = fmt
        applied.append(f"{key}={fmt}")
    if overrides.get("kv"):
        kv = normalize_format(overrides["kv"], what="--kv")
        if kv not in KV_FORMATS:
            raise UserError(f"--kv {overrides['kv']}: KV cache formats are {', '.join(KV_FORMATS)}")
        spec.kv_format = kv
        applied.append(f"kv={kv}")
    if applied:
        spec.precision_source += "; flags " + ", ".join(applied)


def _summarize_precision(spec: ModelSpec) -> None:
    summary: dict[str, str] = {}
    for g in GROUPS:
        fmts = sorted({t.fmt for t in spec.tensors if t.group == g})
        if fmts:
            summary[g] = "/".join(fmts)
    summary["kv_cache"] = spec.kv_format
    spec.precision = summary
