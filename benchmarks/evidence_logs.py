"""Throughput and memory of reading a large pasted log: recognition (scan), NCCL facts, engine facts.

Builds a log of ``--mb`` MB from the real excerpts in tests/fixtures/evidence (an SGLang decode
excerpt and an NCCL excerpt, repeated) in a temporary directory and prints MB/s per stage and
the peak RSS growth. Usage: ``PYTHONPATH=src python benchmarks/evidence_logs.py --mb 50``.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

FIX = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "evidence"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=50)
    args = ap.parse_args()
    from infergap.parsers.engine_log import parse_engine_log
    from infergap.parsers.nccl import parse_nccl_log
    from infergap.evidence.recognize import scan_file

    unit = (FIX / "sglang-13023-decode-no-graph.log").read_bytes() + (FIX / "nccl-1232-two-nodes.log").read_bytes()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "big.log"
        block = unit * max(1, (1 << 22) // len(unit))
        with open(path, "wb") as f:
            n = 0
            while n < args.mb * 2**20:
                f.write(block)
                n += len(block)
        mb = path.stat().st_size / 2**20
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        parts, _ = scan_file(path)
        t1 = time.perf_counter()
        nf = parse_nccl_log(parts[0].iter_lines())
        t2 = time.perf_counter()
        ef = parse_engine_log(parts[0].iter_lines())
        t3 = time.perf_counter()
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"log {mb:.0f} MB, {nf.lines} lines, parts {[p.kind for p in parts]}")
    print(f"scan    {mb / (t1 - t0):6.1f} MB/s  ({t1 - t0:.1f} s)")
    print(f"nccl    {mb / (t2 - t1):6.1f} MB/s  ({t2 - t1:.1f} s)  {sum(nf.transports.values())} channel lines")
    print(f"engine  {mb / (t3 - t2):6.1f} MB/s  ({t3 - t2:.1f} s)  {ef.decode_batches} decode batches")
    print(f"peak RSS growth {(rss1 - rss0) / 1024:.1f} MB")


if __name__ == "__main__":
    main()
