"""NUMA: automatic NUMA balancing and the GPUs' NUMA affinity.

Sources: Documentation/admin-guide/sysctl/kernel.rst (numa_balancing; the kernel disables it by
itself on one-node machines, kernel/sched/fair.c ``numabalancing_default``);
``/sys/bus/pci/devices/<BDF>/numa_node`` and ``local_cpulist`` (Documentation/ABI/testing/sysfs-bus-pci).
A ``numa_node`` of -1 means the firmware gave no proximity information (normal on one socket).
"""

from __future__ import annotations

from infergap.findings import Finding, FixKind, Remedy, Severity, Status
from infergap.investigators.base import Context, evidence, finding, not_applicable, sysctl_remedy, unknown

NAME = "numa"


def numa_balancing(ctx: Context) -> Finding:
    """kernel.numa_balancing: P1 when on (it acts on every CPU thread feeding the GPUs)."""
    cid = "kernel.numa_balancing"
    v = ctx.facts.sysctl("kernel.numa_balancing")
    nodes = ctx.facts.numa_nodes()
    if nodes is not None and len(nodes) <= 1:
        return not_applicable(cid, "Automatic NUMA balancing does not apply: one NUMA node",
                              "With a single NUMA node the kernel turns NUMA balancing off by itself; there is nothing to migrate between nodes.",
                              evidence_=evidence(v, ("files/sys/devices/system/node", f"{len(nodes)} node(s)")))
    if v is None:
        return unknown(cid, "Automatic NUMA balancing: not captured", "Needs /proc/sys/kernel/numa_balancing or sysctl -a.")
    if v.value == "0":
        return finding(cid, Status.ok, "Automatic NUMA balancing is off", evidence_=evidence(v), expected_value="0")
    return finding(cid, Status.actionable, "Automatic NUMA balancing is on",
        evidence_=evidence(v), expected_value="0",
        impact="The kernel periodically unmaps pages to sample accesses and migrates them between nodes; the page faults and migrations land on the CPU threads that launch GPU work and on pinned staging buffers.",
        remedy=sysctl_remedy(ctx, "kernel.numa_balancing", "0", v.value),
        references=["Documentation/admin-guide/sysctl/kernel.rst#numa-balancing"],
    )


def _gpu_affinity(ctx: Context) -> Finding | None:
    cid = "numa.gpu_affinity"
    gpus = ctx.facts.gpu_functions()
    if not gpus:
        return None
    nodes = ctx.facts.numa_nodes()
    mapping = {f.bdf: f.numa_node for f in gpus}
    evs = evidence(*[(f"{f.source}/numa_node" if f.listed_in is None else f.source, f"{f.bdf}: node {f.numa_node}") for f in gpus[:8]])
    if nodes is None:
        return unknown(cid, "GPU NUMA affinity: NUMA layout not captured", "Needs /sys/devices/system/node.", evidence_=evs)
    if len(nodes) <= 1:
        return not_applicable(cid, "GPU NUMA affinity: one NUMA node", "With one NUMA node every CPU is equally close to every GPU.", evidence_=evs)
    if any(v is None for v in mapping.values()) and all(f.listed_in is not None for f in gpus if f.numa_node is None):
        return unknown(cid, "GPU NUMA affinity: the GPUs' NUMA nodes not captured",
                       "The PCI list here carries no NUMA node per GPU; /sys/bus/pci/devices/<BDF>/numa_node or lspci -vvv ('NUMA node:') tells.", evidence_=evs)
    if any(v is None or v < 0 for v in mapping.values()):
        return finding(cid, Status.actionable, "GPUs report no NUMA node on a multi-node host",
                       fix_kind=FixKind.bios, evidence_=evs, expected_value="a node id per GPU",
                       impact="Without proximity information the engine and the operator cannot bind workers next to their GPU; host-to-device copies from the far node were ~3x slower in a public measurement.",
                       remedy=Remedy(note="Enable ACPI SRAT/NUMA reporting (AMD: NPS setting) in the BIOS."))
    per_node: dict[int, list[str]] = {}
    for bdf, n in mapping.items():
        per_node.setdefault(int(n), []).append(bdf)
    desc = "; ".join(f"node {n}: {len(b)} GPU(s)" for n, b in sorted(per_node.items()))
    return finding(cid, Status.ok, f"GPUs spread over NUMA nodes ({desc})", evidence_=evs,
                   impact="Bind each worker to its GPU's node (numactl --cpunodebind=N --membind=N) so host-side copies stay local.",
                   details={"gpu_numa_node": mapping})


def _topo_placement(ctx: Context) -> Finding | None:
    """``numa.gpu_affinity`` from the ``NUMA Affinity`` column of ``nvidia-smi topo -m`` when the
    host's PCI facts are absent (a pasted matrix): GPUs on two or more nodes with a pair across
    nodes linked only by ``SYS`` (nvidia-smi's legend: PCIe plus the SMP interconnect between NUMA
    nodes) is actionable (P2): a tensor-parallel group spanning them all-reduces over the socket
    link. Across-node pairs joined by NVLink, or one node, are ok. None without the column."""
    cid = "numa.gpu_affinity"
    topo = ctx.facts.topology()
    if topo is None or not topo.gpus:
        return None
    node = {g: topo.numa_affinity.get(g, "").strip() for g in topo.gpus}
    if not all(v.isdigit() for v in node.values()):
        return None
    per: dict[str, list[str]] = {}
    for g, n in node.items():
        per.setdefault(n, []).append(g)
    desc = "; ".join(f"node {n}: {', '.join(gs)}" for n, gs in sorted(per.items()))
    src = ctx.facts.src("nvsmi_topo")
    across = [(a, b) for i, a in enumerate(topo.gpus) for b in topo.gpus[i + 1:] if node[a] != node[b]]
    sys_pairs = [(a, b) for a, b in across if topo.link(a, b) == "SYS"]
    evs = evidence((src, f"NUMA Affinity: {desc}"), *((src, f"{a}-{b}: SYS") for a, b in sys_pairs[:4]))
    if not sys_pairs:
        return finding(cid, Status.ok, f"GPUs by NUMA node ({desc})" + ("; pairs across nodes are NVLink" if across else ""), evidence_=evs,
                       impact="Bind each worker to its GPU's node (numactl --cpunodebind=N --membind=N) so host-side copies stay local.")
    return finding(cid, Status.actionable, f"GPUs on {len(per)} NUMA nodes joined only through the CPU interconnect (SYS) for {len(sys_pairs)} pair(s)",
                   severity=Severity.P2, fix_kind=FixKind.runtime, evidence_=evs, expected_value="each tensor-parallel group on the GPUs of one NUMA node",
                   impact="A tensor-parallel group that spans the nodes runs every all-reduce across the socket link, without P2P (SYS: PCIe plus the "
                          "inter-socket interconnect), and its workers' host memory is remote for half of them.",
                   remedy=Remedy(commands=["CUDA_VISIBLE_DEVICES=<the GPUs of one node> <server> --tensor-parallel-size <their count>   # one replica per NUMA node",
                                           "numactl --cpunodebind=<node> --membind=<node> <server>   # each replica next to its GPUs"]),
                   references=["nvidia-smi topo -m legend: SYS = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (QPI/UPI)"],
                   details={"gpu_numa_node": node})


def investigate(ctx: Context) -> list[Finding]:
    """kernel.numa_balancing, numa.gpu_affinity (from the host's PCI facts, else from a pasted ``topo -m``)."""
    out = [numa_balancing(ctx)]
    a = _gpu_affinity(ctx) or _topo_placement(ctx)
    if a is not None:
        out.append(a)
    return out
