"""NUMA: automatic NUMA balancing and the GPUs' NUMA affinity.

Sources: Documentation/admin-guide/sysctl/kernel.rst (numa_balancing);
``/sys/bus/pci/devices/<BDF>/numa_node`` and ``local_cpulist`` (Documentation/ABI/testing/sysfs-bus-pci).
A ``numa_node`` of -1 means the firmware gave no proximity information (normal on one socket).
"""

from __future__ import annotations

from infergap.findings import Finding, FixKind, Remedy, Severity, Status
from infergap.investigators.base import Context, evidence, finding, not_applicable, unknown
from infergap.investigators.kernel_runtime import numa_balancing

NAME = "numa"


def _gpu_affinity(ctx: Context) -> Finding | None:
    cid = "numa.gpu_affinity"
    gpus = ctx.facts.gpu_functions()
    if not gpus:
        return None
    nodes = ctx.facts.numa_nodes()
    mapping = {f.bdf: f.numa_node for f in gpus}
    evs = evidence(*[(f"{f.source}/numa_node", f"{f.bdf}: node {f.numa_node}") for f in gpus[:8]])
    if nodes is None:
        return unknown(cid, NAME, "GPU NUMA affinity: NUMA layout not captured", "Needs /sys/devices/system/node.", evidence_=evs)
    if len(nodes) <= 1:
        return not_applicable(cid, NAME, "GPU NUMA affinity: one NUMA node", "With one NUMA node every CPU is equally close to every GPU.", evidence_=evs)
    if any(v is None or v < 0 for v in mapping.values()):
        return finding(cid, NAME, Status.actionable, "GPUs report no NUMA node on a multi-node host",
                       severity=Severity.P2, fix_kind=FixKind.bios, evidence_=evs, expected_value="a node id per GPU",
                       impact="Without proximity information the engine and the operator cannot bind workers next to their GPU; host-to-device copies from the far node were ~3x slower in a public measurement.",
                       remedy=Remedy(note="Enable ACPI SRAT/NUMA reporting (AMD: NPS setting) in the BIOS."))
    per_node: dict[int, list[str]] = {}
    for bdf, n in mapping.items():
        per_node.setdefault(int(n), []).append(bdf)
    desc = "; ".join(f"node {n}: {len(b)} GPU(s)" for n, b in sorted(per_node.items()))
    return finding(cid, NAME, Status.ok, f"GPUs spread over NUMA nodes ({desc})", evidence_=evs,
                   impact="Bind each worker to its GPU's node (numactl --cpunodebind=N --membind=N) so host-side copies stay local.",
                   details={"gpu_numa_node": mapping})


def investigate(ctx: Context) -> list[Finding]:
    """kernel.numa_balancing, numa.gpu_affinity."""
    out = [numa_balancing(ctx)]
    a = _gpu_affinity(ctx)
    if a is not None:
        out.append(a)
    return out
