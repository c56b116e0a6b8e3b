"""Sweeps against real OpenAI-compatible servers, cross-checked against the servers' own counts."""

from __future__ import annotations

import json

import pytest
from bench_helpers import run_bench

from infergap.bench import datasets, load_result

pytestmark = pytest.mark.slow


def _sent(res) -> int:
    """Requests the bench says it sent: probe + warm-up + every trial's requests."""
    warm = res.settings.warmup * len(res.points)
    return res.environment.probe_requests + warm + sum(t.requests for p in res.points for t in p.trials)


def test_llama_cpp_sweep_streaming_and_usage_cross_check(llama_server, tmp_path):
    """llama-cpp-python streams no usage: output tokens are counted from chunks and the report
    says so. The same sweep without streaming gets the server's usage for each request; the two
    counts must agree, and the server's access log must show exactly the requests we sent."""
    before = llama_server.posts("/v1/completions")
    out, plot = tmp_path / "stream.json", tmp_path / "plot.svg"
    common = ["--url", llama_server.url, "--api", "completions", "--concurrency", "1,2", "--num-prompts", "4",
              "--trials", "2", "--warmup", "1", "--input-len", "24", "--output-len", "12", "--len-spread", "0.25",
              "--seed", "3"]
    r = run_bench(*common, "--format", "json", "--output", out, "--plot", plot)
    assert r.returncode == 0, r.stderr
    res = load_result(out)
    assert llama_server.posts("/v1/completions") - before == _sent(res)
    assert res.environment.model == str(llama_server.model_path)  # default model from /v1/models
    assert "min_tokens" in res.environment.length_control.fields
    assert not res.environment.length_control.stream_usage
    assert [p.concurrency for p in res.points] == [1, 2]
    streamed = []
    for p in res.points:
        assert len(p.trials) == 2 and p.summary["output_throughput_tps"].median > 0
        for t in p.trials:
            assert t.failed == 0 and t.completed == t.requests == 4
            assert t.output_token_source == {"chunks": 4}
            assert t.input_token_source == {"prompt_estimate": 4}
            assert t.finish_reasons == {"length": 4}
            assert t.ttft_ms.n == 4 and t.ttft_ms.p50 <= t.e2e_ms.p50
            assert t.tpot_ms.n == 4 and t.itl_ms.n > 0
            streamed.append(t.output_tokens)
    assert plot.read_text().lstrip().startswith(("<?xml", "<svg"))

    out2 = tmp_path / "whole.json"
    before = llama_server.posts("/v1/completions")
    r = run_bench(*common, "--no-stream", "--format", "json", "--output", out2)
    assert r.returncode == 0, r.stderr
    res2 = load_result(out2)
    assert llama_server.posts("/v1/completions") - before == _sent(res2)
    whole = []
    for p in res2.points:
        for t in p.trials:
            assert t.output_token_source == {"usage": 4} and t.input_token_source == {"usage": 4}
            whole.append(t.output_tokens)
    # Same seed and lengths: the server's own usage counts equal what the streaming run counted.
    assert whole == streamed
    text = run_bench("--url", llama_server.url, "--api", "completions", "--concurrency", "1", "--num-prompts", "2",
                     "--trials", "1", "--warmup", "0", "--input-len", "8", "--output-len", "4")
    assert text.returncode == 0, text.stderr
    assert "output tokens counted as streamed chunks" in " ".join(text.stdout.split())  # fitted to 100 columns
    assert "TTFT:" in text.stdout and "telemetry" in text.stdout


def test_transformers_serve_sweep_usage_and_strict_fields(tf_server, tmp_path):
    """transformers serve: 422 on unknown fields (no length control), usage on the last chunk, no
    [DONE]. Token counts come from usage; input counts are checked against the model's own
    tokenizer and chat template applied to the exact prompts the bench generated."""
    from transformers import AutoTokenizer

    before = tf_server.posts("/v1/chat/completions")
    out = tmp_path / "tf.json"
    r = run_bench("--url", tf_server.url, "--concurrency", "1,2", "--num-prompts", "4", "--trials", "2",
                  "--warmup", "1", "--input-len", "20", "--output-len", "8", "--seed", "5",
                  "--slo", "ttft=30s,tpot=5s", "--format", "json", "--output", out, timeout=400)
    assert r.returncode == 0, r.stderr
    res = load_result(out)
    lc = res.environment.length_control
    assert lc.fields == [] and any("422" in v for v in lc.rejected.values())
    assert lc.stream_usage
    assert tf_server.posts("/v1/chat/completions") - before == _sent(res)
    tok = AutoTokenizer.from_pretrained(str(tf_server.model_path))
    for k, p in enumerate(res.points):
        for t in p.trials:
            assert t.failed == 0 and t.completed == t.requests == 4
            assert t.output_token_source == {"usage": 4} and t.count_disagreements == 0
            assert t.goodput_rps is not None and t.goodput_rps <= t.request_throughput_rps
            prompts = datasets.synthetic(4, 20, 8, seed=5, salt=f"{res.settings.salt}.{k}.{t.trial - 1}.")
            expect = sum(len(tok.apply_chat_template([{"role": "user", "content": q.text}], add_generation_prompt=True,
                                                     tokenize=True, return_dict=False)) for q in prompts)
            assert t.input_tokens == expect
            assert t.output_tokens == sum(q.output_tokens for q in prompts) or t.truncated > 0
    data = json.loads(out.read_text())
    assert data["schema"] == "infergap.bench/1" and data["environment"]["client_host"]["aiohttp"]


def test_transformers_serve_is_recognised_and_planned_for(tf_server, tmp_path):
    """Introspection names the engine of a real transformers server, and the plan built from it and
    a sweep offers that engine's batching lever with the facts that selected it."""
    from infergap.bench import load_result
    from infergap.plan import build_plan
    from infergap.server import introspect

    cfg = introspect(tf_server.url, timeout_s=10)
    assert cfg.engine == "transformers" and cfg.sources["engine"].endswith("/v1/models")
    out = tmp_path / "b.json"
    r = run_bench("--url", tf_server.url, "--concurrency", "1,2", "--num-prompts", "2", "--trials", "1",
                  "--input-len", "16", "--output-len", "8", "--format", "json", "--output", str(out))
    assert r.returncode == 0, r.stderr
    plan = build_plan(bench=load_result(out), server=cfg)
    lever = next(l for l in plan.levers if l.id == "transformers.continuous_batching")
    assert "engine.name" in lever.facts and "load.max_concurrency" in lever.facts


def test_baseline_last_reads_the_ledger(llama_server, tmp_path, monkeypatch):
    """Each bench run is recorded; --baseline last compares with the newest recorded one."""
    monkeypatch.setenv("INFERGAP_DB", str(tmp_path / "ledger.sqlite3"))
    common = ["--url", llama_server.url, "--api", "completions", "--concurrency", "1", "--num-prompts", "2",
              "--trials", "2", "--warmup", "0", "--input-len", "8", "--output-len", "4"]
    r = run_bench(*common, "--baseline", "last")
    assert r.returncode == 2 and "holds no bench run yet" in r.stderr
    assert run_bench(*common, "--format", "json", "--output", tmp_path / "a.json").returncode == 0
    r = run_bench(*common, "--baseline", "last", "--format", "md")
    assert r.returncode == 0, r.stderr
    assert "baseline" in r.stdout.lower() and "c=1" in r.stdout
