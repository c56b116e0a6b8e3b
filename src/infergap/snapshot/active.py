"""Active probes (``infergap audit --active``, ``infergap collect --active``): measurements that
use the GPUs, off by default.

- Host<->device copy bandwidth, pinned and pageable, and device memory bandwidth (a device-to-device
  copy, counting bytes read plus written), per GPU. Every timing uses CUDA events recorded on the
  device that did the work (``torch.cuda.Event`` created and recorded under ``torch.cuda.device(i)``),
  after warm-up, median of repeats.
- NCCL all-reduce over all GPUs (one process per GPU, ``torch.distributed``), message sizes 8 KiB to
  256 MiB; bus bandwidth = algorithm bandwidth x 2(n-1)/n, the nccl-tests definition
  (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md). The NCCL_DEBUG=INFO log of
  that run is kept as evidence (``nccl_log``).

They run in a subprocess of the serving environment's Python (``python3`` on PATH, or
``INFERGAP_PYTHON``), each with a timeout; the result is JSON (``probes/active.json``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from typing import Any

ACTIVE_TIMEOUT_S = 240.0

SCRIPT = r'''
import json, os, statistics, sys
import torch

def timed(dev, fn, reps):
    """Median milliseconds of fn() over reps, timed by CUDA events on device `dev`."""
    out = []
    with torch.cuda.device(dev):
        for _ in range(3):
            fn()
        torch.cuda.synchronize(dev)
        for _ in range(reps):
            s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
            s.record(); fn(); e.record(); e.synchronize()
            out.append(s.elapsed_time(e))
    return statistics.median(out)

def copies(dev, nbytes, reps):
    r = {"device": dev, "name": torch.cuda.get_device_name(dev), "bytes": nbytes, "repeats": reps}
    with torch.cuda.device(dev):
        d = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{dev}")
        d2 = torch.empty_like(d)
        hp = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        hq = torch.empty(nbytes, dtype=torch.uint8)
        hq.fill_(1); hp.fill_(1)
        ms = timed(dev, lambda: d.copy_(hp, non_blocking=True), reps); r["h2d_pinned_GBps"] = nbytes / ms / 1e6
        ms = timed(dev, lambda: hp.copy_(d, non_blocking=True), reps); r["d2h_pinned_GBps"] = nbytes / ms / 1e6
        ms = timed(dev, lambda: d.copy_(hq), reps); r["h2d_pageable_GBps"] = nbytes / ms / 1e6
        ms = timed(dev, lambda: d2.copy_(d), reps); r["d2d_copy_GBps"] = 2 * nbytes / ms / 1e6  # read + write
        del d, d2, hp, hq
        torch.cuda.empty_cache()
    return r

def allreduce_worker(rank, world, port, sizes, q):
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device(f"cuda:{rank}"))
    res = []
    for nbytes in sizes:
        x = torch.ones(nbytes // 2, dtype=torch.bfloat16, device=f"cuda:{rank}")
        reps = 50 if nbytes <= 1 << 20 else 20
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        dist.barrier(); torch.cuda.synchronize()
        s.record()
        for _ in range(reps):
            dist.all_reduce(x)
        e.record(); e.synchronize()
        ms = s.elapsed_time(e) / reps
        algbw = nbytes / ms / 1e6
        res.append({"bytes": nbytes, "time_us": ms * 1000, "algbw_GBps": algbw, "busbw_GBps": algbw * 2 * (world - 1) / world})
    ok = float(x[0].item()) > 0
    if rank == 0:
        q.put({"world": world, "sizes": res, "result_ok": ok})
    dist.destroy_process_group()

if __name__ == "__main__":
    cfg = json.loads(sys.argv[1])
    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": torch.cuda.device_count(), "copies": [], "allreduce": None}
    for i in range(out["gpus"]):
        out["copies"].append(copies(i, cfg["copy_bytes"], cfg["repeats"]))
    if out["gpus"] >= 2:
        import socket
        import torch.multiprocessing as mp
        sock = socket.socket(); sock.bind(("127.0.0.1", 0)); port = sock.getsockname()[1]; sock.close()
        ctx = mp.get_context("spawn"); q = ctx.Queue()
        procs = [ctx.Process(target=allreduce_worker, args=(r, out["gpus"], port, cfg["sizes"], q)) for r in range(out["gpus"])]
        for p in procs: p.start()
        try:
            out["allreduce"] = q.get(timeout=cfg["allreduce_timeout_s"])
        except Exception as e:
            out["allreduce"] = {"error": repr(e)}
        for p in procs: p.join(timeout=30)
    print("INFERGAP_ACTIVE " + json.dumps(out))
'''


def active_probe(timeout_s: float = ACTIVE_TIMEOUT_S, copy_bytes: int = 1 << 30, repeats: int = 20) -> dict[str, Any]:
    """Run the active GPU measurements in the serving environment's Python.

    Returns ``{"available": bool, "copies": [...], "allreduce": {...} | None, "nccl_log": str,
    "error"?: str}``. Bandwidths in GB/s (10^9 bytes per second). Never raises: no torch, no GPU
    or a timeout give ``available: false`` with the reason.
    """
    python = os.environ.get("INFERGAP_PYTHON") or shutil.which("python3") or "python3"
    sizes = [1 << k for k in range(13, 29, 3)]  # 8 KiB .. 256 MiB
    cfg = json.dumps({"copy_bytes": copy_bytes, "repeats": repeats, "sizes": sizes, "allreduce_timeout_s": timeout_s * 0.6})
    with tempfile.TemporaryDirectory(prefix="infergap-active-") as tmp:
        script = os.path.join(tmp, "active.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        env = {**os.environ, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": os.path.join(tmp, "nccl.%h.%p.log")}
        t0 = time.monotonic()
        try:
            p = subprocess.run([python, script, cfg], capture_output=True, text=True, timeout=timeout_s, env=env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return {"available": False, "error": f"active probes timed out after {timeout_s:g} s"}
        except OSError as e:
            return {"available": False, "error": f"could not run {python}: {e.strerror}"}
        logs = sorted(f for f in os.listdir(tmp) if f.startswith("nccl."))
        nccl_log = "".join(open(os.path.join(tmp, f), errors="replace").read() for f in logs)
    line = next((l for l in p.stdout.splitlines() if l.startswith("INFERGAP_ACTIVE ")), None)
    if p.returncode != 0 or line is None:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"available": False, "error": f"active probes failed (rc {p.returncode}): {tail[0][:300]}", "nccl_log": nccl_log}
    data = json.loads(line[len("INFERGAP_ACTIVE "):])
    data.update(available=True, duration_s=round(time.monotonic() - t0, 2), nccl_log=nccl_log)
    return data
