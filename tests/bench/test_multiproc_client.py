"""The multi-process client (``--client-procs``) against the stub on 127.0.0.1: the same counts as
one process for a server that fails some requests, live progress, interruption.

The stub's faults are chosen by the prompt's index (``benchmarks/stub_server.py``), so the same
requests fail however the load is split. A dropped keep-alive connection is retried only when the
request found a *re-used* connection; the drops fall on every 20th index and the concurrency is 4,
so no dropped index is ever the first request of a connection (the first 4 requests, or the one
after a connection the stub closed).
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from bench_helpers import run_bench
from infergap.bench import multiproc
from infergap.bench.client import StreamClient
from infergap.bench.datasets import synthetic
from infergap.bench.trial import LoadSpec, Runner

pytestmark = pytest.mark.slow

N = 240
FAULTS = ("--fail-every", "7", "--error-every", "11", "--cut-every", "40", "--drop-every", "20")


def _expected() -> tuple[dict[str, int], int]:
    """Error kinds and retries the stub's faults must produce for prompts 0..N-1."""
    errors: dict[str, int] = {}
    for i in range(N):
        kind = "http_503" if i % 7 == 6 else "cut" if i % 40 == 39 else "stream_error" if i % 11 == 10 else None
        if kind:
            errors[kind] = errors.get(kind, 0) + 1
    return errors, sum(1 for i in range(N) if i % 20 == 19)


def _run(url: str, procs: int) -> dict:
    r = run_bench("--url", url, "--concurrency", "4", "--num-prompts", str(N), "--client-procs", str(procs),
                  "--trials", "1", "--warmup", "0", "--output-len", "16", "--input-len", "8", "--max-error-rate", "0.5",
                  "--format", "json", timeout=300)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    return json.loads(r.stdout)


def test_two_processes_count_every_failure_and_retry_as_one_does(stub_server):
    s = stub_server("--tokens", "16", *FAULTS)
    errors, retries = _expected()
    runs = {procs: _run(s.url, procs) for procs in (1, 2)}
    for procs, res in runs.items():
        t = res["points"][0]["trials"][0]
        assert t["requests"] == N and t["errors"] == errors, (procs, t["errors"], t["error_examples"])
        assert t["failed"] == sum(errors.values()) and t["completed"] == N - t["failed"]
        assert t["retried"] == retries and res["points"][0]["retried"] == retries, (procs, t["retried"])
        # The workers' connection counters reach the result: each retry was a closed re-used connection.
        assert res["connections"]["reuse_failures"] == retries, (procs, res["connections"])
        assert res["connections"]["note"] and str(retries) in res["connections"]["note"]
        assert t["output_tokens"] == 16 * t["completed"]
    one, two = (runs[k]["points"][0]["trials"][0] for k in (1, 2))
    for key in ("requests", "completed", "failed", "retried", "errors", "output_tokens", "truncated"):
        assert one[key] == two[key], key


def test_progress_advances_while_the_processes_run_and_stop_keeps_what_was_measured(stub_server):
    s = stub_server("--tokens", "32", "--itl-ms", "10", "--fail-every", "5")
    prompts = synthetic(160, 8, 32, salt="p")
    args = multiproc.ClientArgs(s.url, "stub", "chat", True, {"stream_options": {"include_usage": True}}, (), 60.0)
    seen: list[tuple[float, object]] = []

    async def run(stop_after: int | None):
        def done(rec) -> None:
            seen.append((time.perf_counter(), rec))
            if len(seen) == stop_after:
                runner.stop()

        runner = Runner(StreamClient(s.url, "stub"), on_request=done)
        tr = await multiproc.trial(runner, args, LoadSpec("concurrency", 8), prompts, 2)
        return tr, time.perf_counter()

    tr, end = asyncio.run(run(None))
    # 160 requests of ~0.35 s at 8 in flight: ~7 s; progress came in batches throughout, not at the end.
    assert len(seen) == len(tr.records) == 160
    assert seen[0][0] < end - 2.0, end - seen[0][0]
    assert sum(1 for _, r in seen if r.error == "http_503") == 32 == sum(1 for r in tr.records if r.error == "http_503")
    assert sum(r.output_tokens()[0] for _, r in seen if r.ok) == sum(r.output_tokens()[0] for r in tr.records if r.ok)

    # Stopped once 24 requests were reported: the workers cancel what is in flight and send the rest.
    seen.clear()
    tr, end = asyncio.run(run(24))
    stopped_at = seen[23][0]
    assert tr.stopped and end - stopped_at < 3.0, end - stopped_at
    assert len([r for r in tr.records if r.ok]) >= 16 and len(tr.records) < 160
    assert any(r.error == "cancelled" for r in tr.records)
    assert len(seen) == len(tr.records)


def test_trace_split_keeps_the_concurrency_cap():
    parts = multiproc.split(LoadSpec("rate", 8, 1.0, "trace", [0.0, 0.5, 1.0, 1.5]), [0, 1, 2, 3], 2, 0)
    assert [p[0].concurrency for p in parts] == [4, 4] and parts[1][0].offsets == [0.5, 1.5]
    assert len(multiproc.split(LoadSpec("rate", None, 1.0, "trace", [0.0]), [0], 2, 0)) == 1
