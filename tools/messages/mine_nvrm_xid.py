"""Write the NVIDIA driver's Xid messages (``NVRM: Xid (PCI:…): N, …``) into ``data/messages/nvrm_xid.yaml``.

Usage: ``python tools/messages/mine_nvrm_xid.py SIGNATURES_YAML TAG [--out FILE]``. The Xid rows are
the ones the project already keeps, with their sources, in ``src/infergap/data/signatures.yaml``
(entries ``xid.*``: code, NVIDIA's mnemonic, meaning, severity, reset, action, from NVIDIA's Xid
catalog https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html); TAG names the
catalog's revision as recorded there. One entry per code: the line the kernel module prints,
``NVRM: Xid (PCI:<bus id>): <code>, <details>``, with the row's meaning, severity and action, feeding
``gpu.xid``. (The driver's own source, open-gpu-kernel-modules, prints the prefix; the per-code
texts live in NVIDIA's catalog, not in a format string.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.messages import common as c  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def rows(doc: dict) -> list[tuple[str, dict]]:
    """(entry id, xid row) of every ``xid`` row of the signature catalog, by code."""
    out = [(e["id"], r) for e in doc.get("signatures", doc.get("entries", [])) or [] for r in e.get("xid") or []]
    return sorted(out, key=lambda x: int(x[1]["code"]))


def mine(doc: dict, src: str) -> list[c.Entry]:
    """One entry per Xid code."""
    out = []
    seen: set[int] = set()
    for eid, r in rows(doc):
        code = int(r["code"])
        if code in seen:
            continue
        seen.add(code)
        out.append(c.Entry(
            id=f"nvrm_xid.xid.{code}", level="error", template=f"NVRM: Xid (PCI:%s): {code}, %s", style="printf",
            where=f"{src} ({eid}, Xid {code})", cls="crash" if r.get("severity") != "P2" else "informational",
            meaning=f"Xid {code} ({r.get('name', '')}): {r.get('meaning', '')}. {r.get('action', '')}".strip(),
            check="gpu.xid", severity=r.get("severity"), more="dmesg -T | grep -E 'NVRM|Xid'; nvidia-smi -q",
            curated=True, name=str(r.get("name", "")), code=code))
    return out


def main(argv: list[str] | None = None) -> int:
    """Read the Xid rows and write the catalog."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("signatures", type=Path)
    ap.add_argument("tag")
    ap.add_argument("--out", type=Path, default=ROOT / "src/infergap/data/messages/nvrm_xid.yaml")
    a = ap.parse_args(argv)
    doc = yaml.safe_load(a.signatures.read_text(encoding="utf-8"))
    entries = mine(doc, "src/infergap/data/signatures.yaml")
    header = {"component": "nvrm_xid", "upstream": {"repo": "NVIDIA Xid catalog (docs.nvidia.com/deploy/xid-errors)",
              "tag": a.tag, "files": ["src/infergap/data/signatures.yaml (xid rows)"]},
              "mined_by": "tools/messages/mine_nvrm_xid.py", "call_sites": len(entries),
              "sites_by_level": {"error_codes": len(entries)}}
    c.write_catalog(a.out, header, entries)
    print(f"{a.out}: {len(entries)} Xid codes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
