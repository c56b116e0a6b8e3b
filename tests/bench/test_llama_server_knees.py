"""Engine metrics and knee explanations from runs of llama.cpp's ``llama-server`` (CPU build) that
cause them: prefix-cache hits under a shared-prefix workload, all slots busy with requests
deferred, a slot's context filled. Needs a ``llama-server`` binary: ``$INFERGAP_LLAMA_SERVER`` or
one on ``PATH`` (``.ci/run`` builds it from llama-cpp-python's vendored source); skipped without.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from bench_helpers import run_bench, server_factory

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def llama_bin():
    exe = os.environ.get("INFERGAP_LLAMA_SERVER") or shutil.which("llama-server")
    if not exe or not os.access(exe, os.X_OK):
        pytest.skip("no llama-server binary (set INFERGAP_LLAMA_SERVER or put llama-server on PATH)")
    return exe


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    pytest.importorskip("gguf")
    from bench_tiny_models import write_llama_gguf

    return write_llama_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture
def llama_cpp(llama_bin, tiny_gguf, tmp_path):
    """Start llama-server on the tiny GGUF with ``--metrics`` and extra args."""
    yield from server_factory(tmp_path, "llama", lambda port, args: [
        llama_bin, "-m", str(tiny_gguf), "--host", "127.0.0.1", "--port", str(port), "--metrics", "-t", "1",
        "--no-warmup", *args])


def _bench(url: str, *args) -> dict:
    r = run_bench("--url", url, "--trials", "1", "--warmup", "0", "--format", "json", *args, timeout=400)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    return json.loads(r.stdout)


def test_prefix_cache_hit_rate_rises_with_the_shared_prefix_workload(llama_cpp):
    s = llama_cpp("-c", "2048", "--parallel", "1")
    common = ("--concurrency", "1", "--num-prompts", "12", "--output-len", "4", "--api", "completions")
    rand = _bench(s.url, "--dataset", "random", "--input-len", "208", *common)["points"][0]
    shared = _bench(s.url, "--dataset", "shared-prefix:1x200+8", *common)["points"][0]
    # The server's own per-request count (usage.prompt_tokens_details.cached_tokens) …
    assert shared["workload"]["cache_reported"] == 12
    assert shared["workload"]["cache_hit_rate"] > 0.7, shared["workload"]
    assert (rand["workload"] is None) or (rand["workload"]["cache_hit_rate"] or 0) < 0.2
    # … and its /metrics counters agree: prompt_tokens_cached_total grew with the shared prefix.
    assert shared["engine"]["engine"] == "llamacpp"
    assert shared["engine"]["prefix_hit_rate"] > 0.5, shared["engine"]
    assert rand["engine"]["prefix_hit_rate"] is None or rand["engine"]["prefix_hit_rate"] < 0.2, rand["engine"]


def test_all_slots_busy_is_the_knee_and_shows_in_the_report(llama_cpp, tmp_path):
    s = llama_cpp("-c", "4096", "--parallel", "2")
    # Two slots: from c=2 to c=16 the load grows ×8 and the throughput cannot follow.
    res = _bench(s.url, "--concurrency", "2,16", "--duration", "4", "--input-len", "16", "--output-len", "24")
    by = {p["concurrency"]: p for p in res["points"]}
    e16 = by[16]["engine"]
    assert e16["slots"] == 2 and e16["running_max"] == 2 and e16["waiting_max"] >= 1, e16
    ex = by[16]["explanation"]
    assert ex["knee"] and ex["cause"] == "running_limit", ex
    assert ex["line"].startswith("throughput flattened at c=16") and "2 running (all 2 slots)" in ex["line"]
    assert by[2]["explanation"]["cause"] == "scaling" and not by[2]["explanation"]["knee"]

    from infergap.bench.models import BenchResult
    from infergap.plan import build_plan
    from infergap.render.report import render_html

    bench = BenchResult.model_validate(res)
    plan = build_plan(bench=bench)
    html = render_html(plan, bench=bench)
    assert "Engine metrics beside GPU telemetry" in html and "all 2 slots" in html
    from infergap.plan.facts import gather

    fx = gather(bench=bench)
    assert fx["load.knee_cause"].value == "running_limit" and "all 2 slots" in fx["load.knee_cause"].source
    assert fx["load.waiting_max"].value >= 1


def test_a_full_slot_context_is_explained(llama_cpp):
    s = llama_cpp("-c", "1024", "--parallel", "4")  # 256 tokens per slot
    res = _bench(s.url, "--concurrency", "4", "--num-prompts", "8", "--input-len", "100", "--output-len", "64",
                 "--api", "completions")
    p = res["points"][0]
    assert p["engine"]["slot_ctx"] == 256, p["engine"]
    assert p["explanation"]["cause"] == "kv", (p["explanation"], p["engine"], p["trials"][0]["errors"])
    assert "KV cache full" in p["explanation"]["line"]
