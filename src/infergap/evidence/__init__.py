"""Evidence people already have: pasted command outputs, NCCL and engine logs.

:func:`infergap.evidence.recognize.scan_file` recognises and splits a file by content;
:class:`infergap.evidence.overlay.EvidenceSnapshot` overlays the recognised parts on a snapshot so
the same investigators read them; :mod:`infergap.facts.logs` parses each log part once (the
parsers themselves, NCCL, engine, llama.cpp and kernel logs, are in :mod:`infergap.parsers`).
"""

from infergap.evidence.recognize import KINDS, EvidencePart, Unrecognized, scan_file
from infergap.evidence.overlay import EvidenceSnapshot

__all__ = ["KINDS", "EvidencePart", "EvidenceSnapshot", "Unrecognized", "scan_file"]
