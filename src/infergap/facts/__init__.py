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

from infergap.facts.base import Value, memo
from infergap.facts.container import ContainerDomain, ContainerInfo
from infergap.facts.cpu import CpuDomain, IdleState
from infergap.facts.gpu import GpuDomain, GpuFacts, other_host, report_other_host
from infergap.facts.host import HostDomain
from infergap.facts.logs import LogDomain
from infergap.facts.pci import ASPEED, MELLANOX, NVIDIA, PciDomain, PciFunction

__all__ = ["ASPEED", "MELLANOX", "NVIDIA", "ContainerInfo", "Facts", "GpuFacts", "IdleState", "PciFunction",
           "Value", "memo", "other_host", "report_other_host"]


class Facts(PciDomain, GpuDomain, HostDomain, ContainerDomain, CpuDomain, LogDomain):
    """Memoized, thread-safe facts over one snapshot. Every accessor returns None (or empty) when
    the evidence is absent, never raises for missing or malformed sources; parse problems are
    recorded in :attr:`problems` (source -> message) so investigators can report them."""
