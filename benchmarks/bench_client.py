"""Ceiling of the bench client: how many streamed tokens/s one core of client can take.

The stub (benchmarks/stub_server.py: 128 tokens per response, one SSE chunk per token, usage and
``[DONE]`` at the end) runs on one core, the client on the other (``taskset``/affinity). For each
concurrency the figures are: streamed tok/s and req/s as the client measured them and as the stub
counted them, requests in flight (client's view and stub's view) against the target, event-loop
lag (how late the client handles a ready event: the latency it adds to every timestamp) and send
slip p50/p99, TTFT p50/p99, and the client-bound flag. A slow stub (20 ms between tokens) shows
the flag staying down when the server is the limit. With ``--guidellm PATH`` guidellm runs
against the same stub with the same requests, counted by the stub the same way.

With ``--procs 2,4`` the same levels run again with the multi-process client
(``infergap.bench.multiproc``: one event loop per process, a shared start barrier), its processes
allowed on ``--client-cores`` (default: every core but the stub's), and a summary prints the
single- and multi-process ceilings side by side with guidellm's. ``--burn N`` keeps N busy-loop
processes on the client's cores throughout (a busy machine). The script exits 1 when any request
failed.

    python benchmarks/bench_client.py --procs 2 --burn 1 --guidellm /work/benchvenv/bin/guidellm
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from infergap.bench.client import StreamClient  # noqa: E402
from infergap.bench.datasets import synthetic  # noqa: E402
from infergap.bench.metrics import trial_metrics  # noqa: E402
from infergap.bench.multiproc import ClientArgs, run_trial  # noqa: E402
from infergap.bench.runner import LoadSpec, Runner, install_uvloop  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_stub(core: int, *args: str) -> tuple[subprocess.Popen, str]:
    port = _port()
    cmd = ["taskset", "-c", str(core), sys.executable, str(ROOT / "benchmarks" / "stub_server.py"), "--port", str(port), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.1)
    raise SystemExit("stub did not start")


def stub(url: str, path: str, post: bool = False) -> dict:
    req = urllib.request.Request(url + path, method="POST" if post else "GET")
    return json.loads(urllib.request.urlopen(req, timeout=5).read())


async def client_run(url: str, c: int, n: int) -> dict:
    client = StreamClient(url, "stub", "chat", True, {"stream_options": {"include_usage": True}}, (),
                          connections=c, timeout_s=120)
    await client.open()
    try:
        prompts = synthetic(n, 256, 128, seed=1, salt="ceil")
        tr = await Runner(client).trial(LoadSpec("concurrency", c), lambda i: prompts[i], n, None)
    finally:
        await client.close()
    m = trial_metrics(1, tr.records, window_start=tr.window[0], window_end=tr.window[1], client=tr.health)
    chunks = sum(len(r.chunk_times) for r in tr.records)
    return {"tok_s": chunks / m.duration_s, "req_s": m.request_throughput_rps, "failed": m.failed,
            "in_flight": m.client.mean_in_flight, "lag_p50": m.client.loop_lag_ms.p50, "lag_p99": m.client.loop_lag_ms.p99,
            "slip_p50": m.client.send_slip_ms.p50, "slip_p99": m.client.send_slip_ms.p99,
            "ttft_p50": m.ttft_ms.p50, "ttft_p99": m.ttft_ms.p99, "cpu": m.client.cpu_frac,
            "client_bound": m.client.client_bound, "reasons": m.client.reasons}


def multi_run(url: str, c: int, n: int, procs: int, cores: set[int]) -> dict:
    """The same trial as :func:`client_run` over ``procs`` client processes on ``cores``."""
    args = ClientArgs(url, "stub", "chat", True, {"stream_options": {"include_usage": True}}, (), 120.0)
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)  # the spawned workers inherit it
    try:
        tr = run_trial(args, LoadSpec("concurrency", c), synthetic(n, 256, 128, seed=1, salt="ceil"), procs)
    finally:
        os.sched_setaffinity(0, old)
    m = trial_metrics(1, tr.records, window_start=tr.window[0], window_end=tr.window[1], client=tr.health)
    chunks = sum(len(r.chunk_times) for r in tr.records)
    return {"tok_s": chunks / m.duration_s, "req_s": m.request_throughput_rps, "failed": m.failed,
            "in_flight": m.client.mean_in_flight, "lag_p99": m.client.loop_lag_ms.p99, "cpu": m.client.cpu_frac,
            "client_bound": m.client.client_bound, "reasons": m.client.reasons}


def _burn() -> None:  # pragma: no cover - a load generator for the machine, not measured
    while True:
        pass


def guidellm_run(exe: str, url: str, c: int, n: int, tokenizer_dir: str) -> dict:
    out = Path(tempfile.mkdtemp()) / "g.json"
    cmd = ["taskset", "-c", "0", exe, "run", "--backend",
           f"kind=openai_http,target={url},model={tokenizer_dir},request_format=/v1/chat/completions",
           "--profile", f"kind=concurrent,streams={c}", "--data", "kind=synthetic_text,prompt_tokens=256,output_tokens=128",
           "--constraint", f"kind=max_requests,count={n}", "--output", f"kind=json,path={out}", "--disable-progress",
           "--disable-console"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    if r.returncode != 0 or not out.exists():
        return {"error": (r.stderr or r.stdout)[-400:]}
    m = json.loads(out.read_text())["benchmarks"][0]["metrics"]

    def mean(k):
        return (m.get(k) or {}).get("successful", {}).get("mean") or 0.0

    return {"tok_s": mean("output_tokens_per_second"), "req_s": mean("requests_per_second"),
            "in_flight": mean("request_concurrency")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="64,512")
    ap.add_argument("--requests", type=int, default=4000, help="requests per level (at least 8 × concurrency)")
    ap.add_argument("--guidellm", default=None, help="path of a guidellm 0.8.1 executable (separate venv)")
    ap.add_argument("--tokenizer-dir", default=None, help="local HF tokenizer dir guidellm needs for its synthetic data")
    ap.add_argument("--procs", default="2", help="client process counts to measure beside the single process, e.g. 2,4")
    ap.add_argument("--client-cores", default=None, help="cores for the multi-process client, e.g. 0-3 (default: all but the stub's)")
    ap.add_argument("--burn", type=int, default=0, help="busy-loop processes on the client's core(s) throughout")
    a = ap.parse_args()
    levels = [int(x) for x in a.levels.split(",")]
    all_cores = sorted(os.sched_getaffinity(0))
    if len(all_cores) < 2:
        raise SystemExit("needs two cores: client on one, stub on the other")
    stub_core = all_cores[-1]
    if a.client_cores:
        lo, _, hi = a.client_cores.partition("-")
        client_cores = set(range(int(lo), int(hi or lo) + 1))
    else:
        client_cores = set(all_cores) - {stub_core}
    procs_list = [int(x) for x in a.procs.split(",") if x.strip()]
    os.sched_setaffinity(0, {min(client_cores)})
    install_uvloop()
    burners = []
    for _ in range(a.burn):
        import multiprocessing as mp

        b = mp.get_context("spawn").Process(target=_burn, daemon=True)
        b.start()
        os.sched_setaffinity(b.pid, client_cores)
        burners.append(b)
    multi: dict[tuple[int, int], tuple[dict, dict]] = {}
    guide: dict[int, dict] = {}
    proc, url = start_stub(stub_core)
    print(f"stub on core 1 ({url}), client on core 0; 256-token prompts, 128 streamed tokens per response; "
          f"load average {os.getloadavg()[0]:.1f} (other processes share these cores: compare client CPU %)")
    rows = {}
    problems: list[str] = []  # a figure measured over failed requests is no figure: exit 1 at the end
    try:
        asyncio.run(client_run(url, 64, 500))  # warm-up: connections, caches
        for c in levels:
            n = max(a.requests, 8 * c)
            stub(url, "/reset", post=True)
            r = asyncio.run(client_run(url, c, n))
            s = stub(url, "/stats")
            rows[c] = (r, s)
            if r["failed"]:
                problems.append(f"c={c}: {r['failed']} of {n} requests failed")
            print(f"\n[load {os.getloadavg()[0]:.1f}] infergap c={c} ({n} requests): {r['tok_s']:,.0f} streamed tok/s, {r['req_s']:,.0f} req/s "
                  f"(stub counted {s['tokens_per_s']:,.0f} tok/s, {s['requests_per_s']:,.0f} req/s), failed {r['failed']}")
            print(f"  per client CPU-second: {r['tok_s'] / max(r['cpu'], 1e-9):,.0f} tok/s "
                  f"(the ceiling of one whole core; the client got {r['cpu'] * 100:.0f} % of core 0)")
            print(f"  in flight: client {r['in_flight']:.1f}, stub {s['mean_in_flight']:.1f} of {c} "
                  f"({(s['mean_in_flight'] / c - 1) * 100:+.1f} %), peak {s['peak_in_flight']}")
            print(f"  scheduler lateness (event-loop lag) p50 {r['lag_p50']:.2f} ms, p99 {r['lag_p99']:.2f} ms; "
                  f"send slip p50 {r['slip_p50']:.2f} ms, p99 {r['slip_p99']:.2f} ms; client CPU {r['cpu'] * 100:.0f} %")
            print(f"  TTFT p50 {r['ttft_p50']:.1f} ms, p99 {r['ttft_p99']:.1f} ms; client-bound: {r['client_bound']} "
                  f"({'; '.join(r['reasons']) or 'no'})")
        for k in procs_list:
            for c in levels:
                n = max(a.requests, 8 * c)
                stub(url, "/reset", post=True)
                r = multi_run(url, c, n, k, client_cores)
                s = stub(url, "/stats")
                multi[(k, c)] = (r, s)
                if r["failed"]:
                    problems.append(f"{k} processes c={c}: {r['failed']} of {n} requests failed")
                print(f"\n[load {os.getloadavg()[0]:.1f}] infergap {k} processes on cores {sorted(client_cores)}, c={c}: "
                      f"{r['tok_s']:,.0f} streamed tok/s (stub counted {s['tokens_per_s']:,.0f}), failed {r['failed']}; "
                      f"in flight: stub {s['mean_in_flight']:.1f} of {c} ({(s['mean_in_flight'] / c - 1) * 100:+.1f} %); "
                      f"busiest process CPU {r['cpu'] * 100:.0f} %, lag p99 {r['lag_p99']:.1f} ms; client-bound: {r['client_bound']}")
    finally:
        proc.terminate()
    # Floor: added latency on an idle path (c=1), and the flag when the server is the limit.
    proc, url = start_stub(1, "--itl-ms", "20", "--tokens", "32")
    try:
        stub(url, "/reset", post=True)
        r = asyncio.run(client_run(url, 64, 256))
        if r["failed"]:
            problems.append(f"slow stub: {r['failed']} requests failed")
        print(f"\nslow stub (20 ms/token, c=64): {r['tok_s']:,.0f} tok/s, lag p99 {r['lag_p99']:.2f} ms, "
              f"client CPU {r['cpu'] * 100:.0f} %, client-bound: {r['client_bound']} ({'; '.join(r['reasons']) or 'no'})")
    finally:
        proc.terminate()
    proc, url = start_stub(1)
    try:
        r = asyncio.run(client_run(url, 1, 300))
        if r["failed"]:
            problems.append(f"idle path: {r['failed']} requests failed")
        print(f"idle path (c=1, zero-delay stub): TTFT p50 {r['ttft_p50']:.2f} ms, p99 {r['ttft_p99']:.2f} ms; "
              f"event-loop lag p50 {r['lag_p50']:.2f} ms, p99 {r['lag_p99']:.2f} ms")
        if a.guidellm:
            tok = a.tokenizer_dir
            if tok is None:
                sys.path.insert(0, str(ROOT / "tests" / "bench"))
                from bench_tiny_models import write_hf_llama

                tok = str(write_hf_llama(Path(tempfile.mkdtemp()) / "tok"))
            for c in levels:
                n = max(a.requests, 8 * c)
                stub(url, "/reset", post=True)
                g = guidellm_run(a.guidellm, url, c, n, tok)
                s = stub(url, "/stats")
                if "error" in g:
                    print(f"\nguidellm c={c}: failed: {g['error']}")
                    problems.append(f"guidellm c={c} failed")
                    continue
                mine = rows[c][1]
                guide[c] = {"tok_s": g["tok_s"], "stub_tok_s": s["tokens_per_s"], "in_flight": s["mean_in_flight"]}
                best = max(g["tok_s"], s["tokens_per_s"])  # the more favourable of its own and the stub's count
                print(f"\nguidellm c={c} ({n} requests): its own figures {g['tok_s']:,.0f} output tok/s, "
                      f"{g['req_s']:,.0f} req/s, {g['in_flight']:.1f} of {c} in flight; stub counted "
                      f"{s['tokens_per_s']:,.0f} tok/s (its window includes guidellm's pauses); "
                      f"infergap/guidellm = {mine['tokens_per_s'] / max(best, 1e-9):.1f}×")
    finally:
        proc.terminate()
        for b in burners:
            b.terminate()
    print(f"\nsummary (stub-counted streamed tok/s; in flight as the stub saw it, deviation from the target; "
          f"{a.burn} busy process(es) on the client cores; {len(all_cores)} cores):")
    head = ["c", "1 process"] + [f"{k} processes" for k in procs_list] + ["guidellm"]
    print("  " + " | ".join(head))
    for c in levels:
        cells = [str(c)]
        for r, s in [rows.get(c)] + [multi.get((k, c)) for k in procs_list]:
            cells.append("–" if s is None else f"{s['tokens_per_s']:,.0f} ({(s['mean_in_flight'] / c - 1) * 100:+.1f} %)")
        g = guide.get(c)
        cells.append("–" if g is None else f"{max(g['tok_s'], g['stub_tok_s']):,.0f} ({(g['in_flight'] / c - 1) * 100:+.1f} %)")
        print("  " + " | ".join(cells))
    if problems:
        raise SystemExit("FAILED: " + "; ".join(problems) + " (the figures above are not valid)")


if __name__ == "__main__":
    main()
