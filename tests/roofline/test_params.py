"""Parameter counts computed from the shipped configs against the publishers' figures.

Publishers differ on whether the input embedding (a lookup) counts as "active": Qwen's and
Mistral's activated counts include it, OpenAI's gpt-oss card, DeepSeek-V3's and GLM-5's do not.
Each case says which convention its published figure uses.
"""

import pytest

from infergap.roofline import load_model

# name, published total (B), published active (B), active includes the input embedding, tolerance
PUBLISHED = [
    ("deepseek-v3", 671, 37, False, 0.02),
    ("glm-5", 744, 40, False, 0.03),
    ("qwen3-235b-a22b", 235, 22, True, 0.02),
    ("qwen3-30b-a3b", 30.5, 3.3, True, 0.02),
    ("mixtral-8x7b", 46.7, 12.9, True, 0.02),
    ("gpt-oss-120b", 116.8, 5.1, False, 0.02),
    ("llama-3.1-8b", 8.03, 8.03, True, 0.02),
    ("llama-3.1-70b", 70.6, 70.6, True, 0.02),
]


@pytest.mark.parametrize("name,total_B,active_B,with_embedding,tol", PUBLISHED)
def test_counts_match_published(name, total_B, active_B, with_embedding, tol):
    m = load_model(name)
    assert m.total_params() / 1e9 == pytest.approx(total_B, rel=tol)
    assert m.active_params(include_embedding=with_embedding) / 1e9 == pytest.approx(active_B, rel=tol)


def test_mla_attention_formula_deepseek_v3():
    """The MLA projections of one layer equal the reference formula from the config fields."""
    m = load_model("deepseek-v3")
    H, ql, nh, nope, rope, kvl, v = 7168, 1536, 128, 128, 64, 512, 128
    expected = H * ql + ql * nh * (nope + rope) + H * (kvl + rope) + kvl * nh * (nope + v) + nh * v * H
    layer0 = sum(t.params for t in m.tensors if t.layer == 0 and t.group == "attention")
    assert layer0 == expected


def test_dense_and_moe_layers_follow_first_k_dense_replace():
    m = load_model("glm-5")
    assert [k.moe for k in m.layer_kinds[:4]] == [False, False, False, True]
    assert m.moe_layers == m.layers - 3
    dense = [t for t in m.tensors if t.group == "dense_ffn"]
    assert len(dense) == 3 and all(t.params == 3 * m.hidden * 12288 for t in dense)


def test_glm5_indexer_size():
    """The DSA indexer of one layer: wq_b + wk + weights_proj (about 9.4M parameters)."""
    m = load_model("glm-5")
    per_layer = sum(t.params for t in m.tensors if t.layer == 5 and t.group == "indexer")
    assert per_layer == 2048 * 32 * 128 + 6144 * 128 + 6144 * 32
    assert per_layer / 1e6 == pytest.approx(9.4, rel=0.02)


def test_sliding_window_layers_from_layer_types():
    m = load_model("gpt-oss-120b")
    windows = [k.window for k in m.layer_kinds]
    assert windows.count(128) == 18 and windows.count(None) == 18


def test_tied_embeddings_count_once(tmp_path):
    import json

    cfg = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000,
           "intermediate_size": 128, "tie_word_embeddings": True}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    tied = load_model(str(p))
    cfg["tie_word_embeddings"] = False
    p.write_text(json.dumps(cfg))
    untied = load_model(str(p))
    assert untied.total_params() - tied.total_params() == 1000 * 64
    # lm_head is read per token either way
    assert tied.active_params() == untied.active_params()


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from infergap.errors import UserError  # noqa: E402

_FIELDS = ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size",
           "intermediate_size", "moe_intermediate_size", "n_routed_experts", "num_experts", "num_local_experts",
           "num_experts_per_tok", "first_k_dense_replace", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim",
           "qk_rope_head_dim", "v_head_dim", "head_dim", "sliding_window", "layer_types", "mlp_only_layers",
           "decoder_sparse_step", "n_shared_experts", "tie_word_embeddings", "torch_dtype", "index_topk",
           "index_n_heads", "index_head_dim", "quantization_config", "moe_layer_freq", "mlp_layer_types"]
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 64), st.floats(allow_nan=True), st.text(max_size=8),
                    st.lists(st.one_of(st.integers(-2, 8), st.text(max_size=6)), max_size=4),
                    st.dictionaries(st.text(max_size=6), st.integers(0, 4), max_size=2))


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(_FIELDS), _VALUES, max_size=14))
def test_config_fuzz_gives_model_or_one_user_error(tmp_path_factory, cfg):
    import json as _json

    base = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 100, "intermediate_size": 32}
    p = tmp_path_factory.mktemp("cfg") / "config.json"
    p.write_text(_json.dumps({**base, **cfg}))
    try:
        m = load_model(str(p))
    except UserError as e:
        assert "\n" not in str(e)
        return
    assert m.total_params() > 0 and m.active_params() <= m.total_params() + m.vocab * m.hidden


@pytest.mark.parametrize("field,value,message", [
    ("num_hidden_layers", 1e12, "'num_hidden_layers' must be an integer from 0 to 4096"),
    ("hidden_size", "4096", "'hidden_size' must be an integer"),
    ("num_key_value_heads", 3, "not a multiple of num_key_value_heads 3"),
    ("num_experts", 8, "8 experts but no num_experts_per_tok"),
])
def test_bad_config_fields(tmp_path, field, value, message):
    import json as _json

    cfg = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 100,
           "intermediate_size": 32, field: value}
    p = tmp_path / "config.json"
    p.write_text(_json.dumps(cfg))
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        load_model(str(p))
