"""Facts from a kernel log (``dmesg`` or ``journalctl -k``): NVIDIA Xid events and PCIe AER errors.

What each Xid code means is data: the ``xid`` entries of ``infergap/data/signatures.yaml``.
Line formats are the kernel's and the NVIDIA driver's: ``NVRM: Xid (PCI:0000:02:00): 79, GPU has
fallen off the bus.`` (Xid meanings: NVIDIA's Xid catalog), ``pcieport 0000:00:02.0: AER:
Corrected error received`` and ``PCIe Bus Error: severity=Uncorrected (Fatal)``
(``drivers/pci/pcie/aer.c``). Streaming, bounded memory.

Xid events are also tallied per GPU (:class:`XidTally`): the NVLink Xids 144-150 of newer drivers
say ``Fatal`` or ``Nonfatal`` after their sub-unit (``145, RLW_CTRL Nonfatal XC0 i0 Link 00 (…)``,
the message format of NVIDIA's catalog, "WORKFLOW_NVLINK5_ERR"), which is kept; an Xid 45 line
that names its cause (``caused by previous Xid 149``) is tallied under that cause; Xid 154 names
the recovery action it changed to (``… changed from 0x0 (None) to 0x1 (GPU Reset Required)``),
which is kept too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

#: The driver's note on a follow-up Xid (typically 45, channel cleanup) naming the fault behind it.
_CAUSED_BY = re.compile(r"caused by previous Xid (\d+)")
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+)(?:, pid=\S+)?(?:, name=\S+)?,?\s*(.*)$")
#: ``<sub-unit> Fatal|Nonfatal`` at the start of an NVLink Xid message (144-150, R565 and later).
_FATAL_WORD = re.compile(r"^(\S+) (Fatal|Nonfatal)\b")
#: The recovery action an Xid 154 line changed to (NVIDIA's catalog lists None, Drain P2P, Drain
#: and Reset, GPU Reset Required, Node Reboot Required).
_RECOVERY = re.compile(r"recovery action changed from .{0,80}? to 0x[0-9a-fA-F]+ \(([^)]{1,60})\)")
#: Distinct (GPU, code, fatal, recovery, named by) tallies kept; a log with more is counted in ``xid_count`` only.
MAX_TALLIES = 200
_AER = re.compile(r"(\S{1,64} [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]): (?:AER: )?PCIe Bus Error: severity=([A-Za-z ()]{1,64}?),")



#: The shape of a kernel log line: ``dmesg``'s ``[seconds]``, syslog's ``Mon dd hh:mm:ss host
#: kernel:``, journalctl's ``kernel:``.
_LINE = re.compile(r"^\[\s{0,12}\d{1,10}\.\d{3,6}\] |^\w{3} [ \d]\d \d\d:\d\d:\d\d \S{1,255} kernel: |^kernel: ")


#: Kernel messages pasted without a timestamp (``NVRM: Xid …``, ``AMD-Vi: Event logged …``), or
#: behind another prefix (``kern: warning: [2026-…]: NVRM: …``).
_KERNEL_MSG = re.compile(r"(?:^|[\s:\]])(?:NVRM: |AMD-Vi: |DMAR: |pcieport \S{1,64}: AER: |nvidia-modeset: ERROR)")


def is_dmesg_line(line: str) -> bool:
    """Whether a cleaned line (leading blanks removed) is a line of a kernel log: a timestamped
    line, or a driver's kernel message pasted without its timestamp.

    >>> is_dmesg_line("[ 3471.345623] NVRM: Xid (PCI:0000:01:00): 79, pid=1234, GPU has fallen off the bus.")
    True
    >>> is_dmesg_line("[2024-05-01 10:00:00 TP0] Decode batch")
    False
    >>> is_dmesg_line("NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.")
    True
    """
    if line[:1] in "[kADFJMNOS" and line != "" and _LINE.match(line) is not None:
        return True
    return ("NVRM" in line or "AMD-Vi" in line or "DMAR" in line or "AER" in line or "nvidia-modeset" in line) and _KERNEL_MSG.search(line) is not None


class XidTally(BaseModel):
    """Xid events of one code on one GPU: ``gpu`` the PCI address the driver printed, ``fatal``
    what the message says (True ``Fatal``, False ``Nonfatal``, None when it says neither),
    ``recovery`` the recovery action an Xid 154 line changed to (``GPU Reset Required``, ``None``),
    ``named_by`` the code of the follow-up Xid (45) whose lines named this one as their cause
    (None for the code's own lines), ``unit`` the NVLink sub-unit an Xid 144-150 line names before
    its Fatal/Nonfatal word (``RLW_RXPIPE``, ``NETIR_LINK_EVT``; NVIDIA's decode table gives the
    action per sub-unit), ``count`` the lines, ``example`` the first line's message."""

    model_config = ConfigDict(defer_build=True)  # schema built on first use, not at import (start time)

    gpu: str
    code: int
    fatal: bool | None = None
    unit: str | None = None
    recovery: str | None = None
    named_by: int | None = None
    count: int = 0
    example: str = ""


class DmesgFacts(BaseModel):
    """Xid events (code, PCI address, message; first 20), their tallies per GPU and code, and AER
    error counts by severity."""

    model_config = ConfigDict(defer_build=True)  # schema built on first use, not at import (start time)

    lines: int = 0
    xids: list[tuple[int, str, str]] = Field(default_factory=list)
    xid_count: int = 0
    #: Codes an Xid line names as its cause ("Xid 45 … caused by previous Xid 149"), first seen first.
    xid_causes: list[int] = Field(default_factory=list)
    #: Events per (GPU, code, fatal, recovery, named_by), first seen first (at most :data:`MAX_TALLIES`).
    xid_tallies: list[XidTally] = Field(default_factory=list)
    aer: dict[str, int] = Field(default_factory=dict)
    aer_devices: list[str] = Field(default_factory=list)


def parse_dmesg(lines: Iterable[str]) -> DmesgFacts:
    """Parse kernel log lines into :class:`DmesgFacts`.

    >>> parse_dmesg(["[74889.644138] NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus."]).xids
    [(79, '0000:02:00', 'GPU has fallen off the bus.')]

    The AER lines before it (gpu-burn#1, ``tests/fixtures/evidence/dmesg-gpuburn1-xid79.txt``):

    >>> parse_dmesg(["[74889.542044] pcieport 0000:00:02.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
    ...              "type=Transaction Layer, id=0010(Receiver ID)"]).aer
    {'Uncorrected (Fatal)': 1}

    An Xid 45 naming its cause is tallied under the cause (open-gpu-kernel-modules#1150):

    >>> t = parse_dmesg(["NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149"]).xid_tallies[0]
    >>> (t.gpu, t.code, t.named_by, t.count)
    ('0000:dc:00', 149, 45, 1)
    """
    f = DmesgFacts()
    index: dict[tuple[str, int, bool | None, str | None, int | None, str | None], XidTally] = {}
    for line in lines:
        f.lines += 1
        if "Xid" in line:
            m = _XID.search(line)
            if m:
                f.xid_count += 1
                gpu, code, msg = m.group(1), int(m.group(2)), m.group(3).strip()[:200]
                if len(f.xids) < 20:
                    f.xids.append((code, gpu, msg))
                cm = _CAUSED_BY.search(msg)
                if cm and int(cm.group(1)) not in f.xid_causes:
                    f.xid_causes.append(int(cm.group(1)))
                _tally(f, index, gpu, code, msg, cm)
                continue
        if "severity=" in line:
            m = _AER.search(line)
            if m:
                sev = m.group(2).strip()
                f.aer[sev] = f.aer.get(sev, 0) + 1
                dev = m.group(1)
                if dev not in f.aer_devices and len(f.aer_devices) < 20:
                    f.aer_devices.append(dev)
    return f


def _tally(f: DmesgFacts, index: dict[tuple[str, int, bool | None, str | None, int | None, str | None], XidTally], gpu: str, code: int,
           msg: str, caused: re.Match[str] | None) -> None:
    """Count one Xid line under its (GPU, code, fatal, recovery, named_by, sub-unit) key; a line
    naming its cause counts under the cause."""
    fw = _FATAL_WORD.match(msg)
    fatal = None if fw is None else fw.group(2) == "Fatal"
    rm = _RECOVERY.search(msg)
    recovery = rm.group(1).strip() if rm else None
    key = (gpu, int(caused.group(1)), None, None, code, None) if caused else (gpu, code, fatal, recovery, None, fw.group(1) if fw else None)
    t = index.get(key)
    if t is None:
        if len(index) >= MAX_TALLIES:
            return
        t = index[key] = XidTally(gpu=key[0], code=key[1], fatal=key[2], recovery=key[3], named_by=key[4], unit=key[5], example=msg)
        f.xid_tallies.append(t)
    t.count += 1
