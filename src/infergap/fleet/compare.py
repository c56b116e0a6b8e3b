"""``infergap compare`` of two fleet runs: which nodes came or went, changed state, drifted or
stopped drifting, and which checks changed status on which node."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass
class FleetDiff:
    """Fleet run B relative to run A.

    ``nodes_added`` / ``nodes_removed``: node names; ``state_changed``: (node, A's state, B's);
    ``drift_appeared`` / ``drift_resolved``: drift items (JSON) keyed by class, kind and key;
    ``drift_nodes``: for a drift item in both runs, (key, nodes that newly drifted, nodes that no
    longer do); ``checks_changed``: (node, check key, A's status, B's status) for nodes audited in
    both runs.
    """

    nodes_added: list[str] = field(default_factory=list)
    nodes_removed: list[str] = field(default_factory=list)
    state_changed: list[tuple[str, str, str]] = field(default_factory=list)
    drift_appeared: list[dict[str, Any]] = field(default_factory=list)
    drift_resolved: list[dict[str, Any]] = field(default_factory=list)
    drift_nodes: list[tuple[str, list[str], list[str]]] = field(default_factory=list)
    checks_changed: list[tuple[str, str, str, str]] = field(default_factory=list)

    def empty(self) -> bool:
        return not any(vars(self).values())


def _dkey(d: Mapping[str, Any]) -> tuple[str, str, str]:
    return (str(d.get("class")), str(d.get("kind")), str(d.get("key")))


def _checks(node: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for c in node.get("checks") or []:
        if isinstance(c, dict):
            key = f"{c.get('check')}@{c['subject']}" if c.get("subject") else str(c.get("check"))
            out[key] = f"{c.get('status')}{(' ' + c['severity']) if c.get('severity') else ''}"
    return out


def compare_fleets(a: Mapping[str, Any], b: Mapping[str, Any]) -> FleetDiff:
    """Compare two ``infergap.fleet/1`` documents (see :class:`FleetDiff`)."""
    na = {n["node"]["name"]: n for n in a.get("nodes") or [] if isinstance(n, dict) and isinstance(n.get("node"), dict)}
    nb = {n["node"]["name"]: n for n in b.get("nodes") or [] if isinstance(n, dict) and isinstance(n.get("node"), dict)}
    diff = FleetDiff(nodes_added=sorted(set(nb) - set(na)), nodes_removed=sorted(set(na) - set(nb)))
    for name in sorted(set(na) & set(nb)):
        sa, sb = na[name].get("state"), nb[name].get("state")
        if sa != sb:
            diff.state_changed.append((name, str(sa), str(sb)))
        elif sa == "audited":
            ca, cb = _checks(na[name]), _checks(nb[name])
            for k in sorted(set(ca) | set(cb)):
                if ca.get(k) != cb.get(k):
                    diff.checks_changed.append((name, k, ca.get(k, "absent"), cb.get(k, "absent")))
    da = {_dkey(d): d for d in a.get("drift") or [] if isinstance(d, dict)}
    db = {_dkey(d): d for d in b.get("drift") or [] if isinstance(d, dict)}
    diff.drift_appeared = [db[k] for k in db if k not in da]
    diff.drift_resolved = [da[k] for k in da if k not in db]
    for k in da.keys() & db.keys():
        new = sorted(set(db[k].get("nodes") or []) - set(da[k].get("nodes") or []))
        gone = sorted(set(da[k].get("nodes") or []) - set(db[k].get("nodes") or []))
        if new or gone:
            diff.drift_nodes.append((k[2], new, gone))
    return diff


def diff_lines(diff: FleetDiff) -> list[str]:
    """The diff as text lines for ``infergap compare``."""
    out = []
    out += [f"  + node {n}" for n in diff.nodes_added]
    out += [f"  - node {n}" for n in diff.nodes_removed]
    out += [f"  ~ node {n}: {a} → {b}" for n, a, b in diff.state_changed]
    for d in diff.drift_appeared:
        out.append(f"  + drift {d.get('severity')} {d.get('kind')} {d.get('key')}: {', '.join(d.get('nodes') or [])}")
    for d in diff.drift_resolved:
        out.append(f"  - drift {d.get('kind')} {d.get('key')}: no longer on {', '.join(d.get('nodes') or [])}")
    for key, new, gone in diff.drift_nodes:
        if new:
            out.append(f"  + drift {key}: now also on {', '.join(new)}")
        if gone:
            out.append(f"  - drift {key}: no longer on {', '.join(gone)}")
    out += [f"  ~ {n} {k}: {a} → {b}" for n, k, a, b in diff.checks_changed]
    return out or ["  no node, drift item or check changed"]
