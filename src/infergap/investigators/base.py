"""What every investigator receives, and the helpers that gather evidence and remedies.

Findings are built by the one constructor of the check catalog, :func:`infergap.checks.finding`
(with :func:`~infergap.checks.unknown` and :func:`~infergap.checks.not_applicable`), re-exported
here for the investigators.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from infergap import checks
from infergap.checks import SYSCTL_D, finding, not_applicable, unknown
from infergap.facts import Facts, Value
from infergap.findings import Evidence, Remedy
from infergap.snapshot.core import Snapshot

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.server import ServerConfig

__all__ = ["SYSCTL_D", "Context", "evidence", "facts_of", "finding", "not_applicable", "sysctl_remedy", "unknown"]


@dataclass
class Context:
    """Input of an investigator: the snapshot, its memoized facts, and the live server's
    configuration when one was introspected (``None`` otherwise)."""

    snap: Snapshot
    facts: Facts
    server: ServerConfig | None = None

    @property
    def in_container(self) -> bool:
        """Whether the audited host is a container (host-owned settings are then host-controlled)."""
        return self.facts.container().inside


def facts_of(ctx: Context) -> Facts:
    """The facts of an investigator's input (built over its snapshot when a caller passed none)."""
    return getattr(ctx, "facts", None) or Facts(ctx.snap)


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


def sysctl_remedy(ctx: Context, key: str, good: str, current: str, extra_note: str | None = None) -> Remedy:
    """Runtime remedy for one sysctl (:func:`infergap.checks.sysctl_remedy`): ``sysctl -w`` now, a
    sysctl.d line to persist, the exact revert.

    Inside a container the setting belongs to the host kernel (most sysctls are not namespaced):
    the remedy is marked host-controlled and says to run it on the host.
    """
    return checks.sysctl_remedy([(key, good, current)], host_controlled=ctx.in_container and not key.startswith("net."), note=extra_note)
