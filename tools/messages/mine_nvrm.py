"""Mine the NVIDIA kernel module's own error and warning messages (``NVRM: …`` in the kernel log)
into ``src/infergap/data/messages/nvrm.yaml``.

Usage: ``python tools/messages/mine_nvrm.py CHECKOUT TAG [--out FILE]`` where CHECKOUT is a clone of
https://github.com/NVIDIA/open-gpu-kernel-modules (the open kernel modules; the proprietary ones
print the same texts) and TAG a driver release (``595.45.04``). It reads every
``nv_printf(NV_DBG_ERRORS | NV_DBG_WARNINGS, "…")`` and ``NV_DEV_PRINTF(NV_DBG_…, nv, "…")`` call of
``kernel-open/nvidia`` and of the resource manager's Unix layer (``src/nvidia/arch/nvalloc/unix``):
``NVRM: The NVIDIA probe routine was not called for %d device(s).``, ``RmInitAdapter failed!
(0x%x:0x%x:%d)``, ``rm_init_adapter failed, device minor number %d`` … The Xid lines are a catalog
of their own (``mine_nvrm_xid.py``). Curated knowledge: ``tools/messages/curated/nvrm.yaml``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.messages import common as c  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
REPO = "NVIDIA/open-gpu-kernel-modules"
COMPONENT, LABEL = "nvrm", "NVIDIA driver"
DIRS = ("kernel-open/nvidia", "src/nvidia/arch/nvalloc/unix/src")
LEVEL = {"NV_DBG_ERRORS": "error", "NV_DBG_WARNINGS": "warn"}


def _entry(rel: str, call: c.CallSite) -> c.Entry | None:
    """The entry of one print call at an error or warning level; None for other levels or a
    format built at run time."""
    args = call.args[1:] if call.func == "nv_printf" else call.args[2:] if call.func == "NV_DEV_PRINTF" else []
    level = LEVEL.get(call.args[0].strip()) if call.args else None
    if not args or level is None:
        return None
    template = c.c_string(args[0])
    if not template or len(template.strip()) < 8:
        return None
    template = template.rstrip("\n")
    return c.Entry(id=Path(rel).stem, level=level, template=template, where=f"{rel}:{call.line}",
                   cls=c.classify(template))


def mine(co: c.Checkout) -> tuple[list[c.Entry], int]:
    """Entries of every error/warning print call, and the number of such call sites."""
    out: list[c.Entry] = []
    for d in DIRS:
        for rel in co.files(d, (".c",)):
            text = co.read(rel)
            if "NV_DBG_ERRORS" not in text and "NV_DBG_WARNINGS" not in text:
                continue
            out += [e for call in c.c_calls(rel, text, ["nv_printf", "NV_DEV_PRINTF"]) if (e := _entry(rel, call))]
    sites = len(out)
    out = c.dedupe(out)
    taken: set[str] = set()
    for e in out:
        e.id = c.make_id(COMPONENT, e.id, e.template, e.style, taken)
    return out, sites


def main(argv: list[str] | None = None) -> int:
    """Mine, merge curated knowledge, write the catalog; prints a summary and stale curated ids."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout")
    ap.add_argument("tag")
    ap.add_argument("--out", type=Path, default=ROOT / "src/infergap/data/messages/nvrm.yaml")
    ap.add_argument("--curated", type=Path, default=ROOT / "tools/messages/curated/nvrm.yaml")
    a = ap.parse_args(argv)
    co = c.Checkout(a.checkout, a.tag)
    entries, sites = mine(co)
    stale = c.merge_curated(entries, c.load_curated(a.curated), LABEL)
    header = {"component": COMPONENT, "upstream": c.upstream_header(REPO, co), "mined_by": "tools/messages/mine_nvrm.py",
              "call_sites": sites, "sites_by_level": c.sites_by_level(entries)}
    c.write_catalog(a.out, header, entries)
    print(f"{a.out}: {len(entries)} messages from {sites} call sites")
    for s in stale:
        print(f"curated id not found (template changed or removed upstream: review): {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
