"""The finding model: what every investigator returns and every renderer reads.

The JSON shape is the contract in docs/design.md ("Finding contract"):
one finding per check id and subject, with its status, evidence, expected value, impact and,
for actionable findings, a remedy with commands, their persistent form and the exact revert.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Characters of one evidence value kept in a finding (a quoted line of a pasted log; a 16 MB
#: line of NUL bytes must not travel whole into every report and ledger row).
MAX_EVIDENCE_CHARS = 2000


class Status(str, Enum):
    """Triage outcome of one check.

    ``ok`` ruled out; ``actionable`` something to change; ``expected`` looks wrong but is a hardware
    limit or normal for the platform (negative knowledge); ``unknown`` the evidence is missing or
    unreadable; ``not_applicable`` the check does not apply to this host (one GPU has no NVLink peer).
    """

    ok = "ok"
    actionable = "actionable"
    expected = "expected"
    unknown = "unknown"
    not_applicable = "not_applicable"


class Severity(str, Enum):
    """Impact rank of an actionable finding: P0 (likely costs throughput now) to P2 (hygiene)."""

    P0 = "P0"
    P1 = "P1"
    P2 = "P2"


class FixKind(str, Enum):
    """How a remedy takes effect.

    runtime: now, lost on reboot unless persisted; reboot: kernel command line, module or kernel;
    bios: firmware setup; hardware: a physical change; software: upgrade or replace a package.
    """

    runtime = "runtime"
    reboot = "reboot"
    bios = "bios"
    hardware = "hardware"
    software = "software"


#: Ranking of fix kinds in the report: what can be done now comes first.
FIX_KIND_ORDER = {FixKind.runtime: 0, FixKind.software: 1, FixKind.reboot: 2, FixKind.bios: 3, FixKind.hardware: 4}
SEVERITY_ORDER = {Severity.P0: 0, Severity.P1: 1, Severity.P2: 2}


class Evidence(BaseModel):
    """One observed value and where it was read (a snapshot path such as
    ``files/proc/sys/vm/swappiness`` or ``cmds/nvsmi_qx.out``, or a probe name)."""

    model_config = ConfigDict(extra="forbid")

    source: str
    value: str

    @field_validator("source", "value")
    @classmethod
    def _cap(cls, v: str) -> str:
        if len(v) > MAX_EVIDENCE_CHARS:
            return v[:MAX_EVIDENCE_CHARS] + f"… [{len(v) - MAX_EVIDENCE_CHARS} characters cut]"
        return v


class Action(BaseModel):
    """A machine-executable remedy step, declared by the check catalog (never taken from input).

    ``type`` selects the code path in :mod:`infergap.remedy` that applies and reverts it:

    - ``sysctl``: ``target`` is the sysctl key (``vm.swappiness``), ``value`` the new value,
      ``previous`` the value read at audit time.
    - ``setpci``: ``target`` is a PCI BDF, ``pci_register`` the setpci register expression
      (``CAP_EXP+8.w``), ``value``/``mask`` hex words, ``previous`` the word read at audit time.
    - ``modprobe``: ``target`` is a kernel module to load.
    - ``cpuidle``: ``target`` is a cpuidle state name whose ``disable`` is set on every CPU.
    - ``nvidia_persistence``: ``target`` is a GPU BDF.
    """

    model_config = ConfigDict(extra="forbid")

    type: Literal["sysctl", "setpci", "modprobe", "cpuidle", "nvidia_persistence"]
    target: str
    value: str | None = None
    previous: str | None = None
    pci_register: str | None = None
    mask: str | None = None


class Remedy(BaseModel):
    """What to run to fix a finding, how to make it survive a reboot, and how to undo it exactly.

    ``host_controlled`` is set when the audit ran inside a container and the setting belongs to the
    host: the commands are then meant for the host, not for the container.
    """

    model_config = ConfigDict(extra="forbid")

    commands: list[str] = Field(default_factory=list)
    persist: list[str] = Field(default_factory=list)
    revert: list[str] = Field(default_factory=list)
    actions: list[Action] = Field(default_factory=list)
    host_controlled: bool = False
    note: str | None = None


class Finding(BaseModel):
    """The result of one check on one subject (the host, a GPU, a PCI function).

    ``subject`` distinguishes several findings of one check id (``0000:01:00.0`` for a per-GPU
    check); it is ``None`` for host-wide checks. ``severity`` and ``fix_kind`` are set only when the
    status is actionable.
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    investigator: str
    status: Status
    title: str
    subject: str | None = None
    severity: Severity | None = None
    fix_kind: FixKind | None = None
    evidence: list[Evidence] = Field(default_factory=list)
    expected_value: str | None = None
    impact: str | None = None
    remedy: Remedy | None = None
    references: list[str] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict)

    def key(self) -> tuple[str, str]:
        """Identity of the finding across runs: (check id, subject or "")."""
        return (self.id, self.subject or "")

    def to_json(self) -> dict[str, Any]:
        """The contract JSON of this finding (enums as strings, empty optional fields dropped)."""
        return self.model_dump(mode="json", exclude_none=True, exclude_defaults=False)


def ev(source: str, value: object) -> Evidence:
    """Shorthand for an :class:`Evidence` with the value rendered as text."""
    return Evidence(source=source, value=str(value))


_PART_LINE = re.compile(r"#L(\d+)")
# what differs between copies of one paste: the part's line (#L1010) and a quoted line's number
_COPY_PLACE = re.compile(r"#L\d+|\bline \d+\b")


def fold_repeats(findings: list[Finding]) -> list[Finding]:
    """Findings that differ only in the pasted part they came from (the ``#L<line>`` of a part's
    label, ``evidence/paste.txt#L1010``) folded into one: a paste that repeats the same output
    818 times gave 818 identical Xid findings. The first is kept, its title saying how many
    copies and which lines (``details["repeats"]``: ``count``, ``first_line``, ``last_line``);
    a finding with any other difference (another message, value or severity) stays on its own.
    Order of first appearance is kept.

    >>> a = Finding(id="gpu.xid", investigator="evidence", status=Status.actionable, title="Xid 43",
    ...             subject="evidence/p.txt#L1: xid", evidence=[ev("evidence/p.txt#L1", "Xid 43")])
    >>> b = a.model_copy(update={"subject": "evidence/p.txt#L9: xid", "evidence": [ev("evidence/p.txt#L9", "Xid 43")]})
    >>> c = a.model_copy(update={"subject": "evidence/p.txt#L20: xid", "title": "Xid 31"})
    >>> [(f.title, f.details.get("repeats")) for f in fold_repeats([a, b, c])]  # doctest: +NORMALIZE_WHITESPACE
    [('Xid 43 (the same in 2 pasted copies, lines 1-9)', {'count': 2, 'first_line': 1, 'last_line': 9}),
     ('Xid 31', None)]
    """
    def norm(s: str | None) -> str:
        return _COPY_PLACE.sub("#", s or "")

    groups: dict[tuple, list[Finding]] = {}
    for f in findings:
        if not _PART_LINE.search(f.subject or "") and not any(_PART_LINE.search(e.source) for e in f.evidence):
            groups[(id(f),)] = [f]
            continue
        key = (f.id, f.status, f.severity, f.fix_kind, norm(f.title), norm(f.subject), norm(f.impact),
               tuple((norm(e.source), norm(e.value)) for e in f.evidence))
        groups.setdefault(key, []).append(f)
    return [_folded(members) if len(members) > 1 else members[0] for members in groups.values()]


def _folded(members: list[Finding]) -> Finding:
    """The first of ``members`` (identical but for their part), saying how many and where."""
    def line(f: Finding) -> int | None:
        m = _PART_LINE.search(f.subject or "") or next((m for e in f.evidence if (m := _PART_LINE.search(e.source))), None)
        return int(m.group(1)) if m else None

    lines = [n for n in map(line, members) if n is not None]
    a, b = (min(lines), max(lines)) if lines else (None, None)
    where = f", lines {a}-{b}" if a is not None else ""
    first = members[0]
    return first.model_copy(update={
        "title": f"{first.title} (the same in {len(members)} pasted copies{where})",
        "details": {**first.details, "repeats": {"count": len(members), "first_line": a, "last_line": b}}})
