"""Render an :class:`~infergap.synthesis.AuditReport` as terminal text (rich), Markdown or JSON.

The text and Markdown reports have the same sections: a summary line, actionable (ranked, with
commands, persistence and revert), expected (each with why it is not a problem), unknown (what is
missing), confirmed good, and not applicable.
"""

from __future__ import annotations

import io
from typing import Any

from rich.text import Text

from infergap.findings import Finding, Status
from infergap.guard import PlainConsole, dumps, md_code, md_escape, safe_console
from infergap.synthesis import AuditHost, AuditReport

SEV_STYLE = {"P0": "bold red", "P1": "yellow", "P2": "cyan"}


def _count(n_items: int, n_findings: int) -> str:
    """A section's count: the items it lists (the header line says once how many findings they
    stand for, so every count of the report is in one unit)."""
    return str(n_items)


def summary_line(r: AuditReport, grouped: bool = False) -> str:
    """One line: counts per group and actionable per severity. ``grouped``: the report lists
    findings grouped (:func:`group_findings`), so every count is of the items listed (severities
    too) and, when grouping merged findings, the line says so once with the findings' total (it
    mixed '10 items (17 findings) actionable (P0 0, P1 15, …)' with a list of 10)."""
    c = r.summary["counts"]
    s = dict(r.summary["actionable_by_severity"])
    n = {st.value: c[st.value] for st in Status}
    if grouped:
        for st in Status:
            if st is not Status.not_applicable:
                n[st.value] = len(group_findings(r.by_status(st)))
        listed, folded = unknown_items(r)
        n["unknown"] = len(listed) + bool(folded) + len(group_findings([f for f in r.by_status(Status.unknown) if f.id == "evidence.unmatched"]))
        groups = group_findings(r.by_status(Status.actionable))
        s = {k: sum(1 for f, _ in groups if f.severity and f.severity.value == k) for k in ("P0", "P1", "P2")}
    parts = [f"{n['actionable']} actionable (P0 {s['P0']}, P1 {s['P1']}, P2 {s['P2']})", f"{n['expected']} expected",
             f"{n['unknown']} unknown", f"{n['ok']} ok", f"{c['not_applicable']} not applicable"]
    if r.summary.get("evidence_unmatched"):
        parts[2] += f" ({r.summary['evidence_unmatched']} pasted part(s) with no known cause)"
    errs = r.summary.get("investigator_errors") or []
    read = r.summary.get("read_s")
    line = " · ".join(parts)
    total, listed = sum(c.values()), sum(n.values())
    if grouped and listed != total:
        line = f"items listed: {line} ({total} findings grouped: one item per check and result across the devices it shares)"
    line += " — " + (f"input read in {read:.2f} s, " if isinstance(read, (int, float)) else "") \
        + f"{len(r.investigators)} investigators in {r.summary['duration_s']:.2f} s"
    if errs:
        line += f" ({len(errs)} failed: {', '.join(errs)})"
    return line


def group_findings(fs: list[Finding]) -> list[tuple[Finding, list[Finding]]]:
    """Group findings that say the same thing about several subjects (one line for 8 GPUs with the
    same MaxReadReq): key = check id, status, severity, fix kind and the title without the
    subject. Order of first appearance is kept. Returns (representative, members)."""
    groups: dict[tuple, list[Finding]] = {}
    for f in fs:
        title = f.title.replace(f"GPU {f.subject}: ", "").replace(f"Bridge {f.subject}: ", "") if f.subject else f.title
        key = (f.id, f.status, f.severity, f.fix_kind, title)
        groups.setdefault(key, []).append(f)
    return [(members[0], members) for members in groups.values()]


#: Fewer 'not captured' unknowns than this are listed one by one; from this many on (a pasted
#: nvidia-smi output leaves 25 host checks without input) they are one line naming their ids.
FOLD_UNCAPTURED = 8


def unknown_items(r: AuditReport) -> tuple[list[tuple[Finding, list[Finding]]], list[Finding]]:
    """The UNKNOWN section's items: (groups listed one by one, the findings folded into one line
    because the input held nothing for them — at least :data:`FOLD_UNCAPTURED` 'not captured'
    unknowns; else that list is empty). Pasted-part findings (``evidence.unmatched``) are left
    out: they have their own section."""
    unk = [f for f in r.by_status(Status.unknown) if f.id != "evidence.unmatched"]
    folded = [f for f in unk if "not captured" in f.title]
    if len(folded) < FOLD_UNCAPTURED:
        folded = []
    return group_findings([f for f in unk if f not in folded]), folded


def _label(rep: Finding, members: list[Finding]) -> str:
    """``id [subject]`` or ``id [N subjects: a, b, …]`` and the title without the subject."""
    if len(members) == 1:
        return f"{rep.id}" + (f" [{rep.subject}]" if rep.subject else "") + f" — {rep.title}"
    subs = [m.subject or "" for m in members]
    shown = ", ".join(subs[:3]) + (", …" if len(subs) > 3 else "")
    title = rep.title.replace(f"GPU {rep.subject}: ", "").replace(f"Bridge {rep.subject}: ", "")
    return f"{rep.id} [{len(members)}×: {shown}] — {title}"


def _ev(f: Finding, limit: int = 3) -> str:
    return "; ".join(f"{e.value} [{e.source}]" for e in f.evidence[:limit])


def render_json(r: AuditReport) -> str:
    """The contract JSON, indented."""
    return dumps(r.to_json(), indent=2, ensure_ascii=False)


def render_text(r: AuditReport, width: int | None = None, color: bool = False) -> str:
    """The report for a terminal (colour when ``color``; wrapped at ``width`` columns when given)
    or for a pipe or file (plain, one line per item, never wrapped mid-phrase). Every string
    printed, values from inputs included, is made terminal-safe by the console
    (:func:`~infergap.guard.safe_console`, or :class:`~infergap.guard.PlainConsole` for a pipe or
    file: the same text without Rich's cost)."""
    buf = io.StringIO()
    con = PlainConsole(buf) if width is None and not color else safe_console(
        file=buf, width=width or 1000, force_terminal=color, no_color=not color, highlight=False,
        soft_wrap=width is None, markup=False, emoji=False)
    _text_header(con, r)
    con.print(Text(summary_line(r, grouped=True), style="bold"))

    unmatched = r.get("evidence.unmatched")
    if unmatched:
        con.print()
        con.print(Text(f"READ, NO KNOWN CAUSE: {len(unmatched)} (pasted input this report names no cause for)", style="bold"))
        for f in unmatched:
            con.print(f"  ? {f.subject}: {f.title}")
            if f.impact:
                con.print(f"      {f.impact}")
    _text_actionable(con, r.by_status(Status.actionable))
    exp = r.by_status(Status.expected)
    if exp:
        con.print()
        groups = group_findings(exp)
        con.print(Text(f"EXPECTED: {_count(len(groups), len(exp))} (looks wrong, is not — no action)", style="bold"))
        for f, members in groups:
            con.print(f"  • {_label(f, members)}")
            if f.impact:
                con.print(f"      {f.impact}")
    groups, uncaptured = unknown_items(r)
    if groups or uncaptured:
        con.print()
        more = " more" if unmatched else ""
        con.print(Text(f"UNKNOWN: {len(groups) + bool(uncaptured)}{more} (evidence missing or unreadable)", style="bold"))
        if uncaptured:
            ids = ", ".join(dict.fromkeys(f.id for f in uncaptured))
            con.print(f"  ? {len(uncaptured)} checks not captured by the input given: {ids} — 'infergap collect' on the "
                      "host captures what all of them read ('infergap audit -f json' names what each one needs)")
        for f, members in groups:
            con.print(f"  ? {_label(f, members)}" + (f": {f.impact}" if f.impact else ""))
    ok = r.by_status(Status.ok)
    if ok:
        con.print()
        groups = group_findings(ok)
        con.print(Text(f"CONFIRMED GOOD: {_count(len(groups), len(ok))}", style="bold"))
        for f, members in groups:
            con.print(f"  ✓ {_label(f, members)}")
    na = r.by_status(Status.not_applicable)
    if na:
        con.print()
        con.print(Text(f"NOT APPLICABLE: {len(na)}", style="bold"))
        for f in na:
            con.print(f"  - {f.id} — {f.title}")
    errs = [i for i in r.investigators if i.error]
    if errs:
        con.print()
        con.print(Text("INVESTIGATOR ERRORS", style="bold red"))
        for i in errs:
            con.print(f"  ! {i.name}: {i.error}")
    return buf.getvalue()


def _text_header(con: Any, r: AuditReport) -> None:
    """The text report's first lines: the snapshot's label and what the host is (GPUs, CPU,
    kernel, driver, container, VM)."""
    h = r.host
    con.print(Text(f"infergap audit — {h.snapshot.label if h.snapshot else ''}", style="bold"))
    con.print(host_line(h))


def host_line(h: AuditHost) -> str:
    """What the host is, in one line (GPUs, CPU, kernel, driver, container, VM), leaving out what
    the input did not show (an evidence-only audit has no kernel: never the word "None")."""
    desc = [h.gpu_summary or "", h.cpu or "", f"kernel {h.kernel}" if h.kernel else ""]
    if h.driver:
        desc.append(f"driver {h.driver}" + (f" / CUDA {h.cuda_driver}" if h.cuda_driver else ""))
    if h.container:
        desc.append(f"inside {h.container} container")
    if h.virtualization:
        desc.append(f"VM ({h.virtualization})")
    return " · ".join(d for d in desc if d)


def _text_actionable(con: Any, act: list[Finding]) -> None:
    """The ACTIONABLE section: grouped findings ranked, each with evidence, why, note and the
    fix, persist and revert commands of all its members (each once)."""
    if act:
        con.print()
        groups = group_findings(act)
        con.print(Text(f"ACTIONABLE: {_count(len(groups), len(act))} (ranked: severity, then runtime → software → reboot → BIOS/hardware)", style="bold"))
        for i, (f, members) in enumerate(groups, 1):
            sev = f.severity.value if f.severity else ""
            hc = " [host]" if f.remedy and f.remedy.host_controlled else ""
            head = Text(f"{i:>2}. ")
            head.append(f"{sev} {f.fix_kind.value if f.fix_kind else ''}{hc}", style=SEV_STYLE.get(sev, ""))
            head.append(f"  {_label(f, members)}")
            con.print(head)
            con.print(f"      evidence: {_ev(f)}" + (f"; expected {f.expected_value}" if f.expected_value else ""))
            if f.impact:
                con.print(f"      why: {f.impact}")
            if f.remedy and f.remedy.note:
                con.print(f"      note: {f.remedy.note}")
            for kind in ("commands", "persist", "revert"):
                seen: list[str] = []
                for m in members:
                    for c in getattr(m.remedy, kind) if m.remedy else []:
                        if c not in seen:
                            seen.append(c)
                for c in seen:
                    con.print(f"      {'fix' if kind == 'commands' else kind}: {c}")


_md_escape = md_escape


_code = md_code


def render_md(r: AuditReport) -> str:
    """The report as GitHub-flavoured Markdown."""
    h = r.host
    lines = [f"# infergap audit — {md_escape(h.snapshot.label if h.snapshot else '')}", "",
             md_escape(host_line(h)), "", f"**{summary_line(r)}**", ""]
    act = r.by_status(Status.actionable)
    if act:
        lines += ["## Actionable", "", "| # | severity | fix | check | finding | evidence | fix command |", "|---|---|---|---|---|---|---|"]
        for i, f in enumerate(act, 1):
            cmd = "<br>".join(_md_escape(c) for c in (f.remedy.commands if f.remedy else [])) or (_md_escape(f.remedy.note) if f.remedy and f.remedy.note else "")
            hc = " (host)" if f.remedy and f.remedy.host_controlled else ""
            lines.append(f"| {i} | {f.severity.value if f.severity else ''} | {f.fix_kind.value if f.fix_kind else ''}{hc} | {md_code(f.id, cell=True)}{' ' + md_escape(f.subject) if f.subject else ''} | {_md_escape(f.title)} | {_md_escape(_ev(f, 2))} | {cmd} |")
        lines.append("")
        lines += ["### Revert", ""]
        for f in act:
            if f.remedy and f.remedy.revert:
                lines.append(f"- {md_code(f.id)}{' ' + md_escape(f.subject) if f.subject else ''}: " + "; ".join(_code(c) for c in f.remedy.revert))
        lines.append("")
    for title, st in (("Expected (negative knowledge)", Status.expected), ("Unknown", Status.unknown), ("Confirmed good", Status.ok), ("Not applicable", Status.not_applicable)):
        fs = r.by_status(st)
        if not fs:
            continue
        lines += [f"## {title}", ""]
        for f in fs:
            extra = f" — {f.impact}" if f.impact and st in (Status.expected, Status.unknown, Status.not_applicable) else ""
            lines.append(f"- {md_code(f.id)}{' ' + md_escape(f.subject) if f.subject else ''}: {_md_escape(f.title)}{_md_escape(extra)}")
        lines.append("")
    errs = [i for i in r.investigators if i.error]
    if errs:
        lines += ["## Investigator errors", ""] + [f"- {i.name}: {md_escape(i.error)}" for i in errs] + [""]
    return "\n".join(lines)
