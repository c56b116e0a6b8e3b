"""Typed facts about one host, parsed once from a snapshot and shared by the investigators.

One module per domain: :mod:`~infergap.facts.pci` (PCI functions and the bridge tree),
:mod:`~infergap.facts.gpu` (GPUs, links, P2P, driver, NCCL runs), :mod:`~infergap.facts.host`
(kernel, sysctls, limits, packages), :mod:`~infergap.facts.container` (container and VM) and
:mod:`~infergap.facts.cpu` (CPU, NUMA, idle and frequency), :mod:`~infergap.facts.logs` (the NCCL,
engine and kernel logs of the evidence, each parsed once). :class:`Facts` joins them over one
snapshot. Each accessor is memoized and thread-safe (investigators run concurrently), reads only
through the :class:`~infergap.snapshot.Snapshot` API, and prefers the most direct source:
sysfs/procfs over command output, NVML over ``nvidia-smi`` XML over its CSV. Raw text is parsed
by :mod:`infergap.parsers`, never here.
"""

from __future__ import annotations

from typing import Any

from infergap.facts.base import Value, memo
from infergap.facts.container import ContainerDomain, ContainerInfo
from infergap.facts.cpu import CpuDomain, IdleState
from infergap.facts.gpu import GpuDomain, GpuFacts
from infergap.facts.host import HostDomain
from infergap.facts.logs import LogDomain
from infergap.facts.pci import ASPEED, BDF, MELLANOX, NVIDIA, PciDomain, PciFunction
from infergap.snapshot import LiveSnapshot
from infergap.snapshot.core import Snapshot

__all__ = ["ASPEED", "MELLANOX", "NVIDIA", "ContainerInfo", "Facts", "GpuFacts", "IdleState", "PciFunction",
           "Value", "memo", "other_host", "report_other_host"]


class Facts(PciDomain, GpuDomain, HostDomain, ContainerDomain, CpuDomain, LogDomain):
    """Memoized, thread-safe facts over one snapshot. Every accessor returns None (or empty) when
    the evidence is absent, never raises for missing or malformed sources; parse problems are
    recorded in :attr:`problems` (source -> message) so investigators can report them."""


def other_host(base: Snapshot, pasted: Snapshot) -> str | None:
    """Why the GPUs of ``pasted`` (evidence files alone) cannot be ``base``'s (this machine or a
    snapshot), or None when they may be. Pasted evidence of another host (a bug report read on a
    laptop) is audited as its own host instead of being merged into this one.

    Compared, in order: GPUs in the evidence and none here; PCI addresses none of which is here;
    product names none of which is here; the GPU count, when the evidence names GPUs only by index
    (``nvidia-smi topo -m``)."""
    ev = Facts(pasted).gpus()
    if not ev:
        return None
    here = "this machine" if getattr(base, "kind", None) == "live" else (getattr(base, "label", "") or "the snapshot")
    mine = Facts(base).gpus()
    names = sorted({g.name for g in ev if g.name and g.name != "unknown device"})
    what = f"{len(ev)} GPU(s)" + (f" ({', '.join(names)})" if names else "")
    if not mine:
        return f"the evidence describes {what}; {here} has no NVIDIA GPU"
    addr = {g.bdf for g in ev if BDF.fullmatch(g.bdf)}
    if addr and not addr & {g.bdf for g in mine}:
        return f"the evidence describes {what} at PCI addresses {here} does not have"
    my_names = {g.name for g in mine if g.name and g.name != "unknown device"}
    if names and my_names and not set(names) & my_names:
        return f"the evidence describes {what}; {here} has {', '.join(sorted(my_names))}"
    if not addr and len(ev) != len(mine):
        return f"the evidence describes {what}; {here} has {len(mine)}"
    return None


def report_other_host(host: dict[str, Any]) -> str | None:
    """Why the host of an audit report (its ``host`` summary: ``cpu``, ``gpus``) is not this
    machine, or None when it may be: the CPU model or the set of GPUs (PCI address, name) differs
    from this machine's, read live."""
    with LiveSnapshot() as live:
        facts = Facts(live)
        cpu = facts.cpu_vendor_model()[1]
        gpus = sorted((g.bdf, g.name) for g in facts.gpus())
    theirs = sorted((g.get("bdf"), g.get("name")) for g in host.get("gpus") or [])
    if host.get("cpu") and cpu and host["cpu"] != cpu:
        return f"CPU {host['cpu']!r}, here {cpu!r}"
    if "gpus" in host and theirs != gpus:
        return f"GPUs {len(theirs)} × {theirs[0][1] if theirs else 'none'}, here {len(gpus)} × {gpus[0][1] if gpus else 'none'}"
    return None
