"""Real servers in their default configurations: every failed request is retried or reported,
bench and doctor exit 1 above the failure budget, and the reports say why."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import urllib.request

import pytest
from bench_helpers import bench_cmd, bench_env, run_bench

from infergap.bench import load_result
from infergap.guard import md_escape

pytestmark = pytest.mark.slow


def test_llama_cpp_default_interrupt_requests_fail_the_bench(llama_server_default, tmp_path):
    """llama-cpp-python's server, started without options, ends a streaming request early
    whenever another one waits (--interrupt_requests). At c=1 nothing waits; at c=2 almost every
    request is cut. The bench counts them as failed, marks c=2 invalid, names the cause, writes
    everything, and exits 1."""
    s = llama_server_default
    before = s.posts("/v1/completions")
    out, md = tmp_path / "r.json", tmp_path / "r.md"
    common = ["--url", s.url, "--api", "completions", "--concurrency", "1,2", "--num-prompts", "8", "--trials", "1",
              "--warmup", "0", "--input-len", "16", "--output-len", "16"]
    r = run_bench(*common, "--format", "json", "--output", out)
    assert r.returncode == 1, r.stderr
    assert "failure budget" in r.stderr and "c=2" in r.stderr and "Traceback" not in r.stderr
    res = load_result(out)
    c1, c2 = res.points
    assert c1.valid and c1.failed == 0 and c1.completed == 8
    assert not c2.valid and c2.errors.get("interrupted", 0) >= 4 and c2.failed == c2.errors["interrupted"]
    assert c2.error_rate > 0.4 and "interrupted" in c2.invalid_reason
    assert c1.explanation is not None and c2.explanation is None  # no "why the curve bends" from failed requests
    # Every request the server saw is one the bench sent and counted (no hidden resend).
    assert s.posts("/v1/completions") - before == res.environment.probe_requests + c1.requests + c2.requests
    r = run_bench(*common, "--format", "md", "--output", md, "--max-error-rate", "100%")
    assert r.returncode == 0, r.stderr  # a budget of 100 % accepts anything
    text = md.read_text()
    assert "## Failed requests" in text and "interrupted" in text and md_escape("--interrupt_requests False") in text  # Markdown escapes the _
    assert "INVALID" not in text and "FAILURES" in text  # within budget, still marked


def test_doctor_against_default_llama_cpp_is_degraded_and_exits_1(llama_server_default, tmp_path, cli):
    out = tmp_path / "doc"
    r = cli("doctor", "--url", llama_server_default.url, "--quick", "--model", "llama-3.1-8b", "--gpu", "h200",
            "--output-dir", str(out), timeout=600)
    assert r.returncode == 1, r.stderr
    assert "failure budget" in r.stderr
    plan = json.loads((out / "plan.json").read_text())
    stage = next(x for x in plan["stages"] if x["name"] == "bench")
    assert stage["status"] == "ran" and stage["verdict"].startswith("degraded: ") and "interrupt_requests" in stage["detail"]
    assert next(iter(plan["facts"])) == "load.error_rate" and plan["facts"]["load.error_rate"]["value"] > 0.2
    assert plan["facts"]["load.max_concurrency"]["value"] == 1  # c=2 and c=4 are not measurements
    html = (out / "report.html").read_text()
    assert "INVALID" in html and "of the bench&#39;s requests failed" in html and "interrupt_requests" in html
    assert "## Failed requests" in (out / "plan.md").read_text()


def _stub_requests(url: str) -> int:
    return json.loads(urllib.request.urlopen(url + "/stats", timeout=5).read())["requests"]


def test_server_closing_connections_after_streams_is_detected(stub_server, tmp_path):
    """A server that closes the connection after each streamed response although it answered
    keep-alive (llama.cpp's llama-server does): the requests that meet a closed pooled connection
    are retried once on a fresh one, never counted twice by the server, and the client switches
    to one connection per request and says so."""
    s = stub_server("--tokens", "8", "--close-after-stream")
    out = tmp_path / "r.json"
    r = run_bench("--url", s.url, "--concurrency", "1,4", "--num-prompts", "40", "--trials", "1", "--warmup", "2",
                  "--output-len", "8", "--format", "json", "--output", out, "--max-error-rate", "0", timeout=120)
    assert r.returncode == 0, r.stderr
    res = load_result(out)
    assert all(p.failed == 0 and p.valid for p in res.points)
    retried = sum(p.retried for p in res.points)
    assert res.connections.reuse_failures >= 3 and res.connections.fresh_per_request
    assert "does not keep connections alive after streamed responses" in res.connections.note
    assert retried + 2 * 2 >= res.connections.reuse_failures  # warm-up requests may retry too
    # The failed attempts never reached the server: it served each request once.
    assert _stub_requests(s.url) == res.environment.probe_requests + 2 * 2 + sum(p.requests for p in res.points)
    text = run_bench("--url", s.url, "--concurrency", "2", "--num-prompts", "20", "--trials", "1", "--warmup", "0",
                     "--output-len", "8", timeout=120)
    assert text.returncode == 0 and "each request opens a new connection" in " ".join(text.stdout.split())  # fitted to 100 columns


def test_progress_is_live_on_a_terminal_and_silent_when_piped(stub_server):
    s = stub_server("--tokens", "8", "--itl-ms", "2")
    args = ("--url", s.url, "--concurrency", "2", "--num-prompts", "40", "--trials", "1", "--warmup", "0",
            "--output-len", "8", "--format", "json")
    piped = run_bench(*args, timeout=120)
    # piped: no progress at all; only the run's warnings (this stub has no /tokenize: the sizing says so)
    assert piped.returncode == 0
    assert [ln for ln in piped.stderr.splitlines() if not ln.startswith("infergap: warning:")] == []
    master, slave = pty.openpty()
    env = dict(bench_env(), COLUMNS="160", TERM="xterm")
    proc = subprocess.Popen(bench_cmd(*args), stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        seen += chunk
    proc.communicate(timeout=120)
    os.close(master)
    assert proc.returncode == 0
    text = seen.decode(errors="replace")
    assert "c=2 trial 1" in text and "out tok/s" in text and "0 failed" in text and "ETA" in text
    assert "c=2: " in text and "0/40 failed" in text  # the point's line when it ends


def test_history_marks_a_failed_benchmark(stub_server, tmp_path):
    """A benchmark above its failure budget was kept in the ledger as '1 points · stub' with no
    status; `history` must say it failed and how many requests did."""
    from infergap.ledger import Ledger, describe_payload

    s = stub_server("--tokens", "8", "--fail-every", "2")
    db = tmp_path / "ledger.db"
    r = run_bench("--url", s.url, "--concurrency", "2", "--num-prompts", "20", "--trials", "1", "--warmup", "0",
                  "--output-len", "8", "--db", db, "--output", tmp_path / "r.txt", timeout=120)
    assert r.returncode == 1, r.stderr
    ok = run_bench("--url", s.url, "--concurrency", "1", "--num-prompts", "1", "--trials", "1", "--warmup", "0",
                   "--output-len", "8", "--db", db, "--output", tmp_path / "ok.txt", timeout=120)
    with Ledger(db) as led:
        runs = led.runs(kind="bench")
    assert ok.returncode == 0, ok.stderr  # prompt 0 is served (the stub fails odd indexes)
    assert [run.status for run in runs] == [None, "failed"]
    assert "1 INVALID, 10 of 20 requests failed" in describe_payload("bench", runs[-1].payload)
