"""Interconnect: NVLink / NVSwitch topology, GPU peer-to-peer, nvidia_peermem with RDMA NICs,
device identification, and whether the engines' custom all-reduce can be used.

Sources: ``nvidia-smi topo -m`` legend (NV# = bonded NVLinks), ``nvidia-smi topo -p2p r`` legend
(OK/CNS/GNS/TNS/NS/DR), NVML ``nvmlDeviceGetNvLinkState`` / ``nvmlDeviceGetP2PStatus``; NVIDIA
Fabric Manager user guide (NVSwitch systems need the GPU fabric state "Completed"); NVIDIA
GPUDirect RDMA docs (``nvidia-peermem`` module); SGLang ``custom_all_reduce.py`` and vLLM
``custom_all_reduce.py`` (custom all-reduce disabled beyond two GPUs without full NVLink, and
without CUDA peer access between the tensor-parallel GPUs). What each GPU model offers (PCIe P2P,
NVLink none / bridge groups / NVSwitch, PCI device ids) comes from ``data/gpus.yaml`` through
:mod:`infergap.gpudata`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from infergap.checks import threshold as checks_threshold
from infergap.findings import Action, Finding, FixKind, Remedy, Severity, Status, ev
from infergap.gpudata import Sku, device_name, sku
from infergap.investigators.base import Context, evidence, finding, not_applicable, unknown

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.evidence.recognize import EvidencePart
    from infergap.evidence.signatures import Signature
    from infergap.facts import Facts
    from infergap.parsers.cuda_samples import P2pBandwidthRun
    from infergap.parsers.engine_log import EngineLogFacts
    from infergap.server import ServerConfig

NAME = "interconnect"
#: The NVLink check's id, read by the plan (``gpu.nvlink``: ok means linked).
NVLINK_TOPOLOGY = "nvlink.topology"
ASPEED = 0x1A03
NVIDIA = 0x10DE
PLX = 0x10B5
P2P_CMD = "nvidia-smi topo -p2p r"


def _skus(ctx: Context) -> list[Sku | None]:
    """The product's knowledge of each GPU (``data/gpus.yaml``), by name, else by PCI device id."""
    funcs = ctx.facts.pci_functions()
    out = []
    for g in ctx.facts.gpus():
        f = funcs.get(g.bdf)
        out.append(sku(g.name if g.name != "unknown device" else None, f.device if f is not None and f.vendor == NVIDIA else None))
    return out


def _layout(ctx: Context) -> tuple[str | None, Sku | None]:
    """The NVLink layout all GPUs share (``none`` | ``bridge`` | ``switch``) and their entry, or
    (None, None) when a GPU is unknown to the data or the GPUs differ."""
    ss = _skus(ctx)
    if not ss or any(s is None for s in ss) or len({s.nvlink_layout for s in ss if s}) != 1:
        return None, None
    return ss[0].nvlink_layout, ss[0]


def _groups(pairs: dict[tuple[str, str], int]) -> list[list[str]]:
    """Connected groups of GPUs joined by NVLink (GPUs without any NVLink left out)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            x = parent[x]
        return x

    for (a, b), n in pairs.items():
        if n > 0:
            parent[find(a)] = find(b)
    groups: dict[str, list[str]] = {}
    for x in parent:
        groups.setdefault(find(x), []).append(x)
    return sorted(sorted(g, key=lambda s: int(s[3:]) if s[3:].isdigit() else 0) for g in groups.values())


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
    return ctx.facts.nvlink_status()


def _pcie_only(ctx: Context) -> bool:
    """Whether the data says every GPU here is a model without NVLink."""
    layout, _ = _layout(ctx)
    return layout == "none"


def _nvlink(ctx: Context) -> list[Finding]:
    cid = NVLINK_TOPOLOGY
    gpus = ctx.facts.gpus()
    if len(gpus) < 2:
        return [not_applicable(cid, "NVLink: one GPU, no peer", "With a single GPU there is no GPU-to-GPU link to check.",
                               evidence_=evidence(("host", f"{len(gpus)} GPU"), *(( ctx.facts.src("nvsmi_topo"), "GPU0 only"),) if ctx.facts.topology() else ()))]
    pairs, src = _nvlink_pairs(ctx)
    if src is None:
        return [unknown(cid, "NVLink topology: not captured", "Needs nvidia-smi topo -m or NVML.")]
    with_nv = {p: n for p, n in pairs.items() if n > 0}
    topo = ctx.facts.topology()
    cells = sorted({v for (a, b), v in (topo.matrix.items() if topo else []) if a != b and a.startswith("GPU") and b.startswith("GPU")})
    evs = evidence((src, "GPU-GPU links: " + (", ".join(cells) if cells else ", ".join(f"{a}-{b}: NV{n}" for (a, b), n in pairs.items()))))
    links = _nvlink_links(ctx)
    if links:
        evs += evidence((ctx.facts.src("nvsmi_nvlink"), "; ".join(f"GPU{i}: {sum(1 for v in l.values() if v)} active links" + (f" × {max(v for v in l.values() if v):g} GB/s" if any(l.values()) else "") for i, l in sorted(links.items()))))
    layout, entry = _layout(ctx)
    out = []
    if with_nv:
        counts = sorted(set(with_nv.values()))
        missing = [p for p, n in pairs.items() if n == 0]
        fab = [g for g in gpus if g.fabric_state and g.fabric_state not in ("Completed", "N/A")]
        if fab:
            out.append(finding("nvlink.fabric", Status.actionable, "NVSwitch fabric not ready: " + ", ".join(f"{g.bdf} {g.fabric_state}" for g in fab),
                               evidence_=evidence(*[(g.sources[-1], f"fabric state {g.fabric_state}") for g in fab]),
                               impact="On NVSwitch systems the GPUs cannot use NVLink until Fabric Manager has configured the fabric.",
                               remedy=Remedy(commands=["systemctl enable --now nvidia-fabricmanager"], note="Fabric Manager's version must match the driver's."),
                               references=["NVIDIA Fabric Manager user guide"]))
        details = {"pairs": {f"{a}-{b}": n for (a, b), n in pairs.items()}}
        if missing and layout == "bridge" and entry is not None:
            groups = _groups(pairs)
            size = entry.nvlink_group or 2
            if all(len(g) <= size for g in groups):
                alone = sorted({x for p in pairs for x in p} - {x for g in groups for x in g}, key=lambda s: int(s[3:]) if s[3:].isdigit() else 0)
                joined = ", ".join("-".join(g) for g in groups)
                return out + [finding(cid, Status.expected, f"NVLink bridges join the GPUs in groups of up to {size} ({joined}), by design of {entry.label}",
                                      evidence_=evs + evidence(("infergap gpus.yaml", f"{entry.label}: NVLink through bridges joining {size} GPUs")),
                                      impact=f"{entry.label} has no NVSwitch: bridges link {size} GPUs at most, so the other pairs talk over PCIe. Keep a tensor-parallel group inside one bridged group "
                                             f"(TP={max(len(g) for g in groups)} on {groups[0][0]}-{groups[0][-1]}); TP across groups runs at PCIe speed."
                                             + (f" {', '.join(alone)} {'has' if len(alone) == 1 else 'have'} no NVLink bridge." if alone else ""),
                                      references=[entry.source], details=details | {"groups": groups})]
        if missing and layout in ("bridge", "switch"):
            out.append(finding(cid, Status.actionable, f"NVLink missing between {len(missing)} GPU pair(s) of an NVLink system", evidence_=evs, expected_value="NV# between every pair" if layout == "switch" else "NV# within every bridged group",
                               impact="Pairs without NVLink fall back to PCIe for peer traffic; all-reduce runs at the speed of the slowest link.",
                               remedy=Remedy(note="Check nvidia-smi nvlink -s for down links; reseat/replace the GPU, bridge or baseboard."), details=details))
        elif missing:
            out.append(finding(cid, Status.unknown, f"NVLink between {len(with_nv)} of {len(pairs)} GPU pairs; whether the others should have it is not known", evidence_=evs,
                               impact="Partial NVLink is normal for bridged PCIe cards (pairs) and a fault on NVSwitch baseboards; the GPU model is not in infergap's GPU data. "
                                      "Add nvidia-smi -q (the product name) to tell.", details=details))
        else:
            active = {i: sum(1 for v in l.values() if v) for i, l in links.items()}
            out.append(finding(cid, Status.ok, f"NVLink between every GPU pair ({'/'.join(f'NV{c}' for c in counts)})", evidence_=evs,
                               details=details | {"links_per_pair": counts, "active_links_per_gpu": active, "link_GBps": {i: l for i, l in links.items()}}))
        return out
    if layout is None:
        return [finding(cid, Status.unknown, f"No NVLink between the {len(gpus)} GPUs; their model is not known", evidence_=evs,
                        impact="Whether that is expected depends on the GPU model (PCIe-only SKUs have no NVLink) and the model is not known here; add nvidia-smi -q or -q -x to tell.")]
    if layout == "none":
        name = entry.label if entry else gpus[0].name
        return [finding(cid, Status.expected, f"No NVLink: {name} is a PCIe-only GPU", evidence_=evs + evidence(("infergap gpus.yaml", f"{name}: no NVLink")),
                        impact=f"{name} has no NVLink; GPU peers talk over PCIe (topo -m shows {', '.join(cells) or 'PIX/PXB/PHB/NODE/SYS'}). Do not look for a missing bridge or NVSwitch.",
                        references=[entry.source] if entry else [])]
    if layout == "bridge" and entry is not None:
        return [finding(cid, Status.expected, f"No NVLink bridge installed between the {entry.label} GPUs", evidence_=evs,
                        impact=f"{entry.label} links GPUs only through optional NVLink bridges ({entry.nvlink_group or 2} GPUs per bridge set); without them peers talk over PCIe. "
                               "Bridges would give a TP=2 group NVLink bandwidth.", references=[entry.source])]
    return [finding(cid, Status.actionable, "No NVLink between GPUs that have it", fix_kind=FixKind.software, evidence_=evs,
                    expected_value="NV# between GPU pairs", impact="These GPUs are NVLink parts but peer traffic goes over PCIe.",
                    remedy=Remedy(commands=["systemctl enable --now nvidia-fabricmanager (NVSwitch systems)", "nvidia-smi nvlink -s"]),
                    references=["NVIDIA Fabric Manager user guide"])]


#: Why a P2P refusal on GPUs without P2P by product design is expected, not a fault.
PRODUCT_LIMIT = ("This is a product limit of the GPU, not a BIOS, ACS or IOMMU setting: NCCL uses shared memory (SHM) between these GPUs "
                 "and engines keep custom all-reduce off. Do not change firmware settings for it.")

def _unordered(pairs: dict[tuple[str, str], str]) -> set[frozenset[str]]:
    return {frozenset(p) for p in pairs if p[0] != p[1]}


def _p2p(ctx: Context) -> Finding | None:
    cid = "gpu.p2p"
    gpus = ctx.facts.gpus()
    if len(gpus) < 2:
        return None
    p2p, src = ctx.facts.p2p_status()
    if not p2p:
        return unknown(cid, "GPU peer-to-peer: not captured", f"Needs {P2P_CMD}, NVML or the torch probe.")
    bad = {k: v for k, v in p2p.items() if v != "OK"}
    evs = evidence((src, ", ".join(sorted({f"{v}" for v in p2p.values()})) + f" over {len(_unordered(p2p))} GPU pair(s)"))
    n_pairs = len(gpus) * (len(gpus) - 1) // 2
    if not bad:
        if len(_unordered(p2p)) < n_pairs:
            return unknown(cid, f"GPU peer-to-peer: OK for {len(_unordered(p2p))} of {n_pairs} GPU pairs, the rest not captured", f"Run {P2P_CMD} on the host.", evidence_=evs)
        return finding(cid, Status.ok, f"P2P supported between all {len(gpus)} GPUs" if len(gpus) > 2 else "P2P supported between the 2 GPUs", evidence_=evs, expected_value="OK for every pair",
                       impact="OK says P2P is allowed, not that it is fast: ACS redirection or a translating IOMMU can still route it through the root complex.")
    kinds = sorted(set(bad.values()))
    n_bad = len(_unordered(bad))
    vm = ctx.facts.virtualization()
    ss = _skus(ctx)
    consumer = bool(ss) and all(s is not None and s.p2p == "not_supported" for s in ss)
    if set(kinds) <= {"GNS", "NS"} and consumer:
        entry = ss[0]
        return finding(cid, Status.expected, f"P2P not supported ({', '.join(kinds)}): {entry.label} offers no PCIe peer-to-peer", evidence_=evs + evidence(("infergap gpus.yaml", f"{entry.label}: p2p not_supported")),
                       impact=PRODUCT_LIMIT, references=[entry.source])
    if set(kinds) <= {"CNS"} and vm:
        return finding(cid, Status.expected, "P2P not supported (CNS) in this virtual machine", evidence_=evs + evidence(vm),
                       impact="A VM's emulated chipset does not offer peer-to-peer between passed-through GPUs; NCCL uses shared memory instead.")
    return finding(cid, Status.actionable, f"P2P unavailable between {n_bad} GPU pair(s): {', '.join(kinds)}", evidence_=evs, expected_value="OK", impact="Without P2P, NCCL stages every transfer through host memory (SHM): all-reduce latency and bandwidth suffer.",
                   remedy=Remedy(note="Check IOMMU mode, ACS on the bridges, and BIOS settings for PCIe peer-to-peer; DR means a driver registry key disabled it."))


def _p2p_figures(run: P2pBandwidthRun) -> tuple[dict[str, float], dict[str, float], str]:
    """(P2P enabled, P2P disabled, unit) of a run: the unidirectional bandwidth matrices, or the
    GPU latency matrices when the paste holds only those (``P2P=Enabled Latency (P2P Writes)``)."""
    on, off = run.uni(True), run.uni(False)
    if on and off:
        return on, off, "GB/s"
    m = run.matrices
    return m.get("enabled_latency_writes_us") or m.get("enabled_latency_us") or {}, m.get("disabled_latency_us", {}), "us"


def _p2p_measured(ctx: Context) -> list[Finding]:
    """``gpu.p2p`` from each pasted ``p2pBandwidthLatencyTest``: the pairs that can access their
    peer whose unidirectional P2P=Enabled bandwidth is below ``min_enabled_over_disabled`` of the
    P2P=Disabled copy (through host memory) are actionable (with latency matrices only: a P2P
    latency above the staged copy's divided by that ratio); ok when every such pair is faster with
    P2P; nothing when the paste has no pair with both figures (a refusal is the signature's)."""
    cid = "gpu.p2p"
    floor = checks_threshold(cid, "min_enabled_over_disabled")
    out = []
    for part, run in ctx.facts.p2p_bandwidth_runs():
        on, off, unit = _p2p_figures(run)
        pairs = sorted((k for k in on if k in off and k.split("-")[0] != k.split("-")[1] and run.access.get(k, True)),
                       key=lambda k: tuple(int(x) for x in k.split("-")))
        if not pairs:
            continue
        # bandwidth: slower is lower; latency: slower is higher (a pair is slow past the same ratio)
        slow = [k for k in pairs if (on[k] < floor * off[k] if unit == "GB/s" else on[k] * floor > off[k])]
        shown = slow or pairs
        evs = [ev(part.label, f"GPU{k.replace('-', ' -> GPU')}: P2P {on[k]:g} {unit}, without P2P {off[k]:g} {unit}") for k in shown[:6]]
        if slow:
            out.append(finding(cid, Status.actionable, subject=part.label,
                title=f"P2P is slower than copying through host memory for {len(slow)} of {len(pairs)} GPU pair(s)",
                evidence_=evs, expected_value="P2P bandwidth above the staged copy's for every pair that can access its peer",
                impact="Peer writes that cross the root complex (ACS redirect on a bridge) or an IOMMU that translates them lose to a "
                       "copy through host memory; NCCL and custom all-reduce then run at this lower rate.",
                remedy=Remedy(commands=["sudo lspci -vvv | grep -E '^[0-9a-f]|ACSCtl'   # ReqRedir+ or CmpltRedir+ on a bridge above the GPUs",
                                        "cat /proc/cmdline   # iommu=pt (or amd_iommu=off / intel_iommu=off) for identity DMA"],
                              note="Disable ACS redirect in the BIOS (or setpci ECAP_ACS+6.w=0000 per bridge until reboot) and put the IOMMU in passthrough, then rerun the test."),
                references=["https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#pci-access-control-services-acs",
                            "https://github.com/NVIDIA/caffe/issues/10"],
                details={"pairs": len(pairs), "slower_with_p2p": slow[:64]}))
        else:
            out.append(finding(cid, Status.ok, subject=part.label, title=f"P2P is faster than a copy through host memory for all {len(pairs)} measured GPU pair(s)",
                               evidence_=evs, details={"pairs": len(pairs)}))
    return out


def _p2p_waived(ctx: Context) -> list[Finding]:
    """``gpu.p2p`` from each pasted ``nvbandwidth`` run that waived a device-to-device test on two
    or more GPUs: nvbandwidth waives it when the peer mapping failed (its maintainer in
    NVIDIA/nvbandwidth#13). Expected when every GPU it names lacks PCIe P2P by product design
    (``data/gpus.yaml``), actionable otherwise."""
    cid = "gpu.p2p"
    out = []
    for part, run in ctx.facts.nvbandwidth_runs():
        waived = [t for t in run.waived if t.startswith("device_to_device")]
        if not waived or len(run.devices) < 2:
            continue
        names = sorted(set(run.devices.values()))
        skus = [sku(n) for n in names]
        evs = [ev(part.label, f"Waiving {t}.") for t in waived[:4]] + [ev(part.label, f"{len(run.devices)} devices: {', '.join(names)}")]
        if all(s is not None and s.p2p == "not_supported" for s in skus):
            out.append(finding(cid, Status.expected, subject=part.label, evidence_=evs + [ev("infergap gpus.yaml", f"{skus[0].label}: p2p not_supported")],
                               title=f"nvbandwidth waived its peer copies: {skus[0].label} offers no PCIe peer-to-peer (a product limit)",
                               impact=PRODUCT_LIMIT, references=[skus[0].source, "https://github.com/NVIDIA/nvbandwidth/issues/13"]))
            continue
        out.append(finding(cid, Status.actionable, subject=part.label, evidence_=evs, expected_value="device-to-device tests run on every GPU pair",
                           title=f"nvbandwidth waived {len(waived)} device-to-device test(s): peer mapping failed between the GPUs",
                           impact="Without P2P, NCCL stages every transfer through host memory (SHM): all-reduce latency and bandwidth suffer.",
                           remedy=Remedy(commands=["nvidia-smi topo -p2p r   # the P2P status of every pair",
                                                   "sudo lspci -vvv | grep -E '^[0-9a-f]|ACSCtl'   # ACS redirect on a bridge above the GPUs"],
                                         note="Check IOMMU mode, ACS on the bridges, and BIOS settings for PCIe peer-to-peer."),
                           references=["https://github.com/NVIDIA/nvbandwidth/issues/13"]))
    return out


def _capability_report(sig: Signature) -> bool:
    """Whether the entry reports what the GPUs can do (the answer of a P2P query pasted as a
    fragment: cudaDeviceCanAccessPeer, p2pBandwidthLatencyTest), not an engine failure: on GPUs
    that lack P2P by product design (data/gpus.yaml) that answer is expected."""
    return sig.finding is not None and sig.finding.id == "gpu.p2p" and sig.kind == "fragment"


#: GPU names as CUDA samples and nvidia-smi print them in a paste ("Device: 0, NVIDIA GeForce RTX 2080 Ti, pciBusID: 4").
_GPU_NAME = re.compile(r"\b(NVIDIA (?:GeForce |RTX |Quadro |Tesla )?[A-Za-z0-9][\w -]{1,40}?)(?=,|\s{2}|\s*\(|\s*$)")


def p2p_product_limit(sig: Signature, part: EvidencePart) -> Finding | None:
    """``gpu.p2p`` expected when every GPU the part names lacks PCIe P2P by product design
    (``p2p: not_supported`` in data/gpus.yaml), for a signature entry that reports P2P capability;
    None otherwise, when a named GPU is unknown or has P2P, or when the part names none (the
    signature's actionable finding stands)."""
    if not _capability_report(sig):
        return None
    names = sorted({m.group(1).strip() for line in part.iter_lines() for m in _GPU_NAME.finditer(line)})
    skus = [sku(n) for n in names]
    if not names or any(s is None or s.p2p != "not_supported" for s in skus):
        return None
    return finding(sig.finding.id, Status.expected, subject=part.label,
                   title=f"No P2P between the GPUs: {skus[0].label} offers no PCIe peer-to-peer (a product limit)",
                   evidence_=[ev(part.label, n) for n in names[:4]] + [ev("infergap gpus.yaml", f"{skus[0].label}: p2p not_supported")],
                   impact=PRODUCT_LIMIT,
                   references=[skus[0].source] + list(sig.sources), details={"signatures": [sig.id], "gpus": names})


def _peermem(ctx: Context) -> Finding | None:
    cid = "nvidia.peermem"
    if not ctx.facts.gpus():
        return None
    rdma = ctx.facts.rdma_devices()
    if not rdma:
        if not ctx.facts.pci_inventory_captured() and not ctx.facts.listing("/sys/class/infiniband"):
            return None  # nothing here says whether an RDMA NIC exists
        return not_applicable(cid, "nvidia_peermem: no RDMA NIC", "GPUDirect RDMA needs an RDMA-capable NIC (InfiniBand/RoCE); none was found.",
                              evidence_=evidence(("files/sys/bus/pci/devices" if ctx.facts.listing("/sys/bus/pci/devices") else ctx.facts.src("lspci_vvv" if ctx.facts.cmd_ok("lspci_vvv") else "lspci"), "no RDMA NIC")))
    mods = ctx.facts.modules()
    loaded = (mods is not None and "nvidia_peermem" in mods) or ctx.facts.exists("/sys/module/nvidia_peermem")
    evs = evidence(rdma[0], ("files/proc/modules", "nvidia_peermem loaded" if loaded else "nvidia_peermem not loaded") if mods is not None else None)
    if mods is None and not loaded:
        return unknown(cid, "nvidia_peermem: module list not captured", "Needs /proc/modules.", evidence_=evs)
    if loaded:
        return finding(cid, Status.ok, "nvidia_peermem is loaded (GPUDirect RDMA available)", evidence_=evs)
    host = ctx.in_container
    net, nsrc = ctx.facts.collective_network()
    internode = True if net == "rdma" else False if net == "local" else None
    if internode:
        sev, why = Severity.P0, "NCCL's inter-node channels run over the RDMA NIC (NET/IB): without GPUDirect RDMA every transfer is staged through host memory."
        evs += evidence((nsrc, "NCCL channels via NET/IB"))
    elif internode is False:
        sev, why = Severity.P2, "The NCCL log shows one node with no network channels: tensor parallelism inside this host does not use the NIC, so this matters only once traffic crosses nodes."
        evs += evidence((nsrc, "one host, no NET channels"))
    else:
        sev, why = Severity.P1, "P0 when this host exchanges tensors with other nodes over the NIC (multi-node TP/PP, disaggregated prefill); on one node serving with TP it does not matter."
    return finding(cid, Status.actionable, "nvidia_peermem is not loaded although an RDMA NIC is present",
                   severity=sev, evidence_=evs, expected_value="loaded",
                   impact=why + " Without it NCCL logs 'GPU Direct RDMA Disabled' (a public report: 180 -> 10 GB/s). The open kernel module's DMA-BUF path (NCCL >= 2.19 with kernel >= 5.12) is the alternative.",
                   remedy=Remedy(commands=["modprobe nvidia_peermem"], persist=["echo nvidia-peermem > /etc/modules-load.d/nvidia-peermem.conf"],
                                 revert=["modprobe -r nvidia_peermem", "rm -f /etc/modules-load.d/nvidia-peermem.conf"],
                                 actions=[Action(type="modprobe", target="nvidia_peermem")], host_controlled=host,
                                 note="Inside a container the module is the host's: load it on the host." if host else None),
                   references=["NVIDIA GPUDirect RDMA documentation: nvidia-peermem", "NCCL troubleshooting guide: GPU Direct RDMA"])


def _unidentified(ctx: Context) -> Finding | None:
    cid = "pci.unidentified"
    funcs = ctx.facts.pci_functions()
    if not funcs:
        return None
    db = ctx.facts.pci_ids()
    gpu_names = {g.bdf: g.name for g in ctx.facts.gpus()}
    named, unknown_ids, notes = {}, [], []
    for f in funcs.values():
        cls = db.class_name(f.class_code) if f.class_code is not None else None
        text = f.lspci.description if f.vendor is None and f.lspci is not None else ""
        if f.bdf in gpu_names and gpu_names[f.bdf] and gpu_names[f.bdf] != "unknown device":
            name = gpu_names[f.bdf]
        elif text:
            name = text  # lspci without -nn: the name lspci read from its own pci.ids, no ids
        else:
            name = ctx.facts.pci_name(f)
        if f.vendor == ASPEED or "ASPEED" in text:
            name += " — the BMC's video/bridge (baseboard management), benign"
            notes.append(f"{f.bdf}: ASPEED BMC, not an NVSwitch")
        elif f.vendor == NVIDIA and f.class_code is not None and f.class_code >> 8 == 0x0680:
            name += " — NVSwitch"
            notes.append(f"{f.bdf}: NVSwitch")
        elif (f.vendor == PLX and f.class_code is not None and f.class_code >> 8 == 0x0604) or re.search(r"PCI bridge: (?:PLX Technology|Broadcom / LSI PEX)", text):
            name += " — PCIe switch port, not an NVSwitch"
            if not any("PCIe switch" in n for n in notes):
                notes.append("Broadcom/PLX PCIe switch ports, not NVSwitches")
        named[f.bdf] = name + (f" [{f.vendor:04x}:{(f.device or 0):04x}]" if f.vendor is not None else "") + (f" ({cls})" if cls else "")
        if f.vendor is not None and db.vendor_name(f.vendor) is None:
            unknown_ids.append(f.bdf)
    listing = sorted({f.source.rsplit("/", 1)[0] if f.listed_in is None else f.listed_in for f in funcs.values()})
    evs = evidence(*[(funcs[b].source, n) for b, n in named.items() if any(b in x for x in notes)][:4],
                   *[(s, f"{len(funcs)} PCI functions") for s in listing[:2]], ("system pci.ids", db.path or "not installed"))
    if not db.has_vendors:
        return unknown(cid, "PCI names: no pci.ids database installed", "Install the pci.ids package (Debian: pci.ids) to name devices.", evidence_=evs)
    denied = ctx.facts.unreadable_under("/sys/bus/pci/devices")  # ids unreadable, not unknown to pci.ids
    no_id = [b for b, f in funcs.items() if f.vendor is None] if denied else []
    if no_id:
        why = f" ({denied[0][1]})"
        return unknown(cid, f"{len(no_id)} PCI function(s) without a readable vendor id{why}",
                       "Their vendor and device ids could not be read, so what they are is not known.", evidence_=evs)
    if unknown_ids:
        return finding(cid, Status.unknown, f"{len(unknown_ids)} PCI function(s) of an unknown vendor: {', '.join(named[b] for b in unknown_ids[:4])}",
                       evidence_=evs, details={"devices": named}, impact="Not in the installed pci.ids; look the id up before guessing what it is.")
    unk_dev = [b for b in named if "unknown device" in named[b]]
    by_text = [b for b in named if funcs[b].vendor is None]
    by_data = [b for b in named if funcs[b].vendor == NVIDIA and funcs[b].device is not None and db.device_name(NVIDIA, funcs[b].device) is None
               and device_name(funcs[b].device)]
    if by_text and len(by_text) == len(named) and not notes:
        return unknown(cid, f"PCI names: {len(named)} function(s) listed without vendor:device ids",
                       "lspci without -nn prints names only; run lspci -nn (or -vvv -nn) so each device can be checked by its ids.", evidence_=evs)
    title = f"All {len(named)} PCI functions identified" + (f" ({len(unk_dev)} by vendor and class only)" if unk_dev else "") \
        + (f" ({len(by_text)} by lspci's own names, no ids)" if by_text else "") \
        + (f"; {len(by_data)} NVIDIA device(s) newer than the system pci.ids named from infergap's GPU data" if by_data else "")
    if notes:
        title += "; " + "; ".join(notes)
    return finding(cid, Status.ok, title, evidence_=evs, details={"devices": named})


def _custom_allreduce(ctx: Context) -> Finding | None:
    """allreduce.custom: SGLang's and vLLM's custom all-reduce needs CUDA P2P between every pair of
    the tensor-parallel GPUs (both check it at start-up) and, beyond two GPUs, NVLink between all."""
    cid = "allreduce.custom"
    gpus = ctx.facts.gpus()
    if len(gpus) < 2:
        return None
    refs = ["sglang/srt/distributed/device_communicators/custom_all_reduce.py", "vllm/distributed/device_communicators/custom_all_reduce.py"]
    pairs, nsrc = _nvlink_pairs(ctx)
    full_nv = bool(pairs) and all(n > 0 for n in pairs.values())
    p2p, psrc = ctx.facts.p2p_status()
    n_pairs = len(gpus) * (len(gpus) - 1) // 2
    p2p_ok = bool(p2p) and all(v == "OK" for v in p2p.values()) and len(_unordered(p2p)) >= n_pairs
    p2p_bad = {k: v for k, v in p2p.items() if v != "OK"}
    layout, entry = _layout(ctx)
    if len(gpus) > 2 and not full_nv and (nsrc is not None or layout == "none"):
        groups = _groups(pairs) if pairs else []
        tip = f" TP={len(groups[0])} inside an NVLink group ({'-'.join(groups[0])}) keeps it." if groups and layout == "bridge" else ""
        return finding(cid, Status.expected, f"Custom all-reduce will be disabled: {len(gpus)} GPUs without NVLink between all of them",
                       evidence_=evidence((nsrc or "infergap gpus.yaml", f"{len(gpus)} GPUs, no NVLink between every pair")),
                       impact="SGLang and vLLM disable their custom all-reduce kernel on more than two GPUs without full NVLink and fall back to NCCL (~20-25 µs per all-reduce at batch 1); "
                              "no stock flag re-enables it." + tip + " The plan covers PCIe alternatives.", references=refs)
    if p2p_bad:
        return finding(cid, Status.expected, f"Custom all-reduce will be disabled: no P2P between {len(_unordered(p2p_bad))} GPU pair(s)",
                       evidence_=evidence((psrc, ", ".join(sorted(set(p2p_bad.values()))))),
                       impact="The engines check CUDA peer access between all tensor-parallel GPUs at start-up and fall back to NCCL without it; see gpu.p2p for why P2P is missing.", references=refs)
    if not p2p_ok:
        return unknown(cid, "Custom all-reduce: P2P between the GPUs not known",
                       f"The engines use it only when CUDA peer access works between every pair of tensor-parallel GPUs; {P2P_CMD} (or torch.cuda.can_device_access_peer) tells.",
                       evidence_=evidence((nsrc, "NVLink between all pairs") if full_nv else None))
    if not full_nv and len(gpus) > 2:
        return unknown(cid, f"Custom all-reduce: NVLink between the {len(gpus)} GPUs not known",
                       "Beyond two GPUs the engines need NVLink between all of them; nvidia-smi topo -m tells.", evidence_=evidence((psrc, "P2P OK")))
    evs = evidence((psrc, f"P2P OK between all {n_pairs} GPU pair(s)"), (nsrc, "NVLink between all pairs") if full_nv else None)
    if full_nv:
        return finding(cid, Status.ok, "Custom all-reduce usable: NVLink and P2P between every GPU pair", evidence_=evs, references=refs)
    return finding(cid, Status.ok, "Custom all-reduce usable on the pair of PCIe GPUs (P2P OK)", evidence_=evs,
                   impact="SGLang and vLLM keep their custom all-reduce for two PCIe GPUs when P2P works.", references=refs)


def allreduce_from_engine_log(label: str, f: EngineLogFacts) -> Finding | None:
    """allreduce.custom from an SGLang or vLLM log (``f`` its :class:`~infergap.parsers.engine_log.EngineLogFacts`):
    disabled on more than two PCIe-only GPUs is the engines' design (expected); disabled because the
    P2P test failed is a host problem (P1); turned off by flag with TP > 1 is P2."""
    tp = f.args.get("tp_size") or f.args.get("tensor_parallel_size")
    if f.custom_ar_disabled:
        reasons = f.custom_ar_disabled
        pcie = any("PCIe-only" in r or "more than two" in r for r in reasons)
        ev_ = [ev(label, f"Custom allreduce is disabled because {r}") for r in reasons[:3]]
        if pcie and all(("PCIe-only" in r or "more than two" in r) for r in reasons):
            return finding("allreduce.custom", Status.expected, subject=label,
                           title="Custom all-reduce off: more than two PCIe-only GPUs (by design)", evidence_=ev_,
                           impact="SGLang and vLLM ship their custom all-reduce only for NVLink or at most two PCIe GPUs; beyond that "
                                  "tensor-parallel all-reduce goes to NCCL. No stock flag re-enables it; what to do instead "
                                  "(DP replicas, PP, an opt-in PCIe all-reduce) is the plan's call.")
        return finding("allreduce.custom", Status.actionable, subject=label,
                       severity=Severity.P1, fix_kind=FixKind.runtime,
                       title="Custom all-reduce off because GPU P2P is unavailable", evidence_=ev_,
                       expected_value="custom all-reduce on (P2P between the tensor-parallel GPUs)",
                       impact="The engine's P2P test failed, so every all-reduce goes to NCCL, which on the same host then "
                              "also lacks P2P. On datacenter GPUs look at ACS and IOMMU (pcie.acs, iommu.mode).",
                       remedy=Remedy(commands=["nvidia-smi topo -p2p r   # which pairs the driver offers P2P between",
                                               "nvidia-smi -L   # GeForce GPUs have no PCIe P2P by product design",
                                               "lspci -vvv | grep -i acsctl   # datacenter GPUs reported peer-capable: ACS redirect on the path"],
                                     note="The engine's log does not say why P2P failed; change firmware settings only after these show ACS redirect "
                                          "or a translating IOMMU on GPUs that support P2P."))
    if f.args.get("disable_custom_all_reduce") is True and isinstance(tp, int) and tp > 1:
        return finding("allreduce.custom", Status.actionable, subject=label,
                       severity=Severity.P2,
                       title="Custom all-reduce turned off by --disable-custom-all-reduce",
                       evidence_=[ev(label, "disable_custom_all_reduce=True"), ev(label, f"tp_size={tp}")],
                       impact="On NVLink or two PCIe GPUs the custom kernel beats NCCL for the small all-reduces of decode.",
                       remedy=Remedy(commands=["restart the server without --disable-custom-all-reduce"]))
    return None


def allreduce_from_server(cfg: ServerConfig, subject: str, facts: Facts, log_reported: bool) -> Finding | None:
    """allreduce.custom from a server's configuration (``cfg`` a :class:`~infergap.server.ServerConfig`,
    ``facts`` the host's :class:`~infergap.facts.Facts`): custom all-reduce turned off with TP > 2
    is P1 on NVLink GPUs and expected on PCIe-only ones; None when an engine log already reported
    it (``log_reported``) or the links are not known."""

    def _src(cfg: ServerConfig, field: str) -> str:
        return cfg.sources.get(field, cfg.url or "server")

    tp = cfg.tp_size
    if log_reported or tp is None or tp <= 2 or not cfg.disable_custom_all_reduce:
        return None
    nvl = facts.nvlink_between_gpus()
    if nvl is None:
        names = facts.gpu_names()  # the GPU data knows which models have no NVLink at all
        nvl = False if names and all((s := sku(n)) is not None and s.nvlink_layout == "none" for n in names) else None
    if nvl is None:
        return None
    if nvl:
        return finding("allreduce.custom", Status.actionable, subject=subject, severity=Severity.P1,
                       title=f"Custom all-reduce off with TP={tp} on NVLink GPUs",
                       evidence_=[ev(_src(cfg, "disable_custom_all_reduce"), "disable_custom_all_reduce=True"), ev(_src(cfg, "tp_size"), f"tp_size={tp}")],
                       impact="With NVLink the engine's custom all-reduce is faster than NCCL for decode-sized messages.",
                       remedy=Remedy(commands=["restart without --disable-custom-all-reduce"]))
    return finding("allreduce.custom", Status.expected, subject=subject,
                   title=f"Custom all-reduce off with TP={tp} on PCIe-only GPUs (by design)",
                   evidence_=[ev(_src(cfg, "tp_size"), f"tp_size={tp}"), ev("cmds/nvsmi_topo.out", "no NVLink between GPUs")],
                   impact="The engines' custom all-reduce needs NVLink beyond two GPUs; tensor-parallel all-reduce goes to NCCL. "
                          "Alternatives (DP replicas, PP, opt-in PCIe all-reduce) are for the plan.")


def investigate(ctx: Context) -> list[Finding]:
    """nvlink.topology (+ nvlink.fabric), gpu.p2p, nvidia.peermem, pci.unidentified, allreduce.custom."""
    out: list[Finding] = []
    if ctx.facts.gpus():
        out += _nvlink(ctx)
    for fn in (_p2p, _peermem, _unidentified, _custom_allreduce):
        f = fn(ctx)
        if f is not None:
            out.append(f)
    return out + _p2p_measured(ctx) + _p2p_waived(ctx)
