"""Hostile model configs for the roofline: quantization bits, dtypes, nesting, non-numbers."""

from __future__ import annotations

import json

import pytest
from hostile_helpers import cli, one_line_error

BASE = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "torch_dtype": "bfloat16"}


def _roofline(tmp_path, cfg: dict | str, *extra: str):
    p = tmp_path / "config.json"
    p.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    return cli("roofline", "--model", str(p), "--gpu", "h200", "--gpus", "1", *extra)


def test_gptq_bits_zero_is_refused(tmp_path):
    cfg = {**BASE, "quantization_config": {"quant_method": "gptq", "bits": 0, "group_size": 128}}
    one_line_error(_roofline(tmp_path, cfg), "bits 0", "--weights")


@pytest.mark.parametrize("bits", ["4", 4.5, True])
def test_gptq_bits_of_the_wrong_type_are_refused(tmp_path, bits):
    cfg = {**BASE, "quantization_config": {"quant_method": "gptq", "bits": bits}}
    one_line_error(_roofline(tmp_path, cfg), "bits")


@pytest.mark.parametrize("dtype", ["float64", "int3", 16, ["bfloat16"]])
def test_unknown_torch_dtype_is_refused(tmp_path, dtype):
    one_line_error(_roofline(tmp_path, {**BASE, "torch_dtype": dtype}), "torch_dtype", "--weights")


def test_unknown_torch_dtype_with_weights_given_is_accepted(tmp_path):
    p = _roofline(tmp_path, {**BASE, "torch_dtype": "float64"}, "--weights", "bf16")
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("text, words", [
    ("[" * 200_000 + "]" * 200_000, ("nested",)),
    ('{"hidden_size": NaN}', ("NaN",)),
    ('{"hidden_size": 1e999}', ("out of range",)),
    ('{"hidden_size": ' + "9" * 5000 + "}", ("config",)),
])
def test_malformed_config_documents(tmp_path, text, words):
    one_line_error(_roofline(tmp_path, text), *words)


def test_json_output_never_holds_bare_nan(tmp_path):
    """The roofline JSON is parsed by strict readers (``plan``): no NaN/Infinity tokens."""
    out = tmp_path / "r.json"
    p = _roofline(tmp_path, BASE, "--format", "json", "-o", str(out), "--measured", "1e308")
    if p.returncode == 0:
        text = out.read_text()
        assert "NaN" not in text and "Infinity" not in text
        json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
