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

from pydantic import BaseModel, ConfigDict, Field

from infergap.parsers.rules import Rule, apply_first

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


#: The shape of an NCCL log line: ``host:pid:tid [dev] NCCL INFO …`` (``src/debug.cc``), the
#: ``NCCL version`` banner, and the ``[dev] INFO`` form of releases that dropped the word NCCL.
_LINE = re.compile(r"\bNCCL (?:INFO|WARN|TRACE|ABORT)\b|^NCCL version \d|^\S{1,255}:\d{1,10}:\d{1,10} \[\d{1,6}\] (?:INFO|WARN) ")


def is_nccl_line(line: str) -> bool:
    """Whether a cleaned line (leading blanks removed) is a line of an NCCL log.

    >>> is_nccl_line("node0:13571:13571 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0")
    True
    >>> is_nccl_line("INFO 05-15 11:07:08 [api_server.py:1] vLLM API server version 0.8.5")
    False
    """
    return ("NCCL" in line or "INFO" in line or "WARN" in line) and _LINE.search(line) is not None


_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)(?:\+cuda(\d+\.\d+))?")

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
        sub = next(iter(parts[1].split()), "") if len(parts) > 1 else ""
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

    model_config = ConfigDict(defer_build=True)  # schema built on first use, not at import (start time)

    src: int
    dst: int
    src_dev: str
    dst_dev: str
    transport: str
    via: str
    channels: int = 0
    gdr: bool = False
    net_devs: list[int] = Field(default_factory=list)


class NcclNetDev(BaseModel):
    """A network device NCCL listed (``NET/IB : Using [0]mlx5_0:1/RoCE``): its index in channel
    lines (``via NET/IB/0``), name, port, link layer (``IB`` or ``RoCE``) and SHARP support."""

    model_config = ConfigDict(defer_build=True)  # schema built on first use, not at import (start time)

    index: int
    name: str
    port: str = ""
    link: str = ""
    sharp: bool = False


class NcclLogFacts(BaseModel):
    """What one NCCL log says. Counts are over the whole log; lists are bounded.

    ``single_host`` is True when every line comes from one host name and no two ranks name the
    same device (two nodes may share a host name such as ``ubuntu``: then ranks 0 and 8 both
    sit on device 0 and the log is multi-node). ``intra_host_links`` are the links between ranks
    on one host.
    """

    model_config = ConfigDict(defer_build=True)  # schema built on first use, not at import (start time)

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
    gdr_hca: dict[str, bool] = Field(default_factory=dict)
    gdr_why: dict[str, str] = Field(default_factory=dict)
    dmabuf: bool = False
    net_devs: list[NcclNetDev] = Field(default_factory=list)
    oob_iface: str | None = None
    socket_ifaces: list[str] = Field(default_factory=list)
    bootstrap_ifaces: list[str] = Field(default_factory=list)
    nic_speed_mbps: dict[str, int] = Field(default_factory=dict)
    gid_index: int | None = None
    nnodes: int | None = None
    busbw_max_GBps: float | None = None
    busbw_max_bytes: int | None = None
    busbw_avg_GBps: float | None = None
    p2p_disabled_pairs: list[tuple[int, int]] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    warning_count: int = 0
    single_host: bool | None = None
    multi_dev_ranks: bool = False

    def summary(self) -> dict[str, Any]:
        """A compact JSON-able summary for a finding's ``details`` (see :func:`summary`)."""
        return summary(self)

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


class _State:
    """What the line rules of :func:`parse_nccl_log` share: the facts, the host of the current
    line (None for a line without NCCL's prefix) and the sets that bound the lists."""

    def __init__(self) -> None:
        self.f = NcclLogFacts()
        self.host: str | None = None
        self.hosts: dict[str, None] = {}
        self.links: dict[tuple[int, int, str], NcclLink] = {}
        self.dev_ranks: dict[str, set[int]] = {}
        self.warn_seen: set[str] = set()
        self.gdr_off: dict[str, None] = {}
        self.p2p_off: dict[tuple[int, int], None] = {}
        self.lines = 0  # counted here, not on the pydantic model: a plain attribute is cheaper per line
        self.nccl_lines = 0

    def message(self, line: str) -> tuple[str, str] | None:
        """(level, message) of an NCCL line, noting its host; None for another line. A line
        pasted without its ``host:pid:tid [dev]`` prefix counts, without a host."""
        m = _prefix(line)
        if m:
            self.host = m["host"]
            self.hosts.setdefault(self.host, None)
            return m["lvl"], m["msg"]
        self.host = None
        vm = _VERSION.search(line)
        if vm and self.f.version is None:
            self.f.version, self.f.cuda = vm.group(1), vm.group(2)
        if "NCCL WARN" in line:
            return "WARN", line.split("NCCL WARN", 1)[1].strip()
        if "NCCL INFO " in line:
            return "INFO", line.split("NCCL INFO ", 1)[1].strip()
        return None

    def warning(self, msg: str) -> None:
        """Count a warning; keep its text when its shape (digits aside) is new, up to :data:`MAX_WARNINGS`."""
        f = self.f
        f.warning_count += 1
        key = re.sub(r"\d+", "N", msg)[:160]
        if key not in self.warn_seen and len(f.warnings) < MAX_WARNINGS:
            self.warn_seen.add(key)
            f.warnings.append(msg.strip()[:300])

    def finish(self) -> NcclLogFacts:
        """The facts with the links, the de-duplicated lists and the host verdict filled in."""
        f = self.f
        f.lines, f.nccl_lines = self.lines, self.nccl_lines
        f.hosts = list(self.hosts)
        f.links = sorted(self.links.values(), key=lambda x: (x.src, x.dst, x.transport))
        f.gdr_disabled = list(self.gdr_off)
        f.p2p_disabled_pairs = list(self.p2p_off)
        f.multi_dev_ranks = any(len(r) > 1 for r in self.dev_ranks.values())
        if f.hosts or f.links or f.nnodes:
            f.single_host = len(f.hosts) <= 1 and not f.multi_dev_ranks and (f.nnodes or 1) == 1
        return f


def _channel(st: _State, m: re.Match[str] | None, msg: str) -> None:
    """``Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM``: one channel of a link; ranks placed on
    devices and, by the direction of the line, on the host that printed it."""
    assert m is not None
    f = st.f
    src, dst = int(m.group("src")), int(m.group("dst"))
    via = m.group("via")
    fam = transport_family(via)
    lk = st.links.get((src, dst, fam))
    if lk is None:
        lk = st.links[(src, dst, fam)] = NcclLink(src=src, dst=dst, src_dev=m.group("sdev"), dst_dev=m.group("ddev"), transport=fam, via=via)
    lk.channels += 1
    dev = _NET_DEV.match(via)
    if dev and int(dev.group(1)) not in lk.net_devs and len(lk.net_devs) < 64:
        lk.net_devs.append(int(dev.group(1)))
    if "GDRDMA" in via:
        lk.gdr = True
        f.gdr_enabled = True
    f.transports[fam] = f.transports.get(fam, 0) + 1
    for r, d in ((src, m.group("sdev")), (dst, m.group("ddev"))):
        f.rank_dev.setdefault(r, d)
        st.dev_ranks.setdefault(d, set()).add(r)
    if st.host is not None:  # a [send] line is printed by the sender's host, [receive] by the receiver's
        for rank in {None: (src, dst), "send": (src,), "receive": (dst,)}[m.group("dir")]:
            f.rank_host.setdefault(rank, st.host)


def _ring(st: _State, m: re.Match[str] | None, msg: str) -> None:
    assert m is not None
    st.f.ring_channels = max(st.f.ring_channels or 0, int(m.group(2)))


def _version(st: _State, m: re.Match[str] | None, msg: str) -> None:
    assert m is not None
    if st.f.version is None:
        st.f.version, st.f.cuda = m.group(1), m.group(2)


def _trees(st: _State, m: re.Match[str] | None, msg: str) -> None:
    if m:
        st.f.tree_channels = max(st.f.tree_channels or 0, m.group(1).count("["))


def _counts(st: _State, m: re.Match[str] | None, msg: str) -> None:
    assert m is not None
    f = st.f
    f.coll_channels = int(m.group(1))
    f.collnet_channels = int(m.group(2)) if m.group(2) is not None else f.collnet_channels
    f.nvls_channels = int(m.group(3)) if m.group(3) is not None else f.nvls_channels
    f.p2p_channels = int(m.group(4))


def _gdr_why(msg: str) -> str | None:
    """Why NCCL turned GPU Direct RDMA off, from the tail of its line (``(no module)``,
    ``(distance 5 > 4)``: NCCL's ``src/transport/net_ib.cc`` and ``src/graph/paths.cc``)."""
    if "(no module)" in msg:
        return "no peer-memory module loaded (nvidia-peermem / nv_peer_mem)"
    d = re.search(r"\(distance (\d{1,2}) > (-?\d{1,2})\)", msg)
    if d:
        return f"GPU-NIC distance {d.group(1)} is beyond NCCL_NET_GDR_LEVEL {d.group(2)} (the GPU and the NIC do not share a PCIe switch)"
    return None


def _gdr_off(st: _State, m: re.Match[str] | None, msg: str) -> None:
    assert m is not None
    key = m.group(1) or m.group(4) or f"HCA {m.group(3)}"
    st.gdr_off.setdefault(key, None)
    st.f.gdr_hca[key] = False
    why = _gdr_why(msg)
    if why:
        st.f.gdr_why.setdefault(key, why)


def _gdr_on(st: _State, m: re.Match[str] | None, msg: str) -> None:
    assert m is not None
    st.f.gdr_enabled = True
    if m.group(1):
        st.f.gdr_hca.setdefault(m.group(1), True)


def _p2p_off(st: _State, m: re.Match[str] | None, msg: str) -> None:
    assert m is not None
    a, b = sorted((int(m.group(1)), int(m.group(2))))
    st.p2p_off.setdefault((a, b), None)


def _env(st: _State, m: re.Match[str] | None, msg: str) -> None:
    assert m is not None
    st.f.env.setdefault(m.group(1), m.group(2).strip())


def _network(st: _State, m: re.Match[str] | None, msg: str) -> None:
    assert m is not None
    st.f.network = m.group(1)


_NET_DEV = re.compile(r"NET/[A-Za-z_]{1,16}(?:_v\d{1,3})?/(\d{1,3})\b")
_IB_DEV = re.compile(r"\[(\d{1,3})\]([\w.\-]{1,64})(?::(\d{1,3}))?(?::\d{0,3}){0,4}(?:/(IB|RoCE|ETH|\w{1,16}))?(/SHARP)?")
_IFACE = re.compile(r"(?:\[\d{1,3}\])?([\w.\-]{1,64}):[0-9a-fA-F.:%\w]{2,80}<\d{1,6}>")


def _ib_using(st: _State, m: re.Match[str] | None, msg: str) -> None:
    """``NET/IB : Using [0]mlx5_0:1/IB/SHARP [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.0.0.1<0>`` (NCCL's
    ``src/transport/net_ib.cc``): the devices with their link layer, and the OOB interface."""
    assert m is not None
    f = st.f
    head, _, oob = msg.partition("; OOB ")
    for idx, name, port, link, sharp in _IB_DEV.findall(head):
        if name == "RO" or name in f.ib_devices or len(f.ib_devices) >= 64:
            continue
        f.ib_devices.append(name)
        f.net_devs.append(NcclNetDev(index=int(idx), name=name, port=port, link=link, sharp=bool(sharp)))
    ifm = _IFACE.search(oob) if oob else None
    if ifm and f.oob_iface is None:
        f.oob_iface = ifm.group(1)


def _ifaces(into: list[str], msg: str) -> None:
    for name in _IFACE.findall(msg):
        if name not in into and len(into) < 32:
            into.append(name)


def _socket_using(st: _State, m: re.Match[str] | None, msg: str) -> None:
    """``NET/Socket : Using [0]eth0:192.0.2.2<0>`` and the older ``NET : Using interface lo:…``."""
    _ifaces(st.f.socket_ifaces, msg)


def _bootstrap(st: _State, m: re.Match[str] | None, msg: str) -> None:
    _ifaces(st.f.bootstrap_ifaces, msg)


def _speed(st: _State, m: re.Match[str] | None, msg: str) -> None:
    """A NIC's speed in Mbps: ``NET/IB : Made virtual device [0] name=mlx5_0 speed=400000``,
    ``NET/IB: [0] mlx5_0:uverbs0:1/IB … speed=400000``, ``Found network interface eth0 with speed 10000 Mbps``."""
    assert m is not None
    name = m.group(1) or m.group(3) or m.group(5)
    mbps = m.group(2) or m.group(4) or m.group(6)
    if name and len(st.f.nic_speed_mbps) < 64:
        st.f.nic_speed_mbps.setdefault(name, int(mbps))


def _gid(st: _State, m: re.Match[str] | None, msg: str) -> None:
    assert m is not None
    st.f.gid_index = int(m.group(1))


def _nnodes(st: _State, m: re.Match[str] | None, msg: str) -> None:
    """``comm 0x… rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0`` (NCCL's ``src/init.cc``)."""
    assert m is not None
    st.f.nnodes = max(st.f.nnodes or 0, int(m.group(1)))


def _dmabuf(st: _State, m: re.Match[str] | None, msg: str) -> None:
    st.f.dmabuf = True


def _ib_none(st: _State, m: re.Match[str] | None, msg: str) -> None:
    st.f.ib_none = True


def _comm(st: _State, m: re.Match[str] | None, msg: str) -> None:
    assert m is not None
    st.f.nranks = max(st.f.nranks or 0, int(m.group(2)))
    if st.host is not None:
        st.f.rank_host.setdefault(int(m.group(1)), st.host)


def _nvls(st: _State, m: re.Match[str] | None, msg: str) -> None:
    assert m is not None
    st.f.nvls_available = (st.f.nvls_available or False) or not m.group(1)


#: The rules for the message of an NCCL INFO line, in order: the first rule that takes a message ends it.
RULES: tuple[Rule, ...] = (
    Rule(re.compile(r"(?:Channel|Ring) (?P<ch>\d+)(?:/\d+)? ?: (?P<src>\d+)\[(?P<sdev>[0-9a-fx]+)\] -> (?P<dst>\d+)\[(?P<ddev>[0-9a-fx]+)\]"
                    r"(?: \[(?P<dir>send|receive)\])? via (?P<via>.+?)\s*$"), _channel, words=("Channel", "Ring"), prefix=True),
    Rule(re.compile(r"^Channel (\d+)/(\d+) ?:\s+\d+(?:\s+\d+)*\s*$"), _ring, words=("Channel", "Ring"), prefix=True),
    Rule(_VERSION, _version),
    Rule(re.compile(r"^Trees((?: \[\d+\] \S+)+)"), _trees, words=("Trees",), prefix=True, always=True),
    Rule(re.compile(r"(\d{1,9}) coll channels, (?:(\d{1,9}) collnet channels, )?(?:(\d{1,9}) nvls channels, )?(\d{1,9}) p2p channels"), _counts),
    Rule(re.compile(r"GPU Direct RDMA Disabled for (?:HCA \d+ '([^']+)'|GPU (\S+) / HCA (\d+) '?([^'\s]*)'?)"), _gdr_off),
    Rule(re.compile(r"GPU Direct RDMA (?:\(nvidia-peermem\) )?[Ee]nabled? for (?:HCA \d+ '([^']+)|GPU)"), _gdr_on),
    Rule(re.compile(r"P2P is disabled between connected GPUs (\d+) and (\d+)"), _p2p_off),
    Rule(re.compile(r"\b(NCCL_[A-Z0-9_]+) set by environment to (.*?)\.?\s*$"), _env),
    Rule(re.compile(r"Using network (\S+)"), _network),
    Rule(re.compile(r"NET/IB ?: Using ((?:\[\d+\]\S+ ?)+)"), _ib_using),
    Rule(re.compile(r"(?:NET/Socket ?: Using|NET ?: Using interface) "), _socket_using),
    Rule(re.compile(r"^Bootstrap ?: Using "), _bootstrap),
    Rule(re.compile(r"Made virtual device \[\d{1,3}\] name=([\w.\-]{1,64}) speed=(\d{1,9})|NET/IB: \[\d{1,3}\] ([\w.\-]{1,64}):\S{0,200} speed=(\d{1,9})"
                    r"|Found network interface ([\w.\-]{1,64}) with speed (\d{1,9}) Mbps"), _speed, words=("speed",)),
    Rule(re.compile(r"^NET/IB: .{0,200}\bGID (\d{1,4}) \("), _gid, words=("GID",)),
    Rule(re.compile(r"DMA-BUF is available on GPU"), _dmabuf),
    Rule(re.compile(r"\bnRanks \d{1,7} nNodes (\d{1,6}) localRanks"), _nnodes, words=("nNodes",)),
    Rule(re.compile(r"NET/IB ?: No device found"), _ib_none),
    Rule(re.compile(r"comm 0x[0-9a-f]+ rank (\d+) nranks (\d+) cudaDev (\d+)(?: nvmlDev \d+)? busId ([0-9a-f]+)"), _comm),
    Rule(re.compile(r"NVLS multicast support is (not )?available"), _nvls),
)


_REDOPS = (" sum ", " none ", " max ", " min ", " prod ", " avg ")
_AVG_BUSBW = re.compile(r"^#\s{0,8}Avg bus bandwidth\s{0,40}:\s{0,8}(\d{1,7}(?:\.\d{1,6})?)")


def busbw_row(line: str) -> tuple[int, float] | None:
    """(bytes, best bus bandwidth in GB/s) of one result row of an nccl-tests benchmark
    (``all_reduce_perf``: size, count, type, redop[, root], then time, algbw, busbw, #wrong
    out of place and in place, as nccl-tests' ``src/common.cu`` prints them), or None.

    >>> busbw_row("     33554432       8388608     float     sum      -1    812.3   41.31   41.31      0    808.2   41.52   41.52      0")
    (33554432, 41.52)
    """
    t = line.split()
    if len(t) not in (12, 13) or not t[0].isdigit() or not t[1].isdigit():
        return None
    out_i = 7 if len(t) == 13 else 6
    try:
        return int(t[0]), max(float(t[out_i]), float(t[out_i + 4]))
    except ValueError:
        return None


def _tests_line(st: "_State", line: str) -> None:
    """An nccl-tests line between the NCCL lines: a result row or the average bus bandwidth."""
    f = st.f
    if "bus bandwidth" in line:
        m = _AVG_BUSBW.match(line.strip())
        if m:
            f.busbw_avg_GBps = float(m.group(1))
        return
    row = busbw_row(line)
    if row and (f.busbw_max_GBps is None or row[1] > f.busbw_max_GBps):
        f.busbw_max_bytes, f.busbw_max_GBps = row


def parse_nccl_log(lines: Iterable[str]) -> NcclLogFacts:
    """Parse an NCCL log (or any log with NCCL lines interleaved) streaming, into facts: a WARN
    line is counted (and kept, see :meth:`_State.warning`), an INFO message goes to the first
    of :data:`RULES` that takes it.

    Memory is bounded by the number of distinct rank pairs and the warning cap, not the log size.

    >>> f = parse_nccl_log(["h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct"])
    >>> f.transports, f.single_host
    ({'SHM': 1}, True)

    Two nodes over sockets (NCCL#1232, ``tests/fixtures/evidence/nccl-1232-two-nodes.log``): a
    ``[send]`` line places the sender on the host that printed it, ``[receive]`` the receiver.

    >>> f = parse_nccl_log(["[0] host-a:13571:13571 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
    ...                     "[1] host-b:22555:22555 [0] NCCL INFO Channel 00/0 : 2[1] -> 1[0] [receive] via NET/Socket/0"])
    >>> f.transports, f.hosts, f.rank_host
    ({'NET/Socket': 2}, ['host-a', 'host-b'], {0: 'host-a', 1: 'host-b'})
    """
    st = _State()
    for line in lines:
        st.lines += 1
        if "NCCL" not in line and " INFO " not in line and " WARN " not in line:
            if "bus bandwidth" in line or any(r in line for r in _REDOPS):
                _tests_line(st, line)
            continue
        lm = st.message(line)
        if lm is None:
            continue
        st.nccl_lines += 1
        if lm[0] == "WARN":
            st.warning(lm[1])
        else:
            apply_first(RULES, st, lm[1])
    return st.finish()


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


class NcclTestsRun(BaseModel):
    """One nccl-tests benchmark run (``all_reduce_perf`` and its siblings, NVIDIA/nccl-tests
    ``src/common.cu``): the ranks it lists (``#  Rank  0 Group  0 Pid 1 on host device 0 [0x1b]
    NVIDIA H100 80GB HBM3``), its result rows (bytes, busbw out of place and in place in GB/s,
    ``#wrong`` counts when the output has that column), ``# Avg bus bandwidth`` and ``# Out of
    bounds values``."""

    model_config = ConfigDict(defer_build=True)  # schema built on first use, not at import (start time)

    ranks: list[dict[str, str]] = Field(default_factory=list)
    rows: list[tuple[int, float, float]] = Field(default_factory=list)
    wrong: int | None = None
    avg_busbw_GBps: float | None = None
    out_of_bounds: int | None = None

    @property
    def hosts(self) -> list[str]:
        """The host names of the ranks, in order of first appearance."""
        return list(dict.fromkeys(r["host"] for r in self.ranks))

    @property
    def best(self) -> tuple[int, float] | None:
        """(bytes, busbw GB/s) of the row with the highest bus bandwidth, or None."""
        return max(((b, max(o, i)) for b, o, i in self.rows), key=lambda x: x[1], default=None)


_RANK = re.compile(r"^#\s{1,4}Rank\s{1,6}(\d{1,6}) Group\s{1,6}\d{1,6} Pid\s{1,8}\d{1,10} on\s{1,40}(\S{1,64}) device\s{1,4}(\d{1,4}) \[([^\]]{1,20})\] (.{1,80})$")
_OOB = re.compile(r"^#\s{0,8}Out of bounds values\s{0,8}:\s{0,8}(\d{1,12})")
#: Rows kept (a sweep of sizes is a few dozen).
MAX_ROWS = 512


def _tests_row(t: list[str]) -> tuple[int, float, float, int | None] | None:
    """(bytes, busbw out of place, in place, #wrong sum or None) of a result row's fields."""
    if len(t) not in (12, 13) or not t[0].isdigit() or not t[1].isdigit():
        return None
    o = 7 if len(t) == 13 else 6
    try:
        wrong = int(t[o + 1]) + int(t[o + 5]) if len(t) == 13 else None
        return int(t[0]), float(t[o]), float(t[o + 4]), wrong
    except ValueError:
        return None


def parse_nccl_tests(lines: Iterable[str]) -> NcclTestsRun:
    """Parse the output of an nccl-tests benchmark.

    The two-node H100 run of nccl-tests#232 (``tests/fixtures/evidence/nccltests-232-allreduce-two-nodes.txt``):

    >>> r = parse_nccl_tests(["#  Rank  0 Group  0 Pid 895544 on     h100-2 device  0 [0002:00:01] NVIDIA H100 80GB HBM3",
    ...     "    33554432       8388608     float     sum      -1    812.3   41.31   41.31      0    808.2   41.52   41.52      0"])
    >>> r.hosts, r.best, r.wrong
    (['h100-2'], (33554432, 41.52), 0)
    """
    run = NcclTestsRun()
    for line in lines:
        s = line.strip()
        if s.startswith("#"):
            m = _RANK.match(s)
            if m and len(run.ranks) < 4096:
                run.ranks.append({"rank": m.group(1), "host": m.group(2), "device": m.group(3), "bus": m.group(4), "gpu": m.group(5).strip()})
            elif (a := _AVG_BUSBW.match(s)) is not None:
                run.avg_busbw_GBps = float(a.group(1))
            elif (b := _OOB.match(s)) is not None:
                run.out_of_bounds = int(b.group(1))
            continue
        row = _tests_row(s.split())
        if row and len(run.rows) < MAX_ROWS:
            run.rows.append(row[:3])
            if row[3] is not None:
                run.wrong = (run.wrong or 0) + row[3]
    return run
