"""Fleet report renderers: text, Markdown and one self-contained HTML page with the node × check
matrix as a heat map (jinja2, CSS inline, no script and no external resource).

The matrix has one row per audited node and one column per check that is not ``ok`` everywhere
(a check that is fine on every node adds nothing to read); a cell is the node's worst status over
the check's subjects (P0, P1, P2, unknown, expected, ok, not applicable) and is marked when the
node drifted on that check. Two more columns carry version and measurement drift.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import jinja2

from infergap.fleet.digest import NodeDigest
from infergap.guard import md_code, md_escape
from infergap.fleet.drift import DriftItem, FleetReport

#: Cell ranks, worst first; a node's cell for a check is the worst over the check's subjects.
CELL_ORDER = ("P0", "P1", "P2", "unknown", "expected", "ok", "not_applicable", "absent")
_RANK = {c: i for i, c in enumerate(CELL_ORDER)}


def _cell_of(status: str, severity: str | None) -> str:
    return severity if status == "actionable" and severity else status


def matrix(report: FleetReport) -> dict[str, Any]:
    """The node × check matrix: ``columns`` (check ids, then ``versions`` and ``measurements``),
    ``rows`` ({node, cells: {column: {cell, drift}}}) for audited nodes, drifted and worst first,
    and ``all_ok``: how many checks were ok (or not applicable) on every node and left out."""
    nodes = report.audited()
    drift = report.drift_by_node()
    cells: dict[str, dict[str, str]] = {}
    seen: dict[str, None] = {}
    for n in nodes:
        row: dict[str, str] = {}
        for c in n.checks.values():
            cell = _cell_of(c.status, c.severity)
            prev = row.get(c.check)
            row[c.check] = cell if prev is None or _RANK[cell] < _RANK[prev] else prev
            seen.setdefault(c.check, None)
        cells[n.node.name] = row
    drift_cols: dict[str, set[str]] = {}
    for name, items in drift.items():
        for d in items:
            col = d.key.split("@", 1)[0] if d.kind == "check" else {"version": "versions", "hardware": "hardware"}.get(d.kind, "measurements")
            drift_cols.setdefault(name, set()).add(col)
    shown = [c for c in seen if any(cells[n.node.name].get(c) not in (None, "ok", "not_applicable") for n in nodes)
             or any(c in drift_cols.get(n.node.name, ()) for n in nodes)]
    shown.sort(key=lambda c: (min(_RANK[cells[n.node.name].get(c, "absent")] for n in nodes), c))
    hw = any("hardware" in v for v in drift_cols.values())
    columns = shown + ["versions", "measurements"] + (["hardware"] if hw else [])
    rows = []
    for n in nodes:
        dc = drift_cols.get(n.node.name, set())
        row = {c: {"cell": cells[n.node.name].get(c, "absent"), "drift": c in dc} for c in shown}
        row["versions"] = {"cell": "drift" if "versions" in dc else "same", "drift": "versions" in dc}
        row["measurements"] = {"cell": "drift" if "measurements" in dc else ("same" if n.measures else "absent"), "drift": "measurements" in dc}
        if hw:
            row["hardware"] = {"cell": "drift" if "hardware" in dc else "same", "drift": "hardware" in dc}
        rows.append({"node": n.node.name, "cells": row, "drifts": len(drift.get(n.node.name, [])),
                     "worst": min((_RANK[v["cell"]] for v in row.values() if v["cell"] in _RANK), default=len(CELL_ORDER))})
    rows.sort(key=lambda r: (-r["drifts"], r["worst"], r["node"]))
    return {"columns": columns, "rows": rows, "all_ok": len(seen) - len(shown)}


def _fix_lines(d: DriftItem) -> list[str]:
    fix = d.fix or {}
    lines = [*fix.get("commands", []), *fix.get("persist", [])]
    if fix.get("note"):
        lines.append(fix["note"])
    return lines


def _short(text: str, n: int = 110) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _nodes_text(names: list[str], n: int = 8) -> str:
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


def no_drift_line(report: FleetReport) -> str:
    """What an empty drift list means: no node audited, no class with peers to compare (a lone
    node is never 'matching the others'), or every compared class uniform with the lone nodes named."""
    if not report.audited():
        return "none (no node audited)"
    lone = [names[0] for names in report.classes.values() if len(names) == 1]
    if len(lone) == len(report.classes):
        return (f"none found, but nothing was compared: every hardware class has a single node ({_nodes_text(lone)}); "
                "drift needs two or more nodes of one class")
    if lone:
        return (f"none: within every class of two or more nodes, every node matches the others; "
                f"{len(lone)} node(s) alone in their class not compared ({_nodes_text(lone)})")
    return "none: within every class, every node matches the others"


def render_text(report: FleetReport) -> str:
    """Plain-text fleet report: summary, classes, ranked drift with values and fixes, nodes that
    could not be audited, and one line per node with drift or P0/P1 findings."""
    s = report.summary()
    out = [f"infergap fleet audit: {s['nodes']} nodes ({s['audited']} audited, {s['failed']} not audited) "
           f"in {s['classes']} hardware class{'es' if s['classes'] != 1 else ''}, {s['duration_s']:.1f} s",
           f"nodes with P0 findings: {s['nodes_with_P0']} · with P1: {s['nodes_with_P1']} · drift items: {s['drift_items']} "
           f"on {s['drifted_nodes']} node(s) · measurement tolerance {report.tolerance:.0%}", "", "Hardware classes"]
    for k, names in report.classes.items():
        note = "  (one node: no peers to compare)" if len(names) == 1 else ""
        out.append(f"  {len(names):>5} node(s)  {k}{note}")
    out += ["", "Drift (ranked: severity, then nodes touched)"]
    if not report.drift:
        out.append("  " + no_drift_line(report))
    for d in report.drift:
        maj = f"majority ({d.majority['count']} of {d.class_size}): {_short(d.majority['value'])}" if d.majority else \
            f"no majority: the {d.class_size} nodes are split"
        out.append(f"  {d.severity}  {d.kind:<11} {d.key}: {len(d.nodes)} of {d.class_size} node(s): {_nodes_text(d.nodes)}")
        out.append(f"      class: {d.klass}")
        for v in d.values:
            if d.majority is None or v["value"] != d.majority["value"]:
                out.append(f"      {_nodes_text(v['nodes'], 4)}: {_short(v['value'])}")
        out.append(f"      {maj}")
        for ln in _fix_lines(d):
            out.append(f"      fix: {_short(ln, 160)}")
    failed = report.failed()
    if failed:
        out += ["", f"Nodes not audited ({len(failed)})"]
        for n in failed:
            out.append(f"  {n.node.name:<24} {n.state:<12} {n.error or ''}")
    by_node = report.drift_by_node()
    shown = [n for n in report.audited() if by_node.get(n.node.name) or n.counts.get("P0") or n.counts.get("P1")]
    if shown:
        out += ["", "Nodes with drift or P0/P1 findings"]
        for n in shown:
            keys = ", ".join(d.key for d in by_node.get(n.node.name, []))
            out.append(f"  {n.node.name:<24} P0 {n.counts.get('P0', 0)} · P1 {n.counts.get('P1', 0)} · P2 {n.counts.get('P2', 0)}"
                       f"{'  drift: ' + keys if keys else ''}")
        out += ["", *_text_matrix(report, {n.node.name for n in shown})]
    return "\n".join(out) + "\n"


_TEXT_CELL = {"P0": "P0", "P1": "P1", "P2": "P2", "unknown": "?", "expected": "e", "ok": ".", "same": ".",
              "not_applicable": "-", "absent": " ", "drift": "D"}


def _text_matrix(report: FleetReport, names: set[str]) -> list[str]:
    """The node × check matrix for the nodes in ``names``: columns numbered, with a legend."""
    m = matrix(report)
    cols = m["columns"]
    w = max(len(n) for n in names)
    lines = ["Node × check matrix (P0/P1/P2 actionable, ? unknown, e expected, . ok, - not applicable; * drift)",
             " " * (w + 2) + "".join(f"{i + 1:>4}" for i in range(len(cols)))]
    for r in m["rows"]:
        if r["node"] in names:
            lines.append(f"  {r['node']:<{w}}" + "".join(
                f"{_TEXT_CELL.get(r['cells'][c]['cell'], '?') + ('*' if r['cells'][c]['drift'] else ''):>4}" for c in cols))
    lines.append("  columns: " + ", ".join(f"{i + 1} {c}" for i, c in enumerate(cols)))
    return lines


_md = md_escape


def render_md(report: FleetReport) -> str:
    """Markdown fleet report: the text report's sections as tables, plus the node × check matrix."""
    s = report.summary()
    out = ["# infergap fleet audit", "",
           f"{s['nodes']} nodes ({s['audited']} audited, {s['failed']} not audited) in {s['classes']} hardware class(es); "
           f"{s['nodes_with_P0']} with P0 findings, {s['nodes_with_P1']} with P1; {s['drift_items']} drift item(s) on "
           f"{s['drifted_nodes']} node(s); measurement tolerance {report.tolerance:.0%}.", "", "## Hardware classes", "",
           "| nodes | class |", "|---:|---|"]
    out += [f"| {len(v)} | {_md(k)} |" for k, v in report.classes.items()]  # every value through md_escape / md_code
    out += ["", "## Drift", ""]
    if report.drift:
        out += ["| severity | kind | key | nodes | their value | majority | fix |", "|---|---|---|---|---|---|---|"]
        for d in report.drift:
            theirs = "; ".join(f"{_nodes_text(v['nodes'], 4)}: {_short(v['value'], 80)}" for v in d.values
                               if d.majority is None or v["value"] != d.majority["value"])
            maj = f"{_short(d.majority['value'], 80)} ({d.majority['count']} of {d.class_size})" if d.majority else "split"
            out.append(f"| {_md(d.severity)} | {_md(d.kind)} | {md_code(d.key, cell=True)} | {_md(_nodes_text(d.nodes))} | {_md(theirs)} | {_md(maj)} | "
                       f"{_md(' / '.join(_fix_lines(d)))} |")
    else:
        out.append("No drift: " + _md(no_drift_line(report).removeprefix("none: ")) + ".")
    if report.failed():
        out += ["", "## Nodes not audited", "", "| node | state | why |", "|---|---|---|"]
        out += [f"| {_md(n.node.name)} | {_md(n.state)} | {_md(n.error or '')} |" for n in report.failed()]
    m = matrix(report)
    if m["rows"]:
        out += ["", "## Node × check matrix", "", f"{m['all_ok']} check(s) ok on every node are left out. `*` marks drift.", "",
                "| node | " + " | ".join(md_code(c, cell=True) for c in m["columns"]) + " |", "|---|" + "---|" * len(m["columns"])]
        for r in m["rows"]:
            out.append(f"| {_md(r['node'])} | " + " | ".join(
                f"{r['cells'][c]['cell']}{'*' if r['cells'][c]['drift'] else ''}" for c in m["columns"]) + " |")
    return "\n".join(out) + "\n"


def _env() -> jinja2.Environment:
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["short"] = _short
    env.filters["nodes"] = _nodes_text
    return env


def render_html(report: FleetReport) -> str:
    """The fleet report as one self-contained HTML page (UTF-8)."""
    text = (resources.files("infergap") / "data" / "templates" / "fleet.html.j2").read_text(encoding="utf-8")
    by_node = report.drift_by_node()
    details = []
    for n in report.audited():
        act = sorted((c for c in n.checks.values() if c.status == "actionable"), key=lambda c: (c.severity or "P9", c.check))
        if act or by_node.get(n.node.name):
            details.append({"node": n, "actionable": act, "drift": by_node.get(n.node.name, [])})
    return _env().from_string(text).render(r=report, s=report.summary(), m=matrix(report), details=details,
                                           fix_lines=_fix_lines, order=CELL_ORDER, no_drift=no_drift_line(report))


def node_line(n: NodeDigest) -> str:
    """One line per node for progress output."""
    if n.state != "audited":
        return f"{n.node.name}: {n.state} ({n.error})"
    return f"{n.node.name}: audited (P0 {n.counts.get('P0', 0)}, P1 {n.counts.get('P1', 0)})"
