"""Where remedies read and write on this machine, and who may change it.

The roots are configurable so that tests act on places they own: ``INFERGAP_PROC_SYS`` (default
``/proc/sys``), ``INFERGAP_ETC`` (``/etc``) and ``INFERGAP_SYS`` (``/sys``).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class SystemPaths:
    """Roots of the trees a remedy touches: ``proc_sys`` (sysctls), ``etc`` (persistent
    configuration), ``sys`` (sysfs: modules, cpuidle), ``root`` (container markers)."""

    proc_sys: Path = field(default_factory=lambda: Path("/proc/sys"))
    etc: Path = field(default_factory=lambda: Path("/etc"))
    sys: Path = field(default_factory=lambda: Path("/sys"))
    root: Path = field(default_factory=lambda: Path("/"))

    @classmethod
    def from_env(cls) -> "SystemPaths":
        """Roots from ``INFERGAP_PROC_SYS``, ``INFERGAP_ETC``, ``INFERGAP_SYS`` (defaults: the real ones)."""
        env = os.environ
        return cls(proc_sys=Path(env.get("INFERGAP_PROC_SYS", "/proc/sys")), etc=Path(env.get("INFERGAP_ETC", "/etc")),
                   sys=Path(env.get("INFERGAP_SYS", "/sys")))


def is_root() -> bool:
    """True when the effective user id is 0."""
    return os.geteuid() == 0


def container_reason(root: Path = Path("/"), timeout_s: float = 5.0) -> str | None:
    """Why this process looks like it runs in a container, or ``None`` on a host.

    Markers, in order: ``/.dockerenv`` (Docker), ``/run/.containerenv`` (Podman),
    ``container=`` in PID 1's environment (systemd's container interface, also LXC), and
    ``systemd-detect-virt --container`` (exit 0 with a name when in a container).
    """
    if (root / ".dockerenv").exists():
        return "/.dockerenv exists (Docker)"
    if (root / "run/.containerenv").exists():
        return "/run/.containerenv exists (Podman)"
    try:
        env = (root / "proc/1/environ").read_bytes().split(b"\0")
        for item in env:
            if item.startswith(b"container="):
                return f"PID 1 environment has {item.decode(errors='replace')}"
    except OSError:
        pass
    if str(root) == "/":
        try:
            r = subprocess.run(["systemd-detect-virt", "--container"], capture_output=True, text=True, timeout=timeout_s)
            if r.returncode == 0 and r.stdout.strip() not in ("", "none"):
                return f"systemd-detect-virt --container says {r.stdout.strip()}"
        except (OSError, subprocess.SubprocessError):
            pass
    return None
