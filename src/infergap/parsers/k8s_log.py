"""The NVIDIA Kubernetes device plugin's log (``kubectl logs <nvidia-device-plugin pod>``) as
evidence: whether it could load NVML (the GPUs are then usable in its container and advertised
to the kubelet), the MIG strategy it runs with, and whether it found no device.

Two formats, both from NVIDIA/k8s-device-plugin:

- v0.9 and later log with klog, ``I1023 10:14:11.984927       1 main.go:199] Starting FS
  watcher.`` (``cmd/nvidia-device-plugin/main.go``; ``internal/rm/rm.go``: ``NVML not detected:
  %v``; ``internal/plugin/factory.go``: ``Failed to initialize NVML: %v.``), also behind the
  container runtime's CRI prefix (``2023-10-19T14:25:03.80+08:00 stderr F ``);
- 1.x (``main.go`` of the 1.0–1.11 branches) logs with Go's ``log``: ``2020/10/14 18:04:53 Loading
  NVML`` then ``Failed to initialize NVML: could not load NVML library.``; the first releases
  printed ``loading NVML`` and ``Failed to start nvml with error:`` without a date.

The MIG strategy is ``mig-strategy="mixed"`` of rm.go or ``"migStrategy": "none"`` of the
printed configuration; ``No devices found. Waiting indefinitely.`` is NVML loaded with no GPU.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

_CRI = r"(?:\d{4}-\d\d-\d\dT[\d:.]{8,20}(?:Z|[+-]\d\d:\d\d) std(?:out|err) [FP] )?"
#: A klog line (``I1023 10:14:11.984927       1 main.go:199] ``).
KLOG = re.compile(_CRI + r"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6}\s{1,12}\d{1,10} [\w.\-]{1,80}\.go:\d{1,6}\] ")
#: A line of the 1.x plugin, with Go's ``log`` date or, in the first releases, without one.
#: nvidia-smi prints ``Failed to initialize NVML: …`` too: without Go's date that line is not the plugin's.
_OLD = re.compile(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d (?:Loading NVML$|Failed to initialize NVML: |Fetching devices\.$|Starting FS watcher\.$|"
                  r"Starting OS watcher\.$|Starting to serve on \S|Registered device plugin with Kubelet|No devices found\. Waiting indefinitely)"
                  r"|(?:[Ll]oading NVML$|Failed to start nvml with error:)")
_NVML_ERR = re.compile(r"(?:NVML not detected|Failed to initialize NVML|Failed to start nvml with error|nvml init failed):\s{1,8}(.{1,300})")
_MIG = re.compile(r"""mig-strategy="?(\w{1,20})|"migStrategy":\s{0,4}"(\w{1,20})\"""")


def is_device_plugin_line(line: str) -> bool:
    """True for a line of the device plugin's log (klog or the 1.x format).

    >>> is_device_plugin_line("I0819 07:02:54.756599       1 main.go:245] Starting OS watcher.")
    True
    >>> is_device_plugin_line("2022/05/13 23:09:23 Loading NVML")
    True
    >>> is_device_plugin_line("INFO 05-15 11:07:08 [api_server.py:1] vLLM")
    False
    >>> is_device_plugin_line("Failed to initialize NVML: Driver/library version mismatch")  # nvidia-smi's
    False
    """
    s = line.strip()
    return bool(KLOG.match(s) or _OLD.match(s))


@dataclass
class DevicePluginFacts:
    """What a device plugin log says: ``nvml_error`` why NVML could not be loaded in its
    container (None when no such line), ``mig_strategy`` (``none``/``single``/``mixed``),
    ``no_devices`` it loaded NVML, found no GPU and waits, ``evidence`` the line behind each field, ``lines`` the plugin lines read."""

    nvml_error: str | None = None
    mig_strategy: str | None = None
    no_devices: bool = False
    evidence: dict[str, str] = field(default_factory=dict)
    lines: int = 0


def parse_device_plugin_log(lines: Iterable[str]) -> DevicePluginFacts:
    """Read a device plugin log (cleaned lines) into :class:`DevicePluginFacts`.

    >>> f = parse_device_plugin_log(["W0819 07:02:54.757542       1 rm.go:108] mig-strategy=\\"mixed\\" is only supported with NVML",
    ...     "W0819 07:02:54.757556       1 rm.go:109] NVML not detected: could not load NVML library: libnvidia-ml.so.1: "
    ...     "cannot open shared object file: No such file or directory"])
    >>> (f.nvml_error, f.mig_strategy, f.lines)
    ('could not load NVML library: libnvidia-ml.so.1: cannot open shared object file: No such file or directory', 'mixed', 2)
    """
    f = DevicePluginFacts()
    for line in lines:
        s = line.strip()
        if is_device_plugin_line(s):
            f.lines += 1
        if "NVML" in s or "nvml" in s:
            m = _NVML_ERR.search(s)
            if m and f.nvml_error is None:
                f.nvml_error, f.evidence["nvml_error"] = m.group(1).strip().rstrip("."), s[:2000]
        if "ig-strategy" in s or "migStrategy" in s:
            m = _MIG.search(s)
            if m and f.mig_strategy is None:
                f.mig_strategy, f.evidence["mig_strategy"] = m.group(1) or m.group(2), s[:2000]
        if "No devices found" in s:
            f.no_devices, f.evidence["no_devices"] = True, s[:2000]
    return f
