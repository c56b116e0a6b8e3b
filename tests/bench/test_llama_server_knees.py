"""Engine metrics, workloads and knee explanations from runs of llama.cpp's ``llama-server`` (CPU
build) that cause them: prefix-cache hits rising with the shared prefix, multi-turn histories
growing turn by turn, all slots busy with requests deferred, a slot's context filled — and the
plan's first action following from what bent the curve.

Nothing here assumes a slot size: llama.cpp rounds the context it is given (recent releases keep
at least 256 tokens per slot), so each test reads the per-slot context the server actually runs
with from ``/props`` (checked against ``/slots``) and sizes its prompts in the server's own
tokens (``/tokenize``). Needs a ``llama-server`` binary: ``.ci/run`` builds it
(``build/llama.cpp/bin``), or ``$INFERGAP_LLAMA_SERVER``; skipped without.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from bench_helpers import run_bench

pytestmark = pytest.mark.slow


def _get(url: str, path: str, body: dict | None = None):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def slots_of(url: str) -> tuple[int, int]:
    """(slots, tokens per slot) the server runs with, from /props, checked against /slots."""
    props = _get(url, "/props")
    n, ctx = props["total_slots"], props["default_generation_settings"]["n_ctx"]
    assert [s["n_ctx"] for s in _get(url, "/slots")] == [ctx] * n
    return n, ctx


def words_for(url: str, tokens: int) -> int:
    """How many words of the bench's synthetic prompts make about ``tokens`` of the server's tokens
    (the tiny model's vocabulary splits most words into several pieces)."""
    from infergap.bench.datasets import synthetic

    text = synthetic(1, 200, 1, salt="probe")[0].text
    per_word = len(_get(url, "/tokenize", {"content": text})["tokens"]) / len(text.split())
    return max(2, int(tokens / per_word))


def _bench(url: str, *args) -> dict:
    r = run_bench("--url", url, "--trials", "1", "--warmup", "0", "--format", "json", *args, timeout=400)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    return json.loads(r.stdout)


def _plan(res: dict, url: str):
    from infergap.bench.results import BenchResult
    from infergap.plan import build_plan
    from infergap.server import introspect

    bench = BenchResult.model_validate(res)
    return bench, build_plan(bench=bench, server=introspect(url, timeout_s=10))


def test_prefix_cache_hit_rate_rises_with_the_shared_prefix(llama_cpp):
    s = llama_cpp("-c", "2048", "--parallel", "1")
    _, ctx = slots_of(s.url)
    words = words_for(s.url, ctx // 3)  # prompt and output well inside one slot
    common = ("--concurrency", "1", "--num-prompts", "10", "--output-len", "4", "--api", "completions")
    rates = {}
    for share in (0, 1, 3):  # none, a quarter, three quarters of the prompt shared
        prefix = words * share // 4
        # random prompts are sized in the server's own tokens (its /tokenize): ctx // 3 of them,
        # so that the salt each prompt starts with is as small a share as in the shared cases
        ds = ("--dataset", "random", "--input-len", str(ctx // 3)) if not share else \
             ("--dataset", f"shared-prefix:1x{prefix}+{words - prefix}")
        p = _bench(s.url, *ds, *common)["points"][0]
        assert p["trials"][0]["completed"] == 10, p["trials"][0]
        e = p["engine"]
        assert e["engine"] == "llamacpp" and e["slot_ctx"] == ctx
        # /metrics: llamacpp:prompt_tokens_total excludes the cached tokens, so the hit rate is
        # cached / (computed + cached); the per-request usage (prompt_tokens counts them all,
        # prompt_tokens_details.cached_tokens the reused ones) must say the same.
        ws = p["workload"]
        if share:
            assert ws["cache_reported"] == 10, ws
            assert e["prompt_tokens"] == ws["prompt_tokens"] and e["cached_tokens"] == ws["cached_tokens"], (e, ws)
        rates[share] = e["prefix_hit_rate"] or 0.0
    assert rates[0] < 0.1 < rates[1] < rates[3], rates
    assert 0.15 < rates[1] < 0.35 and 0.55 < rates[3] < 0.8, rates  # 9 of 10 requests hit ¼ and ¾ of their prompt


def test_multi_turn_prompt_tokens_grow_turn_by_turn(llama_cpp):
    s = llama_cpp("-c", "4096", "--parallel", "2")
    _, ctx = slots_of(s.url)
    words = words_for(s.url, ctx // 16)  # 3 turns of user message + reply stay inside one slot
    res = _bench(s.url, "--dataset", "multi-turn:turns=3,think=50ms", "--concurrency", "2", "--num-prompts", "6",
                 "--input-len", str(words), "--output-len", "8")
    p = res["points"][0]
    assert p["trials"][0]["completed"] == 6, p["trials"][0]
    turns = p["workload"]["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3] and all(t["requests"] == 2 for t in turns)
    means = [t["prompt_tokens_mean"] for t in turns]
    # The server's own prompt-token count grows every turn by at least the new user message.
    assert means[0] + words <= means[1] and means[1] + words <= means[2], means
    # … and the history it has seen comes from its cache (each conversation keeps its slot).
    assert p["workload"]["cache_hit_rate"] > 0.3, p["workload"]


def test_all_slots_busy_is_the_knee_and_the_first_action(llama_cpp):
    s = llama_cpp("-c", "4096", "--parallel", "2")
    n, ctx = slots_of(s.url)
    assert n == 2
    words = words_for(s.url, ctx // 16)
    # Two slots: from c=2 to c=16 the load grows ×8 and the throughput cannot follow. Long
    # outputs keep both slots busy at c=2 (the gap between one request and the next is small
    # against its decode) and the client nearly idle.
    res = _bench(s.url, "--concurrency", "2,16", "--duration", "3", "--input-len", str(words), "--output-len", "96")
    by = {p["concurrency"]: p for p in res["points"]}
    e16 = by[16]["engine"]
    assert e16["slots"] == 2 and e16["running_max"] == 2 and e16["waiting_max"] >= 1, e16
    ex = by[16]["explanation"]
    assert ex["knee"] and ex["cause"] == "running_limit", ex
    assert ex["line"].startswith("throughput flattened at c=16") and "2 running (all 2 slots)" in ex["line"]
    # At c=2 every request has a slot: never the slots' fault (a client strained by a busy
    # machine may be named there, truthfully).
    assert by[2]["explanation"]["cause"] in ("scaling", "client") and not by[2]["explanation"]["knee"], by[2]["explanation"]

    bench, plan = _plan(res, s.url)
    assert plan.facts["load.knee_cause"].value == "running_limit" and "all 2 slots" in plan.facts["load.knee_cause"].source
    assert plan.facts["load.waiting_max"].value >= 1
    # The first action raises the slot count, because the slots are what bent the curve.
    assert plan.levers[0].id == "llamacpp.more_slots" and "load.knee_cause" in plan.levers[0].facts, plan.levers[0]
    assert "--parallel" in plan.top_actions[0], plan.top_actions

    from infergap.render.report import render_html

    html = render_html(plan, bench=bench)
    assert "Engine metrics beside GPU telemetry" in html and "all 2 slots" in html


def test_a_full_slot_context_is_explained_and_the_first_action(llama_cpp):
    s = llama_cpp("-c", "512", "--parallel", "2")  # llama.cpp may round it: read what it runs with
    n, ctx = slots_of(s.url)
    words = words_for(s.url, ctx // 2)
    # Half a slot of prompt and more output than the rest of the slot holds: every sequence runs
    # into its slot's end, where llama-server stops it (context shift is off by default). One
    # request per slot, so nothing waits: the context, not the slot count, is what the run shows.
    res = _bench(s.url, "--concurrency", str(n), "--num-prompts", str(2 * n), "--input-len", str(words),
                 "--output-len", str(ctx), "--api", "completions")
    p = res["points"][0]
    t = p["trials"][0]
    assert t["completed"] == 2 * n and not t["errors"] and t["truncated"] == 2 * n, t
    e = p["engine"]
    assert e["slot_ctx"] == ctx and e["tokens_max"] >= 0.9 * ctx and not e["waiting_max"], e
    ex = p["explanation"]
    assert ex["cause"] == "kv" and "KV cache full" in ex["line"], ex
    assert f"of the {ctx} tokens one slot holds" in ex["line"] and f"{2 * n} of {2 * n} completed requests cut short" in ex["line"]

    _, plan = _plan(res, s.url)
    assert plan.facts["load.context_too_small"].value is True
    assert plan.levers[0].id == "llamacpp.context_size", [x.id for x in plan.levers]
    assert plan.top_actions[0].startswith("[P0") and f"--parallel {n}" in plan.top_actions[0], plan.top_actions
