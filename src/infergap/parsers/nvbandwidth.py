"""The output of NVIDIA's ``nvbandwidth`` (github.com/NVIDIA/nvbandwidth, ``output.cpp`` and
``testcase.cpp``): its versions, the devices it found (``Device 0: NVIDIA A100-SXM4-40GB
(00000000:99:00)``), and per test case (``Running host_to_device_memcpy_ce.``) a bandwidth matrix
(``memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)``, a header of column indices, one row per
source with ``N/A`` on the diagonal) and its ``SUM <testcase> <GB/s>`` line; a test it could not
run is ``Waiving <testcase>.`` (peer mapping failed, or too few devices).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

_DEVICE = re.compile(r"^Device (\d{1,3}): (.{1,120}?)(?: \(([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})\))?$")
_RUNNING = re.compile(r"^(Running|Waiving) ([a-z][a-z0-9_]{2,80})\.$")
_MATRIX = re.compile(r"^memcpy (CE|SM) (CPU|GPU)\(row\) (->|<-|<->) (CPU|GPU)\(column\) bandwidth \(GB/s\)$")
_SUM = re.compile(r"^SUM ([a-z][a-z0-9_]{2,80}) (\d{1,9}(?:\.\d{1,4})?)$")
_VERSION = re.compile(r"^(nvbandwidth Version|CUDA Runtime Version|CUDA Driver Version|Driver Version): (\S{1,40})$")
_HEADER = re.compile(r"\d{1,3}(?:\s{1,40}\d{1,3}){0,255}")
_CELL = re.compile(r"\d{1,7}(?:\.\d{1,4})?|N/A")
#: Devices and cells kept (a paste of a larger machine is cut there).
MAX_DEVICES = 256


class NvbandwidthRun(BaseModel):
    """One ``nvbandwidth`` run.

    ``versions``: ``nvbandwidth Version``, ``Driver Version`` … as printed; ``devices``: index ->
    name; ``bus``: index -> PCI address as printed (``00000000:99:00``, no function);
    ``tests``: test case name -> ``"row-column"`` -> GB/s (``N/A`` cells left out; for a
    ``host_to_device`` test the row is the CPU, ``0``, and the column the GPU); ``sums``: test case
    -> its ``SUM`` figure; ``waived``: the test cases it could not run.
    """

    model_config = ConfigDict(defer_build=True)  # schema built on first use, not at import (start time)

    versions: dict[str, str] = Field(default_factory=dict)
    devices: dict[int, str] = Field(default_factory=dict)
    bus: dict[int, str] = Field(default_factory=dict)
    tests: dict[str, dict[str, float]] = Field(default_factory=dict)
    sums: dict[str, float] = Field(default_factory=dict)
    waived: list[str] = Field(default_factory=list)

    def per_gpu(self, test: str) -> dict[int, float]:
        """GPU index -> GB/s of a host<->device test (one CPU row, a column per GPU)."""
        return {int(k.split("-")[1]): v for k, v in self.tests.get(test, {}).items()}


def _row(s: str, current: dict[str, float]) -> bool:
    """Read one matrix row (``0     25.13     N/A``) into ``current``; False when ``s`` is none."""
    cells = s.split()
    if len(cells) < 2 or not cells[0].isdigit() or not all(_CELL.fullmatch(c) for c in cells[1:MAX_DEVICES + 1]):
        return False
    for col, v in enumerate(cells[1:MAX_DEVICES + 1]):
        if v != "N/A" and len(current) < MAX_DEVICES * MAX_DEVICES:
            current[f"{int(cells[0])}-{col}"] = float(v)
    return True


def _title_test(m: re.Match[str]) -> str:
    """The test case a matrix title names when no ``Running`` line came before it:
    ``memcpy SM CPU(row) -> GPU(column)`` is ``host_to_device_memcpy_sm``."""
    engine, src, arrow, dst = m.groups()
    if src == "GPU" and dst == "GPU":
        what = "device_to_device" if arrow == "->" else "device_to_device_bidirectional"
    else:
        what = {"->": "host_to_device", "<-": "device_to_host", "<->": "host_device_bidirectional"}[arrow]
    return f"{what}_memcpy_{engine.lower()}"


def _meta(run: NvbandwidthRun, s: str, test: str | None) -> str | None:
    """A line outside a matrix: versions, devices, a test started or waived, a sum. Returns the
    test now running."""
    if (m := _RUNNING.match(s)) is not None:
        if m.group(1) == "Waiving":
            run.waived.append(m.group(2))
            return None
        return m.group(2)
    if (m := _VERSION.match(s)) is not None:
        run.versions[m.group(1)] = m.group(2)
    elif (m := _DEVICE.match(s)) is not None and len(run.devices) < MAX_DEVICES:
        run.devices[int(m.group(1))] = m.group(2).strip()
        if m.group(3):
            run.bus[int(m.group(1))] = m.group(3)
    elif (m := _SUM.match(s)) is not None:
        run.sums[m.group(1)] = float(m.group(2))
    return test


def parse_nvbandwidth(lines: Iterable[str]) -> NvbandwidthRun:
    """Parse ``nvbandwidth`` output (a whole run, or test cases pasted alone).

    NVIDIA/nvbandwidth#15 (``tests/fixtures/evidence/nvbandwidth-15-4090-h2d.txt``): eight
    RTX 4090 copying from host memory at 24-26 GB/s.

    >>> r = parse_nvbandwidth(["Device 0: NVIDIA GeForce RTX 4090", "Device 1: NVIDIA GeForce RTX 4090",
    ...     "Running host_to_device_memcpy_ce.", "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
    ...     "          0         1", "0     25.50     24.26", "", "SUM host_to_device_memcpy_ce 49.76",
    ...     "Waiving device_to_device_memcpy_write_ce."])
    >>> r.per_gpu("host_to_device_memcpy_ce"), r.sums, r.waived
    ({0: 25.5, 1: 24.26}, {'host_to_device_memcpy_ce': 49.76}, ['device_to_device_memcpy_write_ce'])
    """
    run = NvbandwidthRun()
    test: str | None = None
    current: dict[str, float] | None = None
    header = False  # the line of column indices after a matrix title is still to come
    for raw in lines:
        s = raw.strip().removeprefix("> ")  # a Markdown quote around a line (nvbandwidth#24)
        if current is not None:
            if header and _HEADER.fullmatch(s):
                header = False
                continue
            if not s or _row(s, current):
                continue
            current = None
        if (m := _MATRIX.match(s)) is not None:
            current, header = run.tests.setdefault(test or _title_test(m), {}), True
            test = None
            continue
        test = _meta(run, s, test)
    return run
