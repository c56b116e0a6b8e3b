"""Memory: GPU BAR1 / Resizable BAR, transparent huge pages, host memory.

THP: public guidance for inference hosts conflicts (some engines want ``madvise``, some vendors
``never``), so it is reported, not judged (Documentation/admin-guide/mm/transhuge.rst).
"""

from __future__ import annotations

import re

from infergap.facts import GpuFacts
from infergap.findings import Finding, Remedy, Severity, Status
from infergap.investigators.base import Context, evidence, finding, unknown

NAME = "memory"


def bar1(ctx: Context, g: GpuFacts, n_gpus: int) -> Finding:
    """pcie.bar1 for one GPU: a 256 MiB BAR1 (no Resizable BAR) blocks BAR1-based peer access."""
    cid = "pcie.bar1"
    if g.bar1_total_B is None:
        return unknown(cid, f"GPU {g.bdf}: BAR1 size not captured", "Needs NVML or nvidia-smi -q.", subject=g.bdf)
    gib = g.bar1_total_B / 2**30
    evs = evidence((g.src("bar1_total_B"), f"BAR1 total {gib:g} GiB"))
    if g.bar1_total_B <= 256 * 2**20:
        sev = Severity.P1 if n_gpus > 1 else Severity.P2
        return finding(cid, Status.actionable, f"GPU {g.bdf}: BAR1 is only {g.bar1_total_B // 2**20} MiB (no Resizable BAR)",
                       severity=sev, subject=g.bdf, evidence_=evs, expected_value=">= the GPU's memory size",
                       impact="A 256 MiB BAR1 blocks BAR1-based peer access and forces staging through host memory.",
                       remedy=Remedy(note="Enable 'Above 4G decoding' and 'Resizable BAR' in the BIOS."), references=["NVML nvmlDeviceGetBAR1MemoryInfo"])
    return finding(cid, Status.ok, f"GPU {g.bdf}: BAR1 {gib:g} GiB", subject=g.bdf, evidence_=evs)


def _thp(ctx: Context) -> Finding:
    en = ctx.facts.value("/sys/kernel/mm/transparent_hugepage/enabled")
    df = ctx.facts.value("/sys/kernel/mm/transparent_hugepage/defrag")
    if en is None:
        return unknown("mem.thp", "Transparent huge pages: not captured", "Needs /sys/kernel/mm/transparent_hugepage/enabled.")
    sel = re.search(r"\[(\w[\w+]*)\]", en.value)
    mode = sel.group(1) if sel else en.value
    return finding("mem.thp", Status.ok, f"Transparent huge pages: {mode}", evidence_=evidence(en, df),
                   impact="Reported only: public guidance for inference hosts conflicts (madvise vs never), and engines allocate GPU memory outside THP.")


def _host_mem(ctx: Context) -> Finding:
    m = ctx.facts.meminfo()
    if m is None:
        return unknown("mem.host", "Host memory: not captured", "Needs cat /proc/meminfo.")
    tot = m.get("MemTotal")
    if not tot:
        return unknown("mem.host", "Host memory unreadable", "/proc/meminfo has no MemTotal line; needs cat /proc/meminfo.",
                       evidence_=evidence(("files/proc/meminfo", f"{len(m)} fields, no MemTotal")))
    gpu_mem = sum(g.memory_total_B or 0 for g in ctx.facts.gpus())
    txt = f"{tot / 2**30:.0f} GiB host memory" + (f" for {gpu_mem / 2**30:.0f} GiB of GPU memory" if gpu_mem else "")
    return finding("mem.host", Status.ok, txt, evidence_=evidence(("files/proc/meminfo", f"MemTotal {tot // 1024} kB, " + (f"SwapTotal {m['SwapTotal'] // 1024} kB" if "SwapTotal" in m else "no SwapTotal line"))),
                   details={"host_B": tot, "gpu_B": gpu_mem})


def investigate(ctx: Context) -> list[Finding]:
    """pcie.bar1 per GPU, mem.thp, mem.host."""
    gpus = ctx.facts.gpus()
    out = [bar1(ctx, g, len(gpus)) for g in gpus]
    return out + [_thp(ctx), _host_mem(ctx)]
