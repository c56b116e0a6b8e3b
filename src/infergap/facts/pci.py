"""PCI facts: every function of the host (sysfs first, ``lspci -vvv`` for what sysfs lacks), the
tree of bridges above a device, device names, RDMA NICs.

Sources, most direct first: ``/sys/bus/pci/devices/<BDF>/`` attributes and device symlinks (the
link's path lists the bridges above the function), ``config.hex`` (config space, decoded by
:mod:`infergap.parsers.pci`), then ``lspci -vvv`` / ``lspci`` (the bridges' ``Bus: primary=…``
lines give the tree when sysfs links are missing). Names come from the system pci.ids, else from
the product's GPU data for NVIDIA GPUs newer than that file.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from infergap.facts.base import FactsBase, Value, memo
from infergap.gpudata import device_name as data_device_name
from infergap.parsers.host import parse_ibstat, parse_ibv_devinfo
from infergap.parsers.pci import (
    ConfigSpace,
    ConfigSpaceError,
    LspciDevice,
    decode_config,
    lspci_parents,
    parse_lspci_vvv,
    parse_od_hex,
    system_pci_ids,
    unaddressed_links,
)

NVIDIA = 0x10DE
MELLANOX = 0x15B3
ASPEED = 0x1A03
#: A PCI address as sysfs names it: domain:bus:device.function, lower case.
BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_SYSFS = "/sys/bus/pci/devices"


@dataclass
class PciFunction:
    """One PCI function from sysfs, with its decoded config space and ``lspci -vvv`` block when
    captured. ``parent`` is the upstream bridge's BDF, from the device symlink's path."""

    bdf: str
    vendor: int | None = None
    device: int | None = None
    class_code: int | None = None
    numa_node: int | None = None
    local_cpulist: str | None = None
    cur_speed: str | None = None
    max_speed: str | None = None
    cur_width: int | None = None
    max_width: int | None = None
    driver: str | None = None
    parent: str | None = None
    iommu_group: str | None = None
    config: ConfigSpace | None = None
    config_error: str | None = None
    lspci: LspciDevice | None = None
    garbage: list[str] = field(default_factory=list)
    path_known: bool = False
    listed_in: str | None = None
    parent_from: str | None = None

    @property
    def is_gpu(self) -> bool:
        """An NVIDIA display-class function (class 0x03xxxx: VGA or 3D controller)."""
        return self.vendor == NVIDIA and self.class_code is not None and self.class_code >> 16 == 0x03

    @property
    def is_bridge(self) -> bool:
        """A PCI bridge (class 0x0604)."""
        return self.class_code is not None and self.class_code >> 8 == 0x0604

    @property
    def is_rdma_nic(self) -> bool:
        """A Mellanox/NVIDIA networking function (vendor 0x15b3, class 0x02xxxx: InfiniBand/RoCE)."""
        return self.vendor == MELLANOX and self.class_code is not None and self.class_code >> 16 == 0x02

    @property
    def source(self) -> str:
        """Evidence source: the function's sysfs directory in the snapshot, or the ``lspci``
        output it was read from when sysfs does not list it."""
        return self.listed_in or f"files/sys/bus/pci/devices/{self.bdf}"


class PciDomain(FactsBase):
    """PCI accessors of :class:`infergap.facts.Facts`."""

    @memo
    def pci_functions(self) -> dict[str, PciFunction]:
        """Every PCI function in sysfs (plus those only in ``lspci -vvv``), keyed by BDF."""
        lspci, lspci_src = self._lspci_listing()
        names = sorted({n[: -len(".link")] if n.endswith(".link") else n for n in (self.snap.listdir(_SYSFS) or [])})
        out = {bdf: self._sysfs_function(bdf, lspci) for bdf in names if BDF.fullmatch(bdf)}
        for bdf, dev in lspci.items():
            if bdf not in out:
                vendor, klass = dev.vendor_id, dev.class_code
                if vendor is None:  # lspci without -nn: its names are pci.ids names, read back to ids
                    vendor, klass = _ids_from_names(dev.description)
                out[bdf] = PciFunction(bdf=bdf, vendor=vendor, device=dev.device_id, class_code=klass, lspci=dev,
                                       iommu_group=dev.iommu_group, numa_node=dev.numa_node, listed_in=lspci_src)
        if any(d.secondary_bus is not None for d in lspci.values()):
            # No sysfs device links: the tree comes from the bridges' bus numbers in lspci -vvv
            # (a function under no bridge of the listing sits on a root bus).
            parents = lspci_parents(lspci)
            for bdf, f in out.items():
                if not f.path_known and f.parent is None and f.lspci is not None:
                    f.parent, f.parent_from = parents.get(bdf), lspci_src
        return out

    def _lspci_listing(self) -> tuple[dict[str, LspciDevice], str | None]:
        """``lspci -vvv`` (else plain ``lspci``) parsed, with its source; ({}, None) when absent."""
        r = self.cmd_ok("lspci_vvv") or self.cmd_ok("lspci")
        return (parse_lspci_vvv(r.stdout), r.source) if r else ({}, None)

    def _sysfs_function(self, bdf: str, lspci: dict[str, LspciDevice]) -> PciFunction:
        """One function from ``/sys/bus/pci/devices/<bdf>``: ids (hex), NUMA node, link speed and
        width, driver and IOMMU group (symlink targets), parent (from the device link's path) and
        config space; unreadable values are listed in ``garbage``, never raised."""
        snap = self.snap
        f = PciFunction(bdf=bdf)
        d = f"{_SYSFS}/{bdf}"

        def number(name: str, base: int) -> int | None:
            v = snap.read_value(f"{d}/{name}")
            if v is None:
                return None
            try:
                return int(v, base)
            except ValueError:
                f.garbage.append(f"{name}: {v[:40]!r}")
                return None

        f.vendor, f.device, f.class_code = number("vendor", 16), number("device", 16), number("class", 16)
        f.numa_node = number("numa_node", 10)
        f.local_cpulist = snap.read_value(f"{d}/local_cpulist")
        f.cur_speed, f.max_speed = snap.read_value(f"{d}/current_link_speed"), snap.read_value(f"{d}/max_link_speed")
        f.cur_width, f.max_width = number("current_link_width", 10), number("max_link_width", 10)
        drv = snap.read_value(f"{d}/driver.link")
        f.driver = drv.rsplit("/", 1)[-1] if drv else None
        grp = snap.read_value(f"{d}/iommu_group.link")
        f.iommu_group = grp.rsplit("/", 1)[-1] if grp else None
        link = snap.read_value(f"{_SYSFS}/{bdf}.link")
        f.path_known = bool(link)
        if link:
            parts = [p for p in link.split("/") if BDF.fullmatch(p)]
            if len(parts) >= 2:
                f.parent = parts[-2]
        hx = snap.read(f"{d}/config.hex")
        if hx is not None:
            try:
                f.config = decode_config(parse_od_hex(hx))
            except ConfigSpaceError as e:
                f.config_error = str(e)
        f.lspci = lspci.get(bdf)
        if f.lspci is not None:
            f.iommu_group = f.iommu_group or f.lspci.iommu_group
            f.numa_node = f.numa_node if f.numa_node is not None else f.lspci.numa_node
        return f

    def upstream(self, f: PciFunction) -> list[PciFunction]:
        """The functions above ``f`` (its bridges, nearest first) up to the root bus, as far as the
        tree is known (sysfs device links, else ``lspci -vvv`` bus numbers); a loop ends the walk."""
        funcs = self.pci_functions()
        out, seen = [], set()
        cur = funcs.get(f.parent) if f.parent else None
        while cur is not None and cur.bdf not in seen:
            seen.add(cur.bdf)
            out.append(cur)
            cur = funcs.get(cur.parent) if cur.parent else None
        return out

    def pci_name(self, f: PciFunction) -> str:
        """A function's name from the system pci.ids, else (NVIDIA GPUs newer than that file) from
        the product's GPU data, never guessed: ``vendor device`` or ``<vendor> unknown device 0xdddd``."""
        db = system_pci_ids()
        if f.vendor is None:
            return "unknown device"
        vn = db.vendor_name(f.vendor) or ("NVIDIA Corporation" if f.vendor == NVIDIA else f"vendor 0x{f.vendor:04x}")
        dn = db.device_name(f.vendor, f.device) if f.device is not None else None
        if dn is None and f.vendor == NVIDIA and f.device is not None:
            dn = data_device_name(f.device)
        return f"{vn} {dn}" if dn else f"{vn} unknown device 0x{(f.device or 0):04x}"

    def gpu_functions(self) -> list[PciFunction]:
        """PCI functions of NVIDIA GPUs (sysfs), ordered by BDF."""
        return [f for f in self.pci_functions().values() if f.is_gpu]

    def rdma_nic_functions(self) -> list[PciFunction]:
        """PCI functions of RDMA-capable NICs (:attr:`PciFunction.is_rdma_nic`), in :meth:`pci_functions` order."""
        return [f for f in self.pci_functions().values() if f.is_rdma_nic]

    @memo
    def rdma_devices(self) -> list[Value]:
        """RDMA-capable NICs: /sys/class/infiniband entries and Mellanox network-class PCI functions."""
        out = [Value(p.split("/")[4], "files" + p) for p in self.snap.glob("/sys/class/infiniband/*/node_type")]
        if not out:
            out = [Value(f"{f.bdf} {self.pci_name(f)}", f.source) for f in self.rdma_nic_functions()]
        return out

    def pci_inventory_captured(self) -> bool:
        """Whether the whole PCI device list was captured (sysfs, or lspci run by infergap), so that
        the absence of an NVIDIA GPU in it is a fact rather than missing evidence. A pasted lspci
        does not count: pastes are often filtered (``lspci | grep -i plx``)."""
        if self.snap.listdir(_SYSFS):
            return True
        return any(r is not None and not r.source.startswith("evidence/") for r in (self.cmd_ok("lspci_vvv"), self.cmd_ok("lspci")))

    @memo
    def unaddressed_links(self) -> list[LspciDevice]:
        """Link registers of a pasted ``lspci -vv`` excerpt without its device header lines
        (:func:`infergap.parsers.pci.unaddressed_links`); the device they belong to is not named."""
        r = self.cmd_ok("lspci_vvv")
        return unaddressed_links(r.stdout) if r else []

    def pci_pasted(self) -> str | None:
        """The evidence source of a pasted lspci listing, or None."""
        for name in ("lspci_vvv", "lspci"):
            r = self.cmd_ok(name)
            if r is not None and r.source.startswith("evidence/"):
                return r.source
        return None

    @memo
    def ib_ports(self) -> list[dict[str, str]]:
        """The InfiniBand/RoCE HCA ports of ``ibstat`` (:func:`~infergap.parsers.host.parse_ibstat`:
        ``ca``, ``port``, ``state``, ``physical``, ``rate`` in Gb/s, ``link``), else of
        ``ibv_devinfo`` in the same shape (:func:`~infergap.parsers.host.parse_ibv_devinfo`);
        empty when neither was captured."""
        r = self.cmd_ok("ibstat")
        if r:
            return parse_ibstat(r.stdout)
        r = self.cmd_ok("ibv_devinfo")
        return parse_ibv_devinfo(r.stdout) if r else []

    @memo
    def roce_gids(self) -> list[dict[str, str]]:
        """The GID table of ``show_gids`` (:func:`~infergap.parsers.host.parse_show_gids`: ``ca``,
        ``port``, ``index``, ``gid``, ``ipv4``, ``ver`` v1/v2, ``netdev``); empty when not captured."""
        from infergap.parsers.host import parse_show_gids

        r = self.cmd_ok("show_gids")
        return parse_show_gids(r.stdout) if r else []

    @memo
    def iommu_group_types(self) -> dict[str, str]:
        """IOMMU group -> its type (``identity``, ``DMA``, ``DMA-FQ``) from ``/sys/kernel/iommu_groups/*/type``."""
        types = {}
        for p in self.snap.glob("/sys/kernel/iommu_groups/*/type"):
            t = self.snap.read_value(p)
            if t:
                types[p.split("/")[4]] = t
        return types

    def iommu_type_of(self, f: "PciFunction") -> str | None:
        """The IOMMU translation type of one function: its ``iommu_group/type``, else its group's."""
        return self.snap.read_value(f"/sys/bus/pci/devices/{f.bdf}/iommu_group/type") or self.iommu_group_types().get(f.iommu_group or "")

    @memo
    def pci_ids(self) -> Any:
        """The system's pci.ids database (:func:`~infergap.parsers.pci.system_pci_ids`): vendor and device names."""
        return system_pci_ids()


@functools.lru_cache(maxsize=1)
def _pci_names() -> tuple[dict[str, int], dict[str, int]]:
    db = system_pci_ids()
    vendors = {n: v for v, n in db.vendors.items()}
    classes = {n: (base << 16) | (sub << 8) for (base, sub), n in db.subclasses.items()}
    return vendors, classes


def _ids_from_names(description: str) -> tuple[int | None, int | None]:
    """(vendor id, class code) of an ``lspci`` line printed without ``-nn``
    (``VGA compatible controller: NVIDIA Corporation AD102 [GeForce RTX 4090] (rev a1)``): lspci
    takes both names from pci.ids, so the system pci.ids maps them back. (None, None) when unknown."""
    m = re.match(r"^(?P<cls>[^:]+?): (?P<rest>.+)$", description)
    if not m:
        return None, None
    vendors, classes = _pci_names()
    words = m.group("rest").split()
    vendor = next((vendors[" ".join(words[:n])] for n in range(min(len(words), 8), 0, -1) if " ".join(words[:n]) in vendors), None)
    return vendor, classes.get(m.group("cls").strip())
