"""``infergap bench`` against a real vLLM 0.32 (CPU build): its counts against the server's own
``/metrics`` counters, and each knee explanation and plan lever from a run that causes it — the
running limit (``--max-num-seqs 2``), a KV cache too small for the load (preemptions), prefix-cache
hits with a shared prefix, a multi-turn history, and a shared-prefix load with caching off."""

from __future__ import annotations

import json

import pytest
from vllm_support import STARVED_MAX_LEN

from tests.bench.bench_helpers import run_bench

pytestmark = pytest.mark.slow


def _bench(url: str, *args: str) -> dict:
    r = run_bench("--url", url, "--trials", "1", "--warmup", "0", "--format", "json", *args, timeout=500)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def _delta(before: dict[str, float], after: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def _plan(s, res: dict):
    from infergap.bench.results import BenchResult
    from infergap.parsers.engine_log import parse_engine_log
    from infergap.plan import build_plan
    from infergap.server import introspect

    logs = [(f"evidence/{s.log.name}", parse_engine_log(s.log.read_text(errors="replace").splitlines()))]
    return build_plan(bench=BenchResult.model_validate(res), server=introspect(s.url, timeout_s=30), engine_logs=logs)


def _probe_prompt_tokens(s) -> int:
    """Prompt tokens of the bench's test request ("Say something." as one chat message), counted
    by the server's own /tokenize with its chat template."""
    import urllib.request

    body = json.dumps({"model": str(s.model), "messages": [{"role": "user", "content": "Say something."}]}).encode()
    req = urllib.request.Request(s.url + "/tokenize", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["count"]


def test_counts_are_exact_against_the_servers_counters(vllm_limited):
    s = vllm_limited
    before = s.metrics()
    res = _bench(s.url, "--concurrency", "4", "--num-prompts", "12", "--input-len", "40", "--output-len", "16")
    after = s.metrics()
    t = res["points"][0]["trials"][0]
    assert (t["requests"], t["completed"], t["failed"], t["retried"]) == (12, 12, 0, 0), t
    assert t["output_token_source"] == {"usage": 12} and t["count_disagreements"] == 0, t
    assert t["finish_reasons"] == {"length": 12}
    # vLLM's own counters over the same requests (nothing else talks to this server meanwhile),
    # with the bench's test request(s) before the load: 8 tokens each (min(--output-len, 8))
    n_probe = res["environment"]["probe_requests"]
    assert n_probe >= 1
    assert _delta(before, after, "vllm:request_success_total") == 12 + n_probe
    assert _delta(before, after, "vllm:generation_tokens_total") == t["output_tokens"] + 8 * n_probe == 12 * 16 + 8 * n_probe
    assert _delta(before, after, "vllm:prompt_tokens_total") == t["input_tokens"] + n_probe * _probe_prompt_tokens(s)


def test_running_limit_is_the_knee_and_max_num_seqs_the_lever(vllm_limited):
    s = vllm_limited
    res = _bench(s.url, "--concurrency", "2,8", "--duration", "6", "--input-len", "32", "--output-len", "64")
    by = {p["concurrency"]: p for p in res["points"]}
    e8 = by[8]["engine"]
    assert e8["engine"] == "vllm" and e8["running_max"] == 2 and e8["waiting_max"] >= 4, e8
    ex = by[8]["explanation"]
    assert ex["knee"] and ex["cause"] == "running_limit", ex
    assert "2 running (the engine's limit)" in ex["line"], ex
    plan = _plan(s, res)
    assert plan.facts["load.knee_cause"].value == "running_limit"
    assert plan.facts["server.max_running_requests"].value == 2  # from the startup log's non-default args
    lever = next(x for x in plan.levers if x.id == "batch.max_running")
    assert "--max-num-seqs" in json.dumps(lever.model_dump(mode="json")), lever
    assert plan.levers.index(lever) == 0 or all(x.tier == "flag_flip" for x in plan.levers[:plan.levers.index(lever)])


def test_prefix_cache_hit_rate_from_vllms_own_counters(vllm_limited):
    """vLLM caches whole KV blocks (128 tokens on the CPU build): a shared prefix of several blocks
    is found in the cache by every request after the first; random prompts are not."""
    s = vllm_limited
    common = ("--concurrency", "1", "--num-prompts", "8", "--output-len", "4", "--api", "completions")
    rates = {}
    # the tiny model's tokenizer splits a synthetic word into about four tokens: 340 words stay
    # inside --max-model-len 2048, and the 300 shared ones are several 128-token blocks
    for ds in (("--dataset", "random", "--input-len", "340"), ("--dataset", "shared-prefix:1x300+40")):
        before = s.metrics()
        p = _bench(s.url, *ds, *common)["points"][0]
        after = s.metrics()
        assert p["trials"][0]["completed"] == 8, p["trials"][0]
        q, h = (_delta(before, after, f"vllm:prefix_cache_{k}_total") for k in ("queries", "hits"))
        assert q >= p["trials"][0]["input_tokens"] * 0.9, (q, p["trials"][0])  # every prompt token was looked up
        e = p["engine"]
        assert e["engine"] == "vllm" and e["prefix_hit_rate"] == pytest.approx(h / q, abs=0.02), (e, h, q)
        rates[ds[1]] = e["prefix_hit_rate"]
    assert rates["random"] < 0.1 < 0.5 < rates["shared-prefix:1x300+40"], rates


def test_multi_turn_history_grows_and_hits_the_cache(vllm_limited):
    s = vllm_limited
    res = _bench(s.url, "--dataset", "multi-turn:turns=3,think=50ms", "--concurrency", "2", "--num-prompts", "6",
                 "--input-len", "100", "--output-len", "8")
    p = res["points"][0]
    assert p["trials"][0]["completed"] == 6, p["trials"][0]
    turns = p["workload"]["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3] and all(t["requests"] == 2 for t in turns)
    means = [t["prompt_tokens_mean"] for t in turns]
    assert means[0] < means[1] < means[2], means  # vLLM's own prompt-token count, turn by turn
    assert p["engine"]["prefix_hit_rate"] > 0.2, p["engine"]  # the history is found in the prefix cache


def test_kv_cache_too_small_preempts_and_the_kv_lever_follows(vllm_starved):
    s = vllm_starved
    before = s.metrics()
    # about 80 prompt tokens (four per synthetic word) and 128 generated: one request fits in the
    # 256-token limit, eight at once need 1,600 of the 1,024 tokens the cache holds
    res = _bench(s.url, "--concurrency", "1,8", "--num-prompts", "16", "--input-len", "20",
                 "--output-len", str(STARVED_MAX_LEN // 2))
    after = s.metrics()
    by = {p["concurrency"]: p for p in res["points"]}
    assert all(p["trials"][0]["completed"] == 16 for p in by.values()), res["points"]
    e8 = by[8]["engine"]
    preempted = _delta(before, after, "vllm:num_preemptions_total")
    assert preempted > 0 and e8["preemptions"] == pytest.approx(preempted, abs=1), (e8, preempted)
    assert e8["kv_usage_max"] >= 0.9, e8
    ex = by[8]["explanation"]
    assert ex["cause"] == "kv" and "preemptions" in ex["line"], ex
    plan = _plan(s, res)
    assert plan.facts["load.kv_pressure"].value is True
    lever = next(x for x in plan.levers if x.id == "batch.kv_memory")
    assert "--kv-cache-memory-bytes" in json.dumps(lever.model_dump(mode="json")), lever


def test_shared_prefix_with_caching_off_selects_enable_prefix_caching(vllm_starved):
    s = vllm_starved
    res = _bench(s.url, "--dataset", "shared-prefix:1x30+10", "--concurrency", "1", "--num-prompts", "4", "--output-len", "4")
    p = res["points"][0]
    assert p["trials"][0]["completed"] == 4 and not p["engine"]["prefix_hit_rate"], p["engine"]
    plan = _plan(s, res)
    assert plan.facts["server.prefix_caching"].value is False and plan.facts["load.shared_prefix"].value is True
    lever = next(x for x in plan.levers if x.id == "vllm.prefix_caching")
    assert "--enable-prefix-caching" in json.dumps(lever.model_dump(mode="json")), lever
