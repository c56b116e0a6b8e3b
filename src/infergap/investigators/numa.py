"""NUMA: automatic NUMA balancing and the GPUs' NUMA affinity.

Sources: Documentation/admin-guide/sysctl/kernel.rst (numa_balancing; the kernel disables it by
itself on one-node machines, kernel/sched/fair.c ``numabalancing_default``);
``/sys/bus/pci/devices/<BDF>/numa_node`` and ``local_cpulist`` (Documentation/ABI/testing/sysfs-bus-pci).
A ``numa_node`` of -1 means the firmware gave no proximity information (normal on one socket).
"""

from __future__ import annotations

from infergap.findings import Finding, FixKind, Remedy, Status
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


def investigate(ctx: Context) -> list[Finding]:
    """kernel.numa_balancing, numa.gpu_affinity."""
    out = [numa_balancing(ctx)]
    a = _gpu_affinity(ctx)
    if a is not None:
        out.append(a)
    return out
