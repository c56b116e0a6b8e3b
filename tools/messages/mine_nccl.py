"""Mine NCCL's own messages into ``src/infergap/data/messages/nccl.yaml``.

Usage: ``python tools/messages/mine_nccl.py NCCL_CHECKOUT TAG [--out FILE]`` where NCCL_CHECKOUT is
a clone of https://github.com/NVIDIA/nccl (bare or not) or a directory holding files of ``src/`` at
that release.

What it reads (every ``.cc .h .cu .cuh .cpp`` under ``src/``):

- every ``WARN(fmt, ...)`` call (NCCL prints them as ``host:pid:tid [dev] NCCL WARN <msg>``): all of
  them are warning call sites; those whose format is made of string literals (``PRIu64`` macros and
  ``#name`` stringification folded to ``%lu``/``%s``) become entries, the others are counted only;
- ``INFO(flags, fmt, ...)`` calls whose flags name one of :data:`INFO_FLAGS` and whose format
  states a transport choice, a fallback or a refusal (:data:`INFO_KEEP`);
- the ``ncclResult_t`` texts: the ``case ncclX : return "…"`` lines of ``ncclGetErrorString`` in
  ``src/init.cc``, with the codes of the enum in ``src/nccl.h.in`` (or ``src/nccl.h``).

Classes come from :func:`tools.messages.common.classify`; curated meanings, checks and severities
from ``tools/messages/curated/nccl.yaml``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.messages import common as c  # noqa: E402

COMPONENT, LABEL, REPO = "nccl", "NCCL", "NVIDIA/nccl"
ROOT = Path(__file__).resolve().parents[2]
INFO_FLAGS = ("NCCL_INIT", "NCCL_NET", "NCCL_P2P", "NCCL_SHM", "NCCL_GRAPH", "NCCL_BOOTSTRAP",
              "NCCL_PROXY", "NCCL_NVLS", "NCCL_ENV", "NCCL_ALLOC", "NCCL_REG", "NCCL_ALL")
#: An INFO format is kept when it says which transport was chosen, that something fell back, was
#: disabled, refused, not supported, failed, or was forced by the environment.
INFO_KEEP = re.compile(
    r"fall|disabl|not (be )?(used|support|enabl|availab|found|possible|work)|n't|fail|unable|cannot|refus|"
    r"unsupport|skip|ignor|forc|\bno\b|\bvia\b|\busing\b|\benabled\b|available|NET/Plugin|mismatch|"
    r"instead|retry|timeout|error", re.IGNORECASE)
SUFFIXES = (".cc", ".h", ".cu", ".cuh", ".cpp", ".in")
GENERIC_AREAS = {"transport", "src", "misc", "include", "graph", "device", "plugin", "net"}


def area_of(path: str) -> str:
    """``src/transport/net_ib.cc`` → ``net_ib``; ``src/transport/net_ib/connect.cc`` → ``net_ib``."""
    parts = Path(path).with_suffix("").parts
    stem = parts[-1]
    parent = parts[-2] if len(parts) > 1 else ""
    return parent if parent not in GENERIC_AREAS and parent else stem


def fmt_of(arg: str) -> str | None:
    """Format string of a WARN/INFO format argument; ``#name`` stringification counts as ``%s``."""
    return c.c_string(re.sub(r"(?<![\w\"])#\s*\w+", '"%s"', arg), macro_args=True)


def mine_calls(co: c.Checkout, taken: set[str]) -> tuple[list[c.Entry], dict[str, int]]:
    """Entries of every WARN and kept INFO call, and the counts of sites (warn, warn_dynamic, info)."""
    out: list[c.Entry] = []
    counts = {"warn": 0, "warn_dynamic": 0, "info": 0}
    for rel in co.files("src", SUFFIXES):
        text = co.read(rel)
        if "WARN(" not in text and "INFO(" not in text:
            continue
        for call in c.c_calls(rel, text, ["WARN", "INFO"]):
            entry = _entry(rel, call, counts)
            if entry:
                out.append(entry)
    out = c.dedupe(out)
    for e in out:
        e.id = c.make_id(COMPONENT, e.id, e.template, e.style, taken)
    return out, counts


def _entry(rel: str, call: c.CallSite, counts: dict[str, int]) -> c.Entry | None:
    if call.func == "WARN":
        if rel.endswith("include/debug.h") or not call.args:
            return None
        counts["warn"] += 1
        fmt = fmt_of(call.args[0])
        if fmt is None:
            counts["warn_dynamic"] += 1
            return None
        level = "warn"
    else:
        if len(call.args) < 2 or not any(f in call.args[0] for f in INFO_FLAGS):
            return None
        fmt = fmt_of(call.args[1])
        if fmt is None or not INFO_KEEP.search(fmt):
            return None
        counts["info"] += 1
        level = "info"
    if not fmt.strip():
        return None
    return c.Entry(id=area_of(rel), level=level, template=" ".join(fmt.split()) if "\n" not in fmt.strip() else fmt.strip(), where=f"{rel}:{call.line}",
                   style="printf", cls=c.classify(fmt))


_ENUM = re.compile(r"\b(nccl[A-Z]\w*)\s*=\s*(\d+)")
_CASE = re.compile(r'case\s+(nccl\w+)\s*:\s*return\s+"((?:[^"\\]|\\.)*)"')


def mine_results(co: c.Checkout, taken: set[str]) -> list[c.Entry]:
    """One entry per ``ncclResult_t`` text of ``ncclGetErrorString`` (except ncclSuccess)."""
    header = next((h for h in ("src/nccl.h.in", "src/nccl.h") if h in co.files("src")), None)
    codes = dict(_ENUM.findall(co.read(header))) if header else {}
    text = co.read("src/init.cc")
    start = text.find("ncclGetErrorString(ncclResult_t")
    if start < 0:
        raise ValueError("src/init.cc: ncclGetErrorString not found")
    body = text[start:start + 3000]
    out = []
    for m in _CASE.finditer(body):
        name, msg = m.group(1), c.c_unescape(m.group(2))
        if name == "ncclSuccess":
            continue
        line = c.line_of(text, start + m.start())
        out.append(c.Entry(id=c.make_id(COMPONENT, "result", name, "literal", taken), level="error",
                           template=msg, where=f"src/init.cc:{line}", style="literal",
                           cls=c.classify(msg, "crash"), name=name,
                           code=int(codes[name]) if name in codes else None))
    return out


def main(argv: list[str] | None = None) -> int:
    """Mine, merge curated knowledge, write the catalog; prints a summary and stale curated ids."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout")
    ap.add_argument("tag")
    ap.add_argument("--out", type=Path, default=ROOT / "src/infergap/data/messages/nccl.yaml")
    ap.add_argument("--curated", type=Path, default=ROOT / "tools/messages/curated/nccl.yaml")
    a = ap.parse_args(argv)
    co = c.Checkout(a.checkout, a.tag)
    taken: set[str] = set()
    results = mine_results(co, taken)
    calls, counts = mine_calls(co, taken)
    entries = results + calls
    stale = c.merge_curated(entries, c.load_curated(a.curated), LABEL)
    header = {"component": COMPONENT, "upstream": c.upstream_header(REPO, co), "mined_by": "tools/messages/mine_nccl.py",
              "call_sites": counts["warn"],
              "sites_by_level": {"warn": counts["warn"], "warn_dynamic": counts["warn_dynamic"], "info": counts["info"],
                                 "result_codes": len(results)}}
    c.write_catalog(a.out, header, entries)
    print(f"{a.out}: {len(entries)} messages ({counts['warn']} WARN sites, {counts['warn_dynamic']} without a "
          f"fixed format; {counts['info']} INFO sites kept; {len(results)} result codes)")
    for s in stale:
        print(f"curated id not found (template changed or removed upstream: review): {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
