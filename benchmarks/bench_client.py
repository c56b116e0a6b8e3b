"""Ceiling of the bench client: how many streamed tokens/s it takes, with one and with several
client processes, beside guidellm against the same stub.

The stub (benchmarks/stub_server.py: 128 tokens per response, one SSE chunk per token, usage and
``[DONE]`` at the end; ``--stub-workers`` processes sharing the port and the counters) runs on
``--stub-cores`` (default: the last core), the client on the others. One run prints:

1. the one-process hot path before/after: aiohttp's ``readany()`` (one HTTP chunk at a time, the
   connection's flow control called for each) against the client's whole-buffer read
   (``infergap.bench.client._drain``), alternated, at c=512: streamed tok/s, the client's CPU
   share and tok/s per CPU-second (the figure that does not depend on what else the machine runs);
2. for each concurrency in ``--levels`` (default 512..4096): tok/s as the client measured it and
   as the stub counted it, requests in flight as the client and as the stub saw them (the stub's
   steady window, up to the start of the last request, against the target: ±2 % is the goal),
   event-loop lag, send slip, TTFT, the client-bound flag;
3. the same with ``--procs`` client processes (``infergap.bench.multiproc``: one event loop per
   process, a shared start barrier), allowed on ``--client-cores``;
4. a slow stub (the flag stays down when the server is the limit) and the idle path (c=1);
5. with ``--guidellm PATH``, guidellm 0.8.1 at the same concurrency against the same stub;
6. a summary: single-, multi-process and guidellm side by side, and each target met or not.

``--burn N`` keeps N busy-loop processes on the client's cores throughout (a busy machine). The
script exits 1 when any request failed or guidellm, when asked for, did not run.

Measured 2026-11-30 on a 16-core x86-64 virtual host, one thread per core (``--stub-workers 12
--stub-cores 4-15 --client-cores 0-3 --procs 2,4 --levels 512,4096 --requests 20000
--ab-rounds 0 --scaling-rounds 5``; stub-counted tok/s):

    c      1 process   2 processes   4 processes
    512    204,999     568,350       871,380
    4096   290,819     573,551       967,465
    scaling, medians of 5 alternated rounds: 955,745 / 290,585 = 3.29× (rounds 2.26-3.49×;
    an earlier run's medians 2.83×, single pairs in five other runs 2.84-5.08×)
    in flight at the paced stub (ramp-up excluded): −0.0 % (c=512), −0.2 % / −0.0 % (c=4096)

The one-process figure moves between 155k and 301k from run to run on that host (its neighbours,
not the client: alternated rounds minutes apart differ as much), hence ``--scaling-rounds``. The
whole-buffer read (:func:`infergap.bench.client._drain`) against aiohttp's ``readany()``, an
earlier run on the same host: 235,161 → 275,048 tok/s per client CPU-second (+17 %).

On this project's 2-core virtual machine with ``--burn 1`` (one busy-loop process on the client's
core; ``--levels 512,4096 --requests 4096 --procs 2,4 --ab-rounds 0 --guidellm …``), 2026-11-30,
one run: c=512 111,971 / 113,277 / 158,096 tok/s for 1 / 2 / 4 processes, guidellm 0.8.1 8,334
beside it; c=4096 75,156 / 93,148 / 102,182. In flight at the paced stub (response lengths spread
over 64-128 tokens, ramp-up excluded): c=512 −0.8 % (1 process), −0.2 % (4); c=4096 −2.3 % (1),
−0.2 % (4). Before the stub's decode loop (:class:`stub_server.Steps`) the stub wrote each token
through aiohttp's response writer and one core of it topped out near 114,000 tok/s: in the same
setting the client figure was 64,366 (1 process) and 85,249 (2), capped by the stub, not the
client. With one fixed response length the paced stub's requests all end in the same step and the
client answers them in one burst: −4.0 % (1 process) and −2.7 % (2) at c=512 on this machine
under the same load; real responses end at varied lengths, so the paced stub spreads them.

    python benchmarks/bench_client.py --procs 2 --burn 1 --guidellm PATH/TO/guidellm
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from infergap.bench import client as client_mod  # noqa: E402
from infergap.bench.client import StreamClient  # noqa: E402
from infergap.bench.datasets import synthetic  # noqa: E402
from infergap.bench.metrics import trial_metrics  # noqa: E402
from infergap.bench.multiproc import ClientArgs, run_trial  # noqa: E402
from infergap.bench.shapes import ClosedLoop  # noqa: E402
from infergap.bench.trial import LoadSpec, Runner, install_uvloop  # noqa: E402

IN_FLIGHT_TOLERANCE = 0.02
TARGET_TOK_S = 100_000
TARGET_SCALING = 3.0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cores(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out |= set(range(int(lo), int(hi or lo) + 1))
    return out


def start_stub(cores: set[int], *args: str) -> tuple[subprocess.Popen, str]:
    port = _port()
    cmd = ["taskset", "-c", ",".join(map(str, sorted(cores))), sys.executable, str(ROOT / "benchmarks" / "stub_server.py"),
           "--port", str(port), *args]
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


def _figures(tr) -> dict:
    m = trial_metrics(1, tr.records, window_start=tr.window[0], window_end=tr.window[1], client=tr.health)
    chunks = sum(len(r.chunk_times) for r in tr.records)
    return {"tok_s": chunks / m.duration_s, "req_s": m.request_throughput_rps, "failed": m.failed,
            "in_flight": m.client.mean_in_flight, "lag_p50": m.client.loop_lag_ms.p50, "lag_p99": m.client.loop_lag_ms.p99,
            "slip_p50": m.client.send_slip_ms.p50, "slip_p99": m.client.send_slip_ms.p99,
            "ttft_p50": m.ttft_ms.p50, "ttft_p99": m.ttft_ms.p99, "cpu": m.client.cpu_frac,
            "client_bound": m.client.client_bound, "reasons": m.client.reasons}


async def client_run(url: str, c: int, n: int) -> dict:
    """One process, closed loop at ``c`` for ``n`` requests of 256 prompt and 128 output tokens."""
    client = StreamClient(url, "stub", "chat", True, {"stream_options": {"include_usage": True}}, (),
                          connections=c, timeout_s=120)
    await client.open()
    try:
        prompts = synthetic(n, 256, 128, seed=1, salt="ceil")
        tr = await Runner(client).run(ClosedLoop(c, lambda i: prompts[i], n))
    finally:
        await client.close()
    return _figures(tr)


def multi_run(url: str, c: int, n: int, procs: int, cores: set[int]) -> dict:
    """The same trial as :func:`client_run` over ``procs`` client processes on ``cores``."""
    args = ClientArgs(url, "stub", "chat", True, {"stream_options": {"include_usage": True}}, (), 120.0)
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)  # the spawned workers inherit it
    try:
        tr = run_trial(args, LoadSpec("concurrency", c), synthetic(n, 256, 128, seed=1, salt="ceil"), procs)
    finally:
        os.sched_setaffinity(0, old)
    return _figures(tr)


def _burn() -> None:  # pragma: no cover - a load generator for the machine, not measured
    while True:
        pass


def guidellm_run(exe: str, url: str, c: int, n: int, tokenizer_dir: str, cores: set[int]) -> dict:
    """guidellm against the stub, closed loop at ``c`` for ``n`` requests; its own figures, or
    ``{"error": why}`` (the end of its output) when it did not run."""
    out = Path(tempfile.mkdtemp()) / "g.json"
    cmd = ["taskset", "-c", ",".join(map(str, sorted(cores))), exe, "run", "--backend",
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


def _stub_run(cores: set[int], c: int, n: int, what: str, problems: list[str], *stub_args: str) -> dict:
    """One process at ``c`` for ``n`` requests against a fresh stub started with ``stub_args``."""
    proc, url = start_stub(cores, *stub_args)
    try:
        r = asyncio.run(client_run(url, c, n))
    finally:
        proc.terminate()
    if r["failed"]:
        problems.append(f"{what}: {r['failed']} of {n} requests failed")
    return r


def _in_flight(s: dict, c: int) -> tuple[float, bool]:
    dev = s["steady_in_flight"] / c - 1
    return dev, abs(dev) <= IN_FLIGHT_TOLERANCE


def _line(label: str, c: int, n: int, r: dict, s: dict, paced: bool = False) -> None:
    dev, ok = _in_flight(s, c)
    print(f"\n[load {os.getloadavg()[0]:.1f}] {label} c={c} ({n} requests): {r['tok_s']:,.0f} streamed tok/s, "
          f"{r['req_s']:,.0f} req/s (stub counted {s['tokens_per_s']:,.0f} tok/s), failed {r['failed']}")
    print(f"  in flight: client {r['in_flight']:.1f}, stub {s['steady_in_flight']:.1f} of {c} ({dev * 100:+.1f} %), "
          f"peak {s['peak_in_flight']}" + (f", ramp-up {s['ramp_s'] * 1000:.0f} ms (excluded)" if s.get("ramp_s") else "")
          + ("" if paced else " (a zero-delay stub writes a whole response in a few ms, "
          "faster than the client reads it: its count shows the server's busy time, not the client's concurrency)"))
    print(f"  client CPU {r['cpu'] * 100:.0f} % of a core (busiest process); event-loop lag p99 {r['lag_p99']:.1f} ms, "
          f"send slip p99 {r['slip_p99']:.1f} ms; TTFT p50 {r['ttft_p50']:.1f} ms, p99 {r['ttft_p99']:.1f} ms; "
          f"client-bound: {r['client_bound']} ({'; '.join(r['reasons']) or 'no'})")


def hot_path_ab(url: str, c: int, n: int, rounds: int) -> tuple[float, float]:
    """Before/after of the one-process hot path, alternated ``rounds`` times: tok/s per client
    CPU-second with aiohttp's readany() and with the whole-buffer read (medians)."""
    per_cpu: dict[bool, list[float]] = {False: [], True: []}
    saved = client_mod.FAST_DRAIN
    try:
        for k in range(rounds):
            for fast in (False, True):
                client_mod.FAST_DRAIN = fast and saved
                r = asyncio.run(client_run(url, c, n))
                if r["failed"]:
                    raise SystemExit(f"FAILED: hot-path comparison: {r['failed']} of {n} requests failed")
                per_cpu[fast].append(r["tok_s"] / max(r["cpu"], 1e-9))
                print(f"  round {k + 1} {'whole-buffer read' if fast else 'readany() (before)':>22}: {r['tok_s']:,.0f} tok/s, "
                      f"client CPU {r['cpu'] * 100:.0f} %, {per_cpu[fast][-1]:,.0f} tok/s per CPU-second")
    finally:
        client_mod.FAST_DRAIN = saved
    return statistics.median(per_cpu[False]), statistics.median(per_cpu[True])


def scaling_rounds(url: str, rounds: int, n: int, cores: set[int], problems: list[str]) -> tuple[float, float]:
    """1 and 4 client processes alternated ``rounds`` times at c=512, ``n`` requests a run: the
    medians of the stub-counted tok/s (one, four). On a shared or virtual host one run's figure moves
    by ±20 % (one process: 158k-246k tok/s between runs on the same 16-core host), so a ratio of two
    single runs says as much about the neighbours as about the client; alternating puts both counts
    under the same drift."""
    one: list[float] = []
    four: list[float] = []
    print(f"\nscaling, 1 and 4 processes alternated at c=512 ({rounds} rounds, {n} requests a run):")
    for k in range(rounds):
        for procs, into in ((1, one), (4, four)):
            stub(url, "/reset", post=True)
            r = asyncio.run(client_run(url, 512, n)) if procs == 1 else multi_run(url, 512, n, 4, cores)
            s = stub(url, "/stats")
            if r["failed"]:
                problems.append(f"scaling round {k + 1}, {procs} process(es): {r['failed']} of {n} requests failed")
            into.append(s["tokens_per_s"])
        print(f"  round {k + 1}: 1 process {one[-1]:,.0f}, 4 processes {four[-1]:,.0f} tok/s ({four[-1] / one[-1]:.2f}×)")
    return statistics.median(one), statistics.median(four)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="512,1024,2048,4096")
    ap.add_argument("--requests", type=int, default=4000, help="requests per level (at least 8 × concurrency)")
    ap.add_argument("--guidellm", default=None, help="path of a guidellm 0.8.1 executable (separate venv)")
    ap.add_argument("--guidellm-levels", default="512", help="concurrencies guidellm runs at")
    ap.add_argument("--tokenizer-dir", default=None, help="local HF tokenizer dir guidellm needs for its synthetic data")
    ap.add_argument("--procs", default="2", help="client process counts to measure beside the single process, e.g. 2,4")
    ap.add_argument("--client-cores", default=None, help="cores of the client, e.g. 0-3 (default: all but the stub's)")
    ap.add_argument("--stub-cores", default=None, help="cores of the stub, e.g. 8-15 (default: the last core)")
    ap.add_argument("--stub-workers", type=int, default=1, help="stub processes sharing its port")
    ap.add_argument("--burn", type=int, default=0, help="busy-loop processes on the client's core(s) throughout")
    ap.add_argument("--ab-rounds", type=int, default=2, help="rounds of the hot-path before/after (0: skip)")
    ap.add_argument("--ab-requests", type=int, default=4096, help="requests per run of the hot-path before/after")
    ap.add_argument("--scaling-rounds", type=int, default=0,
                    help="rounds of 1 and 4 processes alternated at c=512 (with 4 client cores): the scaling target is "
                         "judged on the ratio of their medians, not on one pair")
    ap.add_argument("--paced-itl-ms", type=float, default=20.0,
                    help="inter-token delay of the paced stub at c=512 (× c / 512 above): the in-flight target is checked against it")
    a = ap.parse_args()
    # A plain `kill` must stop the stub and the busy-loop processes too: SIGTERM becomes SystemExit,
    # which runs the `finally` clauses below (multiprocessing ends daemon children at exit).
    def _term(*_):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: a second TERM must not break the clean-up
        sys.exit(143)

    signal.signal(signal.SIGTERM, _term)
    levels = [int(x) for x in a.levels.split(",")]
    g_levels = [int(x) for x in a.guidellm_levels.split(",") if x.strip()]
    all_cores = sorted(os.sched_getaffinity(0))
    if len(all_cores) < 2:
        raise SystemExit("needs two cores: client on one, stub on the other")
    stub_cores = _cores(a.stub_cores) if a.stub_cores else {all_cores[-1]}
    client_cores = _cores(a.client_cores) if a.client_cores else set(all_cores) - stub_cores
    procs_list = [int(x) for x in a.procs.split(",") if x.strip()]
    one_core = {min(client_cores)}
    os.sched_setaffinity(0, one_core)
    install_uvloop()
    burners = []
    for _ in range(a.burn):
        import multiprocessing as mp

        b = mp.get_context("spawn").Process(target=_burn, daemon=True)
        b.start()
        os.sched_setaffinity(b.pid, client_cores)
        burners.append(b)
    rows: dict[int, tuple[dict, dict]] = {}
    multi: dict[tuple[int, int], tuple[dict, dict]] = {}
    guide: dict[int, dict] = {}
    paced: dict[tuple[int, int], dict] = {}
    problems: list[str] = []  # a figure measured over failed requests is no figure: exit 1 at the end
    notes: list[str] = []
    ab = scaling = None
    proc, url = start_stub(stub_cores, "--workers", str(a.stub_workers))
    print(f"stub: {a.stub_workers} process(es) on cores {sorted(stub_cores)} ({url}); one client process on core "
          f"{min(client_cores)}, several on cores {sorted(client_cores)}; 256-token prompts, 128 streamed tokens per "
          f"response; {len(all_cores)} cores, load average {os.getloadavg()[0]:.1f} "
          f"({a.burn} busy process(es) on the client cores)")
    try:
        asyncio.run(client_run(url, 64, 500))  # warm-up: connections, caches
        if a.ab_rounds:
            print(f"\none-process hot path, before/after (c=512, {a.ab_requests} requests a run):")
            ab = hot_path_ab(url, 512, a.ab_requests, a.ab_rounds)
            print(f"  median tok/s per client CPU-second: readany() {ab[0]:,.0f}, whole-buffer read {ab[1]:,.0f} "
                  f"({(ab[1] / ab[0] - 1) * 100:+.0f} %)")
        for c in levels:
            n = max(a.requests, 8 * c)
            stub(url, "/reset", post=True)
            r = asyncio.run(client_run(url, c, n))
            s = stub(url, "/stats")
            rows[c] = (r, s)
            if r["failed"]:
                problems.append(f"1 process c={c}: {r['failed']} of {n} requests failed")
            _line("infergap, 1 process,", c, n, r, s)
            print(f"  per client CPU-second: {r['tok_s'] / max(r['cpu'], 1e-9):,.0f} tok/s")
        for k in procs_list:
            for c in levels:
                n = max(a.requests, 8 * c)
                stub(url, "/reset", post=True)
                r = multi_run(url, c, n, k, client_cores)
                s = stub(url, "/stats")
                multi[(k, c)] = (r, s)
                if r["failed"]:
                    problems.append(f"{k} processes c={c}: {r['failed']} of {n} requests failed")
                _line(f"infergap, {k} processes on cores {sorted(client_cores)},", c, n, r, s)
        scaling = scaling_rounds(url, a.scaling_rounds, max(a.requests, 4096), client_cores, problems) \
            if a.scaling_rounds and len(client_cores) >= 4 else None
    finally:
        proc.terminate()
    # In flight as the server sees it, where the server is the limit (as a GPU server is): a
    # paced stub holds each request 64-128 × ITL (lengths spread, as end-of-sequence spreads them:
    # with one length every request ends in the same step), so any slot the client leaves empty shows.
    # The stub's token rate is kept at 512 / --paced-itl-ms whatever c (ITL × c / 512), so the stub is never the
    # limit; the window runs from the c-th arrival (the client's ramp-up excluded) to the last start.
    for c in levels:
        itl = a.paced_itl_ms * max(1.0, c / 512)
        proc, url = start_stub(stub_cores, "--workers", str(a.stub_workers), "--itl-ms", str(itl), "--spread", "0.5")
        try:
            n = 3 * c
            for k in [1] + procs_list[-1:]:
                stub(url, f"/reset?ramp={c}", post=True)
                r = asyncio.run(client_run(url, c, n)) if k == 1 else multi_run(url, c, n, k, client_cores)
                s = stub(url, "/stats")
                paced[(k, c)] = s
                if r["failed"]:
                    problems.append(f"paced stub, {k} process(es) c={c}: {r['failed']} of {n} requests failed")
                _line(f"paced stub ({itl:g} ms/token), {k} process(es),", c, n, r, s, paced=True)
        finally:
            proc.terminate()
    proc, url = start_stub(stub_cores, "--workers", str(a.stub_workers))
    try:
        if a.guidellm:
            tok = a.tokenizer_dir
            if tok is None:
                sys.path.insert(0, str(ROOT / "tests" / "bench"))
                from bench_tiny_models import write_hf_llama

                tok = str(write_hf_llama(Path(tempfile.mkdtemp()) / "tok"))
            for c in g_levels:
                n = max(a.requests, 8 * c)
                stub(url, "/reset", post=True)
                g = guidellm_run(a.guidellm, url, c, n, tok, one_core)
                s = stub(url, "/stats")
                if "error" in g:
                    print(f"\nguidellm c={c}: did not run: {g['error']}")
                    problems.append(f"guidellm c={c} did not run")
                    continue
                guide[c] = {"tok_s": g["tok_s"], "stub": s}
                print(f"\nguidellm c={c} ({n} requests, one process on core {min(client_cores)}): its own figures "
                      f"{g['tok_s']:,.0f} output tok/s, {g['req_s']:,.0f} req/s, {g['in_flight']:.1f} of {c} in flight; "
                      f"stub counted {s['tokens_per_s']:,.0f} tok/s, {s['steady_in_flight']:.1f} in flight")
    finally:
        proc.terminate()
    # Floor: the flag when the server is the limit, and added latency on an idle path (c=1).
    try:
        r = _stub_run(stub_cores, 64, 256, "slow stub", problems, "--itl-ms", "20", "--tokens", "32")
        print(f"\nslow stub (20 ms/token, c=64): {r['tok_s']:,.0f} tok/s, lag p99 {r['lag_p99']:.2f} ms, "
              f"client CPU {r['cpu'] * 100:.0f} %, client-bound: {r['client_bound']} ({'; '.join(r['reasons']) or 'no'})")
        r = _stub_run(stub_cores, 1, 300, "idle path", problems)
        print(f"idle path (c=1, zero-delay stub): TTFT p50 {r['ttft_p50']:.2f} ms, p99 {r['ttft_p99']:.2f} ms; "
              f"event-loop lag p50 {r['lag_p50']:.2f} ms, p99 {r['lag_p99']:.2f} ms")
    finally:
        for b in burners:
            b.terminate()
    summary(levels, rows, multi, guide, paced, procs_list, ab, a.burn, len(all_cores), notes, len(client_cores), scaling)
    if problems:
        raise SystemExit("FAILED: " + "; ".join(problems) + " (the figures above are not valid)")


def summary(levels, rows, multi, guide, paced, procs_list, ab, burn, ncores, notes, client_ncores, scaling=None) -> None:
    """The side-by-side table (stub-counted tok/s, stub-seen in flight vs the target) and the targets
    (scaling: on the medians of :func:`scaling_rounds` when it ran, else on the one pair above)."""
    print(f"\nsummary (streamed tok/s as the zero-delay stub counted them; {burn} busy process(es) on the client "
          f"cores; {ncores} cores):")
    print("  " + " | ".join(["c", "1 process"] + [f"{k} processes" for k in procs_list] + ["guidellm"]))
    for c in levels:
        cells = [str(c)]
        for rs in [rows.get(c)] + [multi.get((k, c)) for k in procs_list]:
            cells.append("–" if rs is None else f"{rs[1]['tokens_per_s']:,.0f}")
        g = guide.get(c)
        cells.append("–" if g is None else f"{g['stub']['tokens_per_s']:,.0f} (its own: {g['tok_s']:,.0f})")
        print("  " + " | ".join(cells))
    if ab is not None:
        print(f"  hot path: {ab[0]:,.0f} → {ab[1]:,.0f} tok/s per client CPU-second ({(ab[1] / ab[0] - 1) * 100:+.0f} %)")
    one = rows.get(512)
    if one is not None:
        best = max([one[1]["tokens_per_s"]] + [multi[(k, 512)][1]["tokens_per_s"] for k in procs_list if (k, 512) in multi])
        print(f"  target ≥ {TARGET_TOK_S:,} streamed tok/s at c=512: 1 process {one[1]['tokens_per_s']:,.0f}, best "
              f"{best:,.0f}: {'met' if best >= TARGET_TOK_S else 'NOT met'}")
    flights = [(k, c, _in_flight(s, c)) for (k, c), s in sorted(paced.items())]
    print("  in flight as the paced stub saw it: " + ", ".join(f"{k} process(es) c={c} {dev * 100:+.1f} %" for k, c, (dev, _) in flights))
    bad = [f"{k} process(es) c={c}" for k, c, (dev, ok) in flights if not ok]
    best = {c: min((abs(dev) for k, cc, (dev, _) in flights if cc == c), default=None) for c in levels}
    print(f"  target in flight within ±{IN_FLIGHT_TOLERANCE * 100:.0f} % (server's view) at every level, "
          f"with the best process count: " + ("met" if best and all(v is not None and v <= IN_FLIGHT_TOLERANCE
                                                                   for v in best.values()) else "NOT met")
          + (f" (outside: {', '.join(bad)})" if bad else ""))
    if scaling is not None or (one is not None and (4, 512) in multi):
        pair = (one[1]["tokens_per_s"], multi[(4, 512)][1]["tokens_per_s"]) if one is not None and (4, 512) in multi else None
        x = scaling[1] / max(scaling[0], 1e-9) if scaling else pair[1] / max(pair[0], 1e-9)
        how = (f"medians of the alternated rounds {scaling[1]:,.0f} / {scaling[0]:,.0f}"
               + (f"; the single pair above: {pair[1] / max(pair[0], 1e-9):.2f}×" if pair else "")) if scaling else "the single pair above"
        verdict = ("met" if x >= TARGET_SCALING else "NOT met") if client_ncores >= 4 else \
            f"not judged: the client processes share {client_ncores} core(s), the target is for one core each"
        print(f"  target 4 processes ≥ {TARGET_SCALING:.0f}× one at c=512: {x:.2f}× ({how}): {verdict}")
    for n in notes:
        print("  " + n)


if __name__ == "__main__":
    main()
