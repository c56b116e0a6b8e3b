"""Storage formats of weights and KV cache: bytes per element including scale overhead, and the
reading of a checkpoint's quantization config into per-tensor formats.

Bytes per parameter (each includes the scales stored next to the values):

==============  ==========  =====================================================================
format          bytes       why
==============  ==========  =====================================================================
``fp32``        4
``bf16``        2
``fp16``        2
``fp8``         1           FP8 E4M3 with one fp32 scale per tensor (negligible)
``fp8-block``   1+4/16384   DeepSeek-V3 style: one fp32 scale per 128x128 block
``int8``        1+2/4096    per-output-channel fp16 scale (rows of 4096 taken as typical)
``nvfp4``       0.5+1/16    E2M1 values + one FP8 E4M3 scale per 16 elements (+ per-tensor fp32)
``mxfp4``       0.5+1/32    E2M1 values + one E8M0 scale per 32 elements (OCP MX spec)
``int4-gN``     0.5+2.5/N   AWQ: fp16 scale + 4-bit zero point per group of N (default N=128)
``q8_0`` ...    GGML        GGUF tensor types: bytes per block / elements per block
                            (``gguf.constants.GGML_QUANT_SIZES``; :mod:`infergap.roofline.gguf`)
==============  ==========  =====================================================================

Sources: NVIDIA ModelOpt NVFP4 format (E2M1, FP8 scale per 16, fp32 global scale); OCP
Microscaling Formats (MX) v1.0 specification; DeepSeek-V3 ``config.json``
(``weight_block_size: [128, 128]``); AutoAWQ ``WQLinear_GEMM`` (``qzeros`` 4-bit, ``scales`` fp16).
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any, Iterable

from infergap.errors import UserError
from infergap.roofline.gguf import bits_per_weight, ggml_types

#: Bytes per element of each named format (scale overhead included).
BYTES_PER_PARAM: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp8-block": 1.0 + 4.0 / (128 * 128),
    "int8": 1.0 + 2.0 / 4096,
    "nvfp4": 0.5 + 1.0 / 16,
    "mxfp4": 0.5 + 1.0 / 32,
}

#: Which tensor-core precision a format computes in, when the GPU has it (else bf16).
#: NVFP4 and MXFP4 run as FP4 on Blackwell; INT4 groupwise is weight-only (W4A16) and computes in BF16.
COMPUTE_PRECISION: dict[str, str] = {
    "fp32": "bf16",
    "bf16": "bf16",
    "fp16": "bf16",
    "fp8": "fp8",
    "fp8-block": "fp8",
    "int8": "fp8",
    "nvfp4": "fp4",
    "mxfp4": "fp4",
}

_ALIASES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "float": "fp32",
    "fp8-tensor": "fp8",
    "fp8-per-tensor": "fp8",
    "e4m3": "fp8",
    "fp8-128": "fp8-block",
    "fp8-blockwise": "fp8-block",
    "fp4": "nvfp4",
    "f16": "fp16",
    "f32": "fp32",
    "int4": "int4-g128",
    "awq": "int4-g128",
    "w4a16": "int4-g128",
}

KV_FORMATS = ("fp32", "bf16", "fp16", "fp8")


def normalize_format(name: str, *, what: str = "precision") -> str:
    """The canonical name of format ``name`` (case-insensitive; ``bfloat16`` -> ``bf16``,
    ``int4`` -> ``int4-g128``, ``int4-g64``...). Raises :class:`UserError` naming ``what`` when unknown."""
    key = name.strip().lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    if key in BYTES_PER_PARAM:
        return key
    m = re.fullmatch(r"int4-g(\d+)", key)
    if m and int(m.group(1)) > 0:
        return key

    ggml = key.replace("-", "_")
    try:
        types = ggml_types()
    except UserError:  # no gguf package: only a GGML-looking name needs it
        if re.fullmatch(r"(i?q\d\w*|tq\d\w*|mxfp4)", ggml):
            raise
        types = []
    if ggml in types:
        return ggml
    if re.fullmatch(r"i?q\d_k_(s|m|l|xl)", ggml):
        raise UserError(f"{what} {name!r}: a GGUF file type mixes tensor types; pass the .gguf file as --model, "
                        f"or its main tensor type ({ggml.rsplit('_', 1)[0]})")
    known = ", ".join([*BYTES_PER_PARAM, "int4-g128 (or int4-gN)", "GGUF tensor types (q8_0, q6_k, q4_k, iq4_xs, ...)"])
    raise UserError(f"{what} {name!r}: unknown format (known: {known})")


def bytes_per_param(fmt: str) -> float:
    """Bytes per stored element of canonical format ``fmt``, scales included (see module table)."""
    if fmt in BYTES_PER_PARAM:
        return BYTES_PER_PARAM[fmt]
    m = re.fullmatch(r"int4-g(\d+)", fmt)
    if m:
        return 0.5 + 2.5 / int(m.group(1))

    return bits_per_weight(fmt) / 8.0


def compute_precision(fmt: str) -> str:
    """The tensor-core precision (``bf16`` | ``fp8`` | ``fp4``) that weights of ``fmt`` compute in."""
    return COMPUTE_PRECISION.get(fmt, "bf16")


#: ``torch_dtype`` names (transformers' config.json, ``torch.<name>``) and their formats.
TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32",
                "float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}


def dtype_format(torch_dtype: Any, source: str = "config.json") -> str:
    """Canonical format of a config's ``torch_dtype``/``dtype`` (a name in :data:`TORCH_DTYPES`,
    with or without ``torch.``); bf16 when absent (None). Raises :class:`UserError` naming
    ``source`` for any other value: guessing bf16 would silently halve or double every byte count."""
    if torch_dtype is None:
        return "bf16"
    key = torch_dtype.lower().replace("torch.", "") if isinstance(torch_dtype, str) else None
    if key not in TORCH_DTYPES:
        shown = repr(torch_dtype)[:40]
        raise UserError(f"{source}: torch_dtype {shown} is not a known dtype ({', '.join(TORCH_DTYPES)}); "
                        "give the precision with --weights")
    return TORCH_DTYPES[key]


def _qint(qc: dict[str, Any], keys: tuple[str, ...], default: int, source: str) -> int:
    """The first of ``keys`` in a quantization config as an integer (``default`` when none is
    set); UserError for a value that is not an integer."""
    for k in keys:
        v = qc.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            raise UserError(f"{source}: {k} must be an integer, got {repr(v)[:40]}")
        return v
    return default


def module_matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether module ``name`` is covered by any exclusion pattern.

    Accepts the three forms checkpoints use: ``re:<regex>`` (compressed-tensors ``ignore``), shell
    wildcards matched against the name or a parent of it (ModelOpt ``exclude_modules``:
    ``model.layers.*.self_attn*``), and plain names matched as a substring (transformers'
    ``modules_to_not_convert`` semantics: ``lm_head``, ``model.layers.*.mlp.router``).

    >>> module_matches("model.layers.3.self_attn.q_proj", ["model.layers.*.self_attn"])
    True
    >>> module_matches("model.layers.3.mlp.experts.0.up_proj", ["lm_head", "re:.*self_attn.*"])
    False
    """
    for p in patterns:
        if not isinstance(p, str) or not p:
            continue
        if p.startswith("re:"):
            try:
                if re.match(p[3:], name):
                    return True
            except re.error:
                continue
            continue
        if any(ch in p for ch in "*?["):
            if fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(name, p + ".*"):
                return True
        elif p == name or name.startswith(p + ".") or p in name:
            return True
    return False


class QuantScheme:
    """The checkpoint's quantization: one format for quantized linears, the exclusion patterns,
    and the KV-cache format when the checkpoint states one. ``source`` says where it was read."""

    def __init__(self, fmt: str | None, exclude: list[str], kv: str | None, source: str) -> None:
        self.fmt = fmt
        self.exclude = exclude
        self.kv = kv
        self.source = source

    def __repr__(self) -> str:
        return f"QuantScheme(fmt={self.fmt!r}, exclude={self.exclude!r}, kv={self.kv!r}, source={self.source!r})"


def _ct_weights_format(w: dict[str, Any]) -> str | None:
    bits = w.get("num_bits")
    typ = str(w.get("type", "int")).lower()
    group = w.get("group_size")
    strategy = str(w.get("strategy", "")).lower()
    if bits == 4 and typ == "float":
        return "nvfp4" if (group in (None, 16)) else "mxfp4"
    if bits == 4 and typ == "int":
        return f"int4-g{int(group or 128)}"
    if bits == 8 and typ == "float":
        return "fp8-block" if strategy == "block" else "fp8"
    if bits == 8 and typ == "int":
        return "int8"
    return None


def parse_quant_config(qc: dict[str, Any] | None, source: str) -> QuantScheme | None:
    """Read a ``quantization_config`` (config.json) or an ``hf_quant_config.json`` body.

    Understands ModelOpt (``quant_algo`` NVFP4/FP8/W4A16_AWQ, ``exclude_modules``,
    ``kv_cache_quant_algo``), transformers' ``fp8`` (``weight_block_size``), ``mxfp4``, ``awq`` and
    ``gptq`` (``bits``, ``group_size``, ``modules_to_not_convert``) and compressed-tensors
    (``config_groups``, ``ignore``, ``kv_cache_scheme``). Returns None when ``qc`` is empty.
    Raises :class:`UserError` for a method it cannot map to bytes per parameter.
    """
    if not qc:
        return None
    if not isinstance(qc, dict):
        raise UserError(f"{source}: quantization config is not a JSON object")
    if "quantization" in qc and isinstance(qc["quantization"], dict):  # hf_quant_config.json
        qc = {"quant_method": "modelopt", **qc["quantization"]}
    method = str(qc.get("quant_method", "")).lower()
    exclude: list[str] = []
    for key in ("exclude_modules", "ignore", "modules_to_not_convert", "ignored_layers"):
        v = qc.get(key)
        if isinstance(v, list):
            exclude.extend(str(x) for x in v)
    kv: str | None = None
    fmt: str | None = None
    algo = str(qc.get("quant_algo", "") or "").upper()
    kv_algo = qc.get("kv_cache_quant_algo")
    if isinstance(kv_algo, str) and kv_algo.upper().startswith("FP8"):
        kv = "fp8"
    if method == "modelopt" or algo:
        if "NVFP4" in algo:
            fmt = "nvfp4"
        elif "MXFP4" in algo:
            fmt = "mxfp4"
        elif "FP8" in algo and "BLOCK" in algo:
            fmt = "fp8-block"
        elif "FP8" in algo:
            fmt = "fp8"
        elif "W4A16" in algo or "INT4" in algo or "AWQ" in algo:
            fmt = f"int4-g{_qint(qc, ('group_size',), 128, source) or 128}"
        elif "W8A8" in algo or "INT8" in algo:
            fmt = "int8"
    elif method == "fp8":
        fmt = "fp8-block" if qc.get("weight_block_size") else "fp8"
    elif method == "mxfp4":
        fmt = "mxfp4"
    elif method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = _qint(qc, ("bits", "w_bit"), 4, source)
        group = _qint(qc, ("group_size", "q_group_size"), 128, source)
        if bits not in (4, 8):
            raise UserError(f"{source}: {method} bits {bits} is not 4 or 8 (give the precision with --weights)")
        if not (group == -1 or 0 < group <= 1 << 20):
            raise UserError(f"{source}: {method} group_size {group} is not -1 or a positive size")
        if bits == 4:
            fmt = f"int4-g{group if group > 0 else 128}"
        else:
            fmt = "int8"
    elif method == "compressed-tensors":
        for group in (qc.get("config_groups") or {}).values():
            if isinstance(group, dict) and isinstance(group.get("weights"), dict):
                fmt = _ct_weights_format(group["weights"])
                if fmt:
                    break
        kvs = qc.get("kv_cache_scheme")
        if isinstance(kvs, dict) and kvs.get("num_bits") == 8 and str(kvs.get("type", "")).lower() == "float":
            kv = "fp8"
    if fmt is None:
        raise UserError(
            f"{source}: quantization method {qc.get('quant_method') or algo or '?'!r} is not understood "
            "(give the precision with --weights)"
        )
    return QuantScheme(fmt, exclude, kv, source)
