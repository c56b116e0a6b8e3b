"""Bytes per parameter from the formats' definitions, and quantization configs read into
per-tensor precision."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infergap.errors import UserError
from infergap.roofline import bytes_per_param, load_model
from infergap.roofline.precision import module_matches, normalize_format, parse_quant_config


def test_bytes_per_param_from_format_definitions():
    # NVFP4: 16 E2M1 values (4 bits each) share one FP8 E4M3 scale (8 bits).
    assert bytes_per_param("nvfp4") == (16 * 4 + 8) / 8 / 16
    # MXFP4: 32 values share one E8M0 scale.
    assert bytes_per_param("mxfp4") == (32 * 4 + 8) / 8 / 32
    # FP8 128x128 blocks: one fp32 scale per block.
    assert bytes_per_param("fp8-block") == (128 * 128 + 4) / (128 * 128)
    # AWQ group 128: fp16 scale + 4-bit zero per group.
    assert bytes_per_param("int4-g128") == (128 * 4 + 16 + 4) / 8 / 128
    assert bytes_per_param("bf16") == 2 and bytes_per_param("fp8") == 1


def test_format_names_and_errors():
    assert normalize_format("BFloat16") == "bf16"
    assert normalize_format("int4") == "int4-g128"
    assert normalize_format("int4-g64") == "int4-g64"
    with pytest.raises(UserError, match="unknown format"):
        normalize_format("fp3")


def test_gpt_oss_mxfp4_only_on_experts():
    m = load_model("gpt-oss-120b")
    assert m.precision["experts"] == "mxfp4"
    assert m.precision["attention"] == "bf16" and m.precision["router"] == "bf16" and m.precision["lm_head"] == "bf16"


def test_deepseek_v3_fp8_blocks_except_router_and_head():
    m = load_model("deepseek-v3")
    for g in ("attention", "dense_ffn", "shared_experts", "experts"):
        assert m.precision[g] == "fp8-block"
    assert m.precision["router"] == "bf16" and m.precision["lm_head"] == "bf16"


def test_glm5_nvfp4_release_layout():
    m = load_model("glm-5-nvfp4")
    assert {m.precision[g] for g in ("dense_ffn", "shared_experts", "experts")} == {"nvfp4"}
    assert {m.precision[g] for g in ("attention", "indexer", "router", "lm_head")} == {"bf16"}
    assert m.kv_format == "fp8"


def test_flags_override_checkpoint():
    m = load_model("glm-5", {"weights": "nvfp4", "attention": "bf16", "lm_head": "bf16", "router": "bf16", "kv": "fp8"})
    ref = load_model("glm-5-nvfp4")
    assert m.precision == ref.precision
    assert sum(t.bytes for t in m.tensors) == pytest.approx(sum(t.bytes for t in ref.tensors))
    with pytest.raises(UserError, match="--kv"):
        load_model("glm-5", {"kv": "nvfp4"})


def test_hf_quant_config_next_to_config(tmp_path):
    """A ModelOpt checkpoint directory: hf_quant_config.json wins, its exclusions apply."""
    cfg = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": 1000, "intermediate_size": 512, "torch_dtype": "bfloat16", "model_type": "llama"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({
        "producer": {"name": "modelopt"},
        "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
                         "exclude_modules": ["lm_head", "model.layers.0.self_attn*"]}}))
    m = load_model(str(tmp_path))
    by_name = {t.name: t.fmt for t in m.tensors}
    assert by_name["model.layers.0.self_attn.q_proj"] == "bf16"
    assert by_name["model.layers.1.self_attn.q_proj"] == "nvfp4"
    assert by_name["model.layers.0.mlp.gate_proj"] == "nvfp4"
    assert by_name["lm_head"] == "bf16"
    assert m.kv_format == "fp8"


def test_compressed_tensors_config():
    qc = {"quant_method": "compressed-tensors", "ignore": ["lm_head", "re:.*self_attn.*"],
          "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "group_size": 16}}},
          "kv_cache_scheme": {"num_bits": 8, "type": "float"}}
    s = parse_quant_config(qc, "test")
    assert s.fmt == "nvfp4" and s.kv == "fp8"
    assert module_matches("model.layers.7.self_attn.o_proj", s.exclude)
    assert not module_matches("model.layers.7.mlp.experts.3.down_proj", s.exclude)


def test_unknown_quant_method_is_a_user_error():
    with pytest.raises(UserError, match="not understood"):
        parse_quant_config({"quant_method": "bitsandbytes_magic"}, "config.json")


@given(st.text(max_size=60), st.lists(st.text(max_size=30), max_size=5))
def test_module_matches_never_raises(name, patterns):
    assert module_matches(name, patterns) in (True, False)


@given(st.dictionaries(st.sampled_from(["quant_method", "quant_algo", "bits", "group_size", "exclude_modules",
                                        "ignore", "weight_block_size", "config_groups", "kv_cache_quant_algo"]),
                       st.one_of(st.none(), st.integers(-5, 300), st.text(max_size=12),
                                 st.lists(st.text(max_size=10), max_size=3)), max_size=6))
def test_parse_quant_config_fuzz(qc):
    """Arbitrary JSON-shaped quantization configs give a scheme or one UserError, nothing else."""
    try:
        s = parse_quant_config(qc, "fuzz")
    except UserError:
        return
    if s is not None:
        assert bytes_per_param(s.fmt) > 0
