"""Where the audit runs: inside a container (and which runtime), inside a virtual machine.

Sources: ``systemd-detect-virt -c`` and ``systemd-detect-virt``, ``container=`` in /proc/1/environ,
``/.dockerenv`` and ``/run/.containerenv``, lxcfs mounts (/proc/mounts), the container's own
namespaces (/proc/self/mountinfo, /proc/self/status, /proc/1/cgroup), the cpuinfo ``hypervisor``
flag and virtio PCI devices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from infergap.facts.base import FactsBase, Value, memo
from infergap.parsers import host as hp


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



class ContainerDomain(FactsBase):
    """Container and virtualization accessors of :class:`infergap.facts.Facts`."""

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
    def shm_mounts(self) -> dict[str, dict[str, Any]] | None:
        """``df -h`` per mount point (:func:`~infergap.parsers.host.parse_df_h`: ``fs``, ``size``
        as printed) with ``size_B`` (bytes, None when not a size); None when df was not captured."""
        r = self.cmd_ok("df")
        if r is None:
            return None
        out: dict[str, dict[str, Any]] = {k: dict(v) for k, v in hp.parse_df_h(r.stdout).items()}
        for e in out.values():
            e["size_B"] = hp.human_size_B(e["size"])
        return out
