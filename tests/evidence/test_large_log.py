"""A 200 MB log is read streaming: peak memory stays bounded and the findings are the same as
for the short log it repeats."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.evidence.evidence_data import FIX, ROOT

pytestmark = pytest.mark.slow


def test_200MB_log_bounded_memory(tmp_path):
    # one real SGLang decode excerpt and one real NCCL excerpt, repeated to 200 MB, with a cut last line
    unit = (FIX / "sglang-13023-decode-no-graph.log").read_bytes() + (FIX / "nccl-1232-two-nodes.log").read_bytes()
    path = tmp_path / "big.log"
    target = 200 * 1024 * 1024
    with open(path, "wb") as f:
        block = unit * (4 * 1024 * 1024 // len(unit))
        written = 0
        while written < target:
            f.write(block)
            written += len(block)
        f.write(unit[: len(unit) // 3])
    size = path.stat().st_size
    # a fresh interpreter, so the peak RSS measured is this parse's, not the whole test run's
    code = textwrap.dedent(f"""
        import json, resource, sys, time
        from types import SimpleNamespace
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.monotonic()
        from infergap.evidence import EvidenceSnapshot
        from infergap.investigators import engine_log, nccl_log
        import_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        snap = EvidenceSnapshot(None, [{str(path)!r}])
        ctx = SimpleNamespace(snap=snap, server=None)
        found = nccl_log.investigate(ctx) + engine_log.investigate(ctx)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({{"kinds": [p.kind for p in snap.parts], "ids": sorted({{(f.id, f.status.value) for f in found}}),
                           "growth_kB": peak - import_rss, "s": time.monotonic() - t0}}))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    r = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{size / 2**20:.0f} MB in {r['s']:.1f} s, peak RSS growth {r['growth_kB'] / 1024:.1f} MB")
    assert r["growth_kB"] < 64 * 1024, r  # the file is 200 MB; the parse must not hold it
    assert ["engine.cuda_graph", "actionable"] in r["ids"] and ["nccl.transport", "actionable"] in r["ids"]
