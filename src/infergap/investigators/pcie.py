"""PCIe: link speed/width, MaxReadReq (MRRS), MaxPayload (MPS), RCB, ACS, IOMMU mode, BAR1.

Register decoding is in :mod:`infergap.parsers.pci` (PCIe Base Specification §7.5.3, §7.7.8).
Judgements and their sources:
- MRRS: 4096 B is what GPU vendors' firmware normally programs; 512 B is a common firmware default.
  Public evidence of inference impact is thin, so actionable at P1 at most (checks reference).
- MPS: the in-use value must not exceed what every device on the path supports; 256 B supported is
  the hardware limit of A100, H100/H200 and Blackwell GPUs (their DevCap), so 256 in use there is
  expected, never actionable.
- RCB: reported only (no public evidence of impact).
- ACS: ReqRedir/CmpltRedir (or SrcValid, per NCCL's troubleshooting guide "PCI Access Control
  Services") on bare-metal bridges between GPUs force peer traffic through the root complex.
- IOMMU: ``/sys/kernel/iommu_groups/*/type`` "identity" is passthrough; "DMA"/"DMA-FQ" translate
  every device access (Documentation/ABI/testing/sysfs-kernel-iommu_groups).
- BAR1: consumer GPUs default to a 256 MiB BAR1, which blocks BAR1-based P2P; datacenter GPUs map
  tens of GiB (NVML ``nvmlDeviceGetBAR1MemoryInfo``).
"""

from __future__ import annotations

import re

from infergap import checks
from infergap.facts import GpuFacts, PciFunction
from infergap.findings import Action, Finding, FixKind, Remedy, Status
from infergap.gpudata import pcie_gen_of_gts, pcie_gts
from infergap.investigators.base import Context, evidence, finding, not_applicable, unknown

NAME = "pcie"
MRRS_GOOD_B = checks.threshold("pcie.max_read_request", "good_bytes")
#: An extended capability line of lspci -vvv (offset >= 0x100, shown only when read as root).
EXT_CAP = re.compile(r"Capabilities: \[[1-9a-f][0-9a-f]{2} v\d+\]")
SPEED_GTS = re.compile(r"([\d.]{1,16})\s{0,8}GT/s")


def _gts(s: str | None) -> float | None:
    m = SPEED_GTS.search(s or "")
    return float(m.group(1)) if m else None


def _gpu_label(ctx: Context, f: PciFunction) -> str:
    g = next((g for g in ctx.facts.gpus() if g.bdf == f.bdf), None)
    return f"{f.bdf} ({g.name})" if g and g.name else f.bdf


def _link_reading(ctx: Context, f: PciFunction, g: GpuFacts | None) -> tuple[float | None, int | None, float | None, int | None, str]:
    """(current GT/s, width, maximum GT/s, width, source) of a function's link: sysfs, else lspci
    -vvv, else nvidia-smi / NVML (which report generations, not GT/s)."""
    cur_s, max_s = _gts(f.cur_speed), _gts(f.max_speed)
    cur_w, max_w = f.cur_width, f.max_width
    src = f.source
    if cur_s is None and f.lspci and f.lspci.link_sta:
        cur_s, cur_w = f.lspci.link_sta
        max_s, max_w = f.lspci.link_cap or (None, None)
        src = ctx.facts.src("lspci_vvv")
    if cur_s is None and g is not None and g.pcie_gen is not None:
        cur_s, max_s = pcie_gts(g.pcie_gen), pcie_gts(g.pcie_gen_max)
        cur_w, max_w = g.pcie_width, g.pcie_width_max
        src = g.sources[-1] if g.sources else "nvidia-smi"
    return cur_s, cur_w, max_s, max_w, src


def _link(ctx: Context, f: PciFunction, g: GpuFacts | None, who: str | None = None) -> Finding:
    """pcie.link of one function (``who`` names it in titles; ``GPU <bdf>`` by default). Below the
    maximum means below the capability (LnkCap, max_link_*), or lspci's ``(downgraded)`` note on
    LnkSta when the capability is not in the paste; no maximum at all is unknown, never ok."""
    cid = "pcie.link"
    who = who or f"GPU {f.bdf}"
    cur_s, cur_w, max_s, max_w, src = _link_reading(ctx, f, g)
    if cur_s is None or cur_w is None:
        return unknown(cid, "PCIe link: not captured", "Needs sysfs current/max_link_speed and width, lspci -vvv, or nvidia-smi.", subject=f.bdf)
    note = (f.lspci.speed_downgraded, f.lspci.width_downgraded) if f.lspci is not None and f.lspci.link_sta else (None, None)
    notes = ", ".join(f"{k} {'downgraded' if v else 'ok'}" for k, v in zip(("speed", "width"), note) if v is not None)
    evs = evidence((src, f"current {cur_s:g} GT/s x{cur_w}" + (f" (lspci: {notes})" if notes else "")),
                   (src, f"maximum {max_s:g} GT/s x{max_w}" if max_s else "maximum unknown"))
    label = f"gen{pcie_gen_of_gts(cur_s) or '?'} x{cur_w}"
    max_w_txt = f"x{max_w}" if max_w else "(lspci: downgraded)"
    max_s_txt = f"{max_s:g} GT/s" if max_s else "its maximum (lspci: downgraded)"
    if (max_w and cur_w < max_w) or (not max_w and note[1]):
        return finding(cid, Status.actionable, f"{who}: PCIe link width x{cur_w} below its maximum {max_w_txt}",
                       subject=f.bdf, evidence_=evs, expected_value=f"x{max_w}" if max_w else "the width of LnkCap",
                       impact="A narrower link divides host<->device and peer bandwidth (weights loading, KV offload, PCIe all-reduce); width does not drop at idle, so this is a seating, riser or slot problem.",
                       remedy=Remedy(commands=[], note="Reseat the GPU or riser, try another slot, check the slot's bifurcation / lane settings in the BIOS."),
                       references=["PCIe Base Specification: Link Status register"])
    if (max_s and cur_s < max_s) or (not max_s and note[0]):
        return _slow_link(f, g, who, f"{cur_s:g} GT/s", max_s_txt, evs)
    if not max_s and not max_w and note != (False, False):
        return unknown(cid, f"{who}: PCIe {label}; its maximum is not captured",
                       "Whether the link runs below what the card and slot can do needs the capability: lspci -vvv (LnkCap) or "
                       "/sys/bus/pci/devices/<bdf>/max_link_speed and max_link_width.", subject=f.bdf, evidence_=evs)
    return finding(cid, Status.ok, f"{who}: PCIe {label} at its maximum", subject=f.bdf, evidence_=evs, expected_value=f"{max_s:g} GT/s x{max_w}" if max_s else None)


def _slow_link(f: PciFunction, g: GpuFacts | None, who: str, cur: str, top: str, evs: list) -> Finding:
    """pcie.link of a link below its maximum speed: expected while the GPU idles, actionable while
    it is busy, unknown when nothing says which."""
    cid = "pcie.link"
    idle = g is not None and ("gpu_idle" in g.throttle_active or (g.pstate or "").upper() in ("P8", "P12"))
    load_known = g is not None and (g.throttle_captured or g.pstate is not None or g.utilization_pct is not None)
    if idle:
        return finding(cid, Status.expected, f"{who}: PCIe link at {cur} below {top} while idle",
                       subject=f.bdf, evidence_=evs, expected_value=f"{top} under load",
                       impact="GPUs lower the link speed when idle to save power and raise it under load; sample again while the server is busy before calling it a fault.")
    if not load_known:
        return unknown(cid, f"{who}: PCIe link at {cur} below {top}; whether the GPU was idle is not captured",
                       "Idle GPUs lower the link speed, busy ones must not: sample nvidia-smi -q -d PERFORMANCE (or --query-gpu=pstate,clocks_event_reasons.active) "
                       "with the link speed while the server is under load.", subject=f.bdf, evidence_=evs)
    return finding(cid, Status.actionable, f"{who}: PCIe link at {cur} below {top} while busy",
                   fix_kind=FixKind.bios, subject=f.bdf, evidence_=evs, expected_value=top,
                   impact="A downtrained link under load halves (or worse) host<->device and peer bandwidth.",
                   remedy=Remedy(note="Set the slot's PCIe generation to Auto/Gen5 in the BIOS, reseat, check risers and retimers."),
                   references=["PCIe Base Specification: Link Status register"])


def _caps(f: PciFunction) -> tuple[dict[str, int | None], str] | None:
    """MPS supported/in use, MRRS, RCB and DevCtl from config space, else from lspci -vvv."""
    if f.config is not None and f.config.pcie is not None:
        p = f.config.pcie
        return {"mps_sup": p.mps_supported_B, "mps": p.mps_B, "mrrs": p.mrrs_B, "rcb": p.rcb_B, "devctl": p.devctl_word}, f"{f.source}/config.hex"
    if f.lspci is not None and f.lspci.mrrs_B is not None:
        l = f.lspci
        return {"mps_sup": l.mps_supported_B, "mps": l.mps_B, "mrrs": l.mrrs_B, "rcb": l.rcb_B, "devctl": None}, "cmds/lspci_vvv.out"
    return None


def _why_no_caps(f: PciFunction) -> str:
    if f.config_error:
        return f"PCI config space of {f.bdf} is unreadable ({f.config_error})."
    if f.config is not None and f.config.pcie is None:
        return f"Only the first {len(f.config.raw)} bytes of config space were readable (run the capture as root) and lspci -vvv was not captured."
    return "Needs PCI config space (config.hex, read as root) or lspci -vvv."


def _mrrs(ctx: Context, f: PciFunction) -> Finding:
    cid = "pcie.max_read_request"
    c = _caps(f)
    if c is None:
        return unknown(cid, f"GPU {f.bdf}: MaxReadReq not captured", _why_no_caps(f), subject=f.bdf)
    caps, src = c
    mrrs = caps["mrrs"]
    evs = evidence((src, f"DevCtl MaxReadReq {mrrs} bytes"))
    if mrrs is not None and mrrs >= MRRS_GOOD_B:
        return finding(cid, Status.ok, f"GPU {f.bdf}: MaxReadReq {mrrs} bytes", subject=f.bdf, evidence_=evs, expected_value=f"{MRRS_GOOD_B}")
    devctl = caps["devctl"]
    new_code = 5  # 128 << 5 = 4096 (PCIe Base Spec, DevCtl bits 14:12)
    prev_bits = f"{devctl & 0x7000:04x}" if devctl is not None else None
    host = ctx.in_container
    write = {"bdf": f.bdf, "reg": "CAP_EXP+8.w", "mask": "7000"}
    rem = checks.remedy(
        cid,
        commands=[("setpci_write", {**write, "value": f"{new_code << 12:04x}"})],
        persist=["a boot-time systemd unit (or udev rule) running the setpci command above, or the firmware's 'Max Read Request' setting"],
        revert=[("setpci_write", {**write, "value": prev_bits})] if prev_bits else [("revert_unknown", {"bdf": f.bdf})],
        actions=[Action(type="setpci", target=f.bdf, pci_register="CAP_EXP+8.w", value=f"{new_code << 12:04x}", mask="7000", previous=prev_bits)],
        host_controlled=host,
        note="Inside a container: PCI config space belongs to the host; run this on the host." if host else "setpci writes the live register; save the old word first (the revert above holds it).",
    )
    return finding(cid, Status.actionable, f"GPU {f.bdf}: MaxReadReq {mrrs} bytes, below {MRRS_GOOD_B}",
                   subject=f.bdf, evidence_=evs, expected_value=f"{MRRS_GOOD_B} bytes",
                   impact="Each DMA read the GPU issues is split into requests of at most this size; small requests add TLP overhead on host-to-device copies. Public evidence of end-to-end inference impact is thin.",
                   remedy=rem, references=["PCIe Base Specification §7.5.3.4 Device Control Register", "pciutils setpci(8): CAP_EXP"])


def _path_mps_supported(ctx: Context, f: PciFunction) -> int | None:
    """The smallest MaxPayload supported by the bridges above ``f`` (None when none is known)."""
    sup = [c[0]["mps_sup"] for c in map(_caps, ctx.facts.upstream(f)) if c and c[0]["mps_sup"]]
    return min(sup) if sup else None


def _mps(ctx: Context, f: PciFunction, g: GpuFacts | None) -> Finding:
    cid = "pcie.max_payload"
    c = _caps(f)
    if c is None:
        return unknown(cid, f"GPU {f.bdf}: MaxPayload not captured", _why_no_caps(f), subject=f.bdf)
    caps, src = c
    sup, use = caps["mps_sup"], caps["mps"]
    path = _path_mps_supported(ctx, f)
    limit = min(x for x in (sup, path) if x) if (sup or path) else None
    evs = evidence((src, f"DevCap MaxPayload {sup} bytes"), (src, f"DevCtl MaxPayload {use} bytes"))
    if path:
        evs += evidence(("upstream bridges", f"smallest MaxPayload supported on the path: {path} bytes"))
    if use is not None and limit is not None and use < limit:
        return finding(cid, Status.actionable, f"GPU {f.bdf}: MaxPayload {use} bytes in use, {limit} supported along the path",
                       fix_kind=FixKind.reboot, subject=f.bdf, evidence_=evs, expected_value=f"{limit} bytes",
                       impact="Smaller payloads mean more TLP headers per byte on writes to the GPU.",
                       remedy=Remedy(commands=[], persist=["pci=pcie_bus_perf on the kernel command line, or the firmware's MaxPayload setting"], note="MPS must match along the path; the kernel sets it at enumeration."),
                       references=["Documentation/admin-guide/kernel-parameters.txt: pci=pcie_bus_perf"])
    if sup is not None and sup <= 256 and use == sup:
        name = g.name if g and g.name else "this GPU"
        return finding(cid, Status.expected, f"GPU {f.bdf}: MaxPayload {use} bytes = the most its DevCap supports",
                       subject=f.bdf, evidence_=evs, expected_value=f"{sup} bytes",
                       impact=f"256 bytes is the hardware limit of {name}'s PCIe endpoint (Device Capabilities); no setting can raise it, so do not spend time on it.")
    return finding(cid, Status.ok, f"GPU {f.bdf}: MaxPayload {use} bytes", subject=f.bdf, evidence_=evs, expected_value=f"{limit} bytes" if limit else None)


def _rcb(ctx: Context, f: PciFunction) -> Finding:
    cid = "pcie.rcb"
    c = _caps(f)
    if c is None or c[0]["rcb"] is None:
        return unknown(cid, f"GPU {f.bdf}: RCB not captured", _why_no_caps(f), subject=f.bdf)
    rcb = c[0]["rcb"]
    evs = evidence((c[1], f"LnkCtl RCB {rcb} bytes"))
    if rcb == 64:
        return finding(cid, Status.expected, f"GPU {f.bdf}: Read Completion Boundary 64 bytes", subject=f.bdf, evidence_=evs,
                       impact="RCB only sets where completions may be split; 64 bytes is the common setting and there is no public evidence that it limits GPU throughput. Reported, not a target.")
    return finding(cid, Status.ok, f"GPU {f.bdf}: Read Completion Boundary {rcb} bytes", subject=f.bdf, evidence_=evs)


def _acs(ctx: Context, gpus: list[PciFunction]) -> list[Finding]:
    """pcie.acs on every bridge above the GPUs and the RDMA NICs (GPU-to-GPU P2P and GPUDirect
    RDMA both cross them). The bridges come from sysfs device links, else from the bridges' bus
    numbers in ``lspci -vvv``."""
    cid = "pcie.acs"
    nics = ctx.facts.rdma_nic_functions()
    rdma = ctx.facts.rdma_devices()
    if len(gpus) < 2 and not rdma:
        return [not_applicable(cid, "ACS: no peer traffic to redirect", "ACS redirection matters for GPU-to-GPU and GPU-to-NIC peer traffic; this host has one GPU and no RDMA NIC.",
                               evidence_=evidence((gpus[0].source if gpus else "host", f"{len(gpus)} GPU, no RDMA NIC")))]
    vm = ctx.facts.virtualization()
    ends = gpus + (nics if rdma else [])
    bridges: dict[str, PciFunction] = {}
    for g in ends:
        for b in ctx.facts.upstream(g):
            bridges[b.bdf] = b
    placed = [g for g in ends if g.path_known or g.parent_from]
    what = "the GPUs and the RDMA NICs" if rdma and nics else "the GPUs"
    if not bridges and ends and len(placed) == len(ends) and all(g.parent is None for g in ends):
        return [finding(cid, Status.ok, f"No PCI bridge above {what}: each sits on a root bus, so no ACS can redirect peer traffic",
                        evidence_=evidence(*[(f"files/sys/bus/pci/devices/{g.bdf}.link" if g.path_known else (g.parent_from or g.source), f"{g.bdf} directly below the host bridge") for g in ends[:8]]),
                        expected_value="no redirection")]
    if not bridges:
        return [unknown(cid, f"ACS: bridges above {what} not found", "Needs the device symlinks (sysfs) or lspci -vvv with the bridges' 'Bus: primary=…' lines to find the bridges above each GPU, and their ACS control (lspci -vvv as root).")]
    present, redirecting, unread = [], [], []
    for b in bridges.values():
        if b.config is not None and b.config.extended_readable:
            if b.config.acs is not None:
                present.append((b.bdf, f"{b.source}/config.hex", f"ACSCtl 0x{b.config.acs.ctrl:04x}: " + (" ".join(f + "+" for f in b.config.acs.ctrl_flags) or "no control bit set")))
                if b.config.acs.redirects:
                    redirecting.append((b, b.config.acs.ctrl_flags, f"{b.source}/config.hex", f"{b.config.acs.ctrl:04x}"))
        elif b.lspci is not None and b.lspci.acs_ctl is not None:
            present.append((b.bdf, ctx.facts.src("lspci_vvv"), "ACSCtl " + " ".join(f"{k}{'+' if v else '-'}" for k, v in b.lspci.acs_ctl.items())))
            flags = [k for k, v in b.lspci.acs_ctl.items() if v]
            if b.lspci.acs_ctl.get("ReqRedir") or b.lspci.acs_ctl.get("CmpltRedir"):
                redirecting.append((b, flags, ctx.facts.src("lspci_vvv"), None))
        elif b.lspci is not None and any(EXT_CAP.match(line) for line in b.lspci.lines):
            continue  # lspci listed the extended capabilities (read as root) and ACS is not among them
        else:
            unread.append(b.bdf)
    if redirecting:
        out = []
        for b, flags, src, word in redirecting:
            if vm is not None:
                out.append(finding(cid, Status.expected, f"Bridge {b.bdf}: ACS redirects peer traffic (VM)", subject=b.bdf,
                                   evidence_=evidence((src, "ACSCtl " + " ".join(f + "+" for f in flags)), vm),
                                   impact="Inside a VM, ACS isolation is needed for passthrough; peer traffic goes through the root complex by design."))
                continue
            host = ctx.in_container
            out.append(finding(cid, Status.actionable, f"Bridge {b.bdf}: ACS redirects peer-to-peer traffic ({', '.join(flags)})",
                subject=b.bdf,
                evidence_=evidence((src, "ACSCtl " + " ".join(f + "+" for f in flags))), expected_value="ReqRedir- CmpltRedir-",
                impact="With request/completion redirect on, GPU peer traffic under this bridge is routed up to the root complex: low P2P bandwidth or NCCL hangs (NCCL troubleshooting guide, PCI ACS).",
                remedy=checks.remedy(cid, commands=[("setpci_write", {"bdf": b.bdf, "reg": "ECAP_ACS+6.w", "value": "0000", "mask": "ffff"})],
                              persist=[("persist", {"bdf": b.bdf})],
                              revert=[("setpci_write", {"bdf": b.bdf, "reg": "ECAP_ACS+6.w", "value": word, "mask": "ffff"})] if word else [],
                              actions=[Action(type="setpci", target=b.bdf, pci_register="ECAP_ACS+0x6.w", value="0000", mask="ffff", previous=word)] if word else [],
                              host_controlled=host),
                references=["NCCL troubleshooting guide: PCI Access Control Services (ACS)", "Documentation/admin-guide/kernel-parameters.txt: pci=disable_acs_redir"],
            ))
        return out
    if present:
        if unread:
            return [unknown(cid, f"ACS: no redirection on {len(present)} bridge(s); {len(unread)} other bridge(s) above {what} not readable",
                            "Extended config space needs root (or lspci -vvv as root) for bridges " + ", ".join(unread[:4]),
                            evidence_=evidence(*[(src, f"{b}: {txt}") for b, src, txt in present[:8]]))]
        return [finding(cid, Status.ok, f"ACS present on {len(present)} bridge(s) above {what}, no peer redirection",
                        evidence_=evidence(*[(src, f"{b}: {txt}") for b, src, txt in present[:8]]),
                        expected_value="ReqRedir- CmpltRedir-",
                        details={"bridges": [b for b, _, _ in present]})]
    if unread:
        return [unknown(cid, "ACS: bridge config space not readable", "Extended config space needs root (or lspci -vvv as root) for bridges " + ", ".join(unread[:4]))]
    return [finding(cid, Status.ok, f"No ACS capability on the {len(bridges)} bridge(s) above {what}", expected_value="no redirection",
                    evidence_=evidence(*[((f"{b.source}/config.hex" if b.config is not None else ctx.facts.src("lspci_vvv")), f"{b.bdf}: no ACS extended capability") for b in list(bridges.values())[:8]]))]


def _iommu_types(ctx: Context, funcs: list[PciFunction]) -> tuple[dict[str, str], dict[str, str]]:
    """(group -> type of every IOMMU group, BDF -> type of each function in ``funcs``): from
    ``/sys/kernel/iommu_groups/*/type`` and each device's ``iommu_group/type``."""
    types = ctx.facts.iommu_group_types()
    per_dev = {}
    for f in funcs:
        t = ctx.facts.iommu_type_of(f)
        if t:
            per_dev[f.bdf] = t
    return types, per_dev


def _iommu(ctx: Context, gpus: list[PciFunction]) -> Finding:
    """iommu.mode from the group types (sysfs), the groups' existence (sysfs, ``lspci -vvv``
    "IOMMU group:"), and the kernel command line (``intel_iommu=``, ``amd_iommu=``, ``iommu=pt``;
    Documentation/admin-guide/kernel-parameters.txt). An IOMMU that is on without ``iommu=pt``
    translates DMA: the kernel's default domain type is DMA unless it was built with
    CONFIG_IOMMU_DEFAULT_PASSTHROUGH (drivers/iommu/Kconfig)."""
    cid = "iommu.mode"
    cl = ctx.facts.cmdline()
    params = dict(p.partition("=")[::2] for p in (cl.value.split() if cl else []))
    nics = ctx.facts.rdma_nic_functions()
    devs = gpus + nics
    types, per_dev = _iommu_types(ctx, devs)
    on_cmd = [f"{k}={params[k]}" for k in ("intel_iommu", "amd_iommu") if params.get(k, "").split(",")[0] in ("on", "force_isolation", "force_enable")]
    off_cmd = [f"{k}=off" for k in ("intel_iommu", "amd_iommu", "iommu") if params.get(k) == "off"]
    pt = params.get("iommu") == "pt" or params.get("iommu.passthrough") == "1"
    grouped = [f for f in devs if f.iommu_group]
    evs = evidence(cl)
    if per_dev:
        evs += evidence(*[(f"files/sys/bus/pci/devices/{b}/iommu_group/type", f"{b}: {t}") for b, t in list(per_dev.items())[:8]])
    elif types:
        evs += evidence(("files/sys/kernel/iommu_groups", f"{len(types)} groups, types: {', '.join(sorted(set(types.values())))}"))
    elif grouped:
        evs += evidence(*[(f.source if f.lspci is None else ctx.facts.src("lspci_vvv"), f"{f.bdf}: IOMMU group {f.iommu_group}") for f in grouped[:4]])
    remedy = Remedy(persist=["add iommu=pt to the kernel command line (GRUB_CMDLINE_LINUX), update-grub, reboot"], revert=["remove iommu=pt from the kernel command line, reboot"], host_controlled=ctx.in_container)
    refs = ["Documentation/admin-guide/kernel-parameters.txt: iommu=pt", "Documentation/ABI/testing/sysfs-kernel-iommu_groups"]
    impact = ("With a translating IOMMU every GPU (and NIC) DMA and peer access goes through IOMMU page tables: lower host<->device and P2P bandwidth, and "
              "P2P or GPUDirect RDMA may fail (NCCL hangs, IO_PAGE_FAULT / DMAR faults in the kernel log).")
    translated = sorted(b for b, t in per_dev.items() if t.startswith("DMA"))
    if not per_dev and types and devs:
        translated = ["(groups)"] if any(t.startswith("DMA") for t in types.values()) and not all(t == "identity" for t in types.values()) else []
    if translated:
        who = ", ".join(translated[:4]) if translated != ["(groups)"] else "the IOMMU groups"
        return finding(cid, Status.actionable, f"IOMMU translates GPU/NIC DMA (group type DMA: {who})",
                       evidence_=evs, expected_value="identity (iommu=pt) or off",
                       impact=impact, remedy=remedy, references=refs)
    if per_dev or types:
        mode = "passthrough (identity)" if all(t == "identity" for t in (per_dev.values() or types.values())) else "mixed"
        return finding(cid, Status.ok, f"IOMMU in {mode} mode for the GPUs" + (" (iommu=pt)" if pt else ""), evidence_=evs, expected_value="identity or off")
    groups_exist = bool(grouped) or bool(ctx.facts.listing("/sys/kernel/iommu_groups"))
    listed = ctx.facts.cmd_ok("iommu_ls")  # ls -l /sys/kernel/iommu_groups of older captures
    listed_empty = listed is not None and [ln for ln in listed.stdout.splitlines() if ln.strip()] == ["total 0"]
    no_groups = not groups_exist and (listed_empty or ctx.facts.listing("/sys/kernel/iommu_groups") == []
                                      or (ctx.facts.sysfs_complete() and ctx.facts.listing("/sys/kernel/iommu_groups") is None))
    if no_groups:
        where = (listed.source, "ls -l /sys/kernel/iommu_groups: total 0") if listed_empty else ("files/sys/kernel/iommu_groups", "no groups")
        return finding(cid, Status.ok, "No IOMMU groups: the IOMMU is off or absent", evidence_=evs + evidence(where), expected_value="identity or off")
    if (groups_exist or on_cmd) and not pt and not off_cmd:
        why = ("IOMMU groups exist" if groups_exist else f"the kernel command line turns the IOMMU on ({', '.join(on_cmd)})") + " and iommu=pt is not set"
        return finding(cid, Status.actionable, f"IOMMU on without iommu=pt: GPU DMA is translated by default ({why})",
                       evidence_=evs, expected_value="iommu=pt (identity) or off",
                       impact=impact + " The kernel's default domain is translated unless it was built for passthrough; cat /sys/kernel/iommu_groups/*/type shows it (identity = passthrough).",
                       remedy=remedy, references=refs)
    if pt and cl is not None:
        return finding(cid, Status.ok, "IOMMU in passthrough mode (iommu=pt on the kernel command line)", evidence_=evs, expected_value="identity or off")
    if off_cmd and cl is not None:
        return finding(cid, Status.ok, f"IOMMU off on the kernel command line ({', '.join(off_cmd)})", evidence_=evs, expected_value="identity or off")
    return unknown(cid, "IOMMU mode: not captured" if cl is None else "IOMMU mode: the kernel command line does not set it",
                   "Needs the IOMMU groups: ls /sys/kernel/iommu_groups; cat /sys/kernel/iommu_groups/*/type (identity = passthrough, DMA = translated).", evidence_=evs)


def investigate(ctx: Context) -> list[Finding]:
    """pcie.link, pcie.max_read_request, pcie.max_payload, pcie.rcb per GPU; pcie.acs; iommu.mode;
    pcie.link of link registers pasted without their device line."""
    funcs = ctx.facts.gpu_functions()
    gpus = ctx.facts.gpus()
    by_bdf = {g.bdf: g for g in gpus}
    out: list[Finding] = []
    loose = _unaddressed_links(ctx)
    if not funcs and not gpus:  # gpu_health reports the absence once
        return loose + [_iommu(ctx, [])]
    if not funcs:  # GPUs known only from nvidia-smi / NVML
        funcs = [PciFunction(bdf=g.bdf) for g in gpus]
    for f in funcs:
        g = by_bdf.get(f.bdf)
        out.append(_link(ctx, f, g))
        out.append(_mrrs(ctx, f))
        out.append(_mps(ctx, f, g))
        out.append(_rcb(ctx, f))
    out.extend(_acs(ctx, funcs))
    out.append(_iommu(ctx, funcs))
    return out + loose


def _unaddressed_links(ctx: Context) -> list[Finding]:
    """pcie.link of link registers pasted without their device's header line (which device they
    belong to is not in the paste; the subject names the paste and the line's order in it)."""
    links = ctx.facts.unaddressed_links()
    src = ctx.facts.src("lspci_vvv")
    out = []
    for i, dev in enumerate(links, 1):
        name = f"{src} LnkSta #{i}" if len(links) > 1 else f"{src} LnkSta"
        out.append(_link(ctx, PciFunction(bdf=name, lspci=dev), None, who="The device of the pasted LnkSta line"))
    return out
