"""What every investigator receives and the helpers that build findings and remedies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infergap.facts import Facts, Value
from infergap.findings import Action, Evidence, Finding, FixKind, Remedy, Severity, Status
from infergap.snapshot.core import Snapshot

#: File the persistent sysctl settings are written to (sysctl.d(5): later names win).
SYSCTL_D = "/etc/sysctl.d/90-infergap.conf"


@dataclass
class Context:
    """Input of an investigator: the snapshot, its memoized facts, and the live server's
    configuration when one was introspected (``None`` otherwise)."""

    snap: Snapshot
    facts: Facts
    server: Any = None

    @property
    def in_container(self) -> bool:
        """Whether the audited host is a container (host-owned settings are then host-controlled)."""
        return self.facts.container().inside


def evidence(*vals: Value | tuple[str, object] | None) -> list[Evidence]:
    """Evidence list from facts :class:`Value` objects or (source, value) pairs; None skipped."""
    out = []
    for v in vals:
        if v is None:
            continue
        if isinstance(v, Value):
            out.append(Evidence(source=v.source, value=v.value))
        else:
            out.append(Evidence(source=v[0], value=str(v[1])))
    return out


def finding(
    id: str,
    investigator: str,
    status: Status,
    title: str,
    *,
    severity: Severity | None = None,
    fix_kind: FixKind | None = None,
    evidence_: list[Evidence] | None = None,
    expected_value: str | None = None,
    impact: str | None = None,
    remedy: Remedy | None = None,
    references: list[str] | None = None,
    subject: str | None = None,
    details: dict[str, Any] | None = None,
) -> Finding:
    """Build a :class:`Finding`; severity and fix kind are dropped unless the status is actionable."""
    act = status == Status.actionable
    return Finding(
        id=id,
        investigator=investigator,
        status=status,
        title=title,
        subject=subject,
        severity=severity if act else None,
        fix_kind=fix_kind if act else None,
        evidence=evidence_ or [],
        expected_value=expected_value,
        impact=impact,
        remedy=remedy,
        references=references or [],
        details=details or {},
    )


def unknown(id: str, investigator: str, title: str, why: str, *, subject: str | None = None, evidence_: list[Evidence] | None = None) -> Finding:
    """An ``unknown`` finding: the evidence needed is missing or unreadable; ``why`` says which."""
    return finding(id, investigator, Status.unknown, title, impact=why, subject=subject, evidence_=evidence_)


def not_applicable(id: str, investigator: str, title: str, why: str, *, evidence_: list[Evidence] | None = None, subject: str | None = None) -> Finding:
    """A ``not_applicable`` finding with the reason."""
    return finding(id, investigator, Status.not_applicable, title, impact=why, evidence_=evidence_, subject=subject)


def sysctl_remedy(ctx: Context, key: str, good: str, current: str, extra_note: str | None = None) -> Remedy:
    """Runtime remedy for a sysctl: ``sysctl -w`` now, a sysctl.d line to persist, the exact revert.

    Inside a container the setting belongs to the host kernel (most sysctls are not namespaced):
    the remedy is marked host-controlled and says to run it on the host.
    """
    host = ctx.in_container and not key.startswith("net.")
    note = extra_note
    if host:
        note = ("Inside a container: this kernel setting belongs to the host; run these commands on the host. " + (note or "")).strip()
    return Remedy(
        commands=[f"sysctl -w {key}={_q(good)}"],
        persist=[f"echo '{key} = {good}' >> {SYSCTL_D}", f"sysctl -p {SYSCTL_D}"],
        revert=[f"sysctl -w {key}={_q(current)}", f"sed -i '/^{key} = /d' {SYSCTL_D}"],
        actions=[Action(type="sysctl", target=key, value=good, previous=current)],
        host_controlled=host,
        note=note,
    )


def _q(v: str) -> str:
    return f'"{v}"' if any(c.isspace() for c in v) else v
