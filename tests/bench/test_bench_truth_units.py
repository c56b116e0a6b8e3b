"""Failures are never hidden: interrupted streams, the failure budget, percentiles of few samples,
and how reports and the plan treat an invalid point — no server needed."""

from __future__ import annotations

import pytest
from test_bench_units import LLAMA_STREAM

from infergap.bench.metrics import RequestRecord, judge_point, likely_cause, summarize_trials, trial_metrics
from infergap.bench.results import BenchEnvironment, BenchResult, BenchSettings, PointResult
from infergap.bench.slo import parse_targets
from infergap.cli.bench import parse_error_rate
from infergap.errors import UserError

# Captured from llama-cpp-python 0.3.36's server in its default configuration (this repository's
# tiny GGUF, /v1/completions, max_tokens 400) when a second request arrived 20 ms into the first:
# two tokens, [DONE], no finish_reason, and then the connection closed without the chunked body's
# last chunk (the body below is the de-chunked SSE text; llama_cpp/server/app.py,
# get_event_publisher, --interrupt_requests on by default).
INTERRUPTED = (
    b'data: {"id": "cmpl-a60e73f9-f580-4805-9d0c-5831bae7b5c5", "object": "text_completion", "created": 1796040845, '
    b'"model": "/tmp/bt_tiny.gguf", "choices": [{"text": "k", "index": 0, "logprobs": null, "finish_reason": null}]}\n\n'
    b'data: {"id": "cmpl-a60e73f9-f580-4805-9d0c-5831bae7b5c5", "object": "text_completion", "created": 1796040845, '
    b'"model": "/tmp/bt_tiny.gguf", "choices": [{"text": "v", "index": 0, "logprobs": null, "finish_reason": null}]}\n\n'
    b'data: [DONE]\n\n'
)


def _rec(stream: bytes, max_tokens: int, chat: bool = False) -> RequestRecord:
    from infergap.bench.client import SSEParser

    rec = RequestRecord(intended=0.0, start=0.0, max_tokens=max_tokens)
    p = SSEParser(rec, chat=chat)
    p.feed(stream, 1.0)
    p.finish()
    return rec


def test_a_stream_ended_before_finish_reason_and_short_of_max_tokens_is_interrupted():
    r = _rec(INTERRUPTED, max_tokens=400)
    assert r.error == "interrupted" and "2 of 400 tokens" in r.error_detail
    assert _rec(LLAMA_STREAM, max_tokens=16, chat=True).ok  # finish_reason "length": complete, merely short
    assert _rec(INTERRUPTED, max_tokens=2).ok  # every token asked for arrived
    rec = RequestRecord(intended=0.0, start=0.0)  # max_tokens unknown (the probe): not judged
    from infergap.bench.client import SSEParser

    p = SSEParser(rec, chat=False)
    p.feed(INTERRUPTED, 1.0)
    p.finish()
    assert rec.ok


def _trial(k: int, ok: int, failed: dict[str, int], latency_s: float = 0.1):
    recs = []
    t = 0.0
    for i in range(ok):
        recs.append(RequestRecord(intended=t, start=t, first=t + 0.01, end=t + latency_s, chunk_times=[t + 0.01, t + latency_s],
                                  usage_completion=2, usage_prompt=4, max_tokens=2, finish_reason="length"))
        t += latency_s
    for kind, n in failed.items():
        for _ in range(n):
            recs.append(RequestRecord(intended=t, start=t, end=t + 0.001, error=kind, error_detail=f"{kind} detail"))
    return trial_metrics(k, recs)


def _point(c: int, trials) -> PointResult:
    p = PointResult(mode="concurrency", concurrency=c, trials=trials)
    p.summary, p.unstable_metrics = summarize_trials(p.trials)
    return p


@pytest.mark.parametrize("ok, failed, budget, valid", [
    (99, {"http_503": 1}, 0.01, True),        # exactly 1 %: within
    (98, {"http_503": 2}, 0.01, False),
    (100, {}, 0.0, True),
    (99, {"timeout": 1}, 0.0, False),          # --max-error-rate 0: any failure invalidates
    (90, {"cancelled": 10}, 0.01, True),       # Ctrl-C is the user's doing, not the server's
])
def test_failure_budget(ok, failed, budget, valid):
    p = _point(4, [_trial(1, ok, failed)])
    judge_point(p, budget)
    assert p.valid is valid and p.requests == ok + sum(failed.values()) and p.failed == sum(failed.values())
    assert (p.invalid_reason is None) is valid
    if not valid:
        assert f"{sum(failed.values())} of {p.requests} requests failed" in p.invalid_reason


def test_likely_cause_names_the_interrupting_server_and_slots():
    assert "--interrupt_requests False" in likely_cause({"interrupted": 255, "connection": 1})
    assert "slot" in likely_cause({"http_503": 3})
    assert "--timeout" in likely_cause({"timeout": 2})
    assert "log" in likely_cause({"http_502": 1})
    assert likely_cause({"cancelled": 4}) is None and likely_cause({}) is None


@pytest.mark.parametrize("text, value", [("1%", 0.01), ("0.05", 0.05), ("0", 0.0), (" 2.5 % ", 0.025)])
def test_parse_error_rate(text, value):
    assert parse_error_rate(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["5", "-1%", "lots", "150%"])
def test_parse_error_rate_rejects(text):
    with pytest.raises(UserError, match="--max-error-rate"):
        parse_error_rate(text)


def _result(points) -> BenchResult:
    return BenchResult(infergap_version="0", started_at="2026-01-01T00:00:00+00:00",
                       environment=BenchEnvironment(url="http://127.0.0.1:1", endpoint="e", model="m"),
                       settings=BenchSettings(concurrency=[p.concurrency for p in points], trials=1), points=points)


def test_reports_mark_invalid_points_and_few_sample_percentiles(tmp_path):
    from infergap.render import bench as render

    good = _point(1, [_trial(1, 40, {})])
    bad = _point(2, [_trial(1, 1, {"interrupted": 31})])
    for p in (good, bad):
        judge_point(p, 0.01)
    res = _result([good, bad])
    text = render.to_text(res)
    head = text.split("infergap bench")[0]
    assert "FAILED" in head and "INVALID: 1 of 2 point(s)" in head  # before any figure
    assert "c=2: 31 of 32 requests failed (96.9 %, INVALID): interrupted ×31" in text
    assert "--interrupt_requests False" in text
    rows_c2 = [line.strip() for line in text.splitlines() if line.strip().startswith("c=2 ")]
    assert any("31/32" in r for r in rows_c2)  # the outcome table
    assert any("max 10.0 (n=1)" in r for r in rows_c2)  # TTFT p99 of one request is shown as what it is
    assert not any("max" in r for r in text.splitlines() if r.strip().startswith("c=1 "))
    md = render.to_markdown(res)
    assert "## Failed requests" in md and "INVALID" in md and "max 10.0 (n=1)" in md
    data = res.model_dump(mode="json", by_alias=True)["points"]
    assert [(p["valid"], p["failed"], p["errors"]) for p in data] == [(True, 0, {}), (False, 31, {"interrupted": 31})]
    render.plot(res, str(tmp_path / "p.svg"))
    assert (tmp_path / "p.svg").stat().st_size > 0
    from infergap.render import plots

    assert [p.label for p in plots._pts(res)] == ["c=1"]


def test_plan_states_the_error_rate_first_and_ignores_invalid_points():
    from infergap.plan import build_plan
    from infergap.render.plan import render_markdown, render_text

    good = _point(1, [_trial(1, 40, {})])
    bad = _point(2, [_trial(1, 1, {"interrupted": 31})])
    for p in (good, bad):
        judge_point(p, 0.01)
    res = _result([good, bad])
    plan = build_plan(bench=res)
    names = list(plan.facts)
    assert names[:3] == ["load.error_rate", "load.error_kind", "load.error_cause"]
    assert plan.facts["load.error_rate"].value == pytest.approx(31 / 72, abs=1e-4)
    assert "c=2" in plan.facts["load.error_rate"].source and "interrupt_requests" in plan.facts["load.error_cause"].value
    assert plan.facts["load.max_concurrency"].value == 1  # c=2 is not a measurement
    assert [g.concurrency for g in plan.gap.points] == [1]
    lever = next(x for x in plan.levers if x.id == "llamacpp.no_interrupt")
    assert lever.tier == "flag_flip" and "--interrupt_requests False" in lever.actions[0]
    text = render_text(plan)
    assert text.index("FAILED REQUESTS") < text.index("EFFICIENCY GAP") and "43.1% of the bench's requests failed" in text
    assert "## Failed requests" in render_markdown(plan)
    from infergap.render.report import render_html

    html = render_html(plan, bench=res)
    assert html.index("of the bench&#39;s requests failed") < html.index("Top actions")
    row = html[html.index("<td>c=2"):].split("</tr>")[0]
    assert "INVALID" in row and "31 (96.9 %)" in row and "likely cause" in row and "max 10.0 (n=1)" in row
    all_bad = _point(2, [_trial(1, 0, {"interrupted": 8})])
    judge_point(all_bad, 0.01)
    assert "no valid point" in build_plan(bench=_result([all_bad])).gap.summary


def test_a_point_invalid_in_either_run_is_never_better_or_worse():
    from infergap.bench.compare import compare_bench

    fast = [_point(2, [_trial(k, 40, {}, latency_s=0.05) for k in (1, 2)])]
    slow_failing = [_point(2, [_trial(k, 20, {"http_503": 20}, latency_s=0.2) for k in (1, 2)])]
    slow = [_point(2, [_trial(k, 40, {}, latency_s=0.2) for k in (1, 2)])]
    for p in fast + slow_failing + slow:
        judge_point(p, 0.01)
    honest = compare_bench(_result(slow), _result(fast)).points[0]
    assert any(m.verdict == "better" for m in honest.metrics) and not honest.notes
    c = compare_bench(_result(slow_failing), _result(fast)).points[0]
    assert all(m.verdict in ("within noise", "missing") for m in c.metrics)
    assert "baseline run is invalid at this point (40 of 80 requests failed" in c.notes[0]


def test_a_result_without_point_totals_gets_them_from_its_trials():
    """A file written before points carried totals: its failures still count and show."""
    p = _point(2, [_trial(1, 10, {"http_503": 5})])
    data = _result([p]).model_dump(mode="json", by_alias=True)
    for k in ("requests", "completed", "failed", "retried", "errors", "error_rate", "valid", "invalid_reason"):
        data["points"][0].pop(k)
    old = BenchResult.model_validate(data)
    q = old.points[0]
    assert (q.requests, q.failed, q.valid, q.errors) == (15, 5, False, {"http_503": 5})


@pytest.mark.parametrize("outcomes, verdict", [
    ([(40, {}), (40, {})], "ok: 2 of 2 point(s) within the 5.0% failure budget"),
    ([(40, {}), (39, {"timeout": 1})], "ok: 2 of 2 point(s) within the 5.0% failure budget"),  # 2.5 % of one point
    ([(40, {}), (1, {"interrupted": 31})], "degraded: 1 of 2 point(s) above the 5.0% failure budget"),
    ([(0, {"http_503": 8}), (1, {"interrupted": 31})], "failed: all 2 point(s) above the 5.0% failure budget"),
])
def test_doctor_bench_stage_verdict(outcomes, verdict):
    """The stage's status says the sweep ran; whether its points are usable is the verdict."""
    from infergap.doctor import bench_stage

    pts = [_point(c, [_trial(1, ok, failed)]) for c, (ok, failed) in zip((1, 2), outcomes)]
    res = _result(pts)
    res.settings.max_error_rate = 0.05
    for p in pts:
        judge_point(p, 0.05)
    st, got, detail = bench_stage(res)
    assert (st, got) == ("ran", verdict)
    failed = sum(p.failed for p in pts)
    assert (f"{failed} of {sum(p.requests for p in pts)} requests failed" in detail) == bool(failed)
    if not verdict.startswith("ok"):
        assert "not used" in detail and "most likely cause" in detail


def test_doctor_bench_stage_that_measured_nothing_is_not_ok():
    from infergap.doctor import bench_stage

    res = _result([])
    assert bench_stage(res)[:2] == ("ran", "failed: no point measured")
    res.error = "server gone before the first point"
    assert bench_stage(res)[:2] == ("failed", "failed: no point measured")
    res = _result([_point(1, [_trial(1, 40, {})])])
    res.error = "server gone after the first point"
    assert bench_stage(res)[:2] == ("partial", "ok: 1 of 1 point(s) within the 1.0% failure budget")


@pytest.mark.parametrize("settings, load, lengths", [
    (dict(search="rate", request_rate=[2.0], dataset="mooncake:t.jsonl", slo_targets=parse_targets("ttft_p99=2s")),
     "load: SLO capacity search over request rate from 2/s (poisson arrivals)", "input and output lengths from the trace"),
    (dict(search="concurrency", concurrency=[4], dataset="sharegpt:s.json", output_len=64,
          slo_targets=parse_targets("ttft_p99=2s")),
     "load: SLO capacity search over concurrency from 4", "input from the dataset's prompts, output 64 tokens"),
    (dict(concurrency=[1, 2], dataset="random", input_len=300),
     "load: concurrency 1,2", "input 300, output 128 tokens"),
])
def test_settings_line_says_what_was_run_and_where_lengths_come_from(settings, load, lengths):
    """A search used to read "load: concurrency ;" and a trace replay "input 256, output 128
    tokens", lengths the trace never had."""
    from infergap.render import bench as render

    res = _result([_point(1, [_trial(1, 40, {})])])
    res.settings = BenchSettings(trials=1, **settings)
    line = next(n for n in render.to_text(res).splitlines() if "load:" in n)
    assert load in line and lengths in line


def test_failed_requests_do_not_make_the_client_the_limit():
    """A server that dies mid-point refuses and cuts requests, so fewer are in flight; that was
    reported as CLIENT-BOUND ("only 2.8 of 4 requests in flight")."""
    from infergap.bench.metrics import judge_client
    from infergap.bench.results import ClientHealth

    def health():
        return ClientHealth(mean_in_flight=2.8, max_in_flight=4, target_in_flight=4)

    ok = [RequestRecord(intended=0.0) for _ in range(6)]
    dead = [RequestRecord(intended=0.0, error=e) for e in ("connection",) * 3 + ("cancelled",) * 3]
    def busy():
        return ClientHealth(mean_in_flight=2.8, max_in_flight=4, target_in_flight=4, cpu_frac=0.97)

    b = judge_client(busy(), ok)  # the client's own CPU, and it left slots empty
    assert b.client_bound and "only 2.8 of 4 requests in flight" in b.reasons, b.reasons
    h = judge_client(busy(), ok[:3] + dead[:3])
    assert h.client_bound and not any("in flight" in r for r in h.reasons), h.reasons
    assert not judge_client(health(), ok[:3] + dead[:3]).client_bound


def test_loop_lag_of_a_busy_host_is_not_the_client_limit():
    """On a busy host every point read client-bound from event-loop lag that other processes
    caused (c=1, the client's own CPU at a few per cent): only the client's own CPU share or
    its own send slip make it the limit; lag and empty slots are named beside that evidence."""
    from infergap.bench.metrics import judge_client
    from infergap.bench.results import ClientHealth, Stats

    def health(cpu=0.04, slip=2.0):
        return ClientHealth(loop_lag_ms=Stats(p99=85.0), send_slip_ms=Stats(p99=slip), cpu_frac=cpu,
                            mean_in_flight=0.8, max_in_flight=1, target_in_flight=1)

    assert not judge_client(health()).client_bound and judge_client(health()).reasons == []
    own = judge_client(health(cpu=0.95))
    assert own.client_bound and own.reasons[0].startswith("client CPU 95 %") and "event-loop lag p99 85.0 ms" in own.reasons
    assert judge_client(health(slip=40.0)).reasons[0] == "send slip p99 40.0 ms"


def test_a_client_cause_never_outranks_the_gpu():
    """A point whose GPU was ≥ 90 % busy is GPU-bound even when the client was strained."""
    from infergap.bench.engine_metrics import cause_of
    from infergap.bench.results import ClientHealth, GPUTelemetry, PointResult, TelemetrySummary, TrialMetrics

    health = ClientHealth(client_bound=True, reasons=["client CPU 95 % of a core"])
    trial = TrialMetrics(trial=0, duration_s=3.0, requests=40, completed=40, failed=0, truncated=0, client=health)
    p = PointResult(mode="concurrency", concurrency=4, trials=[trial], client_bound=True,
                    telemetry=TelemetrySummary(available=True, gpus=[GPUTelemetry(index=0, util_pct_mean=97.0)]))
    assert cause_of(p).cause == "gpu", cause_of(p)


def test_cut_streams_neither_kill_the_server_nor_hide_its_death():
    """A server killed mid-run cuts the streams in flight, then refuses connections: it is dead
    after three refusals whatever the cuts among them. A server that only cuts streams (and
    answers every new request) is never taken for dead."""
    from infergap.bench.client import StreamClient
    from infergap.bench.trial import DEAD_REFUSED, Runner

    def rec(kind):
        detail = "ClientConnectorError: Cannot connect" if kind == "refused" else None
        return RequestRecord(intended=0.0, error="connection" if kind == "refused" else kind, error_detail=detail)

    r = Runner(StreamClient("http://127.0.0.1:9", "m"))
    r.watch_reset()
    for k in ["cut", "refused", "cut", "refused", "cut"] + ["refused"] * (DEAD_REFUSED - 2):
        r.watch(rec(k), 8)
    assert r.dead and "connections refused" in r.dead
    r.watch_reset()
    for _ in range(100):
        r.watch(rec("cut"), 8)
    assert r.dead is None


def test_reports_without_a_roofline_compare_nothing_with_a_bound():
    """The roofline was skipped (a model it does not know): the report's throughput plot, its
    caption and the plan's gap table show what was measured, with no claim of a bound."""
    from infergap.plan import build_plan
    from infergap.render.plan import render_markdown, render_text
    from infergap.render.report import render_html

    points = [_point(c, [_trial(1, 40, {})]) for c in (1, 2)]
    for p in points:
        judge_point(p, 0.01)
    plan = build_plan(bench=_result(points))
    html = render_html(plan, bench=_result(points))
    caption = html[html.index('id="plot-throughput"'):].split("<figcaption>")[1].split("</figcaption>")[0]
    assert "no roofline bound" in caption and "against the roofline" not in caption and "bounds" not in caption
    assert "against the roofline" not in html
    text, md = render_text(plan), render_markdown(plan)
    assert "measured tok/s" in text and "bound tok/s" not in text and "efficiency" not in text.split("EFFICIENCY GAP")[1]
    assert "| concurrency | measured tok/s | note |" in md and "bound tok/s" not in md
    assert "no roofline" in plan.gap.summary and all(g.bound_tok_s is None and g.ratio is None for g in plan.gap.points)
    from infergap.render.plots import throughput_caption

    with_rl = throughput_caption({"batched": [{"batch": 1, "tok_s": 10.0, "bound": "memory"}], "single_stream": []})
    assert "against the roofline's batched bound" in with_rl and "batch-1" not in with_rl
