"""Write nvidia-smi's error texts into ``src/infergap/data/messages/nvidia_smi.yaml``.

Usage: ``python tools/messages/mine_nvidia_smi.py [--out FILE]``. nvidia-smi ships closed source
with the NVIDIA driver, so there is no upstream tag to read its format strings from: the texts
are kept in ``tools/messages/curated/nvidia_smi.yaml`` as nvidia-smi prints them, each with a public
report that shows the line (``where``), and this script turns them into a catalog the same way the
mining scripts do (patterns from :func:`tools.messages.common.template_pattern`). A new driver that
prints a text differently is one edit of that file and a re-run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.messages import common as c  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {"template", "level", "where", "meaning", "class", "check", "severity", "more"}


def entries(texts: dict) -> list[c.Entry]:
    """Catalog entries of the curated texts (id → fields); ValueError on a missing or unknown field."""
    out = []
    for key, val in texts.items():
        val = val or {}
        bad, missing = set(val) - FIELDS, {"template", "level", "where", "meaning", "class"} - set(val)
        if bad or missing or not key.startswith("nvidia_smi."):
            raise ValueError(f"{key}: unknown {sorted(bad)} / missing {sorted(missing)} field(s), or id not nvidia_smi.*")
        out.append(c.Entry(id=key, level=val["level"], template=val["template"], where=val["where"], cls=val["class"],
                           meaning=val["meaning"], check=val.get("check"), severity=val.get("severity"),
                           more=val.get("more"), curated=True))
    return out


def main(argv: list[str] | None = None) -> int:
    """Read the curated texts, write the catalog."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--texts", type=Path, default=ROOT / "tools/messages/curated/nvidia_smi.yaml")
    ap.add_argument("--out", type=Path, default=ROOT / "src/infergap/data/messages/nvidia_smi.yaml")
    a = ap.parse_args(argv)
    es = entries(yaml.safe_load(a.texts.read_text(encoding="utf-8")) or {})
    header = {"component": "nvidia_smi",
              "upstream": {"repo": "NVIDIA driver: nvidia-smi (closed source)", "tag": "texts as printed in public reports"},
              "mined_by": "tools/messages/mine_nvidia_smi.py", "call_sites": len(es), "sites_by_level": c.sites_by_level(es)}
    c.write_catalog(a.out, header, es)
    print(f"{a.out}: {len(es)} messages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
