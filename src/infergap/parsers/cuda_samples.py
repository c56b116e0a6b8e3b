"""The output of the CUDA sample ``p2pBandwidthLatencyTest`` (NVIDIA/cuda-samples,
``Samples/5_Domain_Specific/p2pBandwidthLatencyTest/p2pBandwidthLatencyTest.cu``): the devices it
found, which pairs can access each other (``Device=0 CAN Access Peer Device=1``), and its
matrices (``Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)``, ``… P2P=Enabled Bandwidth
(P2P Writes) Matrix (GB/s)``, ``Bidirectional …``, ``P2P=… Latency Matrix (us)``), one row per
source device (``   D\\D     0      1`` header, then ``     0 911.08  20.10``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

_DEVICE = re.compile(r"^Device: (\d{1,3}), (.{1,120}?), pciBusID: ([0-9a-fA-F]{1,4}), pciDeviceID: ([0-9a-fA-F]{1,4}), pciDomainID:\s?([0-9a-fA-F]{1,8})")
_ACCESS = re.compile(r"^Device=(\d{1,3}) (CAN|CANNOT) Access Peer Device=(\d{1,3})")
_MATRIX = re.compile(r"^(Unidirectional|Bidirectional)? ?P2P=(Enabled|Disabled) (Bandwidth|Latency)(?: \((P2P Writes|P2P Reads)\))? Matrix \((GB/s|us)\)")
_CELL = re.compile(r"\d{1,7}(?:\.\d{1,4})?")
#: Devices and matrix cells kept (a paste of a larger machine is cut there).
MAX_DEVICES = 256


class P2pBandwidthRun(BaseModel):
    """One run of ``p2pBandwidthLatencyTest``.

    ``devices``: device index -> GPU name; ``bus``: device index -> PCI bus id (hex, as printed);
    ``access``: ``"i-j"`` -> whether device i can access device j; ``matrices``: a name such as
    ``uni_disabled_GBps``, ``uni_enabled_GBps`` (``_writes``/``_reads`` suffixes when the sample
    printed both), ``bi_enabled_GBps``, ``disabled_latency_us`` -> ``"i-j"`` -> value.
    """

    model_config = ConfigDict(defer_build=True)  # schema built on first use, not at import (start time)

    devices: dict[int, str] = Field(default_factory=dict)
    bus: dict[int, str] = Field(default_factory=dict)
    access: dict[str, bool] = Field(default_factory=dict)
    matrices: dict[str, dict[str, float]] = Field(default_factory=dict)

    def uni(self, enabled: bool) -> dict[str, float]:
        """The unidirectional bandwidth matrix with P2P enabled (writes, when both were measured) or disabled."""
        if not enabled:
            return self.matrices.get("uni_disabled_GBps", {})
        return self.matrices.get("uni_enabled_GBps") or self.matrices.get("uni_enabled_writes_GBps") or {}


def _matrix_name(m: re.Match[str]) -> str:
    direction, state, what, mode, unit = m.groups()
    if what == "Latency":
        return f"{state.lower()}_latency" + (f"_{mode.split()[1].lower()}" if mode else "") + "_us"
    head = "bi" if direction == "Bidirectional" else "uni"
    return f"{head}_{state.lower()}" + (f"_{mode.split()[1].lower()}" if mode else "") + "_GBps"


def parse_p2p_bandwidth(lines: Iterable[str]) -> P2pBandwidthRun:
    """Parse ``p2pBandwidthLatencyTest`` output (the whole of it, or matrices pasted alone).

    NVIDIA/nccl#814 (``tests/fixtures/evidence/nccl-814-p2p-slower.txt``): P2P writes at about
    10 GB/s where copies through host memory reach 22 GB/s.

    >>> r = parse_p2p_bandwidth(["Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)", "   D\\\\D     0      1",
    ...                          "     0 911.08  20.10", "     1  20.39 920.20",
    ...                          "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)", "   D\\\\D     0      1",
    ...                          "     0 912.68   9.90", "     1   9.90 922.37", "Device=0 CAN Access Peer Device=1"])
    >>> r.uni(False)["0-1"], r.uni(True)["0-1"], r.access
    (20.1, 9.9, {'0-1': True})
    """
    run = P2pBandwidthRun()
    current: dict[str, float] | None = None
    for raw in lines:
        line = raw.rstrip()
        s = line.strip()
        m = _MATRIX.match(s)
        if m:
            current = run.matrices.setdefault(_matrix_name(m), {})
            continue
        if current is not None:
            cells = s.split()
            if len(cells) > 1 and cells[0].isdigit() and all(_CELL.fullmatch(c) for c in cells[1:MAX_DEVICES + 1]):
                if len(current) < MAX_DEVICES * MAX_DEVICES:
                    for dst, v in enumerate(cells[1:MAX_DEVICES + 1]):
                        current[f"{int(cells[0])}-{dst}"] = float(v)
                continue
            if s.startswith(("D\\D", "GPU ", "GPU\t")) or not s:
                continue
            current = None
        d = _DEVICE.match(s)
        if d and len(run.devices) < MAX_DEVICES:
            run.devices[int(d.group(1))] = d.group(2).strip()
            run.bus[int(d.group(1))] = d.group(3)
            continue
        a = _ACCESS.match(s)
        if a and len(run.access) < MAX_DEVICES * MAX_DEVICES:
            run.access[f"{a.group(1)}-{a.group(3)}"] = a.group(2) == "CAN"
    return run
