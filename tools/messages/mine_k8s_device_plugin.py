"""Mine the NVIDIA Kubernetes device plugin's log messages into ``data/messages/k8s_device_plugin.yaml``.

Usage: ``python tools/messages/mine_k8s_device_plugin.py CHECKOUT TAG [--out FILE]``, CHECKOUT a
clone of https://github.com/NVIDIA/k8s-device-plugin. Selection rules: :mod:`tools.messages.gomine`;
curated knowledge: ``tools/messages/curated/k8s_device_plugin.yaml``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.messages import common as c  # noqa: E402
from tools.messages.gomine import mine  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
COMPONENT, LABEL, REPO = "k8s_device_plugin", "NVIDIA device plugin", "NVIDIA/k8s-device-plugin"


def main(argv: list[str] | None = None, component: str = COMPONENT, label: str = LABEL, repo: str = REPO,
         script: str = "tools/messages/mine_k8s_device_plugin.py") -> int:
    """Mine, merge curated knowledge, write the catalog."""
    import argparse

    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("checkout")
    ap.add_argument("tag")
    ap.add_argument("--out", type=Path, default=ROOT / f"src/infergap/data/messages/{component}.yaml")
    ap.add_argument("--curated", type=Path, default=ROOT / f"tools/messages/curated/{component}.yaml")
    a = ap.parse_args(argv)
    co = c.Checkout(a.checkout, a.tag)
    entries, counts = mine(co, component)
    stale = c.merge_curated(entries, c.load_curated(a.curated), label)
    header = {"component": component, "upstream": c.upstream_header(repo, co), "mined_by": script,
              "call_sites": counts["fatal"] + counts["error"] + counts["warn"] + counts["error_values"], "sites_by_level": counts}
    c.write_catalog(a.out, header, entries)
    print(f"{a.out}: {len(entries)} messages ({header['call_sites']} warning/error call sites)")
    for s in stale:
        print(f"curated id not found (review): {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
