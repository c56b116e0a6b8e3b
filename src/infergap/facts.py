"""Typed facts about one host, parsed once from a snapshot and shared by the investigators.

Each accessor is memoized and thread-safe (investigators run concurrently), reads only through
the :class:`~infergap.snapshot.Snapshot` API, and prefers the most direct source: sysfs/procfs
over command output, NVML over ``nvidia-smi`` XML over its CSV (checks reference, "Sources to
prefer").
"""

from __future__ import annotations

import functools
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from infergap.parsers import host as hp
from infergap.parsers.nvsmi import (
    NvsmiGpu,
    NvsmiParseError,
    Topology,
    csv_to_gpus,
    nvml_to_gpus,
    parse_nvsmi_xml,
    parse_p2p,
    parse_query_csv,
    parse_nvsmi_q_text,
    parse_nvsmi_table,
    parse_topo,
)
from infergap.gpudata import device_name as data_device_name
from infergap.parsers.pci import ConfigSpace, ConfigSpaceError, LspciDevice, decode_config, lspci_parents, parse_lspci_vvv, parse_od_hex, system_pci_ids
from infergap.snapshot.core import Snapshot

T = TypeVar("T")

NVIDIA = 0x10DE
MELLANOX = 0x15B3
ASPEED = 0x1A03


def memo(fn: Callable[..., T]) -> Callable[..., T]:
    """Memoize a zero-argument method per instance, computing it once even under concurrency."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(self: "Facts") -> T:
        with self._locks_guard:
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:
            if name not in self._cache:
                self._cache[name] = fn(self)
            return self._cache[name]

    return wrapper


@dataclass
class Value:
    """A value with the snapshot source it was read from (for a finding's evidence)."""

    value: str
    source: str


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
    def source(self) -> str:
        """Evidence source: the function's sysfs directory in the snapshot, or the ``lspci``
        output it was read from when sysfs does not list it."""
        return self.listed_in or f"files/sys/bus/pci/devices/{self.bdf}"


@dataclass
class GpuFacts(NvsmiGpu):
    """A GPU merged from sysfs, ``nvidia-smi`` CSV/XML and NVML (later sources win per field).
    ``sources`` lists where its fields came from; ``name_source`` how it was named."""

    sources: list[str] = field(default_factory=list)
    name_source: str | None = None
    cuda_capability: str | None = None
    field_sources: dict[str, str] = field(default_factory=dict)

    def src(self, *fields: str) -> str:
        """Where the first of ``fields`` that is known was read (for a finding's evidence)."""
        for k in fields:
            if k in self.field_sources:
                return self.field_sources[k]
        return self.sources[-1] if self.sources else "nvidia-smi"


@dataclass
class ContainerInfo:
    """Whether the audit ran inside a container, which kind, and the evidence."""

    kind: str | None
    evidence: list[Value]
    #: Markers seen but not taken as proof (``/.dockerenv`` on a VM whose root is its own disk).
    discounted: list[Value] = field(default_factory=list)

    @property
    def inside(self) -> bool:
        return self.kind is not None


@dataclass
class IdleState:
    """A cpuidle state as seen on CPUs: name, wake latency in µs, CPUs where it is enabled."""

    index: int
    name: str
    latency_us: int
    enabled_cpus: list[int]
    disabled_cpus: list[int]


class Facts:
    """Memoized, thread-safe facts over one snapshot. Every accessor returns None (or empty) when
    the evidence is absent, never raises for missing or malformed sources; parse problems are
    recorded in :attr:`problems` (source -> message) so investigators can report them."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self._cache: dict[str, Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self.problems: dict[str, str] = {}

    # -- generic ---------------------------------------------------------------------------------
    def value(self, path: str) -> Value | None:
        """The stripped text of a host file with its source, or None."""
        v = self.snap.read_value(path)
        return None if v is None else Value(v, self.snap.source_of(path))

    def src(self, name: str) -> str:
        """Evidence source label of command ``name``: ``cmds/<name>.out``, or the pasted file it
        came from when the snapshot answers it from evidence."""
        r = self.snap.cmd(name)
        return r.source if r is not None else f"cmds/{name}.out"

    def cmd_ok(self, name: str) -> Any:
        """The CmdResult of a command that ran successfully, else None."""
        r = self.snap.cmd(name)
        return r if r is not None and r.ok and r.stdout.strip() else None

    @memo
    def sysctl_all(self) -> dict[str, str]:
        """``sysctl -a`` output, parsed (empty when absent)."""
        r = self.cmd_ok("sysctl_all")
        return hp.parse_sysctl_all(r.stdout) if r else {}

    def sysctl(self, key: str) -> Value | None:
        """A sysctl from ``/proc/sys/<key with / for .>``, else from ``sysctl -a``."""
        path = "/proc/sys/" + key.replace(".", "/")
        v = self.value(path)
        if v is not None:
            return Value(re.sub(r"\s+", "\t", v.value), v.source)
        s = self.sysctl_all().get(key)
        return Value(re.sub(r"\s+", "\t", s), self.src("sysctl_all")) if s is not None else None

    # -- PCI -------------------------------------------------------------------------------------
    @memo
    def pci_functions(self) -> dict[str, PciFunction]:
        """Every PCI function in sysfs (plus those only in ``lspci -vvv``), keyed by BDF."""
        snap = self.snap
        lspci = {}
        r = self.cmd_ok("lspci_vvv") or self.cmd_ok("lspci")
        lspci_src = None
        if r:
            lspci = parse_lspci_vvv(r.stdout)
            lspci_src = r.source
        out: dict[str, PciFunction] = {}
        base = "/sys/bus/pci/devices"
        names = sorted({n[: -len(".link")] if n.endswith(".link") else n for n in (snap.listdir(base) or [])})
        for bdf in names:
            if not re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", bdf):
                continue
            f = PciFunction(bdf=bdf)
            d = f"{base}/{bdf}"

            def hexval(name: str) -> int | None:
                v = snap.read_value(f"{d}/{name}")
                if v is None:
                    return None
                try:
                    return int(v, 16)
                except ValueError:
                    f.garbage.append(f"{name}: {v[:40]!r}")
                    return None

            def intval(name: str) -> int | None:
                v = snap.read_value(f"{d}/{name}")
                if v is None:
                    return None
                try:
                    return int(v)
                except ValueError:
                    f.garbage.append(f"{name}: {v[:40]!r}")
                    return None

            f.vendor, f.device, f.class_code = hexval("vendor"), hexval("device"), hexval("class")
            f.numa_node = intval("numa_node")
            f.local_cpulist = snap.read_value(f"{d}/local_cpulist")
            f.cur_speed, f.max_speed = snap.read_value(f"{d}/current_link_speed"), snap.read_value(f"{d}/max_link_speed")
            f.cur_width, f.max_width = intval("current_link_width"), intval("max_link_width")
            drv = snap.read_value(f"{d}/driver.link")
            f.driver = drv.rsplit("/", 1)[-1] if drv else None
            grp = snap.read_value(f"{d}/iommu_group.link")
            f.iommu_group = grp.rsplit("/", 1)[-1] if grp else None
            link = snap.read_value(f"{base}/{bdf}.link")
            f.path_known = bool(link)
            if link:
                parts = [p for p in link.split("/") if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", p)]
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
            out[bdf] = f
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

    # -- GPUs ------------------------------------------------------------------------------------
    @memo
    def nvsmi_xml(self) -> Any:
        """Parsed ``nvidia-smi -q -x`` (NvsmiLog) or None; a parse problem goes to :attr:`problems`."""
        r = self.cmd_ok("nvsmi_qx")
        if not r:
            return None
        try:
            return parse_nvsmi_xml(r.stdout)
        except NvsmiParseError as e:
            self.problems[self.src("nvsmi_qx")] = str(e)
            return None

    @memo
    def nvml(self) -> dict[str, Any] | None:
        """The NVML probe JSON when NVML was available, else None."""
        p = self.snap.probe("nvml")
        if isinstance(p, dict) and p.get("available") and isinstance(p.get("gpus"), list):
            return p
        if isinstance(p, dict) and p.get("invalid"):
            self.problems["probes/nvml.json"] = str(p.get("error")).removeprefix("probes/nvml.json: ")
        return None

    @memo
    def gpus(self) -> list[GpuFacts]:
        """NVIDIA GPUs, ordered by BDF, merged from sysfs, nvidia-smi CSV, XML and NVML."""
        merged: dict[str, GpuFacts] = {}
        for f in self.pci_functions().values():
            if f.is_gpu:
                merged[f.bdf] = GpuFacts(bdf=f.bdf, sources=[f.source])
        layers: list[tuple[str, list[NvsmiGpu]]] = []
        r = self.cmd_ok("nvsmi")
        if r:
            layers.append((self.src("nvsmi"), parse_nvsmi_table(r.stdout)))
        r = self.cmd_ok("nvsmi_q")
        if r:
            layers.append((self.src("nvsmi_q"), parse_nvsmi_q_text(r.stdout)))
        r = self.cmd_ok("nvsmi_csv")
        if r:
            layers.append((self.src("nvsmi_csv"), csv_to_gpus(parse_query_csv(r.stdout))))
        x = self.nvsmi_xml()
        if x is not None:
            layers.append((self.src("nvsmi_qx"), x.gpus))
        n = self.nvml()
        if n is not None:
            layers.append(("probes/nvml.json", nvml_to_gpus(n)))
        for src, gl in layers:
            for g in gl:
                if not g.bdf:
                    continue
                m = merged.setdefault(g.bdf, GpuFacts(bdf=g.bdf))
                for k, v in vars(g).items():
                    if k == "bdf" or v is None or v == [] or v == {}:
                        continue
                    setattr(m, k, v)
                    m.field_sources[k] = src
                    if k == "name":
                        m.name_source = src
                m.sources.append(src)
        if n is not None:
            for d in n.get("gpus", []):
                from infergap.parsers.nvsmi import normalize_bdf

                g2 = merged.get(normalize_bdf(d.get("pci_bus_id") or ""))
                if g2 is not None and d.get("cuda_capability"):
                    g2.cuda_capability = d["cuda_capability"]
        caps = self.torch_info().get("capability") if self.torch_info() else None
        gl2 = sorted(merged.values(), key=lambda g: g.bdf)
        topo = self.topology()
        if not gl2 and topo is not None and topo.gpus:
            # Only topo -m was given: the GPUs are known by index, not by PCI address or name.
            gl2 = [GpuFacts(bdf=name, sources=[self.src("nvsmi_topo")]) for name in topo.gpus]
        if caps and len(caps) == len(gl2):
            for g, c in zip(gl2, caps):
                if g.cuda_capability is None and isinstance(c, list) and len(c) == 2:
                    g.cuda_capability = f"{c[0]}.{c[1]}"
        for g in gl2:
            if g.name is None:
                f = self.pci_functions().get(g.bdf)
                db = system_pci_ids()
                dn = db.device_name(NVIDIA, f.device) if f and f.device is not None else None
                if dn:
                    g.name, g.name_source = f"NVIDIA {dn}", "pci.ids"
                elif f is not None and f.device is not None and data_device_name(f.device):
                    g.name, g.name_source = data_device_name(f.device), "infergap gpus.yaml (PCI device id)"
                elif f is not None and f.device is None and f.lspci is not None and "NVIDIA Corporation " in f.lspci.description:
                    # lspci without -nn printed the name from its own pci.ids
                    desc = f.lspci.description.split("NVIDIA Corporation ", 1)[1]
                    g.name, g.name_source = "NVIDIA " + re.sub(r"\s{0,8}\((?:rev|prog-if) [^)]{0,64}\)+", "", desc).strip(), f.source
                else:
                    g.name = "unknown device"
                if g.name_source:
                    g.field_sources["name"] = f.source if f is not None else g.name_source
        return gl2

    @memo
    def topology(self) -> Topology | None:
        """Parsed ``nvidia-smi topo -m`` or None."""
        r = self.cmd_ok("nvsmi_topo")
        if not r:
            return None
        try:
            return parse_topo(r.stdout)
        except NvsmiParseError as e:
            self.problems[self.src("nvsmi_topo")] = str(e)
            return None

    @memo
    def p2p(self) -> dict[tuple[str, str], str]:
        """Pairwise P2P read status from ``topo -p2p r`` (``GPU0``,``GPU1``) -> OK/CNS/…"""
        r = self.cmd_ok("nvsmi_p2p")
        return parse_p2p(r.stdout) if r else {}

    @memo
    def torch_info(self) -> dict[str, Any] | None:
        """The ``torch`` command's JSON (torch version, CUDA build, arch list, devices), or None."""
        from infergap.errors import UserError
        from infergap.guard import loads

        r = self.cmd_ok("torch")
        if not r:
            return None
        for line in reversed(r.stdout.strip().splitlines()):
            try:
                d = loads(line, self.src("torch"))
                if isinstance(d, dict):
                    return d
            except UserError:
                continue
        self.problems[self.src("torch")] = "no JSON line in torch probe output"
        return None

    @memo
    def driver_version(self) -> Value | None:
        """The NVIDIA kernel driver version (``/sys/module/nvidia/version``, NVML, nvidia-smi)."""
        v = self.value("/sys/module/nvidia/version")
        if v:
            return v
        n = self.nvml()
        if n and n.get("driver_version"):
            return Value(n["driver_version"], "probes/nvml.json")
        x = self.nvsmi_xml()
        if x and x.driver_version:
            return Value(x.driver_version, self.src("nvsmi_qx"))
        pv = self.value("/proc/driver/nvidia/version")
        if pv:
            m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", pv.value)
            if m:
                return Value(m.group(1), pv.source)
        return None

    @memo
    def cuda_driver_version(self) -> Value | None:
        """Highest CUDA version the driver supports (``13.0``), from NVML or nvidia-smi."""
        n = self.nvml()
        if n and n.get("cuda_driver_version"):
            c = int(n["cuda_driver_version"])
            return Value(f"{c // 1000}.{(c % 1000) // 10}", "probes/nvml.json")
        x = self.nvsmi_xml()
        if x and x.cuda_version:
            return Value(x.cuda_version, self.src("nvsmi_qx"))
        return None

    # -- host ------------------------------------------------------------------------------------
    @memo
    def modules(self) -> set[str] | None:
        """Loaded kernel modules from /proc/modules (None when not captured)."""
        t = self.snap.read("/proc/modules")
        return hp.parse_modules(t) if t is not None else None

    @memo
    def cmdline(self) -> Value | None:
        """The kernel command line."""
        return self.value("/proc/cmdline")

    @memo
    def kernel_release(self) -> Value | None:
        """Running kernel release: /proc/sys/kernel/osrelease, ``uname -a``, /proc/version."""
        v = self.value("/proc/sys/kernel/osrelease")
        if v:
            return v
        r = self.cmd_ok("uname")
        if r:
            t = r.stdout.split()
            if len(t) >= 3:
                return Value(t[2], self.src("uname"))
        pv = self.value("/proc/version")
        if pv:
            m = re.match(r"Linux version (\S+)", pv.value)
            if m:
                return Value(m.group(1), pv.source)
        return None

    @memo
    def installed_kernels(self) -> tuple[list[str], str] | None:
        """Kernel releases installed (``/lib/modules`` listing, else ``/boot``), with the source."""
        for name in ("modules_installed", "boot_ls"):
            r = self.cmd_ok(name)
            if r:
                rels = hp.kernel_releases_from_listing(r.stdout)
                if rels:
                    return rels, self.src(name)
        return None

    @memo
    def numa_nodes(self) -> dict[int, list[int]] | None:
        """NUMA node -> CPUs, from /sys/devices/system/node/node*/cpulist (or ``numactl -H``)."""
        nodes: dict[int, list[int]] = {}
        for p in self.snap.glob("/sys/devices/system/node/node*/cpulist"):
            m = re.search(r"/node(\d+)/cpulist$", p)
            txt = self.snap.read_value(p)
            if m and txt is not None:
                try:
                    nodes[int(m.group(1))] = hp.parse_cpulist(txt)
                except ValueError:
                    self.problems["files" + p] = f"unreadable cpulist {txt[:40]!r}"
        if nodes:
            return nodes
        r = self.cmd_ok("numactl")
        if r:
            for m in re.finditer(r"^node (\d+) cpus:([\d ]*)$", r.stdout, flags=re.M):
                nodes[int(m.group(1))] = [int(x) for x in m.group(2).split()]
            return nodes or None
        return None

    @memo
    def limits(self) -> dict[str, Value]:
        """Process limits: ``memlock_B`` / ``nofile`` (soft) as text (``unlimited`` or a number),
        from /proc/self/limits, else ``ulimit -a`` (memlock converted from KiB)."""
        out: dict[str, Value] = {}
        t = self.snap.read("/proc/self/limits")
        if t:
            lim = hp.parse_limits(t)
            if "Max locked memory" in lim:
                out["memlock_B"] = Value(lim["Max locked memory"][0], "files/proc/self/limits")
            if "Max open files" in lim:
                out["nofile"] = Value(lim["Max open files"][0], "files/proc/self/limits")
        r = self.cmd_ok("ulimit")
        if r:
            u = hp.parse_ulimit(r.stdout)
            if "memlock_B" not in out and "-l" in u:
                v = u["-l"]
                out["memlock_B"] = Value(v if v == "unlimited" else str(int(v) * 1024) if v.isdigit() else v, self.src("ulimit"))
            if "nofile" not in out and "-n" in u:
                out["nofile"] = Value(u["-n"], self.src("ulimit"))
        return out

    def _isolation(self) -> list[Value]:
        """Signs of a container's own namespaces: an overlay root filesystem
        (/proc/self/mountinfo), a nested PID namespace (more than one ``NSpid`` in
        /proc/self/status), PID 1 in a container runtime's cgroup (/proc/1/cgroup)."""
        out: list[Value] = []
        for line in (self.snap.read("/proc/self/mountinfo") or "").splitlines():
            pre, _, post = line.partition(" - ")
            f = pre.split()
            if len(f) >= 5 and f[4] == "/" and post.split()[:1] and post.split()[0] in ("overlay", "aufs", "fuse-overlayfs"):
                out.append(Value(f"root filesystem is {post.split()[0]}", "files/proc/self/mountinfo"))
                break
        m = re.search(r"^NSpid:\s*(.+)$", self.snap.read("/proc/self/status") or "", flags=re.M)
        if m and len(m.group(1).split()) > 1:
            out.append(Value(f"nested PID namespace (NSpid {m.group(1).strip()})", "files/proc/self/status"))
        cg = self.snap.read("/proc/1/cgroup") or ""
        hit = re.search(r"(docker|kubepods|containerd|libpod|crio|lxc)[^\s]*", cg)
        if hit:
            out.append(Value(f"PID 1 in cgroup {hit.group(0)}", "files/proc/1/cgroup"))
        return out

    @memo
    def container(self) -> ContainerInfo:
        """Container detection: ``systemd-detect-virt -c``, ``container=`` in /proc/1/environ,
        /run/.containerenv, lxcfs mounts, container-runtime cgroup paths. ``/.dockerenv`` alone
        proves nothing (a VM image built from a container image keeps it): it counts only with a
        sign of the container's own namespaces (:meth:`_isolation`); otherwise it is listed in
        ``discounted``."""
        ev: list[Value] = []
        kind: str | None = None
        r = self.cmd_ok("systemd_detect_virt_c")
        if r and r.stdout.strip() not in ("", "none"):
            kind = r.stdout.strip()
            ev.append(Value(kind, self.src("systemd_detect_virt_c")))
        env = self.snap.read("/proc/1/environ")
        if env:
            c = hp.parse_environ(env).get("container")
            if c:
                kind = kind or c
                ev.append(Value(f"container={c}", "files/proc/1/environ"))
        discounted: list[Value] = []
        if self.snap.read("/.dockerenv") is not None:
            iso = self._isolation() if kind is None else []
            if kind is not None or iso:
                kind = kind or "docker"
                ev.append(Value("present", "files/.dockerenv"))
                ev.extend(iso)
            else:
                discounted.append(Value("/.dockerenv present, but the root filesystem is not an overlay, PID 1 shares this "
                                        "PID namespace and no container runtime's cgroup is seen", "files/.dockerenv"))
        if self.snap.read("/run/.containerenv") is not None:
            kind = kind or "podman"
            ev.append(Value("present", "files/run/.containerenv"))
        if kind is None:
            r = self.cmd_ok("systemd_detect_virt")
            if r and r.stdout.strip() in ("lxc", "lxc-libvirt", "docker", "podman", "openvz", "systemd-nspawn", "rkt", "wsl", "container-other"):
                kind = r.stdout.strip()
                ev.append(Value(kind, self.src("systemd_detect_virt")))
        mounts = self.snap.read("/proc/mounts") or ""
        if kind is None and re.search(r"^lxcfs /proc/", mounts, flags=re.M):
            kind = "lxc"
            ev.append(Value("lxcfs mounted over /proc", "files/proc/mounts"))
        if kind is None:
            cg = [v for v in self._isolation() if v.source == "files/proc/1/cgroup"]
            if cg:
                kind = "container-other"
                ev.extend(cg)
        return ContainerInfo(kind, ev, [] if kind else discounted)

    @memo
    def virtualization(self) -> Value | None:
        """Hypervisor (VM) evidence: ``systemd-detect-virt``, the cpuinfo ``hypervisor`` flag, or
        virtio PCI devices (vendor 0x1af4)."""
        r = self.cmd_ok("systemd_detect_virt")
        if r and r.stdout.strip() not in ("none", ""):
            c = self.container()
            if not (c.inside and r.stdout.strip() == c.kind):
                return Value(r.stdout.strip(), self.src("systemd_detect_virt"))
        cpuinfo = self.snap.read("/proc/cpuinfo") or ""
        if re.search(r"^flags\s*:.*\bhypervisor\b", cpuinfo, flags=re.M):
            return Value("hypervisor flag", "files/proc/cpuinfo")
        if any(f.vendor == 0x1AF4 for f in self.pci_functions().values()):
            return Value("virtio PCI devices", "files/sys/bus/pci/devices")
        return None

    @memo
    def cpu_vendor_model(self) -> tuple[str | None, str | None, int | None]:
        """(vendor_id, model name, CPU family) from /proc/cpuinfo."""
        t = self.snap.read("/proc/cpuinfo") or ""
        v = re.search(r"^vendor_id\s*:\s*(.+)$", t, flags=re.M)
        m = re.search(r"^model name\s*:\s*(.+)$", t, flags=re.M)
        fam = re.search(r"^cpu family\s*:\s*(\d+)$", t, flags=re.M)
        return (v.group(1).strip() if v else None, m.group(1).strip() if m else None, int(fam.group(1)) if fam else None)

    @memo
    def idle_states(self) -> list[IdleState] | None:
        """cpuidle states aggregated over CPUs; None when the host exposes no cpuidle states."""
        paths = self.snap.glob("/sys/devices/system/cpu/cpu*/cpuidle/state*/name")
        if not paths:
            return None
        states: dict[int, IdleState] = {}
        for p in paths:
            m = re.search(r"/cpu(\d+)/cpuidle/state(\d+)/name$", p)
            if not m:
                continue
            cpu, idx = int(m.group(1)), int(m.group(2))
            d = p.rsplit("/", 1)[0]
            name = self.snap.read_value(p) or f"state{idx}"
            lat_s = self.snap.read_value(d + "/latency") or "0"
            dis = self.snap.read_value(d + "/disable") or "0"
            try:
                lat = int(lat_s)
            except ValueError:
                lat = -1
            st = states.setdefault(idx, IdleState(idx, name, lat, [], []))
            (st.disabled_cpus if dis.strip() == "1" else st.enabled_cpus).append(cpu)
        return [states[k] for k in sorted(states)]

    @memo
    def cpufreq(self) -> dict[str, Any] | None:
        """cpufreq: ``drivers``/``governors`` ({value: count of CPUs}), plus amd_pstate status,
        EPP and boost. None when no CPU has a cpufreq directory."""
        drivers: dict[str, int] = {}
        govs: dict[str, int] = {}
        for p in self.snap.glob("/sys/devices/system/cpu/cpu*/cpufreq/scaling_driver"):
            v = self.snap.read_value(p)
            if v:
                drivers[v] = drivers.get(v, 0) + 1
        for p in self.snap.glob("/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor"):
            v = self.snap.read_value(p)
            if v:
                govs[v] = govs.get(v, 0) + 1
        if not drivers and not govs:
            return None
        return {
            "drivers": drivers,
            "governors": govs,
            "amd_pstate_status": self.snap.read_value("/sys/devices/system/cpu/amd_pstate/status"),
            "epp": self.snap.read_value("/sys/devices/system/cpu/cpu0/cpufreq/energy_performance_preference"),
            "boost": self.snap.read_value("/sys/devices/system/cpu/cpufreq/boost"),
            "available_governors": self.snap.read_value("/sys/devices/system/cpu/cpu0/cpufreq/scaling_available_governors"),
        }

    @memo
    def rdma_devices(self) -> list[Value]:
        """RDMA-capable NICs: /sys/class/infiniband entries and Mellanox network-class PCI functions."""
        out = [Value(p.split("/")[4], "files" + p) for p in self.snap.glob("/sys/class/infiniband/*/node_type")]
        if not out:
            for f in self.pci_functions().values():
                if f.vendor == MELLANOX and f.class_code is not None and f.class_code >> 16 == 0x02:
                    out.append(Value(f"{f.bdf} {self.pci_name(f)}", f.source))
        return out

    @memo
    def nccl_runs(self) -> list[tuple[str, Any]]:
        """(source, :class:`~infergap.parsers.nccl.NcclLogFacts`) for every NCCL log in the input:
        pasted or snapshot evidence, and the NCCL run of ``audit --active`` (``probes/active.json``)."""
        from infergap.evidence.common import nccl_logs
        from infergap.parsers.nccl import parse_nccl_log

        out = [(part.label, f) for part, f in nccl_logs(self.snap)]
        a = self.snap.probe("active")
        if isinstance(a, dict) and isinstance(a.get("nccl_log"), str) and a["nccl_log"].strip():
            f = parse_nccl_log(a["nccl_log"].splitlines())
            if f.nccl_lines:
                out.append(("probes/active.json (NCCL log)", f))
        return out

    @memo
    def collective_network(self) -> tuple[str | None, str | None]:
        """How NCCL moved data in the logs of this input: ``rdma`` (a NET/IB channel), ``socket``
        (a NET/Socket channel), ``local`` (one host, only P2P/SHM/NVLink channels) or None (no log
        with channels); with the source."""
        runs = self.nccl_runs()
        for want, fam in (("rdma", "NET/IB"), ("socket", "NET/Socket")):
            for src, f in runs:
                if f.transports.get(fam) or any(lk.transport == fam for lk in f.links):
                    return want, src
        for src, f in runs:
            if f.single_host and f.links and not any(lk.transport.startswith("NET") for lk in f.links):
                return "local", src
        return None, None

    @memo
    def pip_packages(self) -> tuple[dict[str, str], str] | None:
        """Python packages of the serving environment (``pip list``), with the source."""
        r = self.cmd_ok("pip_list")
        if not r:
            return None
        pk = hp.parse_pip_list(r.stdout)
        return (pk, self.src("pip_list")) if pk else None

    @memo
    def env(self) -> dict[str, str] | None:
        """GPU/CUDA/NCCL environment variables captured in ``cmds/env.out``."""
        r = self.cmd_ok("env")
        if r is None:
            return None
        out = {}
        for line in r.stdout.splitlines():
            k, sep, v = line.partition("=")
            if sep:
                out[k.strip()] = v
        return out

    def sysfs_complete(self) -> bool:
        """Whether an absent sysfs path means absent on the host: a live host, or a snapshot written
        by ``infergap collect`` (which globs every sysfs path it reads, see ``snapshot/sources.py``)."""
        snap = getattr(self.snap, "base", None) or self.snap
        if getattr(snap, "kind", None) == "live":
            return True
        m = snap.meta() if hasattr(snap, "meta") else {}
        return str(m.get("schema", "")).startswith("infergap.snapshot") and "files" in (m.get("sources") or {})

    def pci_inventory_captured(self) -> bool:
        """Whether the whole PCI device list was captured (sysfs, or lspci run by infergap), so that
        the absence of an NVIDIA GPU in it is a fact rather than missing evidence. A pasted lspci
        does not count: pastes are often filtered (``lspci | grep -i plx``)."""
        if self.snap.listdir("/sys/bus/pci/devices"):
            return True
        return any(r is not None and not r.source.startswith("evidence/") for r in (self.cmd_ok("lspci_vvv"), self.cmd_ok("lspci")))

    def pci_pasted(self) -> str | None:
        """The evidence source of a pasted lspci listing, or None."""
        for name in ("lspci_vvv", "lspci"):
            r = self.cmd_ok(name)
            if r is not None and r.source.startswith("evidence/"):
                return r.source
        return None

    def gpu_functions(self) -> list[PciFunction]:
        """PCI functions of NVIDIA GPUs (sysfs), ordered by BDF."""
        return [f for f in self.pci_functions().values() if f.is_gpu]


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


_REAL_BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


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
    addr = {g.bdf for g in ev if _REAL_BDF.fullmatch(g.bdf)}
    if addr and not addr & {g.bdf for g in mine}:
        return f"the evidence describes {what} at PCI addresses {here} does not have"
    my_names = {g.name for g in mine if g.name and g.name != "unknown device"}
    if names and my_names and not set(names) & my_names:
        return f"the evidence describes {what}; {here} has {', '.join(sorted(my_names))}"
    if not addr and len(ev) != len(mine):
        return f"the evidence describes {what}; {here} has {len(mine)}"
    return None
