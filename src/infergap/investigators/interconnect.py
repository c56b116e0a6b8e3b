"""Interconnect: NVLink / NVSwitch topology, GPU peer-to-peer, nvidia_peermem with RDMA NICs,
device identification, and whether the engines' custom all-reduce can be used.

Sources: ``nvidia-smi topo -m`` legend (NV# = bonded NVLinks), ``nvidia-smi topo -p2p r`` legend
(OK/CNS/GNS/TNS/NS/DR), NVML ``nvmlDeviceGetNvLinkState`` / ``nvmlDeviceGetP2PStatus``; NVIDIA
Fabric Manager user guide (NVSwitch systems need the GPU fabric state "Completed"); NVIDIA
GPUDirect RDMA docs (``nvidia-peermem`` module); SGLang ``custom_all_reduce.py`` and vLLM
``custom_all_reduce.py`` (custom all-reduce disabled beyond two GPUs without full NVLink).
"""

from __future__ import annotations

import re

from infergap.findings import Action, Finding, FixKind, Remedy, Severity, Status
from infergap.investigators.base import Context, evidence, finding, not_applicable, unknown

NAME = "interconnect"
#: GPU product names with NVLink (SXM/HGX modules, superchips). Others are treated as PCIe-only SKUs.
NVLINK_SKU = re.compile(r"SXM|HGX|H200|H100 80GB HBM3|H800|A800-SXM|B200|B300|GB200|GB300|GH200|A100-SXM", re.I)
ASPEED = 0x1A03
NVIDIA = 0x10DE


def _nvlink_pairs(ctx: Context) -> tuple[dict[tuple[str, str], int], str | None]:
    """Bonded NVLink counts per GPU pair (names GPU0…) and the source used."""
    topo = ctx.facts.topology()
    if topo is not None and len(topo.gpus) >= 2:
        pairs = {(a, b): topo.nvlink_count(a, b) for a in topo.gpus for b in topo.gpus if a < b}
        return pairs, ctx.facts.src("nvsmi_topo")
    n = ctx.facts.nvml()
    if n is not None and len(n["gpus"]) >= 2:
        links = {f"GPU{g['index']}": len(g.get("nvlink_active") or []) for g in n["gpus"]}
        names = sorted(links)
        return {(a, b): min(links[a], links[b]) for a in names for b in names if a < b}, "probes/nvml.json"
    return {}, None


def _nvlink_links(ctx: Context) -> dict[int, dict[int, float | None]]:
    """Per-GPU NVLink links and their speed from ``nvidia-smi nvlink -s`` (empty when absent)."""
    from infergap.parsers.nvsmi import parse_nvlink_status

    r = ctx.facts.cmd_ok("nvsmi_nvlink")
    return parse_nvlink_status(r.stdout) if r else {}


def _pcie_only(ctx: Context) -> bool:
    names = [g.name or "" for g in ctx.facts.gpus()]
    return bool(names) and not any(NVLINK_SKU.search(n) for n in names)


def _nvlink(ctx: Context) -> list[Finding]:
    cid = "nvlink.topology"
    gpus = ctx.facts.gpus()
    if len(gpus) < 2:
        return [not_applicable(cid, NAME, "NVLink: one GPU, no peer", "With a single GPU there is no GPU-to-GPU link to check.",
                               evidence_=evidence(("host", f"{len(gpus)} GPU"), *(( ctx.facts.src("nvsmi_topo"), "GPU0 only"),) if ctx.facts.topology() else ()))]
    pairs, src = _nvlink_pairs(ctx)
    if src is None:
        return [unknown(cid, NAME, "NVLink topology: not captured", "Needs nvidia-smi topo -m or NVML.")]
    with_nv = {p: n for p, n in pairs.items() if n > 0}
    topo = ctx.facts.topology()
    cells = sorted({v for (a, b), v in (topo.matrix.items() if topo else []) if a != b and a.startswith("GPU") and b.startswith("GPU")})
    evs = evidence((src, "GPU-GPU links: " + (", ".join(cells) if cells else ", ".join(f"{a}-{b}: NV{n}" for (a, b), n in pairs.items()))))
    links = _nvlink_links(ctx)
    if links:
        evs += evidence((ctx.facts.src("nvsmi_nvlink"), "; ".join(f"GPU{i}: {sum(1 for v in l.values() if v)} active links" + (f" × {max(v for v in l.values() if v):g} GB/s" if any(l.values()) else "") for i, l in sorted(links.items()))))
    out = []
    if with_nv:
        counts = sorted(set(with_nv.values()))
        missing = [p for p, n in pairs.items() if n == 0]
        fab = [g for g in gpus if g.fabric_state and g.fabric_state not in ("Completed", "N/A")]
        if fab:
            out.append(finding("nvlink.fabric", NAME, Status.actionable, "NVSwitch fabric not ready: " + ", ".join(f"{g.bdf} {g.fabric_state}" for g in fab),
                               severity=Severity.P0, fix_kind=FixKind.software, evidence_=evidence(*[(g.sources[-1], f"fabric state {g.fabric_state}") for g in fab]),
                               impact="On NVSwitch systems the GPUs cannot use NVLink until Fabric Manager has configured the fabric.",
                               remedy=Remedy(commands=["systemctl enable --now nvidia-fabricmanager"], note="Fabric Manager's version must match the driver's."),
                               references=["NVIDIA Fabric Manager user guide"]))
        if missing:
            out.append(finding(cid, NAME, Status.actionable, f"NVLink missing between {len(missing)} GPU pair(s) of an NVLink system", severity=Severity.P0, fix_kind=FixKind.hardware,
                               evidence_=evs, expected_value="NV# between every pair", impact="Pairs without NVLink fall back to PCIe for peer traffic; all-reduce runs at the speed of the slowest link.",
                               remedy=Remedy(note="Check nvidia-smi nvlink -s for down links; reseat/replace the GPU or baseboard."), details={"pairs": {f"{a}-{b}": n for (a, b), n in pairs.items()}}))
        else:
            active = {i: sum(1 for v in l.values() if v) for i, l in links.items()}
            out.append(finding(cid, NAME, Status.ok, f"NVLink between every GPU pair ({'/'.join(f'NV{c}' for c in counts)})", evidence_=evs,
                               details={"pairs": {f"{a}-{b}": n for (a, b), n in pairs.items()}, "links_per_pair": counts, "active_links_per_gpu": active,
                                        "link_GBps": {i: l for i, l in links.items()}}))
        return out
    if all(g.name in (None, "unknown device") for g in gpus):
        return [finding(cid, NAME, Status.unknown, f"No NVLink between the {len(gpus)} GPUs; their model is not known", evidence_=evs,
                        impact="Whether that is expected depends on the GPU model (PCIe-only SKUs have no NVLink); add nvidia-smi -q or -q -x to tell.")]
    if _pcie_only(ctx):
        name = gpus[0].name
        return [finding(cid, NAME, Status.expected, f"No NVLink: {name} is a PCIe-only GPU", evidence_=evs,
                        impact=f"{name} has no NVLink; GPU peers talk over PCIe (topo -m shows {', '.join(cells) or 'PIX/PXB/PHB/NODE/SYS'}). Do not look for a missing bridge or NVSwitch.")]
    return [finding(cid, NAME, Status.actionable, "No NVLink between GPUs that have it", severity=Severity.P0, fix_kind=FixKind.software, evidence_=evs,
                    expected_value="NV# between GPU pairs", impact="These GPUs are NVLink parts but peer traffic goes over PCIe.",
                    remedy=Remedy(commands=["systemctl enable --now nvidia-fabricmanager (NVSwitch systems)", "nvidia-smi nvlink -s"]),
                    references=["NVIDIA Fabric Manager user guide"])]


def _p2p(ctx: Context) -> Finding | None:
    cid = "gpu.p2p"
    gpus = ctx.facts.gpus()
    if len(gpus) < 2:
        return None
    p2p = ctx.facts.p2p()
    src = ctx.facts.src("nvsmi_p2p")
    if not p2p:
        n = ctx.facts.nvml()
        if n and n.get("p2p"):
            code = {0: "OK", 1: "CNS", 2: "GNS", 3: "NS", 4: "TNS", 5: "NS", 6: "U"}
            p2p = {(f"GPU{k.split(',')[0]}", f"GPU{k.split(',')[1]}"): code.get(v, "U") for k, v in n["p2p"].items() if v is not None}
            src = "probes/nvml.json"
    if not p2p:
        t = ctx.facts.torch_info()
        if t and t.get("p2p"):
            m = t["p2p"]
            p2p = {(f"GPU{i}", f"GPU{j}"): ("OK" if m[i][j] else "NS") for i in range(len(m)) for j in range(len(m)) if i != j and m[i][j] is not None}
            src = ctx.facts.src("torch")
    if not p2p:
        return unknown(cid, NAME, "GPU peer-to-peer: not captured", "Needs nvidia-smi topo -p2p r, NVML or the torch probe.")
    bad = {k: v for k, v in p2p.items() if v != "OK"}
    evs = evidence((src, ", ".join(sorted({f"{v}" for v in p2p.values()})) + f" over {len(p2p)} ordered pairs"))
    if not bad:
        return finding(cid, NAME, Status.ok, f"P2P supported between all {len(gpus)} GPUs", evidence_=evs, expected_value="OK for every pair",
                       impact="OK says P2P is allowed, not that it is fast: ACS redirection or a translating IOMMU can still route it through the root complex.")
    kinds = sorted(set(bad.values()))
    vm = ctx.facts.virtualization()
    if set(kinds) <= {"CNS"} and vm or set(kinds) <= {"GNS", "NS"} and any(re.search(r"GeForce|RTX [345]0\d0", g.name or "") for g in gpus):
        return finding(cid, NAME, Status.expected, f"P2P not supported ({', '.join(kinds)}) on this platform", evidence_=evs,
                       impact="Consumer GPUs (GNS/NS) and VMs with an emulated chipset (CNS) do not offer P2P; NCCL uses shared memory instead.")
    return finding(cid, NAME, Status.actionable, f"P2P unavailable between {len(bad)} GPU pair(s): {', '.join(kinds)}", severity=Severity.P1, fix_kind=FixKind.bios,
                   evidence_=evs, expected_value="OK", impact="Without P2P, NCCL stages every transfer through host memory (SHM): all-reduce latency and bandwidth suffer.",
                   remedy=Remedy(note="Check IOMMU mode, ACS on the bridges, and BIOS settings for PCIe peer-to-peer; DR means a driver registry key disabled it."))


def _peermem(ctx: Context) -> Finding | None:
    cid = "nvidia.peermem"
    if not ctx.facts.gpus():
        return None
    rdma = ctx.facts.rdma_devices()
    if not rdma:
        return not_applicable(cid, NAME, "nvidia_peermem: no RDMA NIC", "GPUDirect RDMA needs an RDMA-capable NIC (InfiniBand/RoCE); none was found.")
    mods = ctx.facts.modules()
    loaded = (mods is not None and "nvidia_peermem" in mods) or ctx.snap.exists("/sys/module/nvidia_peermem")
    evs = evidence(rdma[0], ("files/proc/modules", "nvidia_peermem loaded" if loaded else "nvidia_peermem not loaded") if mods is not None else None)
    if mods is None and not loaded:
        return unknown(cid, NAME, "nvidia_peermem: module list not captured", "Needs /proc/modules.", evidence_=evs)
    if loaded:
        return finding(cid, NAME, Status.ok, "nvidia_peermem is loaded (GPUDirect RDMA available)", evidence_=evs)
    host = ctx.in_container
    return finding(cid, NAME, Status.actionable, "nvidia_peermem is not loaded although an RDMA NIC is present",
                   severity=Severity.P0, fix_kind=FixKind.runtime, evidence_=evs, expected_value="loaded",
                   impact="Without it NCCL logs 'GPU Direct RDMA Disabled' and stages network traffic through host memory (a public report: 180 -> 10 GB/s). The open kernel module's DMA-BUF path (NCCL >= 2.19 with kernel >= 5.12) is the alternative.",
                   remedy=Remedy(commands=["modprobe nvidia-peermem"], persist=["echo nvidia-peermem > /etc/modules-load.d/nvidia-peermem.conf"],
                                 revert=["modprobe -r nvidia_peermem", "rm -f /etc/modules-load.d/nvidia-peermem.conf"],
                                 actions=[Action(type="modprobe", target="nvidia_peermem")], host_controlled=host,
                                 note="Inside a container the module is the host's: load it on the host." if host else None),
                   references=["NVIDIA GPUDirect RDMA documentation: nvidia-peermem", "NCCL troubleshooting guide: GPU Direct RDMA"])


def _unidentified(ctx: Context) -> Finding | None:
    cid = "pci.unidentified"
    funcs = ctx.facts.pci_functions()
    if not funcs:
        return None
    from infergap.parsers.pci import system_pci_ids

    db = system_pci_ids()
    gpu_names = {g.bdf: g.name for g in ctx.facts.gpus()}
    named, unknown_ids, notes = {}, [], []
    for f in funcs.values():
        cls = db.class_name(f.class_code) if f.class_code is not None else None
        if f.bdf in gpu_names and gpu_names[f.bdf] and gpu_names[f.bdf] != "unknown device":
            name = gpu_names[f.bdf]
        else:
            name = ctx.facts.pci_name(f)
        if f.vendor == ASPEED:
            name += " — the BMC's video/bridge (baseboard management), benign"
            notes.append(f"{f.bdf}: ASPEED BMC, not an NVSwitch")
        elif f.vendor == NVIDIA and f.class_code is not None and f.class_code >> 8 == 0x0680:
            name += " — NVSwitch"
            notes.append(f"{f.bdf}: NVSwitch")
        named[f.bdf] = f"{name} [{(f.vendor or 0):04x}:{(f.device or 0):04x}]" + (f" ({cls})" if cls else "")
        if f.vendor is not None and db.vendor_name(f.vendor) is None:
            unknown_ids.append(f.bdf)
    evs = evidence(*[(f"files/sys/bus/pci/devices/{b}", n) for b, n in named.items() if any(b in x for x in notes)][:4],
                   ("system pci.ids", db.path or "not installed"))
    if not db.vendors:
        return unknown(cid, NAME, "PCI names: no pci.ids database installed", "Install the pci.ids package (Debian: pci.ids) to name devices.", evidence_=evs)
    no_id = [b for b, f in funcs.items() if f.vendor is None]
    if no_id:
        denied = ctx.snap.unreadable_under("/sys/bus/pci/devices")
        why = f" ({denied[0][1]})" if denied else ""
        return unknown(cid, NAME, f"{len(no_id)} PCI function(s) without a readable vendor id{why}",
                       "Their vendor and device ids could not be read, so what they are is not known.", evidence_=evs)
    if unknown_ids:
        return finding(cid, NAME, Status.unknown, f"{len(unknown_ids)} PCI function(s) of an unknown vendor: {', '.join(named[b] for b in unknown_ids[:4])}",
                       evidence_=evs, details={"devices": named}, impact="Not in the installed pci.ids; look the id up before guessing what it is.")
    unk_dev = [b for b in named if "unknown device" in named[b]]
    title = f"All {len(named)} PCI functions identified" + (f" ({len(unk_dev)} by vendor and class only)" if unk_dev else "")
    if notes:
        title += "; " + "; ".join(notes)
    return finding(cid, NAME, Status.ok, title, evidence_=evs, details={"devices": named})


def _custom_allreduce(ctx: Context) -> Finding | None:
    cid = "allreduce.custom"
    gpus = ctx.facts.gpus()
    if len(gpus) < 2:
        return None
    pairs, src = _nvlink_pairs(ctx)
    full_nv = bool(pairs) and all(n > 0 for n in pairs.values())
    if full_nv:
        return finding(cid, NAME, Status.ok, "Custom all-reduce usable: every GPU pair has NVLink", evidence_=evidence((src, "NVLink between all pairs")))
    if src is None and not _pcie_only(ctx):
        return unknown(cid, NAME, "Custom all-reduce: GPU links unknown", "Needs nvidia-smi topo -m or NVML to know whether the GPUs share NVLink.")
    if len(gpus) <= 2:
        return finding(cid, NAME, Status.ok, "Custom all-reduce usable on 2 PCIe GPUs", evidence_=evidence((src or "host", f"{len(gpus)} GPUs, no NVLink")),
                       impact="SGLang and vLLM keep their custom all-reduce for two PCIe GPUs (with P2P).")
    return finding(cid, NAME, Status.expected, f"Custom all-reduce will be disabled: {len(gpus)} GPUs without NVLink", evidence_=evidence((src or "host", f"{len(gpus)} GPUs, no NVLink")),
                   impact="SGLang and vLLM disable their custom all-reduce kernel on more than two GPUs without full NVLink and fall back to NCCL (~20-25 µs per all-reduce at batch 1); no stock flag re-enables it. The plan covers PCIe alternatives.",
                   references=["sglang/srt/distributed/device_communicators/custom_all_reduce.py", "vllm/distributed/device_communicators/custom_all_reduce.py"])


def investigate(ctx: Context) -> list[Finding]:
    """nvlink.topology (+ nvlink.fabric), gpu.p2p, nvidia.peermem, pci.unidentified, allreduce.custom."""
    out: list[Finding] = []
    if ctx.facts.gpus():
        out += _nvlink(ctx)
    for fn in (_p2p, _peermem, _unidentified, _custom_allreduce):
        f = fn(ctx)
        if f is not None:
            out.append(f)
    return out
