"""Drift: within each hardware class, what a node has that the class majority has not.

A hardware class is the set of audited nodes with the same GPU model, GPU count, CPU model and
GPU topology fingerprint (:attr:`NodeDigest.class_key`): nodes that should be configured alike.
Within a class:

- **check drift**: for a check (and subject) the nodes disagree on status, severity or value
  (:meth:`CheckState.compared`); a node where the check is absent counts as ``absent``.
- **version drift**: a version (kernel, driver, CUDA, torch, NCCL, engines) differs.
- **measurement drift**: a measured figure is more than ``tolerance`` (a fraction) below the class
  median. Figures above the median are not drift: a faster node is not a fault.

Across classes, **hardware drift** (:func:`hardware_drift`): a small class next to a much larger one
of the same GPU model and CPU (a node that lost a GPU or whose topology changed).

The majority is the value most nodes hold, if strictly more nodes hold it than any other value;
otherwise the class is split and every node is named. A class of one node has no peers and no
drift (the report says so). Nodes that could not be audited are listed, never compared.

Severity of a drift item: the single-host severity of the drifted nodes' finding when it is
actionable; P1 for a driver, CUDA, NCCL, torch or engine version that differs (NCCL documents
that every rank of a job must run the same NCCL version, and the CUDA/torch stack follows the
driver); P1 for a measurement below the tolerance (the node is measurably slower than its
identical peers); else P2.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable

from infergap import __version__
from infergap.fleet.digest import NodeDigest

SCHEMA = "infergap.fleet/1"

#: Default tolerance of measurement drift: 10 % below the class median. Copy and all-reduce
#: bandwidths repeat within a few per cent on one healthy node (median of 20 copies), so 10 %
#: leaves room for run-to-run spread and still catches a link trained at half width (-50 %).
DEFAULT_TOLERANCE = 0.10

_SEV_RANK = {"P0": 0, "P1": 1, "P2": 2}
_P1_VERSIONS = ("driver", "cuda_driver", "cuda_runtime", "nccl", "torch", "pip ")


@dataclass
class DriftItem:
    """One way some nodes of a class differ from the rest.

    ``kind``: ``check``, ``version`` or ``measurement``; ``key``: the check id (and subject), the
    version or the measurement name; ``nodes``: the drifted nodes; ``values``: every value with
    its count and nodes, most common first; ``majority``: the majority value and count (None when
    the class is split); ``fix``: the remedy of the drifted nodes' single-host finding, or a line
    saying what to align.
    """

    klass: str
    kind: str
    key: str
    title: str
    severity: str
    nodes: list[str]
    values: list[dict[str, Any]]
    majority: dict[str, Any] | None
    class_size: int
    fix: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["class"] = d.pop("klass")
        return d


@dataclass
class FleetReport:
    """The fleet audit (``infergap.fleet/1``): where the nodes came from, the classes, the drift
    items ranked by severity then by how many nodes they touch, and every node's digest."""

    source: dict[str, Any]
    tolerance: float
    nodes: list[NodeDigest]
    classes: dict[str, list[str]]
    drift: list[DriftItem]
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    duration_s: float = 0.0

    def audited(self) -> list[NodeDigest]:
        return [n for n in self.nodes if n.state == "audited"]

    def failed(self) -> list[NodeDigest]:
        return [n for n in self.nodes if n.state != "audited"]

    def summary(self) -> dict[str, Any]:
        """Counts: nodes, audited, failed (by state), classes, nodes with P0/P1, drift items, drifted nodes."""
        aud = self.audited()
        states = Counter(n.state for n in self.failed())
        drifted = {n for d in self.drift for n in d.nodes}
        return {"nodes": len(self.nodes), "audited": len(aud), "failed": len(self.nodes) - len(aud),
                "failed_by_state": dict(sorted(states.items())), "classes": len(self.classes),
                "nodes_with_P0": sum(1 for n in aud if n.counts.get("P0")),
                "nodes_with_P1": sum(1 for n in aud if n.counts.get("P1")),
                "drift_items": len(self.drift), "drifted_nodes": len(drifted),
                "drift_by_severity": dict(sorted(Counter(d.severity for d in self.drift).items())),
                "duration_s": round(self.duration_s, 3)}

    def worst_severity(self) -> str | None:
        """The worst severity among drift items and the nodes' actionable findings (P0 < P1 < P2)."""
        sev = [d.severity for d in self.drift] + [k for n in self.audited() for k in ("P0", "P1", "P2") if n.counts.get(k)]
        return min(sev, key=lambda s: _SEV_RANK[s]) if sev else None

    def drift_by_node(self) -> dict[str, list[DriftItem]]:
        out: dict[str, list[DriftItem]] = {}
        for d in self.drift:
            for n in d.nodes:
                out.setdefault(n, []).append(d)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "created": self.created, "infergap_version": __version__, "source": self.source,
                "tolerance": self.tolerance, "summary": self.summary(),
                "classes": [{"class": k, "nodes": v} for k, v in self.classes.items()],
                "drift": [d.to_json() for d in self.drift], "nodes": [n.to_json() for n in self.nodes]}


def _groups(values: dict[str, str]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    by: dict[str, list[str]] = {}
    for node, v in values.items():
        by.setdefault(v, []).append(node)
    ranked = sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    vals = [{"value": v, "count": len(ns), "nodes": sorted(ns)} for v, ns in ranked]
    majority = {"value": vals[0]["value"], "count": vals[0]["count"]} if len(vals) == 1 or vals[0]["count"] > vals[1]["count"] else None
    return vals, majority


def _show_as_reported(groups: list[dict[str, Any]], majority: dict[str, Any] | None, key: str, by_name: dict[str, NodeDigest]) -> None:
    """Each group's value as its first node reported it (placeholders such as ``<kernel>`` only
    make values comparable; a person reads the value itself). Edits ``groups`` and ``majority``."""
    for g in groups:
        state = by_name[g["nodes"][0]].checks.get(key)
        if state is not None:
            if majority is not None and majority["value"] == g["value"]:
                majority["value"] = state.display()
            g["value"] = state.display()


def class_drift(klass: str, members: list[NodeDigest], tolerance: float = DEFAULT_TOLERANCE) -> list[DriftItem]:
    """Drift items of one class (see the module docstring). A class of one node yields none."""
    if len(members) < 2:
        return []
    out: list[DriftItem] = []
    names = [m.node.name for m in members]
    by_name = {m.node.name: m for m in members}
    keys: dict[str, None] = {}
    for m in members:
        keys.update(dict.fromkeys(m.checks))
    for key in keys:
        vals = {m.node.name: (m.checks[key].compared() if key in m.checks else "absent") for m in members}
        if len(set(vals.values())) == 1:
            continue
        groups, majority = _groups(vals)
        drifted = [n for n in names if majority is None or vals[n] != majority["value"]]
        states = [by_name[n].checks.get(key) for n in drifted]
        sevs = [s.severity for s in states if s is not None and s.status == "actionable" and s.severity]
        fix = next((s.remedy for s in states if s is not None and s.remedy), None)
        ref = next((s for s in states if s is not None), None) or next(m.checks[key] for m in members if key in m.checks)
        if fix is None and majority is not None:
            maj = next((m.checks[key] for m in members if key in m.checks and vals[m.node.name] == majority["value"]), None)
            if maj is not None and maj.status == "actionable":
                fix = {"note": f"The drifted node(s) differ from a class majority that is itself actionable ({maj.title}); "
                               "the majority's finding carries the fix."}
        if fix is None:
            fix = {"note": (f"No single-host finding asks for a change here; align the drifted node(s) with the class "
                            f"({majority['count']} of {len(members)} nodes: {majority['value']})") if majority else
                   "No single-host finding asks for a change here and the class is split: pick one setting for the class."}
        _show_as_reported(groups, majority, key, by_name)
        out.append(DriftItem(klass, "check", key, ref.title, min(sevs, key=lambda s: _SEV_RANK[s]) if sevs else "P2",
                             drifted, groups, majority, len(members), fix))
    vkeys: dict[str, None] = {}
    for m in members:
        vkeys.update(dict.fromkeys(m.versions))
    for key in vkeys:
        vals = {m.node.name: m.versions.get(key, "absent") for m in members}
        if len(set(vals.values())) == 1:
            continue
        groups, majority = _groups(vals)
        drifted = [n for n in names if majority is None or vals[n] != majority["value"]]
        sev = "P1" if key.startswith(_P1_VERSIONS) else "P2"
        fix = {"note": f"Install {key} {majority['value']} on the drifted node(s), as on {majority['count']} of {len(members)} nodes of the class."
               if majority else f"Pick one {key} for the class; the nodes are split."}
        out.append(DriftItem(klass, "version", key, f"{key} version differs", sev, drifted, groups, majority, len(members), fix))
    mkeys: dict[str, None] = {}
    for m in members:
        mkeys.update(dict.fromkeys(m.measures))
    for key in mkeys:
        vals_f = {m.node.name: m.measures[key] for m in members if key in m.measures}
        if len(vals_f) < 2:
            continue
        med = statistics.median(vals_f.values())
        low = sorted(n for n, v in vals_f.items() if v < med * (1 - tolerance))
        if not low:
            continue
        ok = [n for n in vals_f if n not in low]
        groups = [{"value": f"{vals_f[n]:g}", "count": 1, "nodes": [n]} for n in low]
        groups.append({"value": f"within {tolerance:.0%} of the median {med:g}", "count": len(ok), "nodes": sorted(ok)})
        fix = {"note": f"{key} is more than {tolerance:.0%} below the class median ({med:g}); see the node's own findings "
                       "(PCIe link, clocks, throttle, NUMA placement) and re-measure after fixing them."}
        out.append(DriftItem(klass, "measurement", key, f"{key} below the class median", "P1", low, groups,
                             {"value": f"median {med:g}", "count": len(ok)}, len(vals_f), fix))
    return out


def hardware_drift(classes: dict[str, list[NodeDigest]]) -> list[DriftItem]:
    """Nodes whose own class is a small minority next to a class of the same GPU model and CPU:
    a GPU that fell off the bus or a changed NVLink/PCIe topology puts a node into a class of its
    own, where it would have no peers to be compared with. A class is flagged when it has fewer
    than half the nodes of the largest class of the same GPU model and CPU (a fleet that mixes
    4- and 8-GPU nodes in similar numbers is not flagged). Severity P1."""
    groups: dict[tuple[Any, Any], list[str]] = {}
    for k, members in classes.items():
        h = members[0].hw
        if h.get("gpu_model"):
            groups.setdefault((h.get("gpu_model"), h.get("cpu")), []).append(k)
    out: list[DriftItem] = []
    for keys in groups.values():
        if len(keys) < 2:
            continue
        ref = max(keys, key=lambda k: (len(classes[k]), k))
        rh, rn = classes[ref][0].hw, len(classes[ref])
        for k in keys:
            if k == ref or len(classes[k]) * 2 >= rn:
                continue
            h = classes[k][0].hw
            what = "GPU count" if h.get("gpu_count") != rh.get("gpu_count") else "GPU topology"
            mine = h.get("gpu_count") if what == "GPU count" else h.get("topology")
            theirs = rh.get("gpu_count") if what == "GPU count" else rh.get("topology")
            names = sorted(m.node.name for m in classes[k])
            out.append(DriftItem(
                ref, "hardware", what, f"{what} differs from the {rn} other nodes with {rh.get('gpu_model')} and this CPU", "P1",
                names, [{"value": str(mine), "count": len(names), "nodes": names},
                        {"value": str(theirs), "count": rn, "nodes": sorted(m.node.name for m in classes[ref])}],
                {"value": str(theirs), "count": rn}, rn + len(names),
                {"note": ("Check that every GPU is visible (nvidia-smi -L, lspci, dmesg for Xid 79 'fallen off the bus') and "
                          "that the NVLink/PCIe topology (nvidia-smi topo -m) matches the other nodes; if this node is meant "
                          "to differ, this item can be ignored.")}))
    return out


def build_report(nodes: Iterable[NodeDigest], *, source: dict[str, Any], tolerance: float = DEFAULT_TOLERANCE,
                 duration_s: float = 0.0) -> FleetReport:
    """Group ``nodes`` into classes, find drift in each, and rank it: severity, then the number of
    nodes touched (most first), then class, kind and key. Node names must be unique (the runners
    make them so)."""
    all_nodes = list(nodes)
    classes: dict[str, list[NodeDigest]] = {}
    for n in all_nodes:
        if n.state == "audited":
            classes.setdefault(n.class_key, []).append(n)
    drift: list[DriftItem] = []
    for k, members in classes.items():
        drift.extend(class_drift(k, members, tolerance))
    drift.extend(hardware_drift(classes))
    drift.sort(key=lambda d: (_SEV_RANK[d.severity], -len(d.nodes), d.klass, d.kind, d.key))
    return FleetReport(source=source, tolerance=tolerance, nodes=sorted(all_nodes, key=lambda n: n.node.name),
                       classes={k: sorted(m.node.name for m in v) for k, v in sorted(classes.items(), key=lambda kv: -len(kv[1]))},
                       drift=drift, duration_s=duration_s)
