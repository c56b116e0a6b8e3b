"""Load modes, baseline comparison and output formats, against the streaming stub (a real aiohttp
server that counts what it served)."""

from __future__ import annotations

import json
import os
import urllib.request

import pytest
from bench_helpers import run_bench

from infergap.bench import load_result
from infergap.bench.telemetry import GPUSampler

pytestmark = pytest.mark.slow


def _stats(url: str) -> dict:
    return json.loads(urllib.request.urlopen(url + "/stats", timeout=5).read())


def test_constant_rate_keeps_an_absolute_schedule(stub_server, tmp_path):
    s = stub_server("--itl-ms", "2", "--tokens", "8")
    out = tmp_path / "r.json"
    r = run_bench("--url", s.url, "--request-rate", "20", "--arrival", "constant", "--num-prompts", "20", "--trials", "1",
                  "--warmup", "2", "--output-len", "8", "--format", "json", "--output", out, timeout=120)
    assert r.returncode == 0, r.stderr
    res = load_result(out)
    t = res.points[0].trials[0]
    assert _stats(s.url)["requests"] == res.environment.probe_requests + 2 + 20
    assert t.completed == 20 and t.output_token_source == {"usage": 20} and t.output_tokens == 20 * 8
    assert t.duration_s >= 19 / 20  # 20 arrivals 50 ms apart cannot finish sooner
    assert t.client.target_in_flight is None and t.client.send_slip_ms.n == 20
    assert res.points[0].label == "r=20/s"


def test_capped_rate_exposes_queueing_from_the_intended_send_time(stub_server, tmp_path):
    """50 req/s against a server taking ~100 ms per request, capped at 1 in flight: requests queue
    in the client. Latency from the actual send hides that; from the intended send time it shows."""
    s = stub_server("--itl-ms", "12", "--tokens", "8")
    out = tmp_path / "r.json"
    r = run_bench("--url", s.url, "--request-rate", "50", "--concurrency", "1", "--num-prompts", "12", "--trials", "1",
                  "--warmup", "0", "--output-len", "8", "--format", "json", "--output", out, timeout=120)
    assert r.returncode == 0, r.stderr
    t = load_result(out).points[0].trials[0]
    assert t.completed == 12 and _stats(s.url)["peak_in_flight"] == 1
    assert t.e2e_from_intended_ms.p99 > 3 * t.e2e_ms.p99
    assert t.ttft_from_intended_ms.p50 > t.ttft_ms.p50


def test_duration_mode_baseline_markdown_and_png(stub_server, tmp_path):
    s = stub_server("--itl-ms", "1", "--tokens", "8")
    a, b = tmp_path / "a.json", tmp_path / "b.md"
    common = ["--url", s.url, "--concurrency", "1,2", "--trials", "2", "--warmup", "1", "--output-len", "8"]
    r = run_bench(*common, "--duration", "0.5", "--format", "json", "--output", a, timeout=120)
    assert r.returncode == 0, r.stderr
    ra = load_result(a)
    # Each trial issued requests until its 0.5 s were over. The measured window (first send to
    # last response byte) is not held to 0.5 s: the deadline counts from the trial's start and is
    # checked when a response has ended, so under load the first send comes late and a response's
    # last data byte can arrive just before the deadline while its end is read just after it.
    assert all(t.client.issue_s >= 0.5 and t.completed > 0 for p in ra.points for t in p.trials)
    # ... and stopped then: nothing was sent after the deadline, so the window ends within one
    # response after it (each takes well under a second from this stub).
    assert all(0 < t.duration_s < t.client.issue_s + 1.0 for p in ra.points for t in p.trials)
    png = tmp_path / "p.png"
    r = run_bench(*common, "--num-prompts", "16", "--baseline", a, "--format", "md", "--output", b, "--plot", png,
                  timeout=120)
    assert r.returncode == 0, r.stderr
    md = b.read_text()
    assert md.startswith("# infergap bench") and "| c=1 |" in md and "comparison with baseline" in md
    assert "output_throughput_tps" in md and ("within noise" in md or "better" in md or "worse" in md)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "other"}')
    r = run_bench(*common, "--baseline", bad, timeout=60)
    assert r.returncode == 2 and str(bad) in r.stderr


def test_telemetry_without_gpu_is_unavailable_not_an_error():
    s = GPUSampler().start()
    try:
        summ = s.summary([(0.0, 1e12)])
    finally:
        s.stop()
    if s.available:  # a machine with a GPU: the summary has readings
        assert summ.gpus and summ.gpus[0].power_limit_W
    else:
        assert summ.available is False and summ.reason


def test_answers_shorter_than_asked_are_said_in_the_notes(stub_server, tmp_path):
    """A server that stops every answer at 8 tokens while 32 were asked: the throughput is real but
    describes shorter answers than the settings line says, and the text report says so."""
    s = stub_server("--tokens", "8")
    r = run_bench("--url", s.url, "--concurrency", "1", "--num-prompts", "8", "--trials", "1", "--warmup", "0",
                  "--output-len", "32", timeout=120)
    assert r.returncode == 0, r.stderr
    note = next((ln for ln in r.stdout.splitlines() if "ended before their max_tokens" in ln), None)
    assert note is not None, r.stdout
    assert "8 of 8 completed requests" in note and "mean 8.0 output tokens" in note and "32 asked" in note


def test_output_temporary_name_planted_as_a_symlink_redirects_nothing(stub_server, tmp_path):
    """The report is written through a temporary file created exclusively beside ``--output``:
    a symlink planted at ``NAME.tmp`` (the name a fixed scheme would use) is neither followed nor
    replaced."""
    s = stub_server("--tokens", "4")
    victim, out = tmp_path / "victim.txt", tmp_path / "r.json"
    victim.write_text("precious\n")
    os.symlink(victim, tmp_path / "r.json.tmp")
    r = run_bench("--url", s.url, "--concurrency", "1", "--num-prompts", "2", "--trials", "1", "--warmup", "0",
                  "--output-len", "4", "--format", "json", "--output", out, timeout=120)
    assert r.returncode == 0, r.stderr
    assert victim.read_text() == "precious\n"
    assert load_result(out).points


def test_a_model_the_server_does_not_serve_is_one_line(stub_server):
    """``--served-model`` is checked against /v1/models before any load: a name the server does
    not list is one clear line and exit 2, not a sweep of failed requests."""
    s = stub_server("--tokens", "4")
    r = run_bench("--url", s.url, "--served-model", "no-such-model", "--concurrency", "1", "--num-prompts", "2",
                  "--trials", "1", "--warmup", "0", timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr[-800:])
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and "no-such-model" in err[0] and "/v1/models" in err[0] and "Traceback" not in r.stderr, err


def test_prompt_lengths_are_checked_against_the_servers_count(stub_server, tmp_path):
    """A server whose tokenizer counts five tokens per word: ``--input-len 64`` sent about 320
    prompt tokens by its own count (usage.prompt_tokens), and nothing said so."""
    s = stub_server("--tokens", "4", "--tokens-per-word", "5")
    out = tmp_path / "r.json"
    r = run_bench("--url", s.url, "--api", "completions", "--concurrency", "1", "--num-prompts", "4", "--trials", "1",
                  "--warmup", "0", "--input-len", "64", "--output-len", "4", "--format", "json", "--output", str(out),
                  timeout=120)
    assert r.returncode == 0, r.stderr[-800:]
    warn = [ln for ln in r.stderr.splitlines() if "prompt tokens" in ln]
    assert len(warn) == 1 and "usage.prompt_tokens" in warn[0] and "--input-len 64" in warn[0], r.stderr[-800:]
    assert any("prompt tokens" in w for w in load_result(out).warnings)
    # Counts that agree say nothing.
    ok = stub_server("--tokens", "4")
    quiet = run_bench("--url", ok.url, "--api", "completions", "--concurrency", "1", "--num-prompts", "4", "--trials", "1",
                      "--warmup", "0", "--input-len", "64", "--output-len", "4", "--format", "json", timeout=120)
    assert quiet.returncode == 0 and "prompt tokens" not in quiet.stderr, quiet.stderr[-800:]


def test_prompts_are_sized_by_the_servers_tokenize(tmp_path):
    """llama-server's byte-level vocabulary made '--input-len 64' 382 prompt tokens (+496 %):
    prompts are now sized with the server's own POST /tokenize, and a server without one is
    said aloud to be sized by words."""
    import subprocess
    import time

    from bench_helpers import free_port, llama_server_bin
    from bench_tiny_models import write_llama_gguf

    exe = llama_server_bin()
    if exe is None:
        pytest.skip("no llama-server (.ci/run builds it at build/llama.cpp/bin)")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    p = subprocess.Popen([str(exe), "-m", str(write_llama_gguf(tmp_path / "tiny.gguf")), "--host", "127.0.0.1", "--port",
                          str(port), "-t", "2"], stdout=open(tmp_path / "server.log", "wb"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert p.poll() is None and time.monotonic() < deadline, (tmp_path / "server.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.3)
        out = tmp_path / "r.json"
        r = run_bench("--url", url, "--api", "completions", "--concurrency", "1", "--num-prompts", "4", "--trials", "1",
                      "--warmup", "0", "--input-len", "64", "--output-len", "4", "--format", "json", "--output", str(out),
                      timeout=240)
        assert r.returncode == 0, r.stderr[-800:]
        res = load_result(out)
        assert res.environment.prompt_sizing == "server /tokenize (llama.cpp)" and not res.warnings, res.warnings
        t = res.points[0].trials[0]
        assert t.input_token_source.get("usage") == t.completed == 4
        assert abs(t.input_tokens / t.completed - 64) <= 64 * 0.05, t.input_tokens  # the server's count, near 64
    finally:
        p.terminate()
        p.wait(timeout=20)


def test_a_server_without_tokenize_is_sized_by_words_said_aloud(stub_server, tmp_path):
    s = stub_server("--tokens", "4")
    out = tmp_path / "r.json"
    r = run_bench("--url", s.url, "--api", "completions", "--concurrency", "1", "--num-prompts", "2", "--trials", "1",
                  "--warmup", "0", "--input-len", "16", "--output-len", "4", "--format", "json", "--output", str(out), timeout=120)
    assert r.returncode == 0, r.stderr[-800:]
    assert "prompt lengths estimated as one token per word: the server has no /tokenize" in r.stderr
    assert load_result(out).environment.prompt_sizing == "words"
