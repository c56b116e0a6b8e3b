"""PCI: config space decoding, ``lspci -vvv`` text, and the system PCI ID database.

Register layouts are from the PCI Express Base Specification (rev. 5.0/6.0), §7.5.3 "PCI Express
Capability Structure" and §7.7.8 "ACS Extended Capability", as also decoded by pciutils
(``lib/header.h``, ``ls-caps.c``) and the kernel (``include/uapi/linux/pci_regs.h``):

- PCI Express capability (ID 0x10): Device Capabilities at +0x04 (bits 2:0 Max_Payload_Size
  Supported), Device Control at +0x08 (bits 7:5 Max_Payload_Size, bits 14:12
  Max_Read_Request_Size; size = 128 << code), Link Capabilities at +0x0C (bits 3:0 max speed,
  9:4 max width), Link Control at +0x10 (bit 3 Read Completion Boundary: 0 = 64 B, 1 = 128 B),
  Link Status at +0x12 (bits 3:0 speed, 9:4 width). The speed code is the generation number
  (``data/pcie.yaml`` gives its GT/s).
- ACS extended capability (ID 0x000D): capability word at +0x04, control word at +0x06; bits
  0 SrcValid, 1 TransBlk, 2 ReqRedir, 3 CmpltRedir, 4 UpstreamFwd, 5 EgressCtrl, 6 DirectTrans.
- Resizable BAR extended capability (ID 0x0015).
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field

from infergap.gpudata import pcie_gts

ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")

PCI_IDS_PATHS = ("/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids", "/usr/share/pci.ids")


class ConfigSpaceError(ValueError):
    """The config space text is not hex bytes, or too short for the structure asked."""


def parse_od_hex(text: str) -> bytes:
    """Bytes from ``od -An -tx1 -v`` text (whitespace-separated two-digit hex).

    >>> parse_od_hex(" 86 80 57 0d\\n 00 00")
    b'\\x86\\x80W\\r\\x00\\x00'

    Raises ConfigSpaceError on a token that is not a hex byte.
    """
    try:  # fast path: bytes.fromhex skips whitespace; every token was one byte iff the counts agree
        data = bytes.fromhex(text)
        if len(data) == len(text.split()):
            return data
    except ValueError:
        pass
    out = bytearray()
    for tok in text.split():
        if len(tok) != 2:
            raise ConfigSpaceError(f"not a hex byte: {tok[:16]!r}")
        try:
            out.append(int(tok, 16))
        except ValueError:
            raise ConfigSpaceError(f"not a hex byte: {tok!r}") from None
    return bytes(out)


def _u16(b: bytes, off: int) -> int:
    return int.from_bytes(b[off : off + 2], "little")


def _u32(b: bytes, off: int) -> int:
    return int.from_bytes(b[off : off + 4], "little")


@dataclass
class PcieCap:
    """Decoded PCI Express capability. Sizes in bytes, speeds in GT/s."""

    offset: int
    port_type: int
    mps_supported_B: int
    mps_B: int
    mrrs_B: int
    devctl_offset: int
    devctl_word: int
    link_speed_max_GTs: float | None
    link_width_max: int
    link_speed_GTs: float | None
    link_width: int
    rcb_B: int

    @property
    def port_type_name(self) -> str:
        """Device/Port Type (PCIe Base Spec, capabilities register bits 7:4)."""
        return {
            0: "Endpoint",
            1: "Legacy Endpoint",
            4: "Root Port",
            5: "Upstream Port",
            6: "Downstream Port",
            7: "PCIe-to-PCI bridge",
            8: "PCI-to-PCIe bridge",
            9: "Root Complex Integrated Endpoint",
            10: "Root Complex Event Collector",
        }.get(self.port_type, f"type {self.port_type}")


@dataclass
class AcsCap:
    """ACS capability and control words, with the names of the set control bits."""

    offset: int
    cap: int
    ctrl: int

    @property
    def ctrl_flags(self) -> list[str]:
        """Names of the enabled ACS control bits (lspci's ``ACSCtl`` with a ``+``)."""
        return [n for i, n in enumerate(ACS_BITS) if self.ctrl >> i & 1]

    @property
    def redirects(self) -> bool:
        """True when peer requests or completions are redirected upstream (ReqRedir/CmpltRedir)."""
        return bool(self.ctrl & 0b1100)


@dataclass
class ConfigSpace:
    """Decoded PCI config space of one function (whatever part of it was readable)."""

    raw: bytes
    vendor: int
    device: int
    header_type: int
    pcie: PcieCap | None = None
    acs: AcsCap | None = None
    rebar: bool = False
    ext_caps: list[int] = field(default_factory=list)

    @property
    def extended_readable(self) -> bool:
        """Whether the extended space (>= 256 bytes) was captured (root reads 4096; users 64)."""
        return len(self.raw) >= 4096


def decode_config(raw: bytes) -> ConfigSpace:
    """Decode a function's config space.

    ``raw`` may be 64 bytes (non-root sysfs read: header only), 256 (legacy space) or 4096
    (extended). Raises ConfigSpaceError when shorter than 64 bytes or all 0xff (no device).
    """
    if len(raw) < 64:
        raise ConfigSpaceError(f"config space has {len(raw)} bytes, need at least 64")
    vendor, device = _u16(raw, 0), _u16(raw, 2)
    if vendor in (0xFFFF, 0x0000):
        raise ConfigSpaceError(f"vendor id 0x{vendor:04x}: no device behind this config space")
    cs = ConfigSpace(raw=raw, vendor=vendor, device=device, header_type=raw[0x0E] & 0x7F)
    status = _u16(raw, 0x06)
    if status & 0x10 and len(raw) >= 256:
        ptr = raw[0x34] & 0xFC
        seen = set()
        while ptr and ptr not in seen and ptr + 2 <= len(raw) and ptr >= 0x40:
            seen.add(ptr)
            cap_id = raw[ptr]
            if cap_id == 0x10 and ptr + 0x14 <= len(raw):
                capreg = _u16(raw, ptr + 2)
                devcap = _u32(raw, ptr + 4)
                devctl = _u16(raw, ptr + 8)
                lnkcap = _u32(raw, ptr + 0x0C)
                lnkctl = _u16(raw, ptr + 0x10)
                lnksta = _u16(raw, ptr + 0x12)
                cs.pcie = PcieCap(
                    offset=ptr,
                    port_type=(capreg >> 4) & 0xF,
                    mps_supported_B=128 << (devcap & 0x7),
                    mps_B=128 << ((devctl >> 5) & 0x7),
                    mrrs_B=128 << ((devctl >> 12) & 0x7),
                    devctl_offset=ptr + 8,
                    devctl_word=devctl,
                    link_speed_max_GTs=pcie_gts(lnkcap & 0xF),
                    link_width_max=(lnkcap >> 4) & 0x3F,
                    link_speed_GTs=pcie_gts(lnksta & 0xF),
                    link_width=(lnksta >> 4) & 0x3F,
                    rcb_B=128 if lnkctl & 0x8 else 64,
                )
            ptr = raw[ptr + 1] & 0xFC
    if len(raw) >= 4096:
        off = 0x100
        seen = set()
        while off and off not in seen and off + 8 <= len(raw):
            seen.add(off)
            hdr = _u32(raw, off)
            if hdr in (0, 0xFFFFFFFF):
                break
            cap_id = hdr & 0xFFFF
            cs.ext_caps.append(cap_id)
            if cap_id == 0x000D:
                cs.acs = AcsCap(offset=off, cap=_u16(raw, off + 4), ctrl=_u16(raw, off + 6))
            elif cap_id == 0x0015:
                cs.rebar = True
            off = (hdr >> 20) & 0xFFC
            if off < 0x100:
                break
    return cs


# --- lspci -vvv ---------------------------------------------------------------------------------

_LSPCI_HEAD = re.compile(r"^(?P<bdf>(?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])\s+(?P<rest>.*)$", re.I)


@dataclass
class LspciDevice:
    """One function of ``lspci -vvv [-nn]`` output: the header line and the decoded fields."""

    bdf: str
    description: str
    vendor_id: int | None = None
    device_id: int | None = None
    class_code: int | None = None
    mps_supported_B: int | None = None
    mps_B: int | None = None
    mrrs_B: int | None = None
    link_cap: tuple[float, int] | None = None
    link_sta: tuple[float, int] | None = None
    link_downgraded: bool = False
    #: the ``(downgraded)`` / ``(ok)`` notes newer pciutils print after LnkSta's speed and width
    #: (None without a note): lspci's own comparison with the link's capability
    speed_downgraded: bool | None = None
    width_downgraded: bool | None = None
    rcb_B: int | None = None
    acs_ctl: dict[str, bool] | None = None
    rebar: bool = False
    secondary_bus: int | None = None
    subordinate_bus: int | None = None
    iommu_group: str | None = None
    numa_node: int | None = None
    lines: list[str] = field(default_factory=list)

    @property
    def bus(self) -> int:
        """The bus number of this function (``0000:3b:00.0`` -> 0x3b)."""
        return int(self.bdf.split(":")[1], 16)

    @property
    def domain(self) -> str:
        """The PCI domain (``0000``)."""
        return self.bdf.split(":")[0]


def lspci_parents(devices: dict[str, LspciDevice]) -> dict[str, str]:
    """Upstream bridge of each function from the bridges' bus numbers (``Bus: primary=00,
    secondary=3b, subordinate=3f``): the bridge of the same domain whose secondary..subordinate
    range holds the function's bus most narrowly. For ``lspci -vvv`` text without sysfs links.
    Functions on a root bus (no bridge above them in the text) are left out."""
    bridges = [d for d in devices.values() if d.secondary_bus is not None and d.subordinate_bus is not None]
    out: dict[str, str] = {}
    for d in devices.values():
        best = None
        for b in bridges:
            if b.bdf == d.bdf or b.domain != d.domain or not b.secondary_bus <= d.bus <= b.subordinate_bus:  # type: ignore[operator]
                continue
            if best is None or (b.subordinate_bus - b.secondary_bus) < (best.subordinate_bus - best.secondary_bus):  # type: ignore[operator]
                best = b
        if best is not None:
            out[d.bdf] = best.bdf
    return out


_SPEED_WIDTH = re.compile(r"Speed ([\d.]+)GT/s(?: \((ok|downgraded)\))?,? .*?Width x(\d+)(?: \((ok|downgraded)\))?")


def _speed_width(s: str) -> tuple[float, int] | None:
    mm = _SPEED_WIDTH.search(s)
    return (float(mm.group(1)), int(mm.group(3))) if mm else None


def _link_status(dev: LspciDevice, s: str) -> None:
    """Read one ``LnkSta:`` line into ``dev``: speed and width, and lspci's notes on each.

    >>> d = LspciDevice(bdf="", description="")
    >>> _link_status(d, "LnkSta: Speed 2.5GT/s (downgraded), Width x16 (ok)")  # janhq/jan#183
    >>> d.link_sta, d.speed_downgraded, d.width_downgraded, d.link_downgraded
    ((2.5, 16), True, False, True)
    """
    mm = _SPEED_WIDTH.search(s)
    if mm:
        dev.link_sta = (float(mm.group(1)), int(mm.group(3)))
        dev.speed_downgraded = None if mm.group(2) is None else mm.group(2) == "downgraded"
        dev.width_downgraded = None if mm.group(4) is None else mm.group(4) == "downgraded"
    dev.link_downgraded = "downgraded" in s


def unaddressed_links(text: str) -> list[LspciDevice]:
    """Link registers pasted without their device's header line (``lspci -vv | grep Lnk``, or the
    two lines copied out of a block): one :class:`LspciDevice` with an empty ``bdf`` per
    ``LnkSta:`` line above the first device header, with the ``LnkCap:`` line before it.

    >>> (d,) = unaddressed_links("    LnkCap: Port #0, Speed 16GT/s, Width x16, ASPM L1, Exit Latency L1 <16us\\n"
    ...                          "    LnkSta: Speed 2.5GT/s (downgraded), Width x16 (ok)\\n")  # janhq/jan#183
    >>> d.link_cap, d.link_sta, d.speed_downgraded
    ((16.0, 16), (2.5, 16), True)
    """
    out: list[LspciDevice] = []
    cur = LspciDevice(bdf="", description="")
    for line in text.splitlines():
        if _LSPCI_HEAD.match(line) and not line[:1].isspace():
            break
        s = line.strip()
        if s.startswith("LnkCap:"):
            cur.link_cap = _speed_width(s)
        elif s.startswith("LnkSta:"):
            _link_status(cur, s)
            cur.lines.append(s)
            if cur.link_sta is not None:
                out.append(cur)
            cur = LspciDevice(bdf="", description="")
    return out


def parse_lspci_vvv(text: str) -> dict[str, LspciDevice]:
    """Parse ``lspci -vvv`` (optionally ``-nn``, ``-D``) text into devices keyed by full BDF.

    A BDF without a domain gets ``0000:``. Unknown lines are kept in ``lines``. Never raises on
    odd text: what cannot be read stays None. A line of a public paste
    (``tests/fixtures/evidence/lspci-torchipc17-plx.txt``):

    >>> d = parse_lspci_vvv("03:08.0 PCI bridge: PLX Technology, Inc. PEX 8747 48-Lane, 5-Port PCI Express Gen 3 (8.0 GT/s) Switch (rev ca)")
    >>> list(d), d["0000:03:08.0"].bus, d["0000:03:08.0"].description[:29]
    (['0000:03:08.0'], 3, 'PCI bridge: PLX Technology, I')
    """
    devices: dict[str, LspciDevice] = {}
    cur: LspciDevice | None = None
    for line in text.splitlines():
        m = _LSPCI_HEAD.match(line)
        if m and not line[:1].isspace():
            bdf = m.group("bdf").lower()
            if bdf.count(":") == 1:
                bdf = "0000:" + bdf
            cur = LspciDevice(bdf=bdf, description=m.group("rest"))
            ids = re.findall(r"\[([0-9a-f]{4}):([0-9a-f]{4})\]", m.group("rest"))
            cls = re.match(r"^[^\[\]]*\[([0-9a-f]{4})\]:", m.group("rest"), flags=re.I)
            if cls:
                cur.class_code = int(cls.group(1), 16) << 8
            if ids:
                cur.vendor_id, cur.device_id = int(ids[-1][0], 16), int(ids[-1][1], 16)
            devices[bdf] = cur
            continue
        if cur is None:
            continue
        s = line.strip()
        cur.lines.append(s)
        if s.startswith("DevCap:"):
            mm = re.search(r"MaxPayload (\d+) bytes", s)
            if mm:
                cur.mps_supported_B = int(mm.group(1))
        elif s.startswith("DevCtl:") or (s.startswith("MaxPayload") and "MaxReadReq" in s):
            mm = re.search(r"MaxPayload (\d+) bytes, MaxReadReq (\d+) bytes", s)
            if mm:
                cur.mps_B, cur.mrrs_B = int(mm.group(1)), int(mm.group(2))
        elif s.startswith("LnkCap:"):
            cur.link_cap = _speed_width(s)
        elif s.startswith("LnkCtl:"):
            mm = re.search(r"RCB (\d+) bytes", s)
            if mm:
                cur.rcb_B = int(mm.group(1))
        elif s.startswith("LnkSta:"):
            _link_status(cur, s)
        elif s.startswith("ACSCtl:"):
            cur.acs_ctl = {k: v == "+" for k, v in re.findall(r"(\w{1,32})([+-])", s[len("ACSCtl:") :])}
        elif "Resizable BAR" in s:
            cur.rebar = True
        elif s.startswith("Bus: primary="):
            mm = re.search(r"secondary=([0-9a-f]+), subordinate=([0-9a-f]+)", s, flags=re.I)
            if mm:
                cur.secondary_bus, cur.subordinate_bus = int(mm.group(1), 16), int(mm.group(2), 16)
        elif s.startswith("NUMA node:") and s.split(":", 1)[1].strip().lstrip("-").isdigit():
            cur.numa_node = int(s.split(":", 1)[1])
        elif s.startswith("IOMMU group:"):
            cur.iommu_group = s.split(":", 1)[1].strip() or None
    return devices


# --- pci.ids ------------------------------------------------------------------------------------


@dataclass
class PciIds:
    """The PCI ID database: vendor names, device names, class names.

    File format documented at the head of pci.ids itself (https://pci-ids.ucw.cz/): vendor lines
    ``vvvv  name``, device lines ``\\tdddd  name``, subsystem lines ``\\t\\t``, class section
    ``C cc  name`` with ``\\tss  name`` subclasses.
    """

    vendors: dict[int, str] = field(default_factory=dict)
    devices: dict[tuple[int, int], str] = field(default_factory=dict)
    classes: dict[int, str] = field(default_factory=dict)
    subclasses: dict[tuple[int, int], str] = field(default_factory=dict)
    path: str | None = None

    def vendor_name(self, vendor: int) -> str | None:
        """Vendor name or None."""
        return self.vendors.get(vendor)

    def device_name(self, vendor: int, device: int) -> str | None:
        """Device name or None (never a guess from a neighbouring id)."""
        return self.devices.get((vendor, device))

    def class_name(self, class_code: int) -> str | None:
        """Name of a 24-bit class code (``0x030200``): the subclass name, else the class name."""
        base, sub = class_code >> 16, (class_code >> 8) & 0xFF
        return self.subclasses.get((base, sub)) or self.classes.get(base)

    @property
    def has_vendors(self) -> bool:
        """Whether the database names any vendor (False: no pci.ids installed)."""
        return bool(self.vendors)


#: The start of a top-level line of pci.ids (a vendor ``vvvv  name`` or a class ``C cc  name``,
#: not tab-indented, not a comment): where a vendor's or a class's block of lines ends.
_PCI_IDS_TOP = re.compile(r"\n[^\t#\n]")


class PciIdsIndex:
    """The same questions as :class:`PciIds` answered from the text of pci.ids by looking up only
    the ids asked (``str.find`` of the vendor or class line, then the device line within its
    block), not by parsing all of its ~40,000 lines (45 ms of CPU on the CI machine, for the handful
    of devices a host has). ``vendors``, ``devices``, ``classes`` and ``subclasses`` parse the whole
    file on first use (:func:`parse_pci_ids`). Ids in pci.ids are lower-case hex."""

    def __init__(self, text: str, path: str | None = None) -> None:
        self.text = "\n" + text
        self.path = path
        self._memo: dict[tuple[str, int, int], str | None] = {}

    @functools.cached_property
    def _parsed(self) -> PciIds:
        return parse_pci_ids(self.text, self.path)

    vendors = property(lambda self: self._parsed.vendors, doc="Vendor id -> name (whole file parsed).")
    devices = property(lambda self: self._parsed.devices, doc="(vendor, device) -> name (whole file parsed).")
    classes = property(lambda self: self._parsed.classes, doc="Class -> name (whole file parsed).")
    subclasses = property(lambda self: self._parsed.subclasses, doc="(class, subclass) -> name (whole file parsed).")

    def _line(self, head: str, start: int = 0, end: int | None = None) -> tuple[int, str] | None:
        """(offset after the line, the name on it) of the first line ``head  name`` in the range."""
        i = self.text.find("\n" + head + "  ", start, end)
        if i < 0:
            return None
        j = self.text.find("\n", i + 1)
        j = len(self.text) if j < 0 else j
        return j, self.text[i + 1 + len(head) + 2:j].strip()

    @functools.lru_cache(maxsize=64)  # keeps the index alive: it is one per process (system_pci_ids)
    def _block(self, top: str) -> tuple[str, int, int] | None:
        """(name, start, end) of the line ``top  name`` and the tab-indented block under it."""
        hit = self._line(top)
        if hit is None:
            return None
        m = _PCI_IDS_TOP.search(self.text, hit[0] + 1)
        return hit[1], hit[0], m.start() if m else len(self.text)

    def _lookup(self, kind: str, top: str, sub: str | None) -> str | None:
        block = self._block(top)
        if block is None or sub is None:
            return block[0] if block else None
        inner = self._line("\t" + sub, block[1] - 1, block[2])
        return inner[1] if inner else None

    def _memoised(self, kind: str, a: int, b: int, top: str, sub: str | None) -> str | None:
        k = (kind, a, b)
        if k not in self._memo:
            self._memo[k] = self._lookup(kind, top, sub)
        return self._memo[k]

    def vendor_name(self, vendor: int) -> str | None:
        """Vendor name or None."""
        return self._memoised("v", vendor, -1, f"{vendor:04x}", None)

    def device_name(self, vendor: int, device: int) -> str | None:
        """Device name or None (never a guess from a neighbouring id)."""
        return self._memoised("d", vendor, device, f"{vendor:04x}", f"{device:04x}")

    def class_name(self, class_code: int) -> str | None:
        """Name of a 24-bit class code (``0x030200``): the subclass name, else the class name."""
        base, sub = class_code >> 16, (class_code >> 8) & 0xFF
        return (self._memoised("s", base, sub, f"C {base:02x}", f"{sub:02x}")
                or self._memoised("c", base, -1, f"C {base:02x}", None))

    @property
    def has_vendors(self) -> bool:
        """Whether the database names any vendor (False: an empty file)."""
        return re.search(r"^[0-9a-f]{4}  ", self.text, re.M) is not None


def parse_pci_ids(text: str, path: str | None = None) -> PciIds:
    """Parse pci.ids text. Lines it does not understand are skipped."""
    db = PciIds(path=path)
    vendor: int | None = None
    klass: int | None = None
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("C "):
            parts = line[2:].split(None, 1)
            try:
                klass = int(parts[0], 16)
            except (ValueError, IndexError):
                klass = None
            vendor = None
            if klass is not None and len(parts) > 1:
                db.classes[klass] = parts[1].strip()
            continue
        if line.startswith("\t\t"):
            continue
        if line.startswith("\t"):
            parts = line[1:].split(None, 1)
            if len(parts) != 2:
                continue
            try:
                code = int(parts[0], 16)
            except ValueError:
                continue
            if vendor is not None:
                db.devices[(vendor, code)] = parts[1].strip()
            elif klass is not None:
                db.subclasses[(klass, code)] = parts[1].strip()
            continue
        parts = line.split(None, 1)
        if len(parts) == 2 and len(parts[0]) == 4:
            try:
                vendor = int(parts[0], 16)
            except ValueError:
                vendor = None
                continue
            klass = None
            db.vendors[vendor] = parts[1].strip()
    return db


@functools.lru_cache(maxsize=4)
def system_pci_ids(paths: tuple[str, ...] = PCI_IDS_PATHS) -> PciIds | PciIdsIndex:
    """The system's pci.ids (Debian package ``pci.ids``), read once and looked up by id
    (:class:`PciIdsIndex`); empty when none is installed."""
    for p in paths:
        if os.path.isfile(p):
            with open(p, encoding="utf-8", errors="replace") as f:
                return PciIdsIndex(f.read(), p)
    return PciIds()
