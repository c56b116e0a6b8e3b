"""Fleet audit at scale: 1,000 node snapshots (variants of the real host captures, a known fault
injected into a random tenth of them) audited by ``infergap fleet audit --snapshots``'s code path.

Prints the wall time of the audit (snapshot generation not counted), the driver's resident memory
at 10 % and at 100 % of the nodes (a streamed audit keeps only a few KB per node, so the two
differ little), the audit processes' peak memory, and the drift found against the drift injected
(recall and precision over (node, drift key) pairs).

Targets on a 2-core machine: under 60 s for 1,000 nodes, 100 % recall, no false drift, driver
memory growth under 64 KiB per node. Exits 1 when a target is missed or any node could not be
audited.

Run: python benchmarks/fleet.py [--nodes 1000] [--fault-rate 0.1] [--seed 1] [--workers N]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.fleet.fleet_support import FAULTS, drift_keys, load, to_targz  # noqa: E402

#: Share of each real capture among the generated nodes (the 8-GPU reconstruction is ten times
#: larger than the H200 captures, so it is a small class, as a rack of another SKU would be).
MIX = (("h200-2gpu-collect.tar.gz", 0.50), ("h200-1gpu-collect.tar.gz", 0.47), ("seed-8x-rtxpro6000", 0.03))


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def generate(out: Path, nodes: int, fault_rate: float, rng: random.Random) -> dict[str, set[str]]:
    """Write ``nodes`` snapshots into ``out``; return node -> drift keys injected."""
    bases = {name: load(name) for name, _ in MIX}
    names = [n for n, _ in MIX]
    weights = [w for _, w in MIX]
    expected: dict[str, set[str]] = {}
    for i in range(nodes):
        fixture = rng.choices(names, weights)[0]
        files = dict(bases[fixture])
        node = f"node{i:05d}"
        if rng.random() < fault_rate:
            for fault in rng.sample(sorted(FAULTS), len(FAULTS)):
                trial = dict(files)
                try:
                    keys = FAULTS[fault](trial)
                except (AssertionError, KeyError):  # not applicable to this capture (no active measurements)
                    continue
                files, expected[node] = trial, keys
                break
        (out / f"{node}.tar.gz").write_bytes(to_targz(files))
    return expected


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--fault-rate", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=None, help="audit processes (default: the CPUs here)")
    ap.add_argument("--target-s", type=float, default=60.0)
    args = ap.parse_args()

    from infergap.fleet import build_report
    from infergap.fleet.runner import audit_stream, default_workers, expand_snapshots, snapshot_stream

    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="infergap-fleet-bench-") as tmp:
        t0 = time.perf_counter()
        expected = generate(Path(tmp), args.nodes, args.fault_rate, rng)
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
        print(f"generated {args.nodes} snapshots ({size / 2**20:.1f} MiB compressed, {len(expected)} with a fault) "
              f"in {time.perf_counter() - t0:.1f} s")

        samples: dict[str, int] = {}
        done = [0]

        def progress(_d: object) -> None:
            done[0] += 1
            if done[0] == max(1, args.nodes // 10):
                samples["10%"] = _rss_kib()

        workers = default_workers() if args.workers is None else args.workers
        t0 = time.perf_counter()
        digests = audit_stream(snapshot_stream(expand_snapshots(tmp)), workers=workers, progress=progress)
        report = build_report(digests, source={"kind": "snapshots", "snapshots": tmp})
        wall = time.perf_counter() - t0
        samples["100%"] = _rss_kib()

    found = {(n, k) for n, keys in drift_keys(report.to_json()).items() for k in keys}
    want = {(n, k) for n, keys in expected.items() for k in keys}
    hit = found & want
    recall = len(hit) / len(want) if want else 1.0
    precision = len(hit) / len(found) if found else 1.0
    s = report.summary()
    children_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    growth = (samples["100%"] - samples.get("10%", samples["100%"])) / max(1, args.nodes - args.nodes // 10)
    print(f"audited {s['audited']} of {s['nodes']} nodes ({s['failed']} not audited) in {wall:.1f} s with {workers} process(es) "
          f"= {wall / max(1, s['nodes']) * 1000:.1f} ms per node; {s['classes']} classes; {s['drift_items']} drift items")
    print(f"driver RSS: {samples.get('10%', 0) / 1024:.0f} MiB at 10 % of the nodes, {samples['100%'] / 1024:.0f} MiB at 100 % "
          f"({growth:.1f} KiB per node); largest audit process: {children_kib / 1024:.0f} MiB")
    print(f"drift: {len(want)} injected (node, key) pairs, {len(found)} found, {len(hit)} matched: "
          f"recall {recall:.1%}, precision {precision:.1%}")
    for n, k in sorted(want - found)[:10]:
        print(f"  MISSED {n} {k}")
    for n, k in sorted(found - want)[:10]:
        print(f"  FALSE  {n} {k}")
    failures = []
    if wall > args.target_s:
        failures.append(f"wall time {wall:.1f} s > {args.target_s:g} s")
    if recall < 1 or precision < 1:
        failures.append("drift recall or precision below 100 %")
    if s["failed"]:
        failures.append(f"{s['failed']} node(s) not audited")
    if growth > 64:
        failures.append(f"driver memory grows {growth:.0f} KiB per node")
    for f in failures:
        print(f"TARGET MISSED: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
