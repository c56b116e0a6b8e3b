"""Workload building blocks on the real public trace heads: parsing, schedules, prefix sharing,
dataset specs, the SLO search's bracketing and bisection, and Prometheus parsing."""

from __future__ import annotations

import pytest

from infergap.bench import slo, traces, workloads
from infergap.bench.engine_metrics import parse
from infergap.bench.results import PointResult, Stats, TrialMetrics
from infergap.errors import UserError

from bench_helpers import ROOT

TRACES = ROOT / "tests" / "fixtures" / "traces"
MOONCAKE = TRACES / "mooncake_conversation_head.jsonl"
AZURE_CONV = TRACES / "azure_llm_conv_head.csv"
AZURE_CODE = TRACES / "azure_llm_code_head.csv"


def test_mooncake_head_parses_with_ms_timestamps_and_shared_block():
    reqs = traces.read_mooncake(MOONCAKE)
    assert len(reqs) == 40
    assert reqs[0].offset_s == 0 and reqs[10].offset_s == pytest.approx(3.0) and reqs[-1].offset_s == pytest.approx(12.0)
    assert reqs[0].input_tokens == 6758 and reqs[0].output_tokens == 500
    assert all(r.hash_ids[0] == 0 for r in reqs)
    # 40 requests share block 0 only: 39 of all blocks are reuse.
    total = sum(len(r.hash_ids) for r in reqs)
    assert traces.shared_prefix_fraction(reqs) == pytest.approx(39 / total)


def test_mooncake_prompts_share_exactly_the_blocks_with_equal_hash_ids():
    reqs = traces.read_mooncake(MOONCAKE)[:3]
    ps = traces.prompts(reqs, salt="s1", token_scale=0.01)  # blocks of 5 words
    block = len(traces._block_text("s1", 0, 5))
    heads = {p.text[: 3 + block] for p in ps}
    assert len(heads) == 1  # "s1 " + block 0, identical
    assert ps[0].text[3 + block: 3 + 2 * block] != ps[1].text[3 + block: 3 + 2 * block]
    assert [p.input_tokens for p in ps] == [68, 73, 72] and [p.output_tokens for p in ps] == [5, 5, 8]
    assert all(abs(len(p.text.split()) - 1 - p.input_tokens) <= 1 for p in ps)
    # A different salt changes every block, so a new run cannot hit the last run's cache.
    assert traces.prompts(reqs, salt="s2", token_scale=0.01)[0].text[3:40] != ps[0].text[3:40]


def test_azure_heads_parse_to_offsets():
    conv = traces.read_azure(AZURE_CONV)
    assert len(conv) == 60 and conv[0].offset_s == 0
    assert conv[1].offset_s == pytest.approx(50.9951690 - 46.6805900, abs=1e-6)
    assert conv[0].input_tokens == 374 and conv[0].output_tokens == 44 and not conv[0].hash_ids
    code = traces.read_azure(AZURE_CODE)
    assert code[12].offset_s - code[11].offset_s == pytest.approx(33.4590290 - 5.3790470, abs=1e-6)  # the ~28 s gap


def test_time_scale_max_duration_and_rate_rescaling():
    conv = traces.read_azure(AZURE_CONV)
    sel = traces.select(conv, time_scale=0.1, max_duration_s=1.0)
    assert sel and all(r.offset_s <= 1.0 for r in sel)
    assert len(sel) == sum(1 for r in conv if r.offset_s * 0.1 <= 1.0)
    off = traces.rescale_to_rate(sel, 50.0)
    assert (len(off) - 1) / (off[-1] - off[0]) == pytest.approx(50.0)
    # The shape is kept: gaps keep their proportions.
    g0 = [b.offset_s - a.offset_s for a, b in zip(sel, sel[1:])]
    g1 = [b - a for a, b in zip(off, off[1:])]
    assert g1[0] / g1[1] == pytest.approx(g0[0] / g0[1])
    with pytest.raises(UserError, match="time-scale"):
        traces.select(conv, time_scale=0)
    with pytest.raises(UserError, match="max-duration"):
        traces.select(conv[1:], time_scale=1, max_duration_s=0.001)


def test_bad_trace_files_are_one_line_errors(tmp_path):
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2}\n{"timestamp": "x"}\n')
    with pytest.raises(UserError, match="line 2"):
        traces.read_mooncake(bad)
    csvf = tmp_path / "t.csv"
    csvf.write_text("time,in,out\n1,2,3\n")
    with pytest.raises(UserError, match="header"):
        traces.read_azure(csvf)
    with pytest.raises(UserError, match="cannot read"):
        traces.read_azure(tmp_path / "missing.csv")


def test_dataset_specs():
    s = workloads.parse_dataset("shared-prefix:4x512+64")
    assert (s.kind, s.groups, s.prefix, s.suffix) == ("shared-prefix", 4, 512, 64)
    s = workloads.parse_dataset("shared-prefix:groups=2,prefix=100,suffix=8")
    assert (s.groups, s.prefix, s.suffix) == (2, 100, 8)
    s = workloads.parse_dataset("multi-turn:turns=5,think=250ms")
    assert (s.turns, s.think_s) == (5, 0.25)
    assert workloads.parse_dataset("multi-turn:3").think_s == workloads.DEFAULT_THINK_S
    s = workloads.parse_dataset("multi-turn:5,think=2s")  # the README's spelling
    assert (s.turns, s.think_s) == (5, 2.0)
    assert workloads.parse_dataset(f"mooncake:{MOONCAKE}").path == str(MOONCAKE)
    assert workloads.parse_dataset("random") is None
    for bad in ("shared-prefix:4x512", "multi-turn:turns=0", "multi-turn:3,turns=4x", "multi-turn:3,bogus=1", "mooncake:", "nope:1", "shared-prefix:groups=a,prefix=1,suffix=1"):
        with pytest.raises(UserError, match="--dataset"):
            workloads.parse_dataset(bad)


def test_shared_prefix_prompts_share_the_group_prefix_only():
    spec = workloads.parse_dataset("shared-prefix:3x40+6")
    ps = workloads.shared_prefix(9, spec, 8, salt="z.")
    pre = [p.text.split("\n")[0] for p in ps]
    assert pre[0] == pre[3] == pre[6] and pre[1] == pre[4] and pre[0] != pre[1]
    assert len(pre[0].split()) == 40 - 1  # "z.g0:" + 38 words
    assert len({p.text.split("\n")[1] for p in ps}) == 9
    assert [p.tag for p in ps[:3]] == ["g0", "g1", "g2"]


def test_conversation_history_grows_with_real_replies():
    spec = workloads.parse_dataset("multi-turn:3")
    c = workloads.conversations(1, spec, 10, 4, salt="m.")[0]
    p1 = c.prompt(0)
    c.answered(0, "reply one")
    p2 = c.prompt(1)
    assert [m["role"] for m in p2.messages] == ["user", "assistant", "user"]
    assert p2.messages[1]["content"] == "reply one" and p2.input_tokens > p1.input_tokens
    assert (p1.tag, p2.tag) == ("t1", "t2")


# ----------------------------------------------------------------------------- SLO search


def _point(load: float, ttft_p99: list[float], failed: int = 0) -> PointResult:
    trials = [TrialMetrics(trial=i + 1, duration_s=1, requests=100, completed=100 - failed, failed=failed, truncated=0,
                           ttft_ms=Stats(n=100, p99=v), tpot_ms=Stats(n=100, p99=10.0)) for i, v in enumerate(ttft_p99)]
    return PointResult(mode="rate", request_rate=load, trials=trials)


def _run_search(true_capacity: float, start: float = 1.0, spread: float = 0.0):
    targets = slo.parse_targets("ttft_p99=100ms,tpot_p99=50ms")
    points: list[PointResult] = []
    s = slo.Search("rate", targets, points, make_spec=lambda r: r, start=start)
    for load in s:
        base = 20.0 if load <= true_capacity else 400.0
        points.append(_point(load, [base, base * (1 + spread), base]))
    return s.result, points


def test_search_brackets_then_bisects_to_the_known_capacity():
    cap, points = _run_search(13.0)
    assert [p.request_rate for p in points[:5]] == [1, 2, 4, 8, 16]  # doubling until 16 fails
    assert cap.capacity <= 13.0 < cap.upper and cap.upper / cap.capacity <= 1 + slo.REL_TOL + 1e-9
    assert cap.binding == "ttft_p99" and cap.confidence == "high"
    assert "bracket" in cap.detail and "3 trial(s)" in cap.detail


def test_search_halves_from_a_failing_start_and_a_worst_trial_fails_the_probe():
    cap, points = _run_search(3.0, start=32.0)
    assert [p.request_rate for p in points[:5]] == [32, 16, 8, 4, 2]
    assert 2.0 <= cap.capacity <= 3.0
    # One trial over the bound fails the probe even when the median passes.
    targets = slo.parse_targets("ttft_p99=100ms")
    pr = slo.judge(_point(5, [20.0, 150.0, 20.0]), targets)
    assert not pr.passed and "worst of 3" in pr.reason
    assert not slo.judge(_point(5, [20.0, 20.0, 20.0], failed=5), targets).passed  # 5 % failed


def test_a_rate_probe_too_short_to_show_a_queue_fails_and_binds_the_search():
    """30 requests at 32,600/s arrive in 1 ms: all answered within a 2 s TTFT bound proves nothing.
    A probe must span the largest TTFT/E2E bound and two median request times."""
    targets = slo.parse_targets("ttft_p99=2s,tpot_p99=100ms")

    def pt(rate: float, n: int, e2e_p50_ms: float) -> PointResult:
        tr = TrialMetrics(trial=1, duration_s=1, requests=n, completed=n, failed=0, truncated=0,
                          ttft_ms=Stats(n=n, p99=50.0), tpot_ms=Stats(n=n, p99=5.0), e2e_ms=Stats(n=n, p50=e2e_p50_ms))
        return PointResult(mode="rate", request_rate=rate, trials=[tr])

    short = slo.judge(pt(32600, 30, 80.0), targets)
    assert not short.passed and short.too_short
    assert "arrive within 0.00092 s" in short.reason and "--num-prompts to ≥ 65200" in short.reason
    assert slo.judge(pt(10, 30, 80.0), targets).passed  # 3 s of arrivals ≥ the 2 s bound
    slow = slo.judge(pt(10, 30, 2000.0), targets)  # requests of 2 s each: 3 s < 2 × 2 s
    assert not slow.passed and "2 median request times" in slow.reason
    # A search over such probes is bound by the probe length, not by an SLO, at low confidence.
    points: list[PointResult] = []
    s = slo.Search("rate", targets, points, make_spec=lambda r: r, start=1.0)
    for load in s:
        points.append(pt(load, 30, 80.0))
    cap = s.result
    assert cap.binding == slo.PROBE_LENGTH and cap.confidence == "low"
    assert 13.5 <= cap.capacity <= 15 < cap.upper  # 30 requests span ≥ 2 s up to 15/s
    assert "bound by the probe length, not by an SLO" in cap.line() and "too short" in cap.detail
    # A load that was only too short to judge is not one that failed.
    assert f"at least {cap.capacity:g} req/s" in cap.line() and "fails at" not in cap.line()
    assert f"at {cap.upper:g} the probes were too short to judge" in cap.line()


def test_search_needs_percentile_bounds():
    with pytest.raises(UserError, match="--slo"):
        slo.Search("rate", slo.parse_targets("ttft=2s"), [], make_spec=lambda r: r)


# ----------------------------------------------------------------------------- Prometheus text


VLLM_METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 48.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 210.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.98
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 120.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 430.0
"""


def test_prometheus_text_maps_to_one_vocabulary():
    engine, v = parse(VLLM_METRICS)
    assert engine == "vllm"
    assert v == {"running": 48.0, "waiting": 210.0, "kv_usage": 0.98, "preemptions": 120.0,
                 "prefix_queries": 1000.0, "prefix_hits": 430.0}
    engine, v = parse("# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{tp_rank=\"0\"} 3\n"
                      "sglang:num_running_reqs{tp_rank=\"1\"} 4\n# TYPE sglang:token_usage gauge\n"
                      "sglang:token_usage{tp_rank=\"0\"} 0.5\nsglang:token_usage{tp_rank=\"1\"} 0.7\n")
    assert engine == "sglang" and v == {"running": 7.0, "kv_usage": 0.7}
    assert parse("# TYPE foo gauge\nfoo 1\n") == (None, {})


# llama-server's /metrics as the CPU build of llama-cpp-python 0.3.36's llama.cpp serves it
# (counters excerpted): n_tokens_max is declared a counter without _total, which the text parser
# names n_tokens_max_total.
LLAMACPP_METRICS = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 258
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 245
# HELP llamacpp:n_tokens_max Largest observed sequence length (prompt + generation)
# TYPE llamacpp:n_tokens_max counter
llamacpp:n_tokens_max 254
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 0
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
"""


def test_llama_server_series_include_the_longest_sequence():
    engine, v = parse(LLAMACPP_METRICS)
    assert engine == "llamacpp"
    assert v == {"running": 0.0, "waiting": 0.0, "prompt_tokens": 258.0, "cached_tokens": 245.0, "tokens_max": 254.0}


def _strained_point(waiting_mean: float):
    from infergap.bench.engine_metrics import EngineSummary, cause_of
    from infergap.bench.results import ClientHealth, PointResult, TrialMetrics

    health = ClientHealth(client_bound=True, reasons=["event-loop lag p99 27.0 ms"])
    trial = TrialMetrics(trial=0, duration_s=3.0, requests=40, completed=40, failed=0, truncated=0, client=health)
    engine = EngineSummary(available=True, engine="llamacpp", samples=4, running_mean=2.0, running_max=2.0,
                           waiting_mean=waiting_mean, waiting_max=14.0, slots=2, slot_ctx=2048)
    p = PointResult(mode="concurrency", concurrency=16, trials=[trial], client_bound=True, engine=engine)
    return cause_of(p)


def test_a_queue_that_never_emptied_outweighs_a_strained_client():
    ex = _strained_point(13.5)
    assert ex.cause == "running_limit" and "all 2 slots" in ex.line and "event-loop lag" in ex.line, ex
    # A mostly empty queue is still the server's limit: a client cause never outranks a server-side one.
    assert _strained_point(0.4).cause == "running_limit"
