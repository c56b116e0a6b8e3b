"""Facts from a kernel log (``dmesg`` or ``journalctl -k``): NVIDIA Xid events and PCIe AER errors.

What each Xid code means is data: the ``xid`` entries of ``infergap/data/signatures.yaml``.
Line formats are the kernel's and the NVIDIA driver's: ``NVRM: Xid (PCI:0000:02:00): 79, GPU has
fallen off the bus.`` (Xid meanings: NVIDIA's "XID Errors" document), ``pcieport 0000:00:02.0: AER:
Corrected error received`` and ``PCIe Bus Error: severity=Uncorrected (Fatal)``
(``drivers/pci/pcie/aer.c``). Streaming, bounded memory.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import BaseModel, Field

#: The driver's note on a follow-up Xid (typically 45, channel cleanup) naming the fault behind it.
_CAUSED_BY = re.compile(r"caused by previous Xid (\d+)")
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+)(?:, pid=\S+)?(?:, name=\S+)?,?\s*(.*)$")
_AER = re.compile(r"(\S{1,64} [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]): (?:AER: )?PCIe Bus Error: severity=([A-Za-z ()]{1,64}?),")



class DmesgFacts(BaseModel):
    """Xid events (code, PCI address, message; first 20) and AER error counts by severity."""

    lines: int = 0
    xids: list[tuple[int, str, str]] = Field(default_factory=list)
    xid_count: int = 0
    #: Codes an Xid line names as its cause ("Xid 45 … caused by previous Xid 149"), first seen first.
    xid_causes: list[int] = Field(default_factory=list)
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
    """
    f = DmesgFacts()
    for line in lines:
        f.lines += 1
        if "Xid" in line:
            m = _XID.search(line)
            if m:
                f.xid_count += 1
                if len(f.xids) < 20:
                    f.xids.append((int(m.group(2)), m.group(1), m.group(3).strip()[:200]))
                cm = _CAUSED_BY.search(m.group(3))
                if cm and int(cm.group(1)) not in f.xid_causes:
                    f.xid_causes.append(int(cm.group(1)))
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
