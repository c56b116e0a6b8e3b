"""Bounds against hand-computed cases, the project's seed headline, and monotonicity."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infergap.errors import UserError
from infergap.roofline import (
    Parallel,
    Workload,
    bounds,
    causal_pairs,
    collective_time_s,
    expected_max_experts_per_rank,
    experts_touched,
    load_hardware,
    load_model,
)

# The seed case: GLM-5-NVFP4 on 8 x RTX PRO 6000 Blackwell Server, TP8, computed at 309 tok/s
# single-stream and measured at 10.36 tok/s.
SEED_BOUND_TOK_S = 309
SEED_MEASURED_TOK_S = 10.36


@pytest.fixture(scope="module")
def seed():
    m = load_model("glm-5-nvfp4")
    hw = load_hardware("rtx-pro-6000-server", 8)
    return bounds(m, hw, Parallel(tp=8), Workload(measured_tok_s=SEED_MEASURED_TOK_S))


def test_seed_aggregate_bound(seed):
    assert seed.bound("aggregate").tok_s == pytest.approx(SEED_BOUND_TOK_S, rel=0.05)
    assert seed.hardware["bandwidth_GBps"] == pytest.approx(1600, rel=0.01)


def test_seed_per_gpu_bound_is_lower_and_explained(seed):
    agg, mem, per = seed.bound("aggregate"), seed.bound("per_gpu_memory"), seed.bound("per_gpu")
    assert per.tok_s < mem.tok_s < agg.tok_s
    # the replicated MLA down-projections, router and indexer are what a rank reads beyond its share
    assert mem.bytes_per_token > agg.bytes_per_token / 8
    text = " ".join(per.assumptions)
    assert "kv_a_proj_with_mqa" in text and "q_a_proj" in text and "mlp.gate" in text
    assert "replicated" in text
    assert seed.collectives.per_token == 2 * 78 + 1
    assert seed.collectives.latency_us == 20.0
    assert per.collectives_s == pytest.approx(seed.collectives.time_s)
    assert "below the aggregate" in seed.per_gpu_explanation


def test_seed_efficiency(seed):
    eff = {e.bound: e for e in seed.efficiency}
    assert eff["aggregate"].ratio == pytest.approx(SEED_MEASURED_TOK_S / seed.bound("aggregate").tok_s)
    assert eff["aggregate"].ratio == pytest.approx(SEED_MEASURED_TOK_S / SEED_BOUND_TOK_S, rel=0.05)  # ≈3.4 %
    assert eff["per_gpu"].ratio > eff["aggregate"].ratio


def test_llama_8b_a100_single_stream_is_bandwidth_over_weight_bytes():
    """Weight bytes read per token computed here from the config fields (input embedding excluded)."""
    L, H, nh, nkv, d, inter, V = 32, 4096, 32, 8, 128, 14336, 128256
    per_layer = H * nh * d + 2 * H * nkv * d + nh * d * H + 3 * H * inter + 2 * H
    weight_bytes = 2 * (L * per_layer + H + V * H)
    r = bounds(load_model("llama-3.1-8b"), load_hardware("a100-80gb"), Parallel(tp=1))
    assert r.bound("aggregate").tok_s == pytest.approx(2.039e12 / weight_bytes, rel=0.03)
    assert r.bound("per_gpu").tok_s == pytest.approx(r.bound("aggregate").tok_s)


def test_expert_touch_256_top8():
    assert experts_touched(256, 8, 1) == pytest.approx(8)
    rng = np.random.default_rng(0)
    for batch in (16, 128):
        trials = [len(np.unique(np.argsort(rng.random((batch, 256)), axis=1)[:, :8])) for _ in range(400)]
        assert experts_touched(256, 8, batch) == pytest.approx(np.mean(trials), rel=0.02)
    assert experts_touched(256, 8, 16) == pytest.approx(102, abs=1)
    assert experts_touched(256, 8, 128) == pytest.approx(252, abs=1)


def test_expected_max_experts_per_rank_brute_force():
    E, k, ep = 8, 3, 4
    g = E // ep
    maxima = [max(sum(1 for e in c if e // g == r) for r in range(ep)) for c in itertools.combinations(range(E), k)]
    assert expected_max_experts_per_rank(E, k, ep) == pytest.approx(sum(maxima) / len(maxima))
    assert expected_max_experts_per_rank(256, 8, 1) == 8
    assert 1 <= expected_max_experts_per_rank(256, 8, 8) < 8


def test_collective_and_pairs_formulas():
    assert collective_time_s(1, 1e6, 20, 63) == 0
    assert collective_time_s(8, 12288, 20, 63) == pytest.approx(20e-6 + 2 * 7 / 8 * 12288 / 63e9)
    assert causal_pairs(10) == sum(range(1, 11))
    assert causal_pairs(10, 4) == sum(min(i, 4) for i in range(1, 11))


def test_kv_bytes_per_token():
    ds = load_model("deepseek-v3")
    assert ds.kv_stored_bytes(1) == (512 + 64) * 2 * 61  # MLA latent + rope key, bf16, 61 layers
    assert ds.kv_stored_bytes(1, tp=8) == ds.kv_stored_bytes(1)  # replicated under TP
    ll = load_model("llama-3.1-70b")
    assert ll.kv_stored_bytes(1) == 2 * 8 * 128 * 2 * 80
    assert ll.kv_entry_bytes(8) == 2 * 1 * 128 * 2
    assert ll.kv_entry_bytes(16) == 2 * 1 * 128 * 2  # 8 KV heads over 16 ranks: replicated
    oss = load_model("gpt-oss-120b")
    entry = 2 * 8 * 64 * 2
    assert oss.kv_read_bytes(10000) == (18 * 10000 + 18 * 128) * entry


def test_dsa_reads_topk_latents_and_scores_every_key():
    m = load_model("glm-5-nvfp4")
    entry, key = (512 + 64) * 1, 128 + 4
    assert m.kv_read_bytes(1000) == 78 * 1000 * entry
    assert m.kv_read_bytes(1000, optimistic=False) == 78 * 1000 * (entry + key)
    assert m.kv_read_bytes(10000) == 78 * (2048 * entry + 10000 * key)


def test_dense_crossover_matches_flops_over_bandwidth():
    """B* ≈ F·bytes_per_param / (2·BW) for a dense BF16 model at negligible context."""
    hw = load_hardware("a100-80gb")
    r = bounds(load_model("llama-3.1-8b"), hw, Parallel(tp=1), Workload(context=1))
    expected = hw.tflops["bf16"] * 1e12 * 2 / (2 * hw.bandwidth_GBps * 1e9)
    assert r.crossover_batch == pytest.approx(expected, rel=0.03)
    assert r.crossover_batch_weights_only == pytest.approx(expected, rel=0.03)
    # at 4k context each sequence reads its KV every step: decode stays memory-bound far longer
    long = bounds(load_model("llama-3.1-8b"), hw, Parallel(tp=1), Workload(context=4096))
    assert long.crossover_batch is None or long.crossover_batch > r.crossover_batch
    assert long.crossover_batch_weights_only == r.crossover_batch_weights_only


def test_batched_throughput_grows_and_flags_kv_capacity():
    r = bounds(load_model("llama-3.1-8b"), load_hardware("h200"), Parallel(tp=1),
               Workload(context=32768, batches=[1, 8, 64, 512]))
    tps = [p.tok_s for p in r.batched]
    assert tps == sorted(tps)
    assert r.batched[0].tok_s == pytest.approx(r.bound("per_gpu").tok_s)
    assert [p.fits_kv for p in r.batched] == [p.batch <= r.memory.max_seqs_per_replica for p in r.batched]
    assert r.batched[-1].fits_kv is False


def test_memory_capacity_hand_computed():
    hw = load_hardware("h200")
    m = load_model("llama-3.1-8b")
    r = bounds(m, hw, Parallel(tp=1), Workload(context=8192, mem_fraction=0.9))
    weights = sum(t.bytes for t in m.tensors if t.stored)
    kv_seq = 8192 * 2 * 8 * 128 * 2 * 32
    assert r.memory.max_seqs == int((0.9 * 141e9 - weights) // kv_seq)


def test_does_not_fit_reports_numbers():
    r = bounds(load_model("llama-3.1-70b"), load_hardware("rtx-4090"), Parallel(tp=1))
    assert not r.memory.fits
    assert r.memory.message.startswith("does not fit")
    assert "GB per GPU" in r.memory.message
    assert r.bound("aggregate").tok_s > 0


def test_expert_parallel_busiest_rank():
    m = load_model("glm-5-nvfp4")
    hw = load_hardware("rtx-pro-6000-server", 8)
    tp_only = bounds(m, hw, Parallel(tp=8, ep=1))
    ep8 = bounds(m, hw, Parallel(tp=8, ep=8))
    per_expert = next(t for t in m.tensors if t.group == "experts").bytes / m.n_experts
    emax = expected_max_experts_per_rank(256, 8, 8)
    assert ep8.bound("per_gpu").components_B["experts"] == pytest.approx(75 * emax * per_expert)
    assert ep8.bound("per_gpu").components_B["experts"] > tp_only.bound("per_gpu").components_B["experts"]


def test_measured_ceiling_and_overrides_scale_bandwidth():
    m = load_model("llama-3.1-8b")
    ds = bounds(m, load_hardware("h200"), Parallel(tp=1)).bound("aggregate").tok_s
    meas = bounds(m, load_hardware("h200", ceiling="measured"), Parallel(tp=1)).bound("aggregate").tok_s
    assert meas / ds == pytest.approx(4233 / 4800)
    half = bounds(m, load_hardware("h200", bandwidth_efficiency=0.5), Parallel(tp=1)).bound("aggregate").tok_s
    assert half == pytest.approx(ds / 2)
    user = load_hardware("h200", measured_bandwidth_GBps=3000)
    assert bounds(m, user, Parallel(tp=1)).bound("aggregate").tok_s == pytest.approx(ds * 3000 / 4800)
    with pytest.raises(UserError, match="no measured figures"):
        load_hardware("l40s", ceiling="measured")


@pytest.mark.parametrize("name,tp,ep,match", [
    ("llama-3.1-8b", 3, 1, "does not divide the model's 32 attention heads"),
    ("glm-5-nvfp4", 8, 3, "must divide --tp"),
    ("llama-3.1-8b", 4, 2, "has no experts"),
])
def test_impossible_splits(name, tp, ep, match):
    with pytest.raises(UserError, match=match):
        bounds(load_model(name), load_hardware("h100", tp), Parallel(tp=tp, ep=ep))


MODELS = {n: load_model(n) for n in ("llama-3.1-8b", "glm-5-nvfp4", "gpt-oss-120b", "qwen3-30b-a3b")}


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(MODELS)), st.floats(100, 10000), st.floats(1.0, 3.0), st.integers(1, 200000))
def test_more_bandwidth_is_never_slower(name, bw, factor, context):
    m = MODELS[name]
    tp = 8 if name == "glm-5-nvfp4" else 1
    wl = Workload(context=context, batches=[1, 16, 128])
    lo = bounds(m, load_hardware("h200", tp, measured_bandwidth_GBps=bw), Parallel(tp=tp), wl)
    hi = bounds(m, load_hardware("h200", tp, measured_bandwidth_GBps=bw * factor), Parallel(tp=tp), wl)
    for a, b in zip(lo.single_stream, hi.single_stream):
        assert b.tok_s >= a.tok_s * (1 - 1e-12)
    for a, b in zip(lo.batched, hi.batched):
        assert b.tok_s >= a.tok_s * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(MODELS)), st.integers(1, 100000), st.integers(0, 100000))
def test_longer_context_is_never_faster(name, context, extra):
    m = MODELS[name]
    tp = 8 if name == "glm-5-nvfp4" else 1
    hw = load_hardware("rtx-pro-6000-server", tp)
    short = bounds(m, hw, Parallel(tp=tp), Workload(context=context, batches=[1, 32]))
    long = bounds(m, hw, Parallel(tp=tp), Workload(context=context + extra, batches=[1, 32]))
    for a, b in zip(short.single_stream, long.single_stream):
        assert b.tok_s <= a.tok_s * (1 + 1e-12)
    for a, b in zip(short.batched, long.batched):
        assert b.tok_s <= a.tok_s * (1 + 1e-12)
    assert long.memory.max_seqs <= short.memory.max_seqs


def test_prefill_flops_dense_hand_computed():
    m = load_model("llama-3.1-8b")
    P = 2048
    r = bounds(m, load_hardware("h200"), Parallel(tp=1), Workload(prompt_len=P))
    linear = sum(t.params for t in m.tensors if t.group not in ("embedding", "other"))
    attn = 32 * 2 * (P * (P + 1) / 2) * 32 * (128 + 128)
    assert r.prefill.flops == pytest.approx(2 * linear * P + attn)
    assert r.prefill.ttft_s >= r.prefill.flops / (989e12)
    assert math.isclose(r.prefill.tok_s, P / r.prefill.ttft_s)
