"""Merge investigators' findings into one triaged report.

Groups: confirmed good (ok), actionable (ranked: severity, then runtime before software before
reboot before BIOS/hardware), expected (negative knowledge), unknown, not applicable. The JSON
shape is the contract of docs/design.md ``{"schema": "infergap.audit/1", "host", "investigators",
"findings", "summary"}``.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from infergap import __version__
from infergap.findings import FIX_KIND_ORDER, SEVERITY_ORDER, Finding, Status

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.facts import Facts
    from infergap.snapshot.core import Snapshot

SCHEMA = "infergap.audit/1"


class InvestigatorRun(BaseModel):
    """How one investigator ran: its name, wall time in seconds, error (if it raised), finding count."""

    name: str
    duration_s: float
    error: str | None = None
    findings: int = 0


class SnapshotRef(BaseModel):
    """What was audited: the snapshot's kind (``live``, ``dir``, ``archive``, ``evidence`` …) and
    its label (a path, a host name)."""

    kind: str | None = None
    label: str | None = None


class AuditGpu(BaseModel):
    """One GPU of the audited host: PCI address (``0000:17:00.0``, or the nvidia-smi device name
    when that is all the input gave), name, memory in bytes (None when not read)."""

    bdf: str | None = None
    name: str | None = None
    memory_total_B: int | None = None


class AuditHost(BaseModel):
    """The report's ``host`` summary (:func:`host_summary`): what was audited and what the host is.
    Every field is optional: an evidence-only audit has no kernel, a summary that failed has only
    ``snapshot`` and ``error``. Only the fields a summary set are written back
    (:meth:`as_dict`), so a document reads back as it was; keys of another version are kept."""

    model_config = {"extra": "allow"}

    snapshot: SnapshotRef | None = None
    kernel: str | None = None
    cpu: str | None = None
    cpu_vendor: str | None = None
    numa_nodes: int | None = None
    gpus: list[AuditGpu] = Field(default_factory=list)
    gpu_summary: str | None = None
    driver: str | None = None
    cuda_driver: str | None = None
    container: str | None = None
    virtualization: str | None = None
    error: str | None = None

    @property
    def gpus_read(self) -> bool:
        """Whether the summary says which GPUs the host has (``gpus`` was set, perhaps empty)."""
        return "gpus" in self.model_fields_set

    def as_dict(self) -> dict[str, Any]:
        """The summary as written in the document (JSON values, only the fields that were set)."""
        return self.model_dump(mode="json", exclude_unset=True)


class AuditReport(BaseModel):
    """The audit report. ``findings`` are ordered for reading: actionable first (ranked), then
    expected, unknown, ok and not applicable."""

    schema_: str = Field(SCHEMA, alias="schema")
    created: str
    infergap_version: str = __version__
    host: AuditHost
    investigators: list[InvestigatorRun]
    findings: list[Finding]
    summary: dict[str, Any]

    model_config = {"populate_by_name": True}

    def by_status(self, status: Status) -> list[Finding]:
        """Findings of one status, in report order."""
        return [f for f in self.findings if f.status == status]

    def get(self, id: str, subject: str | None = None) -> list[Finding]:
        """Findings of check ``id`` (optionally of one subject)."""
        return [f for f in self.findings if f.id == id and (subject is None or f.subject == subject)]

    def to_json(self) -> dict[str, Any]:
        """The contract JSON (``schema`` key, enums as strings, None fields dropped in findings)."""
        d = self.model_dump(mode="json", by_alias=True, exclude={"findings", "host"})  # those two dumped below
        d["host"] = self.host.as_dict()
        d["findings"] = [f.to_json() for f in self.findings]
        return {k: d[k] for k in (f.alias or n for n, f in type(self).model_fields.items()) if k in d}  # field order


def rank_key(f: Finding) -> tuple[int, int, str, str]:
    """Order of actionable findings: severity, then fix kind (runtime first), then id, subject."""
    return (
        SEVERITY_ORDER.get(f.severity, 9) if f.severity else 9,
        FIX_KIND_ORDER.get(f.fix_kind, 9) if f.fix_kind else 9,
        f.id,
        f.subject or "",
    )


_STATUS_ORDER = {Status.actionable: 0, Status.expected: 1, Status.unknown: 2, Status.ok: 3, Status.not_applicable: 4}


def synthesize(findings: list[Finding], runs: list[InvestigatorRun], host: dict[str, Any] | AuditHost, duration_s: float = 0.0,
               read_s: float | None = None) -> AuditReport:
    """Order findings and compute the summary counts (per status, per severity, per fix kind).
    ``duration_s``: seconds the investigators and the synthesis took; ``read_s``: seconds spent
    reading the snapshot and evidence before them (``summary.read_s``; None when nothing was read
    up front)."""
    ordered = sorted(findings, key=lambda f: (_STATUS_ORDER[f.status], *rank_key(f)))
    counts = {s.value: sum(1 for f in findings if f.status == s) for s in Status}
    act = [f for f in findings if f.status == Status.actionable]
    sev = {s: sum(1 for f in act if f.severity and f.severity.value == s) for s in ("P0", "P1", "P2")}
    kinds: dict[str, int] = {}
    for f in act:
        if f.fix_kind:
            kinds[f.fix_kind.value] = kinds.get(f.fix_kind.value, 0) + 1
    summary = {
        "counts": counts,
        "actionable_by_severity": sev,
        "actionable_by_fix_kind": kinds,
        "investigator_errors": [r.name for r in runs if r.error],
        # pasted parts read but explained by no finding: a report of 0 actionable is not a clean bill then
        "evidence_unmatched": sum(1 for f in findings if f.id == "evidence.unmatched"),
        "duration_s": round(duration_s, 4),
    }
    if read_s is not None:
        summary["read_s"] = round(read_s, 4)
    return AuditReport(
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        host=host if isinstance(host, AuditHost) else AuditHost.model_validate(host),
        investigators=sorted(runs, key=lambda r: r.name),
        findings=ordered,
        summary=summary,
    )


def _unreadable_note(snap: Snapshot, prefix: str, what: str) -> str | None:
    """``"GPUs unknown (permission denied)"`` when files under ``prefix`` could not be read."""
    denied = snap.unreadable_under(prefix) if hasattr(snap, "unreadable_under") else []
    return f"{what} unknown ({denied[0][1]})" if denied else None


def host_summary(snap: Snapshot, facts: Facts) -> dict[str, Any]:
    """What the report says about the host: snapshot kind/label, kernel, CPU, GPUs, container, VM."""
    gpus = facts.gpus()
    vendor, model, _fam = facts.cpu_vendor_model()
    kr = facts.kernel_release()
    c = facts.container()
    vm = facts.virtualization()
    nodes = facts.numa_nodes()
    names: dict[str, int] = {}
    for g in gpus:
        names[g.name or "unknown device"] = names.get(g.name or "unknown device", 0) + 1
    return {
        "snapshot": {"kind": snap.kind, "label": snap.label},
        "kernel": kr.value if kr else None,
        "cpu": model,
        "cpu_vendor": vendor,
        "numa_nodes": len(nodes) if nodes else None,
        "gpus": [{"bdf": g.bdf, "name": g.name, "memory_total_B": g.memory_total_B} for g in gpus],
        "gpu_summary": ", ".join(f"{n} × {k}" for k, n in names.items()) if names else
        (_unreadable_note(snap, "/sys/bus/pci", "GPUs") or
         ("no NVIDIA GPU" if facts.pci_inventory_captured() or facts.nvml() is not None else "GPUs not captured")),
        "driver": (facts.driver_version().value if facts.driver_version() else None),
        "cuda_driver": (facts.cuda_driver_version().value if facts.cuda_driver_version() else None),
        "container": c.kind,
        "virtualization": vm.value if vm else None,
    }
