"""Shared inputs of the plan tests. Inputs of the seed case, built with the project's own code from the seed's published numbers.

- audit: the seed host snapshot (``tests/fixtures/hosts/seed-8x-rtxpro6000``) with the SGLang
  startup log ``fixtures/seed-sglang-tp8.log`` as evidence (see ``fixtures/ABOUT.md``).
- roofline: GLM-5-NVFP4 on 8 × RTX PRO 6000 Blackwell Server, TP8, computed by ``infergap.roofline``.
- bench: an ``infergap.bench/1`` result whose points are the seed's figures — 10.36 tok/s at
  concurrency 1 and 66 tok/s at concurrency 10 (the seed's baseline table), 2,095 output tok/s at
  concurrency 2048 with the GPUs at 235 W of 600 W (the seed's best configuration) — made from
  per-request records by the bench's own metrics code (``trial_metrics``, ``summarize_trials``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import threading
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "tests" / "fixtures" / "hosts" / "seed-8x-rtxpro6000"
FIX = Path(__file__).resolve().parent / "fixtures"
SEED_LOG = FIX / "seed-sglang-tp8.log"
H200X2 = ROOT / "tests" / "fixtures" / "hosts" / "h200-2gpu-collect.tar.gz"  # real capture, NV18 between two H200s

# The bench tests' real llama-cpp-python server (tests/bench/conftest.py), reused, not copied.
sys.path.insert(0, str(ROOT / "tests" / "bench"))
_spec = importlib.util.spec_from_file_location("_bench_conftest", ROOT / "tests" / "bench" / "conftest.py")
_bench = importlib.util.module_from_spec(_spec)
sys.modules["_bench_conftest"] = _bench
_spec.loader.exec_module(_bench)
llama_server = _bench.llama_server
free_port = _bench.free_port


def constructed_bench(points: list[tuple[int, float, float | None]], output_len: int = 256, input_len: int = 1024,
                      url: str = "http://127.0.0.1:30000", gpu_name: str = "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                      gpus: int = 8):
    """A BenchResult from (concurrency, output tok/s, mean GPU power W or None) points: each point
    is ``max(concurrency, 4)`` requests of ``output_len`` tokens, ``concurrency`` at a time, with
    evenly spaced tokens, so that the bench's metrics code yields exactly that output tok/s."""
    from infergap.bench.metrics import RequestRecord, summarize_trials, trial_metrics
    from infergap.bench.results import (BenchEnvironment, BenchResult, BenchSettings, ClientHealth, GPUTelemetry,
                                       PointResult, TelemetrySummary)

    result = BenchResult(infergap_version="0.1.0", started_at="2026-02-14T10:20:00+00:00", finished_at="2026-02-14T11:00:00+00:00",
                         environment=BenchEnvironment(url=url, endpoint="/v1/chat/completions", model="glm-5"),
                         settings=BenchSettings(concurrency=[c for c, _, _ in points], input_len=input_len, output_len=output_len, trials=1))
    for c, tps, power in points:
        n = max(c, 4)
        waves = math_ceil(n / c)
        e2e = output_len * c / tps  # one wave of c requests lasts this long
        ttft = min(0.5, e2e / 10)
        recs = []
        for i in range(n):
            start = (i // c) * e2e
            first = start + ttft
            step = (e2e - ttft) / (output_len - 1)
            chunks = [first + k * step for k in range(output_len)]
            recs.append(RequestRecord(intended=start, start=start, first=first, end=chunks[-1], chunk_times=chunks,
                                      usage_prompt=input_len, usage_completion=output_len, max_tokens=output_len, finish_reason="length"))
        tm = trial_metrics(1, recs, window_start=0.0, window_end=waves * e2e,
                           client=ClientHealth(cpu_frac=0.1, mean_in_flight=float(c), max_in_flight=c, target_in_flight=c))
        p = PointResult(mode="concurrency", concurrency=c, trials=[tm])
        p.summary, p.unstable_metrics = summarize_trials(p.trials)
        if power is not None:
            p.telemetry = TelemetrySummary(available=True, gpus=[GPUTelemetry(index=i, name=gpu_name, samples=100, power_W_mean=power,
                                                                                power_limit_W=600.0) for i in range(gpus)])
        result.points.append(p)
    return result


def math_ceil(x: float) -> int:
    import math

    return math.ceil(x)


SEED_POINTS = [(1, 10.36, None), (10, 66.0, None), (2048, 2095.0, 235.0)]


@contextlib.contextmanager
def silent_listener():
    """A TCP port on 127.0.0.1 that accepts every connection and closes it at once (a port where
    something other than an HTTP server listens); yields the port."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        t.join(timeout=5)
        srv.close()
