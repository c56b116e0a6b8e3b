"""Facts from NCCL's own log (``NCCL_DEBUG=INFO``), read line by line.

The line formats are NCCL's (``src/debug.cc`` prefixes ``host:pid:tid [cudaDev] NCCL INFO``;
``src/transport/*.cc`` print ``Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM``; ``src/init.cc`` prints
``NCCL version 2.x.y+cudaX.Y`` and ``N coll channels, N collnet channels, N nvls channels, N p2p
channels``; ``src/transport/net_ib.cc`` prints ``NET/IB : GPU Direct RDMA Disabled for HCA``;
``src/transport/p2p.cc`` prints ``P2P is disabled between connected GPUs``; ``src/misc/param.cc``
prints ``NCCL_X set by environment to Y``). Quoted examples are in the project's fixtures.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field

#: ``host:pid:tid [dev] NCCL INFO msg`` (NCCL 2.2-2.3 printed ``INFO``/``WARN`` without ``NCCL``).
#: The ``] NCCL INFO`` anchor is found first and the head is matched in the 100 characters before
#: it (HOST_NAME_MAX is 64), so a crafted line costs time in proportion to its length; one search
#: of the whole pattern from every position would be quadratic.
_ANCHOR = re.compile(r"\] (?:NCCL )?(?:INFO|WARN|TRACE|ABORT)")
_HEAD = re.compile(r"(?P<host>[^\s:\[\]]{1,64}):(?P<pid>\d{1,10}):(?P<tid>\d{1,10}) \[(?P<dev>\d{1,6})\]$")
_TAIL = re.compile(r" (?:NCCL )?(?P<lvl>INFO|WARN|TRACE|ABORT) ?(?P<msg>.*)$")


def _prefix(line: str) -> dict[str, str] | None:
    """``host``, ``pid``, ``tid``, ``dev``, ``lvl``, ``msg`` of an NCCL debug line, or None (the
    first 8 anchors of a line are tried)."""
    for n, a in enumerate(_ANCHOR.finditer(line)):
        if n == 8:
            break
        pos = a.start()
        head = _HEAD.search(line, max(0, pos - 100), pos + 1)
        tail = _TAIL.match(line, pos + 1) if head else None
        if tail:
            return {**head.groupdict(), **tail.groupdict()}
    return None
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)(?:\+cuda(\d+\.\d+))?")
_CHANNEL = re.compile(
    r"(?:Channel|Ring) (?P<ch>\d+)(?:/\d+)? ?: (?P<src>\d+)\[(?P<sdev>[0-9a-fx]+)\] -> (?P<dst>\d+)\[(?P<ddev>[0-9a-fx]+)\]"
    r"(?: \[(?P<dir>send|receive)\])? via (?P<via>.+?)\s*$"
)
_RING = re.compile(r"^Channel (\d+)/(\d+) ?:\s+\d+(?:\s+\d+)*\s*$")
_TREES = re.compile(r"^Trees((?: \[\d+\] \S+)+)")
_COUNTS = re.compile(r"(\d{1,9}) coll channels, (?:(\d{1,9}) collnet channels, )?(?:(\d{1,9}) nvls channels, )?(\d{1,9}) p2p channels")
_GDR_OFF = re.compile(r"GPU Direct RDMA Disabled for (?:HCA \d+ '([^']+)'|GPU (\S+) / HCA (\d+) '?([^'\s]*)'?)")
_GDR_ON = re.compile(r"GPU Direct RDMA (?:\(nvidia-peermem\) )?[Ee]nabled? for (?:HCA \d+ '([^']+)|GPU)")
_P2P_OFF = re.compile(r"P2P is disabled between connected GPUs (\d+) and (\d+)")
_ENV = re.compile(r"\b(NCCL_[A-Z0-9_]+) set by environment to (.*?)\.?\s*$")
_NETWORK = re.compile(r"Using network (\S+)")
_IB_USING = re.compile(r"NET/IB ?: Using ((?:\[\d+\]\S+ ?)+)")
_IB_NONE = re.compile(r"NET/IB ?: No device found")
_COMM = re.compile(r"comm 0x[0-9a-f]+ rank (\d+) nranks (\d+) cudaDev (\d+)(?: nvmlDev \d+)? busId ([0-9a-f]+)")
_NVLS = re.compile(r"NVLS multicast support is (not )?available")

#: Most warning lines kept verbatim (the rest are counted).
MAX_WARNINGS = 20


def transport_family(via: str) -> str:
    """The transport of a ``via`` string: ``P2P/CUMEM``, ``P2P/IPC``, ``P2P/direct``, ``SHM``,
    ``NET/Socket``, ``NET/IB``, ``COLLNET``, ``NVLS`` or the first word.

    >>> transport_family("NET/IBext_v8/7/GDRDMA"), transport_family("P2P/direct pointer/read")
    ('NET/IB', 'P2P/direct')
    """
    if "shared memory" in via:  # NCCL 2.3: "via direct shared memory"
        return "SHM"
    parts = via.split("/")
    head = parts[0].upper()
    if head == "P2P":
        sub = parts[1].split()[0] if len(parts) > 1 else ""
        return f"P2P/{sub}" if sub else "P2P"
    if head == "SHM":
        return "SHM"
    if head == "NET":
        sub = parts[1] if len(parts) > 1 else ""
        if sub.startswith("IB"):
            return "NET/IB"
        return f"NET/{sub}" if sub else "NET"
    return head


class NcclLink(BaseModel):
    """Channels between two ranks over one transport (``via`` as NCCL printed it)."""

    src: int
    dst: int
    src_dev: str
    dst_dev: str
    transport: str
    via: str
    channels: int = 0
    gdr: bool = False


class NcclLogFacts(BaseModel):
    """What one NCCL log says. Counts are over the whole log; lists are bounded.

    ``single_host`` is True when every line comes from one host name and no two ranks name the
    same device (two nodes may share a host name such as ``ubuntu``: then ranks 0 and 8 both
    sit on device 0 and the log is multi-node). ``intra_host_links`` are the links between ranks
    on one host.
    """

    lines: int = 0
    nccl_lines: int = 0
    version: str | None = None
    cuda: str | None = None
    hosts: list[str] = Field(default_factory=list)
    nranks: int | None = None
    rank_host: dict[int, str] = Field(default_factory=dict)
    rank_dev: dict[int, str] = Field(default_factory=dict)
    links: list[NcclLink] = Field(default_factory=list)
    transports: dict[str, int] = Field(default_factory=dict)
    ring_channels: int | None = None
    tree_channels: int | None = None
    coll_channels: int | None = None
    collnet_channels: int | None = None
    nvls_channels: int | None = None
    p2p_channels: int | None = None
    nvls_available: bool | None = None
    network: str | None = None
    ib_devices: list[str] = Field(default_factory=list)
    ib_none: bool = False
    gdr_disabled: list[str] = Field(default_factory=list)
    gdr_enabled: bool = False
    p2p_disabled_pairs: list[tuple[int, int]] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    warning_count: int = 0
    single_host: bool | None = None
    multi_dev_ranks: bool = False

    def intra_host_links(self) -> list[NcclLink]:
        """Links whose two ranks are on one host (all links of a single-host log).

        With several host names, ranks are placed by the host that printed their lines. When
        the host names cannot tell the nodes apart (two nodes both called ``ubuntu``), ranks
        joined by P2P or SHM channels are taken to share a node, and a network link between
        ranks of one such group counts as intra-host.
        """
        if self.single_host:
            return list(self.links)
        if len(self.hosts) > 1 and len(set(self.rank_host.values())) > 1:
            return [
                lk for lk in self.links
                if lk.src in self.rank_host and lk.dst in self.rank_host and self.rank_host[lk.src] == self.rank_host[lk.dst]
            ]
        parent: dict[int, int] = {}

        def find(x: int) -> int:
            parent.setdefault(x, x)
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for lk in self.links:
            if not lk.transport.startswith("NET"):
                parent[find(lk.src)] = find(lk.dst)
        return [lk for lk in self.links if find(lk.src) == find(lk.dst) and (not lk.transport.startswith("NET") or lk.src != lk.dst)]


def parse_nccl_log(lines: Iterable[str]) -> NcclLogFacts:
    """Parse an NCCL log (or any log with NCCL lines interleaved) streaming, into facts.

    Memory is bounded by the number of distinct rank pairs and the warning cap, not the log size.

    >>> f = parse_nccl_log(["h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct"])
    >>> f.transports, f.single_host
    ({'SHM': 1}, True)
    """
    f = NcclLogFacts()
    hosts: dict[str, None] = {}
    links: dict[tuple[int, int, str], NcclLink] = {}
    dev_ranks: dict[str, set[int]] = {}
    warn_seen: set[str] = set()
    gdr_off: dict[str, None] = {}
    p2p_off: dict[tuple[int, int], None] = {}
    for line in lines:
        f.lines += 1
        if "NCCL" not in line and " INFO " not in line and " WARN " not in line:
            continue
        m = _prefix(line)
        if m:
            msg = m["msg"]
            host = m["host"]
            hosts.setdefault(host, None)
            level = m["lvl"]
        else:
            vm = _VERSION.search(line)
            if vm and f.version is None:
                f.version, f.cuda = vm.group(1), vm.group(2)
            if "NCCL WARN" in line:
                msg, host, level = line.split("NCCL WARN", 1)[1].strip(), None, "WARN"
            elif "NCCL INFO " in line:  # a line pasted without its host:pid:tid [dev] prefix
                msg, host, level = line.split("NCCL INFO ", 1)[1].strip(), None, "INFO"
            else:
                continue
        f.nccl_lines += 1
        if level == "WARN":
            f.warning_count += 1
            key = re.sub(r"\d+", "N", msg)[:160]
            if key not in warn_seen and len(f.warnings) < MAX_WARNINGS:
                warn_seen.add(key)
                f.warnings.append(msg.strip()[:300])
            continue
        if msg.startswith(("Channel", "Ring")):
            cm = _CHANNEL.search(msg)
            if cm:
                src, dst = int(cm.group("src")), int(cm.group("dst"))
                via = cm.group("via")
                fam = transport_family(via)
                key3 = (src, dst, fam)
                lk = links.get(key3)
                if lk is None:
                    lk = links[key3] = NcclLink(src=src, dst=dst, src_dev=cm.group("sdev"), dst_dev=cm.group("ddev"), transport=fam, via=via)
                lk.channels += 1
                if "GDRDMA" in via:
                    lk.gdr = True
                    f.gdr_enabled = True
                f.transports[fam] = f.transports.get(fam, 0) + 1
                for r, d in ((src, cm.group("sdev")), (dst, cm.group("ddev"))):
                    f.rank_dev.setdefault(r, d)
                    dev_ranks.setdefault(d, set()).add(r)
                if host is not None and cm.group("dir") is None:
                    f.rank_host.setdefault(src, host)
                    f.rank_host.setdefault(dst, host)
                elif host is not None and cm.group("dir") == "send":
                    f.rank_host.setdefault(src, host)
                elif host is not None and cm.group("dir") == "receive":
                    f.rank_host.setdefault(dst, host)
                continue
            rm = _RING.match(msg)
            if rm:
                f.ring_channels = max(f.ring_channels or 0, int(rm.group(2)))
                continue
        vm = _VERSION.search(msg)
        if vm:
            if f.version is None:
                f.version, f.cuda = vm.group(1), vm.group(2)
            continue
        if msg.startswith("Trees"):
            tm = _TREES.match(msg)
            if tm:
                f.tree_channels = max(f.tree_channels or 0, tm.group(1).count("["))
            continue
        cm2 = _COUNTS.search(msg)
        if cm2:
            f.coll_channels = int(cm2.group(1))
            f.collnet_channels = int(cm2.group(2)) if cm2.group(2) is not None else f.collnet_channels
            f.nvls_channels = int(cm2.group(3)) if cm2.group(3) is not None else f.nvls_channels
            f.p2p_channels = int(cm2.group(4))
            continue
        gm = _GDR_OFF.search(msg)
        if gm:
            gdr_off.setdefault(gm.group(1) or gm.group(4) or f"HCA {gm.group(3)}", None)
            continue
        if _GDR_ON.search(msg):
            f.gdr_enabled = True
            continue
        pm = _P2P_OFF.search(msg)
        if pm:
            a, b = sorted((int(pm.group(1)), int(pm.group(2))))
            p2p_off.setdefault((a, b), None)
            continue
        em = _ENV.search(msg)
        if em:
            f.env.setdefault(em.group(1), em.group(2).strip())
            continue
        nm = _NETWORK.search(msg)
        if nm:
            f.network = nm.group(1)
            continue
        im = _IB_USING.search(msg)
        if im:
            for dev in re.findall(r"\[\d+\]([^:\s]+)", im.group(1)):
                if dev not in f.ib_devices and dev != "RO":
                    f.ib_devices.append(dev)
            continue
        if _IB_NONE.search(msg):
            f.ib_none = True
            continue
        cm3 = _COMM.search(msg)
        if cm3:
            rank, n = int(cm3.group(1)), int(cm3.group(2))
            f.nranks = max(f.nranks or 0, n)
            if host is not None:
                f.rank_host.setdefault(rank, host)
            continue
        nv = _NVLS.search(msg)
        if nv:
            f.nvls_available = (f.nvls_available or False) or not nv.group(1)
    f.hosts = list(hosts)
    f.links = sorted(links.values(), key=lambda x: (x.src, x.dst, x.transport))
    f.gdr_disabled = list(gdr_off)
    f.p2p_disabled_pairs = list(p2p_off)
    f.multi_dev_ranks = any(len(r) > 1 for r in dev_ranks.values())
    if f.hosts or f.links:
        f.single_host = len(f.hosts) <= 1 and not f.multi_dev_ranks
    return f


def summary(f: NcclLogFacts) -> dict[str, Any]:
    """A compact JSON-able summary for a finding's ``details``."""
    return {
        "version": f.version,
        "nranks": f.nranks,
        "hosts": len(f.hosts),
        "single_host": f.single_host,
        "transports": f.transports,
        "ring_channels": f.ring_channels,
        "tree_channels": f.tree_channels,
        "coll_channels": f.coll_channels,
        "nvls_channels": f.nvls_channels,
        "collnet_channels": f.collnet_channels,
        "p2p_channels": f.p2p_channels,
        "network": f.network,
    }
