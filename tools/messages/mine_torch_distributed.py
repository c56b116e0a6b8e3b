"""Mine PyTorch distributed's (c10d) Python messages into ``data/messages/torch_distributed.yaml``.

Usage: ``python tools/messages/mine_torch_distributed.py SITE_PACKAGES VERSION [--out FILE]``:
SITE_PACKAGES holds an installed ``torch`` (its ``torch/distributed/`` Python sources are the
upstream files of https://github.com/pytorch/pytorch at ``v<VERSION>``); a clone of the repository
works too (``torch/distributed/`` at its root).

Reads every logger call (``logger.warning/error/exception/critical``, ``warnings.warn``) and every
``raise X("…")`` with a literal, %-style, ``.format`` or f-string message under ``torch/distributed/``
(tests left out). Warnings and errors are call sites; raises are kept when they concern the
field's topics (:data:`TOPIC`: NCCL, process groups, ranks, timeouts, stores, devices, backends),
and those count as call sites too.
The C++ side of ProcessGroupNCCL (the watchdog's timeout texts) lives in ``.cpp`` files a wheel does
not ship; it is not read here.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.messages import common as c  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TOPIC = re.compile(r"nccl|gloo|process ?group|\brank|world.?size|timeout|timed out|store|backend|device|cuda|gpu|"
                   r"socket|port|address|barrier|collective|rendezvous|heartbeat|watchdog|abort|shm|memory", re.I)


def mine(co: c.Checkout, component: str = "torch_distributed", under: str = "torch/distributed",
         topic: re.Pattern[str] = TOPIC, topic_logs: bool = False,
         skip: re.Pattern[str] | None = None) -> tuple[list[c.Entry], dict[str, int]]:
    """Entries and site counts of the Python messages under ``under``: raises kept on ``topic``;
    with ``topic_logs`` logger calls too (all counted as sites); files matching ``skip`` left out."""
    counts = {"fatal": 0, "error": 0, "warn": 0, "info": 0, "raises": 0, "raises_on_topic": 0, "logs_on_topic": 0}
    out: list[c.Entry] = []
    for rel in co.files(under, (".py",)):
        if "/test" in rel or "/_tools/" in rel or "/tests/" in rel or (skip is not None and skip.search(rel)):
            continue
        for pm in c.python_messages(co.read(rel), raises=True):
            if pm.func == "raise":
                counts["raises"] += 1
                if not topic.search(pm.template):
                    continue
                counts["raises_on_topic"] += 1
            elif pm.level == "info":
                continue
            else:
                counts[pm.level] += 1
                if topic_logs and not topic.search(pm.template):
                    continue
                counts["logs_on_topic"] += 1
            area = Path(rel).parent.name if Path(rel).stem == "__init__" else Path(rel).stem
            out.append(c.Entry(id=area, level=pm.level, template=pm.template, where=f"{rel}:{pm.line}",
                               style=pm.style, cls=c.classify(pm.template)))
    out = c.dedupe(out)
    taken: set[str] = set()
    for e in out:
        e.id = c.make_id(component, e.id, e.template, e.style, taken)
    return out, counts


def main(argv: list[str] | None = None) -> int:
    """Mine, merge curated knowledge, write the catalog."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source")
    ap.add_argument("version")
    ap.add_argument("--out", type=Path, default=ROOT / "src/infergap/data/messages/torch_distributed.yaml")
    ap.add_argument("--curated", type=Path, default=ROOT / "tools/messages/curated/torch_distributed.yaml")
    a = ap.parse_args(argv)
    co = c.Checkout(a.source, f"v{a.version}")
    entries, counts = mine(co)
    stale = c.merge_curated(entries, c.load_curated(a.curated), "PyTorch distributed")
    header = {"component": "torch_distributed", "upstream": c.upstream_header("pytorch/pytorch", co, ["torch/distributed/**.py"]),
              "mined_by": "tools/messages/mine_torch_distributed.py",
              "call_sites": counts["fatal"] + counts["error"] + counts["warn"] + counts["raises_on_topic"],
              "sites_by_level": counts}
    c.write_catalog(a.out, header, entries)
    print(f"{a.out}: {len(entries)} messages ({header['call_sites']} warning/error call sites, {counts['raises']} raises read)")
    for s in stale:
        print(f"curated id not found (review): {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
