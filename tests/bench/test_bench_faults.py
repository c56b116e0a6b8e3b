"""Bad input and faults: clear errors before the run, per-request errors during it, partial results
when the server dies or the user interrupts."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import threading
import time

import pytest
from aiohttp import web
from bench_helpers import bench_cmd, bench_env, free_port, run_bench

from infergap.bench import load_result

pytestmark = pytest.mark.slow

CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":" x"},"finish_reason":null}]}\n\n'
END = (b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}],'
       b'"usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9}}\n\ndata: [DONE]\n\n')


class FaultServer:
    """An aiohttp server on 127.0.0.1 that misbehaves on purpose, in ways a real server cannot be
    made to on demand. The first ``healthy`` POSTs (the bench's probe) are served normally; after
    that, request k gets behaviour ``cycle[k % len(cycle)]``. ``served`` tallies what it did."""

    def __init__(self, cycle: list[str], healthy: int = 1):
        self.cycle, self.healthy = cycle, healthy
        self.posts = 0
        self.served: dict[str, int] = {}
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    async def _chat(self, req: web.Request):
        await req.read()
        k = self.posts
        self.posts += 1
        kind = "ok" if k < self.healthy else self.cycle[(k - self.healthy) % len(self.cycle)]
        self.served[kind] = self.served.get(kind, 0) + 1
        if kind == "http500":
            return web.json_response({"error": "boom"}, status=500)
        if kind == "http429":
            return web.json_response({"error": "slow down"}, status=429)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(req)
        await resp.write(CHUNK)
        if kind == "hang":
            await asyncio.sleep(5)
        elif kind == "error_event":
            await resp.write(b'data: {"error":{"message":"engine died"}}\n\n')
            await resp.write_eof()
            return resp
        elif kind == "cut":
            req.transport.close()
            return resp
        for _ in range(3):
            await resp.write(CHUNK)
        await resp.write(END)
        await resp.write_eof()
        return resp

    def _run(self):
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        async def models(_req):
            return web.json_response({"data": [{"id": "fault"}]})

        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/chat/completions", self._chat)
        runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(runner.setup())
        self.loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self.ready.set()
        self.loop.run_forever()

    def __enter__(self):
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *a):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.call_soon_threadsafe(self.loop.close) if self.loop.is_running() else self.loop.close()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"


def test_unreachable_url_is_one_clear_error():
    port = free_port()  # nothing listens there
    r = run_bench("--url", f"http://127.0.0.1:{port}", "--concurrency", "1", "--trials", "1", timeout=60)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("infergap: error: --url") and "unreachable" in lines[0]
    assert "Traceback" not in r.stderr


def test_wrong_path_is_one_clear_error():
    with FaultServer(["ok"]) as s:
        r = run_bench("--url", s.url + "/nothing/here", "--concurrency", "1", "--trials", "1", timeout=60)
        assert s.posts == 0  # no load was sent
    assert r.returncode == 2 and "HTTP 404" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_bad_options_are_one_clear_error():
    r = run_bench("--url", "ftp://x", "--concurrency", "1", timeout=60)
    assert r.returncode == 2 and "--url" in r.stderr
    r = run_bench("--url", "http://127.0.0.1:1", "--slo", "ttft=fast", timeout=60)
    assert r.returncode == 2 and "--slo" in r.stderr


@pytest.mark.parametrize("content, problem", [("{not json", "not valid JSON"),
                                              ('[{"prompt": "hi"}]', "no 'conversations' list"),
                                              ('{"a": 1}', "expected a JSON list")])
def test_malformed_dataset_names_the_file(tmp_path, content, problem):
    f = tmp_path / "share.json"
    f.write_text(content)
    with FaultServer(["ok"]) as s:
        r = run_bench("--url", s.url, "--dataset", f"sharegpt:{f}", "--concurrency", "1", timeout=60)
        assert s.posts == 0
    assert r.returncode == 2 and str(f) in r.stderr and problem in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_sharegpt_dataset_is_used(tmp_path):
    f = tmp_path / "share.json"
    f.write_text(json.dumps([{"conversations": [{"from": "human", "value": "tell me about rivers"},
                                                {"from": "gpt", "value": "rivers flow" * 10}]}] * 3))
    with FaultServer(["ok"]) as s:
        r = run_bench("--url", s.url, "--dataset", f"sharegpt:{f}", "--concurrency", "2", "--num-prompts", "6",
                      "--trials", "1", "--warmup", "0", "--format", "json", timeout=60)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["points"][0]["trials"][0]["completed"] == 6


def test_http_errors_and_timeouts_are_counted_and_the_run_goes_on(tmp_path):
    cycle = ["ok", "http500", "hang", "error_event", "cut", "http429"]
    out = tmp_path / "r.json"
    with FaultServer(cycle) as s:
        r = run_bench("--url", s.url, "--concurrency", "3", "--num-prompts", "12", "--trials", "1", "--warmup", "0",
                      "--timeout", "1", "--format", "json", "--output", out, timeout=120)
        served = dict(s.served)
    # 10 of 12 failed: far above the failure budget; everything is still written, then exit 1.
    assert r.returncode == 1, r.stderr
    assert "above the failure budget" in r.stderr and "c=3: 10 of 12 requests failed" in r.stderr
    res = load_result(out)
    assert not res.points[0].valid and res.points[0].failed == 10
    t = res.points[0].trials[0]
    probe_ok = res.environment.probe_requests  # the probe's requests were served "ok"
    assert t.requests == 12 and t.completed == served["ok"] - probe_ok
    assert t.errors == {"http_500": served["http500"], "timeout": served["hang"], "stream_error": served["error_event"],
                        "cut": served["cut"], "http_429": served["http429"]}
    assert t.failed == 12 - t.completed
    assert t.error_examples and t.ttft_ms.n == t.completed  # failed requests contribute no TTFT


def _wait_points(path, n, proc, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            try:
                if len(json.loads(path.read_text())["points"]) >= n:
                    return
            except (ValueError, KeyError):
                pass
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError("bench wrote no point in time")


def _then_wait(proc, act, timeout=60.0) -> str:
    """Do ``act()`` to the server under a running bench, then wait for the bench; its stderr."""
    try:
        act()
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return err


def test_server_killed_mid_sweep_keeps_what_was_measured(stub_server, tmp_path):
    s = stub_server("--itl-ms", "5", "--tokens", "16")
    out = tmp_path / "r.json"
    proc = subprocess.Popen(bench_cmd("--url", s.url, "--concurrency", "1,2,4,8,16", "--num-prompts", "8", "--trials",
                                      "2", "--warmup", "0", "--output-len", "16", "--timeout", "5", "--format", "json",
                                      "--output", out), env=bench_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    err = _then_wait(proc, lambda: (_wait_points(out, 1, proc), s.proc.kill()))
    assert proc.returncode == 1, err
    assert "server stopped answering" in err and "partial results written" in err
    res = load_result(out)
    assert res.error and 1 <= len(res.points) < 5
    assert res.points[0].trials[0].completed == 8
    assert res.points[-1].error
    # The server died: its refused and cut requests say nothing of the client's ceiling.
    assert not any("in flight" in r for t in res.points[-1].trials for r in t.client.reasons)


def _signal_after_first_point(out, sig, *args):
    """Run ``infergap bench *args`` writing JSON to ``out``; send ``sig`` once its first point is
    written; return the ended process and its stderr."""
    proc = subprocess.Popen(bench_cmd(*args, "--format", "json", "--output", out), env=bench_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_points(out, 1, proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_writes_partial_results(stub_server, tmp_path, sig):
    """Ctrl-C and a plain ``kill``/``timeout`` (SIGTERM) both stop the sweep with what it measured
    (SIGTERM used to end the process with nothing written)."""
    s = stub_server("--itl-ms", "5", "--tokens", "16")
    out = tmp_path / "r.json"
    proc, err = _signal_after_first_point(out, sig, "--url", s.url, "--concurrency", "1,2,4,8,16", "--num-prompts", "8",
                                          "--trials", "2", "--warmup", "0", "--output-len", "16")
    assert proc.returncode == 130, err
    res = load_result(out)
    assert res.interrupted and 1 <= len(res.points) < 5
    assert res.points[0].trials[0].completed == 8
    assert "Traceback" not in err


def test_sigterm_during_search_keeps_the_capacity_proven(stub_server, tmp_path):
    """A capacity search stopped after its first probe still says what it proved and why it
    stopped (it printed "SLO capacity: no load tried met … ()" with the reason empty)."""
    s = stub_server("--itl-ms", "5", "--tokens", "16")
    out = tmp_path / "r.json"
    proc, err = _signal_after_first_point(out, signal.SIGTERM, "--url", s.url, "--search", "rate", "--slo",
                                          "ttft_p99=5s,tpot_p99=1s", "--request-rate", "2", "--num-prompts", "8",
                                          "--trials", "1", "--warmup", "0", "--output-len", "16")
    assert proc.returncode == 130, err
    res = load_result(out)
    assert res.interrupted and res.capacity is not None and res.capacity.probes
    line = res.capacity.line()
    assert "interrupted" in line and "()" not in line, line
    assert res.capacity.detail.endswith("interrupted")  # after what the probes showed (too short here)


def test_cancelled_requests_are_not_called_failed_in_the_report(tmp_path):
    """Requests cancelled when a run stops are left out of the error rate; the report's line said
    "15 of 26 requests failed (0.0 %, within budget)" (cancelled counted in one figure, not the other)."""
    from pathlib import Path

    from infergap.bench.metrics import judge_point
    from infergap.bench.results import PointResult, TrialMetrics
    from infergap.render.bench import failure_summary

    res = load_result(Path(__file__).parents[1] / "fixtures" / "real-gpu" / "h200-transformers" / "bench.json")
    tm = TrialMetrics(trial=1, requests=26, completed=10, failed=16, errors={"cancelled": 15, "timeout": 1},
                      duration_s=10.0, truncated=0)
    p = PointResult(label="r=1/s", mode="rate", request_rate=1.0, trials=[tm])
    judge_point(p, 0.2)
    res.points = [p]
    [line] = [x for x in failure_summary(res) if x.startswith("r=1/s")]
    assert line.startswith("r=1/s: 1 of 11 requests failed (9.1 %, within budget), 15 more cancelled when the run "
                           "stopped (not counted)"), line


def _stub_requests(url: str) -> int:
    import urllib.request

    with urllib.request.urlopen(url + "/stats", timeout=5) as r:
        return json.loads(r.read())["requests"]


def _bench_until(s, out, *extra):
    """Start a 400-request point at concurrency 2 against stub ``s``; return the bench process once
    the stub has answered 20 of them (the point is well under way)."""
    proc = subprocess.Popen(bench_cmd("--url", s.url, "--concurrency", "2", "--num-prompts", "400", "--trials", "1",
                                      "--warmup", "0", "--output-len", "16", "--format", "json", "--output", out, *extra),
                            env=bench_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while _stub_requests(s.url) < 20:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the bench sent too few requests"
        time.sleep(0.05)
    return proc


def test_server_killed_mid_point_stops_the_point_early(stub_server, tmp_path):
    """Once nothing listens any more, the rest of the point is not sent at a dead server: the point
    stops after a few refused connections, says why, keeps its counts, and the bench exits 1."""
    s = stub_server("--itl-ms", "5", "--tokens", "16")
    out = tmp_path / "r.json"
    proc = _bench_until(s, out, "--timeout", "30")
    err = _then_wait(proc, s.proc.kill)
    assert proc.returncode == 1, err
    assert "connections refused with no answer between them" in err and "stopped early after" in err
    res = load_result(out)
    [point] = res.points
    [t] = point.trials
    assert 20 <= t.requests < 400 and t.completed >= 18  # what was measured is kept (20 arrived, 2 of them in flight)
    assert t.errors.get("connection", 0) >= 3 and t.failed == t.requests - t.completed
    assert "of 400 request(s)" in point.error and res.error


def test_hung_server_stops_the_point_without_waiting_every_timeout(stub_server, tmp_path):
    """A stopped (hung) server still accepts connections, so each request would wait its whole
    timeout: 380 requests × 2 s / 2 in flight = 6 minutes. The point stops after a run of timeouts
    with no answer between them."""
    import os

    s = stub_server("--itl-ms", "5", "--tokens", "16")
    out = tmp_path / "r.json"
    proc = _bench_until(s, out, "--timeout", "2")
    t0 = time.monotonic()
    try:
        err = _then_wait(proc, lambda: os.kill(s.proc.pid, signal.SIGSTOP), timeout=90)
    finally:
        os.kill(s.proc.pid, signal.SIGCONT)
    assert time.monotonic() - t0 < 60
    assert proc.returncode == 1, err
    assert "consecutive requests failed (connection or timeout)" in err
    [point] = load_result(out).points
    [t] = point.trials
    # 20 had arrived before the stop, at most 2 in flight; on a loaded machine one more may have hit
    # the 2 s timeout before the stop, so 15 completed is the floor of what was measured and kept.
    assert t.requests < 400 and t.errors.get("timeout", 0) >= 8 and t.completed >= 15
    assert t.failed == t.requests - t.completed


def test_streams_cut_mid_way_are_their_own_kind_and_do_not_make_the_server_dead(stub_server, tmp_path):
    """The stub closes every stream after 2 tokens (``--cut-every 1``) but accepts every new
    request: each failure is a cut answer, counted and named as such in the breakdown (not a
    connection that could not be made), and the server, which answers, is not taken for dead."""
    s = stub_server("--tokens", "16", "--cut-every", "1")
    out = tmp_path / "r.json"
    r = run_bench("--url", s.url, "--concurrency", "2", "--num-prompts", "20", "--trials", "1", "--warmup", "0",
                  "--output-len", "16", "--timeout", "10", "--format", "json",
                  "--output", out, timeout=120)
    assert r.returncode == 1, r.stderr  # every request failed: above the failure budget
    assert "server stopped answering" not in r.stderr + r.stdout
    res = load_result(out)
    [t] = res.points[0].trials
    assert t.requests == 20 and t.errors == {"cut": 20}, t.errors
    assert "closed after 2 token chunk(s)" in t.error_examples[0]
    from infergap.render.bench import to_text

    text = to_text(res)
    assert "cut ×20" in text and "in the middle of an answer" in text


def _busy_slots(url: str) -> int:
    import urllib.request

    with urllib.request.urlopen(url + "/slots", timeout=5) as r:
        return sum(1 for s in json.loads(r.read()) if s.get("is_processing"))


def test_llama_server_killed_mid_stream(llama_cpp, tmp_path):
    """llama.cpp's server killed while it streams: the streams in flight are cut (their own kind,
    with the tokens they had), the requests after them are refused, and the point stops as a dead
    server's, keeping what was measured."""
    s = llama_cpp("-c", "2048", "--parallel", "2")
    out = tmp_path / "r.json"
    proc = subprocess.Popen(bench_cmd("--url", s.url, "--concurrency", "2", "--num-prompts", "400", "--trials", "1",
                                      "--warmup", "0", "--input-len", "32", "--output-len", "256", "--timeout", "60", "--format", "json",
                                      "--output", out), env=bench_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)

    def kill_while_streaming() -> None:
        deadline = time.monotonic() + 120
        while _busy_slots(s.url) < 2:  # both slots generating: two streams in flight
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the bench never had two streams in flight"
            time.sleep(0.05)
        time.sleep(0.3)  # well into the streams' tokens
        s.proc.kill()

    err = _then_wait(proc, kill_while_streaming, timeout=120)
    assert proc.returncode == 1, err
    assert "connections refused with no answer between them" in err and "stopped early after" in err
    [t] = load_result(out).points[0].trials
    assert t.errors.get("cut", 0) >= 1 and t.errors.get("connection", 0) >= 3, t.errors
    assert set(t.errors) <= {"cut", "connection", "cancelled"}, t.errors
    assert any("token chunk(s)" in e for e in t.error_examples), t.error_examples
