"""Mine Ray's Python messages (object store, /dev/shm, GPU detection, memory) into ``data/messages/ray.yaml``.

Usage: ``python tools/messages/mine_ray.py SITE_PACKAGES VERSION [--out FILE]``: SITE_PACKAGES holds
an installed ``ray`` (its Python sources are those of https://github.com/ray-project/ray at
``ray-<VERSION>``, under ``python/ray/``); a directory with ``ray/`` at its root works the same.

Every logger call and ``warnings.warn`` (warning, error, critical) under ``ray/`` (the libraries of
:data:`SKIP` left out) is a call site, kept when it concerns :data:`TOPIC`; ``raise X("…")``
messages are kept, and counted, when they concern it too (``logs_on_topic``, ``raises_on_topic``). Selection and
classes as in ``tools/messages/mine_torch_distributed.py``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.messages import common as c  # noqa: E402
from tools.messages.mine_torch_distributed import mine  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TOPIC = re.compile(r"object.?store|plasma|/dev/shm|shared memory|\bshm\b|spill|gpu|cuda|nvidia|accelerator|"
                   r"memory|oom|raylet|num_gpus|resource|placement group|nccl|collective|driver", re.I)
#: Libraries on top of Ray core (data, training, tuning, RL, serving, dashboards) are left out: the
#: catalog is about the cluster a serving engine runs on (object store, GPUs, placement, collectives).
SKIP = re.compile(r"^ray/(rllib|tune|data|train|air|serve|dashboard|workflow|llm|_private/thirdparty|thirdparty_files|"
                  r"autoscaler/_private/(aws|gcp|azure|kuberay|vsphere|aliyun|local)|util/(dask|spark|joblib|multiprocessing))/")


def main(argv: list[str] | None = None) -> int:
    """Mine, merge curated knowledge, write the catalog."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source")
    ap.add_argument("version")
    ap.add_argument("--out", type=Path, default=ROOT / "src/infergap/data/messages/ray.yaml")
    ap.add_argument("--curated", type=Path, default=ROOT / "tools/messages/curated/ray.yaml")
    a = ap.parse_args(argv)
    co = c.Checkout(a.source, f"ray-{a.version}")
    entries, counts = mine(co, "ray", "ray", TOPIC, topic_logs=True, skip=SKIP)
    stale = c.merge_curated(entries, c.load_curated(a.curated), "Ray")
    header = {"component": "ray", "upstream": c.upstream_header("ray-project/ray", co, ["python/ray/**.py"]),
              "mined_by": "tools/messages/mine_ray.py",
              "call_sites": counts["fatal"] + counts["error"] + counts["warn"] + counts["raises_on_topic"],
              "sites_by_level": counts}
    c.write_catalog(a.out, header, entries)
    print(f"{a.out}: {len(entries)} messages ({header['call_sites']} warning/error call sites)")
    for s in stale:
        print(f"curated id not found (review): {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
