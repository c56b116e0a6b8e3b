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

from infergap.checks import finding
from infergap.evidence.common import nccl_logs
from infergap.facts import Facts
from infergap.parsers.nccl import NcclLogFacts, summary
from infergap.findings import Finding, FixKind, Remedy, Severity, Status, ev
from infergap.investigators.runtime import nccl_env_from_log

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


def _p2p_set_up_failed(label: str, f: NcclLogFacts, intra: list, evidence: list, details: dict) -> Finding | None:
    """nccl.transport actionable when NCCL chose P2P between GPUs of one host and then warned that
    P2P could not be set up (error 217, CUDA IPC handle); None otherwise."""
    src = label
    p2p_failed = [w for w in f.warnings if _P2P_FAILED.search(w)]
    if p2p_failed and any(lk.transport.startswith("P2P") for lk in intra):
        # NCCL picked P2P, then could not set it up (the run aborted or fell back): not ok.
        return finding(
            "nccl.transport", Status.actionable, subject=label,
            severity=Severity.P1, fix_kind=FixKind.runtime,
            title="NCCL chose P2P between GPUs of one host, but setting up P2P failed",
            evidence_=evidence + [ev(src, w) for w in p2p_failed[:3]],
            expected_value="P2P channels that open without a warning",
            impact="The channels the log lists were never usable: the communicator failed at set-up (or fell back), so these GPUs do not exchange data over P2P.",
            remedy=Remedy(commands=["nvidia-smi topo -p2p r   # P2P support per GPU pair",
                                    "NCCL_P2P_DISABLE=1   # in the server's environment when the GPUs have no P2P (GeForce, many VMs)"],
                          note="GeForce GPUs have no P2P by product design; on datacenter GPUs look at ACS and the IOMMU."),
            references=["https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#pci-access-control-services-acs"],
            details=details,
        )
    return None


def _gpu_models(facts: Facts) -> tuple[list[str], bool | None]:
    """The GPU product names the evidence holds, and whether every one of them lacks PCIe P2P by
    product design (``p2p: not_supported`` in data/gpus.yaml); None when a model is not known."""
    from infergap.gpudata import sku

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
    details = summary(f)
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


def _version(label: str, f: NcclLogFacts, snap: object, part: object, ctx: object) -> Finding | None:
    """``nccl.version``: the log's NCCL version (and the CUDA it was built with) checked against the
    catalog of known issues, with the catalog's NCCL message signatures seen in this log."""
    from infergap.evidence.signatures import catalog
    from infergap.evidence.versions import memo_versions, version_finding
    from infergap.investigators.evidence_files import signature_hits

    cat = catalog()
    hits = signature_hits(snap, part)
    extra = [cat.by_id(sid) for sid in hits if cat.by_id(sid).finding.id == "nccl.version"]
    lines = [x for sid in hits if cat.by_id(sid).finding.id == "nccl.version" for x in hits[sid].examples]
    if not f.version and not extra:
        return None
    checks = [("nccl", f.version)] if f.version else []
    if f.cuda:
        checks.append(("nccl_cuda", f.cuda))
    sv = memo_versions(snap, getattr(ctx, "facts", None))
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


def _env_from_evidence(snap: object) -> dict[str, str]:
    """NCCL_* variables from pasted environment listings next to the log (``NCCL_X=Y`` lines)."""
    out: dict[str, str] = {}
    getter = getattr(snap, "evidence_parts", None)
    for part in getter("env") if getter else []:
        for line in part.iter_lines():
            k, sep, v = line.strip().removeprefix("export ").partition("=")
            if sep and k.startswith("NCCL_"):
                out.setdefault(k, v.strip().strip("'\""))
    return out


def investigate(ctx: object) -> list[Finding]:
    """Findings from every NCCL log in the snapshot's evidence (none when there is no NCCL log)."""
    snap = ctx.snap  # type: ignore[attr-defined]
    facts = getattr(ctx, "facts", None) or Facts(snap)
    out: list[Finding] = []
    pasted_env = _env_from_evidence(snap)
    for part, f in nccl_logs(snap):
        label = part.label
        if pasted_env:
            f = f.model_copy(update={"env": {**pasted_env, **f.env}})
        out.append(_transport(label, f, facts))
        for fn in (_gdr, _p2p):
            x = fn(label, f, facts)
            if x:
                out.append(x)
        for fn2 in (nccl_env_from_log, _warnings):
            x = fn2(label, f)
            if x:
                out.append(x)
        v = _version(label, f, snap, part, ctx)
        if v:
            out.append(v)
    return out
