"""NCCL's log: which transport each channel took, GPU Direct RDMA, P2P refusals, NCCL_* settings.

Severity model: GPUs on one host talking over ``NET/Socket`` lose one to two orders of magnitude
of all-reduce bandwidth against P2P (P0); ``SHM`` bounces through host memory (P1) but is NCCL's
own default between GPUs on different CPU sockets (``SYS`` in ``nvidia-smi topo -m``: expected);
"GPU Direct RDMA Disabled" with an RDMA NIC stages inter-node traffic through host memory (a public
report, NVIDIA/nccl#1676: 180 → 10 GB/s) (P0). P2P refused between GPUs the driver reports as
unable to peer (``CNS``/``GNS``/``NS`` in ``nvidia-smi topo -p2p r``) is expected.
"""

from __future__ import annotations

import re

from infergap.checks import finding, get, not_applicable, threshold
from infergap.evidence.signatures import catalog
from infergap.evidence.versions import memo_versions, version_finding
from infergap.facts import Facts
from infergap.findings import Finding, FixKind, Remedy, Severity, Status, ev
from infergap.gpudata import sku
from infergap.investigators.base import facts_of
from infergap.investigators.evidence_files import merge_finding, signature_applies, signature_finding, signature_hits
from infergap.investigators.runtime import nccl_env_from_log
from infergap.parsers.nccl import NcclLogFacts

NAME = "nccl_log"
_UNSUPPORTED = {"CNS", "GNS", "TNS", "NS", "DR"}
def _dev_index(dev: str) -> int | None:
    """A rank's device token as a GPU index: ``[1]`` is cudaDev 1; a bus id (``14000``) is not."""
    return int(dev) if dev.isdigit() and len(dev) <= 2 else None


def _version_tuple(v: str | None) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in (v or "").split("."))
    except ValueError:
        return ()


_P2P_FAILED = re.compile(r"peer access is not supported|failed to open CUDA IPC handle", re.I)
"""NCCL warnings that say the P2P transport it chose could not be set up."""
#: Warnings that say the transport of that family could not be set up (NCCL's own texts: the
#: ibverbs wrappers of misc/ibvwrap.cc, net_ib's completion errors, the socket layer's connect
#: failures); a communicator whose chosen transport failed is never ok.
_SET_UP_FAILED = {
    "P2P": _P2P_FAILED,
    "NET/IB": re.compile(r"\bCall to ibv_\w+ failed|NET/IB\s?:.{0,80}\b(?:failed|error)\b|Got completion from peer", re.I),
    "NET/Socket": re.compile(r"\bsocket\w*\s?:.{0,80}failed|Connect to \S{1,80} failed|Connection (?:refused|closed by remote peer|timed out)", re.I),
}


def _p2p_set_up_failed(label: str, f: NcclLogFacts, intra: list, evidence: list, details: dict) -> Finding | None:
    """nccl.transport actionable when NCCL chose a transport (P2P between GPUs of one host, IB or
    sockets between hosts) and then warned that it could not be set up; None otherwise."""
    for fam, rx in _SET_UP_FAILED.items():
        failed = [w for w in f.warnings if rx.search(w)]
        links = intra if fam == "P2P" else f.links
        if failed and any(lk.transport.startswith(fam) for lk in links):
            return _set_up_failed(label, fam, failed, evidence, details)
    return None


def _set_up_failed(label: str, fam: str, failed: list[str], evidence: list, details: dict) -> Finding:
    p2p = fam == "P2P"
    return finding(
        "nccl.transport", Status.actionable, subject=label, severity=Severity.P1, fix_kind=FixKind.runtime,
        title=("NCCL chose P2P between GPUs of one host, but setting up P2P failed" if p2p
               else f"NCCL chose {fam} between hosts, but setting up its connections failed"),
        evidence_=evidence + [ev(label, w) for w in failed[:3]],
        expected_value=f"{fam} channels that open without a warning",
        impact="The channels the log lists were never usable: the communicator failed at set-up (or fell back), so "
               + ("these GPUs do not exchange data over P2P." if p2p else "the nodes do not exchange data over it."),
        remedy=Remedy(commands=["nvidia-smi topo -p2p r   # P2P support per GPU pair",
                                "NCCL_P2P_DISABLE=1   # in the server's environment when the GPUs have no P2P (GeForce, many VMs)"] if p2p else
                      ["ibv_devinfo   # the HCA and port NCCL used are there and PORT_ACTIVE", "ulimit -l   # unlimited for RDMA",
                       "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET   # the call that failed and its errno"],
                      note=("GeForce GPUs have no P2P by product design; on datacenter GPUs look at ACS and the IOMMU." if p2p else
                            "The warning names the call that failed; nccl.net follows the path between the hosts.")),
        references=["https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"],
        details=details)


def _gpu_models(facts: Facts) -> tuple[list[str], bool | None]:
    """The GPU product names the evidence holds, and whether every one of them lacks PCIe P2P by
    product design (``p2p: not_supported`` in data/gpus.yaml); None when a model is not known."""
    try:
        names = [g.name for g in facts.gpus() if g.name and g.name != "unknown device"]
    except Exception:
        return [], None
    skus = [sku(n) for n in names]
    if not names or any(s is None or s.p2p is None for s in skus):
        return names, None
    return names, all(s.p2p == "not_supported" for s in skus if s)


def _p2p_cause(f: NcclLogFacts, facts: Facts, p2p_cells: set[str]) -> tuple[FixKind, list[str], str]:
    """How a missing P2P path is fixed, from what the evidence shows: (fix kind, commands, note).

    The NCCL_* environment in the log switching P2P or SHM off is a runtime fix; the driver
    reporting the pairs peer-capable (``OK`` in ``nvidia-smi topo -p2p r``) while NCCL still does
    not use P2P points at the PCIe path (ACS redirect, a translating IOMMU: firmware or kernel
    command line, NCCL's troubleshooting guide). Without either, the evidence does not say why;
    the remedy then is the commands that tell, never a firmware change."""
    env_off = f.env.get("NCCL_P2P_DISABLE") == "1" or f.env.get("NCCL_P2P_LEVEL") in ("LOC", "0") or f.env.get("NCCL_SHM_DISABLE") == "1"
    look = ["nvidia-smi topo -p2p r   # P2P support per GPU pair (NS/CNS/GNS: the GPUs or platform offer none)",
            "nvidia-smi -L   # the GPU model: GeForce cards have no PCIe P2P by product design"]
    if env_off:
        return (FixKind.runtime,
                ["unset NCCL_P2P_DISABLE NCCL_SHM_DISABLE NCCL_P2P_LEVEL  # in the server's environment, then restart it"] + look[:1],
                "The log's own NCCL_* settings switch the path off; nothing on the host needs to change.")
    if p2p_cells and p2p_cells <= {"OK"}:
        return (FixKind.bios,
                ["lspci -vvv | grep -i acsctl   # ACS redirect on bridges forces peer traffic through the root complex",
                 "cat /proc/cmdline   # iommu=pt / intel_iommu= / amd_iommu="],
                "The driver reports these pairs peer-capable, yet NCCL does not use P2P: ACS redirect on the bridges "
                "(BIOS, or setpci) and a translating IOMMU (iommu=pt on the kernel command line) are the usual causes.")
    return (FixKind.runtime, look + ["lspci -vvv | grep -i acsctl   # only on datacenter GPUs that report P2P support"],
            "The evidence does not say why P2P is not used: no GPU model, no P2P matrix, no NCCL_* setting that switches it off. "
            "Capture the commands' output before changing anything; GeForce GPUs and many VMs offer no P2P at all, "
            "and no firmware setting adds it.")


def _transport(label: str, f: NcclLogFacts, facts: Facts) -> Finding:
    intra = f.intra_host_links()
    src = label
    details = f.summary()
    if not f.links:
        return finding("nccl.transport", Status.unknown, subject=label,
                       title="NCCL log has no channel lines (connection setup not logged)",
                       evidence_=[ev(src, f"{f.nccl_lines} NCCL lines, version {f.version or 'unknown'}")],
                       impact="Without 'Channel … via …' lines the transport between GPUs is unknown; run with NCCL_DEBUG=INFO through the first collective.",
                       details=details)
    bad = [lk for lk in intra if lk.transport.startswith("NET/") or lk.transport == "SHM"]
    topo = facts.topology()
    links = topo.matrix if topo is not None else {}
    p2p, _ = facts.p2p_status()
    env_p2p_off = f.env.get("NCCL_P2P_DISABLE") == "1" or f.env.get("NCCL_P2P_LEVEL") in ("LOC", "0")
    names, consumer = _gpu_models(facts)
    expected, actionable = [], []
    for lk in bad:
        a, b = _dev_index(lk.src_dev), _dev_index(lk.dst_dev)
        pair = (f"GPU{a}", f"GPU{b}") if a is not None and b is not None else None
        cell = links.get(pair) if pair else None
        pcell = p2p.get(pair) if pair else None
        if pcell in _UNSUPPORTED:
            expected.append((lk, f"nvidia-smi topo -p2p reports {pcell} for GPU{a}-GPU{b}"))
        elif lk.transport == "SHM" and cell == "SYS" and not env_p2p_off:
            expected.append((lk, f"GPU{a} and GPU{b} are on different CPU sockets (SYS): NCCL uses SHM there by default"))
        elif lk.transport == "SHM" and consumer and not env_p2p_off:
            expected.append((lk, f"{names[0]} offers no PCIe P2P (a product limit, data/gpus.yaml): NCCL uses SHM between these GPUs"))
        else:
            actionable.append(lk)
    evidence = [ev(src, f"{lk.src}[{lk.src_dev}] -> {lk.dst}[{lk.dst_dev}] via {lk.via} ({lk.channels} channel(s))") for lk in (actionable or [x for x, _ in expected] or intra)[:8]]
    evidence.append(ev(src, "transports: " + ", ".join(f"{k} ×{v}" for k, v in sorted(f.transports.items()))))
    if actionable:
        sock = any(lk.transport.startswith("NET/") for lk in actionable)
        why = []
        if env_p2p_off:
            why.append("P2P is switched off by " + ", ".join(f"{k}={v}" for k, v in f.env.items() if k in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL")))
        if f.env.get("NCCL_SHM_DISABLE") == "1":
            why.append("shared memory is switched off by NCCL_SHM_DISABLE=1")
        if f.p2p_disabled_pairs:
            why.append("NCCL found P2P disabled between " + ", ".join(f"GPU{a}-GPU{b}" for a, b in f.p2p_disabled_pairs[:6]))
        kind, commands, note = _p2p_cause(f, facts, {p2p[(f"GPU{_dev_index(lk.src_dev)}", f"GPU{_dev_index(lk.dst_dev)}")] for lk in actionable
                                                    if _dev_index(lk.src_dev) is not None and _dev_index(lk.dst_dev) is not None
                                                    and (f"GPU{_dev_index(lk.src_dev)}", f"GPU{_dev_index(lk.dst_dev)}") in p2p})
        return finding("nccl.transport", Status.actionable, subject=label,
            severity=Severity.P0 if sock else Severity.P1, fix_kind=kind,
            title=("GPUs on one host exchange data over " + ("TCP sockets (NET/Socket)" if sock else "host shared memory (SHM)") + " instead of P2P"),
            evidence_=evidence, expected_value="P2P (P2P/CUMEM, P2P/IPC, P2P/direct) or NVLink between GPUs of one host",
            impact=("Tensor-parallel all-reduce between these GPUs goes through "
                    + ("the kernel's TCP stack: tens of times slower than P2P, and it dominates decode latency." if sock else
                       "pinned host memory: about half the bandwidth of P2P and extra latency on every all-reduce."))
                   + (" Cause seen in the log: " + "; ".join(why) + "." if why else ""),
            remedy=Remedy(commands=commands, note=note),
            references=["https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#pci-access-control-services-acs"],
            details=details)
    if expected:
        return finding("nccl.transport", Status.expected, subject=label,
                       title="NCCL uses SHM or sockets only where P2P is not available",
                       evidence_=evidence + [ev(src, why) for _, why in expected[:4]],
                       impact="These GPU pairs cannot use P2P on this platform; NCCL's fallback is the normal path there.",
                       details=details)
    failed = _p2p_set_up_failed(label, f, intra, evidence, details)
    if failed is not None:
        return failed
    kinds = sorted({lk.transport for lk in intra}) or sorted(f.transports)
    title = "GPUs of one host use " + ", ".join(kinds) if intra else "NCCL transports: " + ", ".join(sorted(f.transports))
    if f.nvls_channels:
        title += f"; NVLS on {f.nvls_channels} channels"
    if any(lk.transport == "COLLNET" for lk in f.links):
        title += "; CollNet in use"
    return finding("nccl.transport", Status.ok, subject=label, title=title,
                   evidence_=evidence, details=details)


def _gdr(label: str, f: NcclLogFacts, facts: Facts) -> Finding | None:
    if not f.gdr_disabled and not f.gdr_enabled:
        return None
    if not f.gdr_disabled:
        return finding("nccl.gdr", Status.ok, subject=label,
                       title="NCCL uses GPU Direct RDMA", evidence_=[ev(label, "via NET/IB …/GDRDMA")])
    nic = True if f.ib_devices or f.gdr_disabled else bool(facts.rdma_devices())
    inter = any(lk.transport == "NET/IB" for lk in f.links) or not f.single_host or (f.network or "").startswith("IB") and (f.nranks or 0) > 8
    old = _version_tuple(f.version) and _version_tuple(f.version) < (2, 23, 4)
    note = ("NCCL before 2.23.4 looks only for the old nv_peer_mem module, not nvidia_peermem (NVIDIA/nccl#1676): "
            "with nvidia_peermem loaded, upgrade NCCL." if old else
            "With the open GPU kernel module, NCCL can use DMA-BUF instead (NCCL_DMABUF_ENABLE=1, kernel 5.12+).")
    return finding("nccl.gdr", Status.actionable, subject=label,
        severity=Severity.P0 if inter else Severity.P1,
        title=f"GPU Direct RDMA disabled for {', '.join(f.gdr_disabled[:4])}",
        evidence_=[ev(label, f"NET/IB : GPU Direct RDMA Disabled for HCA '{h}'") for h in f.gdr_disabled[:4]]
                 + ([ev(label, f"NCCL {f.version}")] if f.version else []),
        expected_value="GPU Direct RDMA enabled (nvidia-peermem loaded, or DMA-BUF)",
        impact="Inter-node traffic is staged through host memory instead of going NIC↔GPU directly; one public report measured "
               "all-reduce falling from ~180 to ~10 GB/s." + ("" if nic else " (No RDMA NIC was seen in the host evidence.)"),
        remedy=Remedy(commands=["modprobe nvidia-peermem"],
                      persist=["echo nvidia-peermem > /etc/modules-load.d/nvidia-peermem.conf"],
                      revert=["modprobe -r nvidia_peermem"], note=note),
        references=["https://github.com/NVIDIA/nccl/issues/1676", "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#gpu-direct"])


def _p2p(label: str, f: NcclLogFacts, facts: Facts) -> Finding | None:
    if not f.p2p_disabled_pairs:
        return None
    p2p, _ = facts.p2p_status()
    pairs = [(f"GPU{a}", f"GPU{b}") for a, b in f.p2p_disabled_pairs]
    cells = {p2p.get(pair) for pair in pairs if pair in p2p}
    evidence = [ev(label, f"P2P is disabled between connected GPUs {a} and {b}") for a, b in f.p2p_disabled_pairs[:8]]
    if cells and cells <= _UNSUPPORTED:
        return finding("nccl.p2p", Status.expected, subject=label,
                       title="NCCL found P2P disabled between GPUs that do not support it",
                       evidence_=evidence + [ev("cmds/nvsmi_p2p.out", ", ".join(sorted(c for c in cells if c)))],
                       impact="The driver reports no peer access for these pairs (GeForce GPUs, or a VM chipset); NCCL falls back to SHM.")
    names, consumer = _gpu_models(facts)
    if consumer:
        return finding("nccl.p2p", Status.expected, subject=label,
                       title=f"NCCL found P2P disabled between GPUs that offer none ({names[0]})",
                       evidence_=evidence + [ev("infergap gpus.yaml", f"{names[0]}: p2p not_supported")],
                       impact="These GPUs have no PCIe peer-to-peer by product design; NCCL falls back to SHM. No firmware setting changes that.")
    kind, commands, note = _p2p_cause(f, facts, {c for c in cells if c})
    return finding("nccl.p2p", Status.actionable, subject=label, title=f"NCCL found P2P disabled between {len(f.p2p_disabled_pairs)} GPU pair(s)",
        evidence_=evidence, expected_value="P2P enabled between the GPUs of a tensor-parallel group",
        fix_kind=kind,
        impact="CUDA reports no peer access between these GPUs, so NCCL and the engines' custom all-reduce fall back to host memory. "
               "On datacenter GPUs this points at ACS redirection or IOMMU translation on the PCIe path; on GeForce GPUs and in VMs it is a platform limit.",
        remedy=Remedy(commands=commands, note=note),
        references=["https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#pci-access-control-services-acs"])


def _version(label: str, f: NcclLogFacts, facts: Facts, part: object) -> Finding | None:
    """``nccl.version``: the log's NCCL version (and the CUDA it was built with) checked against the
    catalog of known issues, with the catalog's NCCL message signatures seen in this log."""
    cat = catalog()
    hits = signature_hits(facts, part)
    extra = [cat.by_id(sid) for sid in hits if cat.by_id(sid).finding.id == "nccl.version"]
    lines = [x for sid in hits if cat.by_id(sid).finding.id == "nccl.version" for x in hits[sid].examples]
    if not f.version and not extra:
        return None
    checks = [("nccl", f.version)] if f.version else []
    if f.cuda:
        checks.append(("nccl_cuda", f.cuda))
    sv = memo_versions(facts)
    out = version_finding("nccl.version", checks, label, label, sv.gpu_sm, extra, lines)
    out.details.update({"ring_channels": f.ring_channels, "tree_channels": f.tree_channels, "coll_channels": f.coll_channels,
                        "nvls_channels": f.nvls_channels, "collnet_channels": f.collnet_channels, "p2p_channels": f.p2p_channels,
                        "nranks": f.nranks, "network": f.network})
    return out


def _warnings(label: str, f: NcclLogFacts) -> Finding | None:
    if not f.warning_count:
        return None
    return finding("nccl.warnings", Status.actionable, subject=label, title=f"NCCL printed {f.warning_count} warning(s)",
                   evidence_=[ev(label, w) for w in f.warnings[:6]],
                   impact="NCCL warnings mark failed connections, CUDA or network errors; a collective after one may hang or run on a fallback path.")


def _env_from_evidence(facts: Facts) -> dict[str, str]:
    """NCCL_* variables from pasted environment listings next to the log (``NCCL_X=Y`` lines)."""
    out: dict[str, str] = {}
    for part in facts.evidence_parts("env"):
        for line in part.iter_lines():
            k, sep, v = line.strip().removeprefix("export ").partition("=")
            if sep and k.startswith("NCCL_"):
                out.setdefault(k, v.strip().strip("'\""))
    return out


def _ports_alone(facts: Facts) -> Finding | None:
    """``nccl.net`` from ``ibstat`` when no NCCL log shows the path: a port that is not Active is
    actionable (P1: NCCL cannot use it, or falls back); all Active is unknown with their rates."""
    ports = facts.ib_ports()
    if not ports:
        return None
    src = facts.src("ibstat") if facts.command("ibstat") is not None else facts.src("ibv_devinfo")
    evs = [ev(src, f"{p['ca']} port {p['port']}: {p.get('state', '?')}/{p.get('physical', '?')}, {p.get('rate', '?')} Gb/s, {p.get('link', '?')}") for p in ports[:8]]
    down = [p for p in ports if p.get("state") != "Active"]
    if down:
        return finding("nccl.net", Status.actionable, subject=src, severity=Severity.P1,
                       title=f"{len(down)} of {len(ports)} HCA port(s) not Active: " + ", ".join(f"{p['ca']}/{p['port']} {p.get('state', '?')}" for p in down[:4]),
                       evidence_=evs, expected_value="State: Active, Physical state: LinkUp on every port NCCL uses",
                       impact="NCCL cannot send over a port that is not Active: it leaves the HCA out, or a job pinned to it (NCCL_IB_HCA) fails or falls back to sockets.",
                       remedy=Remedy(commands=["ibstat   # cable, switch port and subnet manager (Initializing: no SM)", "export NCCL_IB_HCA=<the Active HCAs>"]))
    total = sum(float(p["rate"]) for p in ports if p.get("rate", "").replace(".", "", 1).isdigit())
    return finding("nccl.net", Status.unknown, subject=src, title=f"{len(ports)} HCA port(s) Active, {total:g} Gb/s together; no NCCL log shows the path NCCL takes",
                   evidence_=evs, impact=f"These ports bound a ring all-reduce between nodes at {total / 8:g} GB/s (NICs used × line rate); "
                   "whether NCCL uses them with GPU Direct RDMA is in its NCCL_DEBUG=INFO log (NCCL_DEBUG_SUBSYS=INIT,NET).")


def investigate(ctx: object) -> list[Finding]:
    """Findings from every NCCL log in the snapshot's evidence (none when there is no NCCL log)."""
    facts = facts_of(ctx)
    out: list[Finding] = []
    pasted_env = _env_from_evidence(facts)
    for part, f in facts.nccl_logs():
        label = part.label
        if pasted_env:
            f = f.model_copy(update={"env": {**pasted_env, **f.env}})
        out.append(_transport(label, f, facts))
        for fn in (_gdr, _p2p):
            x = fn(label, f, facts)
            if x:
                out.append(x)
        for x in (nccl_env_from_log(label, f, facts), _warnings(label, f)):
            if x:
                out.append(x)
        v = _version(label, f, facts, part)
        if v:
            out.append(v)
        n = _net(label, f, facts, part)
        if n:
            out.append(n)
    if not any(x.id == "nccl.net" for x in out):
        alone = _ports_alone(facts) or _gids_alone(facts, pasted_env)
        if alone is not None:
            out.append(alone)
    return out


def _gids_alone(facts: Facts, env: dict[str, str]) -> Finding | None:
    """``nccl.net`` from ``show_gids`` when no NCCL log or port list shows the path. With a pasted
    ``NCCL_IB_GID_INDEX``: an HCA whose GID of that index is missing, RoCE v1 or link-local
    (``fe80:``, not routed between hosts: the maintainer in NVIDIA/nccl#769) is actionable (P1);
    else unknown, naming per HCA the RoCE v2 GIDs that carry an IPv4 address (the index to use)."""
    gids = facts.roce_gids()
    if not gids:
        return None
    src = facts.src("show_gids")
    cas = sorted({g["ca"] for g in gids})
    good = {ca: [g for g in gids if g["ca"] == ca and g["ver"] == "v2" and g["ipv4"]] for ca in cas}
    evs = [ev(src, f"{ca}: RoCE v2 with IPv4 at index " + (", ".join(f"{g['index']} ({g['ipv4']})" for g in good[ca]) or "none")) for ca in cas[:8]]
    want = env.get("NCCL_IB_GID_INDEX", "").strip()
    if want.isdigit():
        bad = []
        for ca in cas:
            g = next((g for g in gids if g["ca"] == ca and g["index"] == want), None)
            if g is None or g["ver"] != "v2" or g["gid"].startswith("fe80"):
                bad.append(f"{ca}: " + ("no GID at that index" if g is None else f"{g['ver']} {g['gid']}"))
        if bad:
            return finding("nccl.net", Status.actionable, subject=src, severity=Severity.P1, title=f"NCCL_IB_GID_INDEX={want} is not a routable RoCE v2 GID on {len(bad)} HCA(s)",
                           evidence_=[ev("pasted environment", f"NCCL_IB_GID_INDEX={want}")] + [ev(src, b) for b in bad[:6]] + evs[:2],
                           expected_value="a RoCE v2 GID with the host's IPv4 (or global IPv6) address on every HCA NCCL uses",
                           impact="A RoCE v1 or link-local GID is not routed between hosts: NCCL's queue pairs time out (ibv_modify_qp) or the job falls back to sockets.",
                           remedy=Remedy(commands=["export NCCL_IB_GID_INDEX=<the index show_gids lists as v2 with the IPv4 address>"]),
                           references=["https://github.com/NVIDIA/nccl/issues/769"])
    return finding("nccl.net", Status.unknown, subject=src, title=f"RoCE GID table of {len(cas)} HCA(s); no NCCL log shows which GID NCCL uses",
                   evidence_=evs, impact="Between hosts NCCL needs a RoCE v2 GID that carries a routed address (the v2 rows with an IPv4 address here); "
                   "NCCL_DEBUG=INFO prints the GID index it picked, and NCCL_IB_GID_INDEX sets it.")


# -- nccl.net: the network path between hosts --------------------------------------------------

def _inter_host(f: NcclLogFacts) -> list:
    """Links between ranks of different hosts (the complement of the intra-host links); none
    for a log of one host."""
    if f.single_host:
        return []
    intra = {id(lk) for lk in f.intra_host_links()}
    return [lk for lk in f.links if id(lk) not in intra]


def _link_name(f: NcclLogFacts, lk) -> str:
    """``IB``, ``RoCE`` or ``Socket`` for a network link, from the device list of the log."""
    if lk.transport == "NET/Socket":
        return "Socket"
    if lk.transport != "NET/IB":
        return lk.transport
    links = {d.link for d in f.net_devs if not lk.net_devs or d.index in lk.net_devs}
    return "RoCE" if links == {"RoCE"} else "IB" if links <= {"IB", ""} else "IB/RoCE"


def _bound(f: NcclLogFacts, net: list, facts: Facts | None = None) -> tuple[dict, str]:
    """(details, sentence) of the bound the NICs give a ring all-reduce across nodes: NICs used
    per node (distinct NET device indexes of the inter-host channels, else the devices listed)
    × their line rate (the log's speed lines, Mbps), in GB/s; the measured busbw beside it."""
    used = sorted({i for lk in net for i in lk.net_devs})
    by_index = {d.index: d.name for d in f.net_devs}
    names = [by_index[i] for i in used if i in by_index] if f.net_devs else [f.socket_ifaces[i] for i in used if i < len(f.socket_ifaces)]
    names = names or [d.name for d in f.net_devs]
    ib_rate = {p["ca"]: int(float(p["rate"]) * 1000) for p in (facts.ib_ports() if facts is not None else [])
               if p.get("rate", "").replace(".", "", 1).isdigit()}
    rates = [f.nic_speed_mbps.get(n) or ib_rate.get(n) for n in names]
    out: dict = {"nics": names, "rate_mbps": rates, "busbw_max_GBps": f.busbw_max_GBps, "busbw_avg_GBps": f.busbw_avg_GBps}
    entry = get("nccl.net")
    if not names or any(r is None for r in rates):
        return out, entry.text("no_rate")
    bound = sum(rates) / 1000 / threshold("nccl.net", "bits_per_byte")  # type: ignore[operator]
    out["bound_GBps"] = round(bound, 1)
    rate = "/".join(sorted({f"{r / 1000:g}" for r in rates}))  # type: ignore[operator]
    text = entry.text("bound", nics=len(names), rate_gbps=rate, bound_GBps=f"{bound:.1f}")
    if f.busbw_max_GBps is not None:
        text += f" Measured in this paste: {f.busbw_max_GBps:g} GB/s busbw at best ({100 * f.busbw_max_GBps / bound:.0f} % of the bound)."
    return out, text


def _path_evidence(label: str, f: NcclLogFacts, net: list) -> list:
    """What the log says about the path: devices, interfaces, GDR per HCA, GID, measured busbw."""
    out = []
    if f.net_devs:
        out.append(ev(label, "NET/IB devices: " + ", ".join(f"[{d.index}]{d.name}:{d.port}/{d.link or '?'}" + ("/SHARP" if d.sharp else "") for d in f.net_devs[:8])
                      + (f"; OOB {f.oob_iface}" if f.oob_iface else "")))
    if f.ib_none:
        out.append(ev(label, "NET/IB : No device found."))
    if f.network:
        out.append(ev(label, f"Using network {f.network}"))
    if f.socket_ifaces:
        out.append(ev(label, "socket interfaces: " + ", ".join(f.socket_ifaces[:8])))
    if f.bootstrap_ifaces:
        out.append(ev(label, "bootstrap interfaces: " + ", ".join(f.bootstrap_ifaces[:8])))
    for hca, on in list(f.gdr_hca.items())[:8]:
        why = f" ({f.gdr_why[hca]})" if hca in f.gdr_why else ""
        out.append(ev(label, f"GPU Direct RDMA {'enabled' if on else 'disabled'} for {hca}{why}"))
    chosen = {k: v for k, v in f.env.items() if k in ("NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_SOCKET_IFNAME", "NCCL_NET_GDR_LEVEL", "NCCL_IB_DISABLE", "NCCL_NET")}
    if chosen or f.gid_index is not None:
        out.append(ev(label, ", ".join(f"{k}={v}" for k, v in chosen.items()) + (f"; GID index {f.gid_index} in use" if f.gid_index is not None else "")))
    for lk in net[:6]:
        out.append(ev(label, f"{lk.src}[{lk.src_dev}] -> {lk.dst}[{lk.dst_dev}] via {lk.via} ({lk.channels} channel(s), {_link_name(f, lk)})"))
    return out


def _net_signatures(label: str, facts: Facts, part: object) -> Finding | None:
    """The known network failures of signatures.yaml (entries of ``nccl.net``) matched in this
    log whose condition holds, merged into one finding (the most severe entry's text)."""
    cat = catalog()
    hits = signature_hits(facts, part)
    merged: dict = {}
    for sid, hit in hits.items():
        sig = cat.by_id(sid)
        if sig.finding.id == "nccl.net" and signature_applies(sig, facts, part, hits):
            merge_finding(merged, signature_finding(sig, label, hit.examples, hit.count))
    return next(iter(merged.values()), None)


def _rdma_seen(f: NcclLogFacts, facts: Facts) -> bool:
    if f.net_devs or f.ib_devices or f.gdr_hca:
        return True
    try:
        return bool(facts.rdma_devices())
    except Exception:
        return False


def _net_status(label: str, f: NcclLogFacts, facts: Facts, net: list) -> tuple[Status, str, Severity | None, str | None]:
    """(status, title, severity, impact) of the path the inter-host channels show."""
    kinds = sorted({_link_name(f, lk) for lk in net})
    socket = [lk for lk in net if lk.transport == "NET/Socket"]
    if socket and _rdma_seen(f, facts):
        return (Status.actionable, "Nodes exchange data over TCP sockets (NET/Socket) although an RDMA NIC is in the evidence", Severity.P0,
                "All-reduce between the nodes goes through the kernel's TCP stack at a fraction of what the InfiniBand/RoCE NIC carries.")
    if socket:
        why = " NCCL found no InfiniBand/RoCE device (NET/IB : No device found)." if f.ib_none else ""
        return (Status.unknown, "Nodes exchange data over TCP sockets (NET/Socket); whether they have an RDMA NIC is not in the evidence", None,
                "Sockets are the only path between hosts without InfiniBand or RoCE; with such a NIC they are one to two orders of magnitude slower." + why)
    staged = [lk for lk in net if lk.transport == "NET/IB" and not lk.gdr]
    off = [h for h, on in f.gdr_hca.items() if not on]
    if staged and off:
        return (Status.actionable, f"Inter-node channels over {'/'.join(kinds)} are staged through host memory: GPU Direct RDMA is disabled for {', '.join(off[:4])}", Severity.P1,
                "Without GPU Direct RDMA every transfer between the NIC and the GPU is copied through host memory (see nccl.gdr for why).")
    if any(lk.gdr for lk in net) or (f.gdr_hca and all(f.gdr_hca.values())):
        return Status.ok, f"Nodes exchange data over {'/'.join(kinds)} with GPU Direct RDMA", None, None
    return (Status.unknown, f"Nodes exchange data over {'/'.join(kinds)}; no channel shows GPU Direct RDMA (/GDRDMA) and the log does not say why", None,
            "Channels without /GDRDMA copy through host memory; NCCL_DEBUG_SUBSYS=INIT,NET prints 'GPU Direct RDMA Enabled|Disabled for HCA' with the reason.")


def _net(label: str, f: NcclLogFacts, facts: Facts, part: object) -> Finding | None:
    """``nccl.net``: the network path between hosts (see the catalog entry's ``decides``)."""
    net = [lk for lk in _inter_host(f) if lk.transport.startswith("NET")]
    bound, bound_text = _bound(f, net, facts)
    details = {"transports": {f"{lk.src}->{lk.dst}": _link_name(f, lk) for lk in net[:32]}, "gdr_hca": f.gdr_hca, "gdr_why": f.gdr_why,
               "socket_ifaces": f.socket_ifaces, "bootstrap_ifaces": f.bootstrap_ifaces, "oob_iface": f.oob_iface, "gid_index": f.gid_index, **bound}
    evidence = _path_evidence(label, f, net)
    sig = _net_signatures(label, facts, part)
    if sig is not None:
        sig.evidence += [e for e in evidence if e not in sig.evidence][:6]
        sig.details.update(details)
        return sig
    if net:
        status, title, sev, impact = _net_status(label, f, facts, net)
        impact = f"{impact} {bound_text}" if impact else bound_text
        return finding("nccl.net", status, subject=label, title=title, severity=sev, evidence_=evidence, impact=impact,
                       remedy=Remedy(commands=["ibv_devinfo   # every HCA NCCL should use: PORT_ACTIVE, link_layer", "ibstat   # Rate of each port",
                                               "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET   # the devices, GDR and channel lines"]) if status != Status.ok else None,
                       details=details)
    if f.nnodes == 1 or (f.single_host and not _rdma_seen(f, facts) and f.network in (None, "Socket")):
        return not_applicable("nccl.net", "One host in this NCCL log: no network path between hosts",
                              "Every rank of this log runs on one host, so no traffic crosses a network between hosts.", subject=label,
                              evidence_=[ev(label, f"host {(f.hosts or ['(no host prefix)'])[0]}, {len(f.links)} link(s): " + ", ".join(sorted(f.transports)))])
    if f.net_devs or f.network or f.socket_ifaces or f.ib_none or f.gdr_hca:
        return finding("nccl.net", Status.unknown, subject=label, title="NCCL's network choice is logged, but no channel line between hosts shows the transport",
                       evidence_=evidence, impact="Without 'Channel … via NET/…' lines between ranks of different hosts the path actually used is unknown; "
                       "run with NCCL_DEBUG=INFO through the first collective. " + bound_text, details=details)
    return None
