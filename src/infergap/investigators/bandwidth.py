"""Measured bandwidths (from ``--active`` probes): host<->device copies against the PCIe link,
device memory against the datasheet, NCCL all-reduce bus bandwidth against the link.

Reference figures:
- PCIe per direction, x16: the table in ``data/pcie.yaml`` (gen4 31.5, gen5 63.0 GB/s: GT/s x lanes x
  128/130 / 8, PCIe Base Specification); pinned copies reach ~80-90 % of it (this project's H200 measurement:
  55.5 GB/s on gen5 x16 = 88 %). Below 60 % points at the link, the IOMMU or NUMA placement.
- Device memory: the datasheet peak of ``data/gpus.yaml`` (H200 4.8 TB/s). A copy reaches ~85-90 % (H200 measured 4.2-4.3 TB/s);
  below 70 % is flagged.
- Pageable copies go through a staging buffer and are expected to be several times slower.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infergap import checks
from infergap.findings import Finding, FixKind, Remedy, Severity, Status
from infergap.gpudata import datasheet_bandwidth_TBps, pcie_link_GBps, sku
from infergap.investigators.base import Context, evidence, finding, unknown

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.parsers.nvbandwidth import NvbandwidthRun

NAME = "bandwidth"
#: The check this investigator writes the measured device memory copy into, and the detail keys
#: of that finding that other stages read (the plan's ``gpu.measured_bw_GBps``, the fleet's
#: per-node measurements): the figure in GB/s counting read + write, and the datasheet peak in TB/s.
MEMORY_BANDWIDTH = "gpu.memory_bandwidth"
MEASURED_GBPS = "measured_GBps"
DATASHEET_TBPS = "datasheet_TBps"
H2D_OK = checks.threshold("pcie.h2d_bandwidth", "min_fraction_of_link")
MEM_OK = checks.threshold("gpu.memory_bandwidth", "min_fraction_of_datasheet")



def _pasted_runs(ctx: Context) -> list[Finding]:
    """``nccl.allreduce_bandwidth`` of each pasted nccl-tests run: P0 when a row counts wrong
    values or values out of bounds (corrupted results), ok with the best busbw when every row
    with a ``#wrong`` column is 0; unknown when the output has no such column."""
    out = []
    for part, run in ctx.facts.nccl_tests_runs():
        best = run.best
        if best is None:
            continue
        where = f"{len(run.ranks)} rank(s) on {len(run.hosts)} host(s)" if run.ranks else "ranks not listed"
        evs = evidence((part.label, f"best busbw {best[1]:g} GB/s at {best[0] >> 20} MiB ({len(run.rows)} sizes, {where})"),
                       (part.label, f"Avg bus bandwidth {run.avg_busbw_GBps:g} GB/s") if run.avg_busbw_GBps is not None else None)
        bad = (run.wrong or 0) + (run.out_of_bounds or 0)
        if bad:
            out.append(finding("nccl.allreduce_bandwidth", Status.actionable, subject=part.label, severity=Severity.P0,
                               title=f"nccl-tests reports {bad} wrong or out-of-bounds value(s): the collective returned corrupted data",
                               evidence_=evs + evidence((part.label, f"#wrong total {run.wrong}, out of bounds {run.out_of_bounds}")), expected_value="#wrong 0 in every row",
                               impact="A collective that returns wrong data corrupts every tensor-parallel step; bandwidth figures of such a run mean nothing.",
                               remedy=Remedy(commands=["NCCL_P2P_DISABLE=1 ./all_reduce_perf -b 8 -e 1G -f 2 -g <n>   # wrong only with P2P: the PCIe path (ACS, IOMMU, a P2P-patched driver)",
                                                       "sudo dmesg -T | grep -E 'NVRM|Xid|AER'"])))
        elif run.wrong is not None:
            out.append(finding("nccl.allreduce_bandwidth", Status.ok, subject=part.label,
                               title=f"nccl-tests: correct results, best busbw {best[1]:g} GB/s", evidence_=evs))
        else:
            out.append(finding("nccl.allreduce_bandwidth", Status.unknown, subject=part.label, title="nccl-tests output without a #wrong column",
                               evidence_=evs, impact="The result check is not in this output (an old nccl-tests prints an error magnitude instead); run a current nccl-tests with -c 1."))
    return out


def _gpu_link(ctx: Context, run: NvbandwidthRun, i: int) -> tuple[float | None, str]:
    """(GB/s per direction, how it is known) of the host link of device ``i`` of an nvbandwidth
    run: the GPU's maximum link from the host facts when its PCI address is among them, else the
    PCIe generation of its datasheet (x16, ``data/gpus.yaml``) by the name nvbandwidth printed."""
    dom, _, rest = (run.bus.get(i) or "").partition(":")
    if rest:  # "00000000:99:00" -> "0000:99:00.0" (nvbandwidth prints no function)
        bdf = f"{int(dom, 16):04x}:{rest.lower()}.0"
        g = next((g for g in ctx.facts.gpus() if g.bdf == bdf), None)
        if g is not None and g.pcie_gen_max:
            return pcie_link_GBps(g.pcie_gen_max, g.pcie_width_max or 16), f"gen{g.pcie_gen_max} x{g.pcie_width_max or 16} of {g.bdf}"
    s = sku(run.devices.get(i))
    if s is not None and s.pcie_gen:
        return pcie_link_GBps(s.pcie_gen), f"gen{s.pcie_gen} x16 of the {s.label} datasheet"
    return None, ""


def _pasted_h2d(ctx: Context) -> list[Finding]:
    """``pcie.h2d_bandwidth`` of each pasted ``nvbandwidth`` run with a unidirectional
    host-to-device test: a GPU below ``min_fraction_of_link`` of its host link is actionable, ok
    when every GPU reaches it, unknown when no GPU's link is known (the paste names none)."""
    out = []
    for part, run in ctx.facts.nvbandwidth_runs():
        for test in sorted(t for t in run.tests if t.startswith("host_to_device_memcpy_")):
            figs = run.per_gpu(test)
            links = {i: _gpu_link(ctx, run, i) for i in figs}
            judged = {i: figs[i] / links[i][0] for i in figs if links[i][0]}
            low = sorted(i for i, f in judged.items() if f < H2D_OK)
            shown = low or sorted(judged) or sorted(figs)
            evs = evidence(*((part.label, f"{test} GPU {i}: {figs[i]:g} GB/s"
                              + (f" = {judged[i]:.0%} of {links[i][0]:.1f} GB/s ({links[i][1]})" if i in judged else "")) for i in shown[:8]))
            if not judged:
                out.append(finding("pcie.h2d_bandwidth", Status.unknown, subject=part.label, evidence_=evs,
                                   title=f"nvbandwidth {test}: {min(figs.values()):g}-{max(figs.values()):g} GB/s; the PCIe link it should reach is not known",
                                   impact="Judging the copy needs the GPU's link: paste nvbandwidth's Device lines (the GPU's name and address) or nvidia-smi -q (GPU Link Info)."))
            elif low:
                out.append(finding("pcie.h2d_bandwidth", Status.actionable, subject=part.label, evidence_=evs, expected_value=f">= {H2D_OK:.0%} of the host link",
                                   title=f"nvbandwidth {test}: {len(low)} of {len(figs)} GPU(s) copy from host memory below {H2D_OK:.0%} of their PCIe link",
                                   impact="Weight loading, KV offload and CPU-GPU transfers run below what the link carries: check the link width and speed "
                                          "(pcie.link), the IOMMU mode, MaxReadReq and the NUMA node of the copying thread.",
                                   remedy=Remedy(commands=["nvidia-smi -q -d PCI   # Link Width and PCIe Generation: Current against Max",
                                                           "numactl --cpunodebind=<GPU's node> --membind=<GPU's node> ./nvbandwidth -t host_to_device_memcpy_ce"])))
            else:
                out.append(finding("pcie.h2d_bandwidth", Status.ok, subject=part.label, evidence_=evs, expected_value=f">= {H2D_OK:.0%} of the host link",
                                   title=f"nvbandwidth {test}: every GPU copies from host memory at {min(judged.values()):.0%} or more of its PCIe link"))
    return out


def investigate(ctx: Context) -> list[Finding]:
    """The active probes' findings (:func:`_active`) and those of pasted nccl-tests and nvbandwidth runs."""
    return _active(ctx) + _pasted_runs(ctx) + _pasted_h2d(ctx)


def _active(ctx: Context) -> list[Finding]:
    """pcie.h2d_bandwidth and gpu.memory_bandwidth per GPU, nccl.allreduce_bandwidth from the
    active probes. Without them, one unknown ``active.probes`` naming the command that measures
    (nothing when no GPU is known: ``gpu.present`` reports that). A malformed probe file gives one
    unknown finding."""
    data = ctx.facts.active_probe()
    if data is None:
        if not ctx.facts.gpus():
            return []
        return [unknown("active.probes", "Active measurements not run",
                        "Copy, memory and NCCL all-reduce bandwidth were not measured, so none of them is known to be good: "
                        "run infergap audit --active (or infergap collect --active) on the host.")]
    if not isinstance(data, dict):
        return [finding("active.probes", Status.unknown, "Active measurements unreadable", impact="probes/active.json is not a JSON object.")]
    if not data.get("available"):
        if not ctx.facts.gpus():
            return [finding("active.probes", Status.not_applicable, "No GPU to measure", impact="Active measurements need an NVIDIA GPU (and torch); this host has none.")]
        return [finding("active.probes", Status.unknown, "Active measurements did not run", impact=str(data.get("error")))]
    try:
        return _judge(ctx, data)
    except (TypeError, KeyError, AttributeError, ValueError, IndexError, ZeroDivisionError) as e:
        return [finding("active.probes", Status.unknown, "Active measurements unreadable",
                        impact=f"probes/active.json does not have the expected fields ({type(e).__name__}: {e}).")]


def _judge(ctx: Context, data: dict) -> list[Finding]:
    src = "probes/active.json"
    out: list[Finding] = []
    gpus = ctx.facts.gpus()
    for c in data.get("copies", []):
        i = c["device"]
        g = gpus[i] if i < len(gpus) else None
        subj = g.bdf if g else f"cuda:{i}"
        gen, width = (g.pcie_gen_max, g.pcie_width_max) if g else (None, None)
        link = pcie_link_GBps(gen, width or 16) if gen else None
        evs = evidence((src, f"H2D pinned {c['h2d_pinned_GBps']:.1f} GB/s, D2H pinned {c['d2h_pinned_GBps']:.1f} GB/s, H2D pageable {c['h2d_pageable_GBps']:.1f} GB/s ({c['bytes'] >> 20} MiB, median of {c['repeats']}, CUDA events on the GPU)"))
        if link:
            frac = c["h2d_pinned_GBps"] / link
            if frac < H2D_OK:
                out.append(finding("pcie.h2d_bandwidth", Status.actionable, f"GPU {subj}: pinned host-to-device copy {c['h2d_pinned_GBps']:.1f} GB/s = {frac:.0%} of gen{gen} x{width}",
                                   fix_kind=FixKind.bios, subject=subj, evidence_=evs, expected_value=f">= {H2D_OK:.0%} of {link:.1f} GB/s",
                                   impact="Weight loading, KV offload and CPU-GPU transfers run below what the link carries: check the IOMMU mode, MaxReadReq, NUMA placement of the copying thread and the link itself.",
                                   remedy=Remedy(note="Compare with the pcie.* and iommu.mode findings; bind the process to the GPU's NUMA node and re-measure.")))
            else:
                out.append(finding("pcie.h2d_bandwidth", Status.ok, f"GPU {subj}: pinned host-to-device copy {c['h2d_pinned_GBps']:.1f} GB/s = {frac:.0%} of gen{gen} x{width} ({link:.1f} GB/s)",
                                   subject=subj, evidence_=evs, expected_value=f">= {H2D_OK:.0%} of {link:.1f} GB/s"))
        else:
            out.append(finding("pcie.h2d_bandwidth", Status.unknown, f"GPU {subj}: pinned host-to-device copy {c['h2d_pinned_GBps']:.1f} GB/s; the PCIe link it should reach is not captured",
                               subject=subj, evidence_=evs, impact="Judging the copy needs the link's maximum generation and width: nvidia-smi -q (GPU Link Info) or lspci -vvv (LnkCap)."))
        name = g.name if g else c.get("name")
        peak = datasheet_bandwidth_TBps(name) if name else None
        mevs = evidence((src, f"device-to-device copy {c['d2d_copy_GBps'] / 1000:.2f} TB/s counting read + write"))
        if peak:
            frac = c["d2d_copy_GBps"] / 1000 / peak
            st = Status.ok if frac >= MEM_OK else Status.actionable
            out.append(finding(MEMORY_BANDWIDTH, st, f"GPU {subj}: memory copy {c['d2d_copy_GBps'] / 1000:.2f} TB/s = {frac:.0%} of the {peak} TB/s datasheet peak",
                               subject=subj, evidence_=mevs, expected_value=f">= {MEM_OK:.0%} of {peak} TB/s",
                               impact="Decode is bound by memory bandwidth; this measured figure is the ceiling to use in the roofline (infergap roofline --measured-bandwidth).",
                               remedy=Remedy(note="Check clocks and throttling under load (gpu.clocks, gpu.throttle).") if st == Status.actionable else None,
                               details={MEASURED_GBPS: c["d2d_copy_GBps"], DATASHEET_TBPS: peak}))
        else:
            out.append(finding(MEMORY_BANDWIDTH, Status.unknown, f"GPU {subj}: memory copy {c['d2d_copy_GBps'] / 1000:.2f} TB/s (no datasheet figure for {name or 'this GPU'})",
                               subject=subj, evidence_=mevs, details={MEASURED_GBPS: c["d2d_copy_GBps"]},
                               impact="Judging the copy needs the GPU's datasheet bandwidth: add the model to src/infergap/data/gpus.yaml, or capture nvidia-smi -q so the GPU is named."))
    ar = data.get("allreduce")
    if ar and ar.get("sizes"):
        big = ar["sizes"][-1]
        small = ar["sizes"][0]
        evs = evidence((src, f"{ar['world']} GPUs: {small['bytes'] >> 10} KiB in {small['time_us']:.1f} µs; {big['bytes'] >> 20} MiB busbw {big['busbw_GBps']:.1f} GB/s"))
        out.append(finding("nccl.allreduce_bandwidth", Status.ok if ar.get("result_ok") else Status.actionable,
                           f"NCCL all-reduce on {ar['world']} GPUs: {big['busbw_GBps']:.0f} GB/s bus bandwidth at {big['bytes'] >> 20} MiB, {small['time_us']:.0f} µs at {small['bytes'] >> 10} KiB",
                           severity=None if ar.get("result_ok") else Severity.P0, fix_kind=None if ar.get("result_ok") else FixKind.software,
                           evidence_=evs, impact="Small-message latency is what tensor-parallel decode pays per all-reduce; the bus bandwidth is what prefill and large batches see (nccl-tests definition).",
                           details={"sizes": ar["sizes"]}))
    elif ar and ar.get("error"):
        out.append(finding("nccl.allreduce_bandwidth", Status.unknown, "NCCL all-reduce measurement failed", impact=ar["error"]))
    return out
