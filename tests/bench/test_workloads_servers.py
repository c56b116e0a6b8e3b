"""Workloads, SLO search and knee explanations against real servers on 127.0.0.1.

llama-cpp-python's server (multi-turn histories, trace replay) and a paced stub for what a CPU
server cannot give: a computable service rate (the SLO search's answer) and a client that is the
limit. llama-server's cases (prefix-cache hits, slots, context) are in test_llama_server_knees.py.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from bench_helpers import ROOT, run_bench
from infergap.bench import traces, workloads
from infergap.bench.client import StreamClient
from infergap.bench.shapes import OpenLoop
from infergap.bench.trial import LoadSpec, Runner

pytestmark = pytest.mark.slow

TRACES = ROOT / "tests" / "fixtures" / "traces"


def _json(r):
    assert r.returncode in (0, 1), r.stderr[-2000:]
    return json.loads(r.stdout)


def test_multi_turn_prompt_tokens_grow_turn_by_turn(llama_server):
    r = run_bench("--url", llama_server.url, "--dataset", "multi-turn:turns=3,think=50ms", "--concurrency", "2",
                  "--num-prompts", "6", "--trials", "1", "--warmup", "0", "--input-len", "12", "--output-len", "6",
                  "--no-stream", "--format", "json")
    res = _json(r)
    p = res["points"][0]
    assert p["trials"][0]["completed"] == 6, p["trials"][0]
    turns = p["workload"]["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3] and all(t["requests"] == 2 for t in turns)
    means = [t["prompt_tokens_mean"] for t in turns]
    # Each turn carries the previous user messages and the server's replies: the server's own
    # prompt-token count grows by at least the new user message every turn.
    assert means[0] + 12 <= means[1] and means[1] + 12 <= means[2], means


def test_trace_replay_keeps_the_schedule_and_reports_lateness(llama_server):
    reqs = traces.select(traces.read_azure(TRACES / "azure_llm_conv_head.csv"), time_scale=0.1, max_duration_s=1.5)
    r = run_bench("--url", llama_server.url, "--dataset", f"azure:{TRACES / 'azure_llm_conv_head.csv'}",
                  "--time-scale", "0.1", "--max-duration", "1.5", "--token-scale", "0.02", "--trials", "1",
                  "--warmup", "0", "--format", "json")
    res = _json(r)
    p = res["points"][0]
    assert p["mode"] == "rate" and p["trials"][0]["requests"] == len(reqs) == p["workload"]["scheduled"]
    late = p["workload"]["lateness_ms"]
    assert set(late) == {"p50", "p99", "max"} and 0 <= late["p50"] <= late["p99"] <= late["max"]
    assert late["p50"] < 50, late  # the schedule is kept (2 busy cores: a few ms late at most, typically)

    # In process: every request's intended time is exactly its trace arrival, and the lateness
    # reported is each request's actual send minus that arrival.
    async def go():
        c = StreamClient(llama_server.url, "x", "completions", True, {}, ("min_tokens",), timeout_s=60)
        await c.open()
        try:
            ps = traces.prompts(reqs, salt="lat", token_scale=0.02)
            offsets = [q.offset_s for q in reqs]
            t0 = time.perf_counter()
            tr = await Runner(c).run(OpenLoop(LoadSpec("rate", None, 10.0, "trace", offsets), lambda i: ps[i]))
            return t0, offsets, tr
        finally:
            await c.close()

    t0, offsets, tr = asyncio.run(go())
    assert len(tr.records) == len(offsets)
    base = tr.records[0].intended
    assert base - t0 < 0.1
    for rec, off in zip(tr.records, offsets):
        assert rec.intended - base == pytest.approx(off, abs=1e-9)
    ws = workloads.point_stats("azure", tr.records, schedule=True)
    assert ws.lateness_ms["max"] == pytest.approx(max(r.start - r.intended for r in tr.records) * 1e3)


def test_slo_search_finds_the_knee_of_a_paced_stub(stub_server):
    # 4 slots, 8 tokens 50 ms apart: a request holds a slot ≥ 400 ms, so the stub serves at most
    # 4 / 0.4 = 10 requests/s; past that, arrivals queue and TTFT grows without bound.
    s = stub_server("--slots", "4", "--tokens", "8", "--itl-ms", "50")
    r = run_bench("--url", s.url, "--search", "rate", "--slo", "ttft_p99=200ms", "--request-rate", "8",
                  "--arrival", "constant", "--duration", "3", "--trials", "2", "--warmup", "0",
                  "--output-len", "8", "--input-len", "8", "--format", "json", timeout=400)
    res = _json(r)
    cap = res["capacity"]
    assert cap["binding"] == "ttft_p99", cap
    assert 7.0 <= cap["capacity"] <= 10.5, cap
    assert cap["upper"] is not None and cap["upper"] > cap["capacity"]
    assert [p["load"] for p in cap["probes"]][:2] == [8.0, 16.0]
    assert cap["probes"][1]["passed"] is False
    text = run_bench("--url", s.url, "--search", "rate", "--slo", "ttft_p99=200ms", "--request-rate", "8",
                     "--arrival", "constant", "--duration", "2", "--trials", "1", "--warmup", "0",
                     "--output-len", "8", "--input-len", "8", timeout=400).stdout
    assert "SLO capacity:" in text and "binding SLO: ttft_p99" in text


def test_client_bound_knee_is_explained(stub_server):
    s = stub_server("--tokens", "64")
    r = run_bench("--url", s.url, "--concurrency", "32,512", "--num-prompts", "1024", "--trials", "1",
                  "--warmup", "0", "--output-len", "64", "--input-len", "8", "--format", "json", timeout=400)
    res = _json(r)
    knee = [p for p in res["points"] if p["explanation"] and p["explanation"]["knee"]]
    assert knee, [p["explanation"] for p in res["points"]]
    assert knee[0]["concurrency"] == 512 and knee[0]["explanation"]["cause"] == "client", knee[0]["explanation"]
    assert "client-bound" in knee[0]["explanation"]["line"]

    # The plan's first action changes nothing on the server: re-run with more client processes.
    from infergap.bench.results import BenchResult
    from infergap.plan import build_plan

    plan = build_plan(bench=BenchResult.model_validate(res))
    assert plan.facts["load.knee_cause"].value == "client"
    assert plan.levers[0].id == "bench.client_procs" and "--client-procs" in plan.top_actions[0], plan.top_actions
    assert "no.client_bound_tuning" in [x.id for x in plan.wont_help]


def test_multi_process_client_merges_records_and_keeps_the_concurrency(stub_server):
    import urllib.request

    from infergap.bench.datasets import synthetic
    from infergap.bench.multiproc import ClientArgs, run_trial

    s = stub_server("--tokens", "32", "--itl-ms", "5")
    r = run_bench("--url", s.url, "--concurrency", "8", "--num-prompts", "32", "--client-procs", "2", "--trials", "1",
                  "--warmup", "0", "--output-len", "32", "--input-len", "8", "--format", "json", timeout=400)
    t = _json(r)["points"][0]["trials"][0]
    assert t["requests"] == t["completed"] == 32 and t["output_tokens"] == 32 * 32, t["errors"]

    urllib.request.urlopen(urllib.request.Request(s.url + "/reset", method="POST"), timeout=5).read()
    args = ClientArgs(s.url, "stub", "chat", True, {"stream_options": {"include_usage": True}}, (), 60.0)
    tr = run_trial(args, LoadSpec("concurrency", 64), synthetic(512, 8, 32, salt="mp"), 2)
    stats = json.loads(urllib.request.urlopen(s.url + "/stats", timeout=5).read())
    assert len(tr.records) == 512 and all(rec.error is None for rec in tr.records)
    assert stats["requests"] == 512 and stats["peak_in_flight"] == 64
    # Both processes' requests were in flight together (one process's share is 32), as the stub saw it.
    assert stats["mean_in_flight"] > 48, stats
    assert tr.health.target_in_flight == 64 and tr.health.mean_in_flight > 48


def test_split_divides_concurrency_rate_and_arrivals():
    from infergap.bench.multiproc import split

    prompts = list(range(10))
    parts = split(LoadSpec("concurrency", 5), prompts, 2, 0)
    assert [p[0].concurrency for p in parts] == [3, 2] and parts[0][1] == [0, 2, 4, 6, 8]
    parts = split(LoadSpec("rate", None, 8.0, "poisson"), prompts, 4, 1)
    assert [p[0].rate for p in parts] == [2.0] * 4 and len({p[2] for p in parts}) == 4
    parts = split(LoadSpec("rate", None, 1.0, "trace", [0.0, 0.5, 1.0, 1.5]), prompts[:4], 2, 0)
    assert parts[0][0].offsets == [0.0, 1.0] and parts[1][0].offsets == [0.5, 1.5]
