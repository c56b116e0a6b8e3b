"""The log of the GPU Operator's driver container (``kubectl logs nvidia-driver-daemonset-…``):
the ``nvidia-driver`` script of NVIDIA/gpu-driver-container (``ubuntu22.04/nvidia-driver``,
``centos7/nvidia-driver`` …) printing its steps (``========== NVIDIA Software Installer
==========``, ``Starting installation of NVIDIA driver version V for Linux kernel version K``,
``Resolving Linux kernel version...``, ``Compiling NVIDIA driver kernel modules...``, ``Done, now
waiting for signal``), its node-label lines (``Current value of 'nvidia.com/gpu.deploy.…'``) and
the installer's ``ERROR:`` lines (``Unable to load the kernel module 'nvidia.ko'``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

#: The script's own step lines (``echo`` of nvidia-driver), and its node-label lines.
_STEPS = ("========== NVIDIA Software Installer", "Starting installation of NVIDIA driver version", "Stopping NVIDIA persistence daemon...",
          "Unloading NVIDIA driver kernel modules...", "Unmounting NVIDIA driver rootfs...", "Checking NVIDIA driver packages...",
          "Updating the package cache...", "Resolving Linux kernel version...", "Proceeding with Linux kernel version",
          "Installing Linux kernel headers...", "Installing Linux kernel module files...", "Generating Linux kernel version string...",
          "Compiling NVIDIA driver kernel modules...", "Relinking NVIDIA driver kernel modules...", "Building NVIDIA driver package",
          "Installing NVIDIA driver kernel modules...", "Loading NVIDIA driver kernel modules...", "Loading ipmi and i2c_core kernel modules...",
          "Mounting NVIDIA driver rootfs...", "Done, now waiting for signal", "Could not resolve Linux kernel version", "DRIVER_ARCH is ",
          "Getting current value of the 'nvidia.com/gpu.deploy.", "Current value of 'nvidia.com/gpu.deploy.")
#: Failures the script or the installer print (the first one seen is kept).
_FAILURES = ("Could not resolve Linux kernel version", "ERROR: Unable to load the kernel module", "ERROR: Unable to open",
             "ERROR: An error occurred", "ERROR: Unable to find the kernel source tree", "ERROR: Failed to", "Could not find kernel headers")
_START = re.compile(r"Starting installation of NVIDIA driver version (\S{1,40}) for Linux kernel version (\S{1,80})")


def is_driver_container_line(line: str) -> bool:
    """Whether a cleaned line (leading blanks removed) is a step line of the driver container.

    >>> is_driver_container_line("Starting installation of NVIDIA driver version 450.80.02 for Linux kernel version 3.10.0-862.el7.x86_64")
    True
    >>> is_driver_container_line("Loading NVML")
    False
    """
    return line[:1] in "=SULCRPIGBMDd" and line.startswith(_STEPS) or "Could not resolve Linux kernel version" in line


@dataclass
class DriverContainerFacts:
    """What a driver container log says: ``driver`` and ``kernel`` of its start line, ``failure``
    the first failure line (None when none), ``done`` it reached ``Done, now waiting for signal``
    (the driver loaded), ``last_step`` the last step line, ``evidence`` the line behind each
    field, ``lines`` the step lines read."""

    driver: str | None = None
    kernel: str | None = None
    failure: str | None = None
    done: bool = False
    last_step: str | None = None
    evidence: dict[str, str] = field(default_factory=dict)
    lines: int = 0


def parse_driver_container_log(lines: Iterable[str]) -> DriverContainerFacts:
    """Read a driver container log (cleaned lines) into :class:`DriverContainerFacts`.

    NVIDIA/gpu-operator#155 (``tests/fixtures/evidence/gpuop-155-driver-kernel-unresolved.log``):

    >>> f = parse_driver_container_log([
    ...     "Starting installation of NVIDIA driver version 450.80.02 for Linux kernel version 3.10.0-862.el7.x86_64",
    ...     "Resolving Linux kernel version...",
    ...     "Unable to open the file '/lib/modules/3.10.0-862.el7.x86_64/proc/version' (No such file or directory).Could not resolve Linux kernel version"])
    >>> (f.driver, f.kernel, f.failure, f.done)
    ('450.80.02', '3.10.0-862.el7.x86_64', 'Could not resolve Linux kernel version', False)
    """
    f = DriverContainerFacts()
    for line in lines:
        s = line.strip()
        if not is_driver_container_line(s) and not s.startswith("ERROR:"):
            continue
        f.lines += 1
        m = _START.search(s)
        if m and f.driver is None:
            f.driver, f.kernel, f.evidence["start"] = m.group(1), m.group(2), s[:2000]
        hit = next((x for x in _FAILURES if x in s), None)
        if hit and f.failure is None:
            f.failure, f.evidence["failure"] = s[s.index(hit):][:300].rstrip(". "), s[:2000]
        if s.startswith("Done, now waiting for signal"):
            f.done, f.evidence["done"] = True, s[:2000]
        if not s.startswith("ERROR:"):
            f.last_step = s[:300]
    return f
