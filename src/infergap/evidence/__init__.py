"""Evidence people already have: pasted command outputs, NCCL and engine logs.

:func:`infergap.evidence.recognize.scan_file` recognises and splits a file by content;
:class:`infergap.evidence.snapshot.EvidenceSnapshot` overlays the recognised parts on a snapshot so
the same investigators read them; :mod:`infergap.evidence.nccl` and :mod:`infergap.evidence.engine`
turn logs into typed facts, streaming.
"""

from infergap.evidence.recognize import KINDS, EvidencePart, Unrecognized, scan_file
from infergap.evidence.snapshot import EvidenceSnapshot

__all__ = ["KINDS", "EvidencePart", "EvidenceSnapshot", "Unrecognized", "scan_file"]
