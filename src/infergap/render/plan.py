"""Render a :class:`~infergap.plan.Plan`: terminal text (rich), Markdown, JSON."""

from __future__ import annotations

import io
from typing import Any

from rich.markup import escape
from rich.table import Table

from infergap.guard import dumps, md_code, md_escape, safe_console
from infergap.plan import TIER_LABEL, Plan, PlanItem
from infergap.plan.build import HostFix, Unknown



def _no_actions_why(plan: Plan) -> str:
    """Why the plan has no top action, so an empty list never reads as a clean bill of health."""
    why = "the facts at hand"
    if plan.unknowns:
        why += f"; {len(plan.unknowns)} unknown fact(s) below could change that"
    return why + "."

def render_json(plan: Plan) -> str:
    """The ``infergap.plan/1`` JSON document."""
    return dumps(plan.to_json_dict(), indent=2, ensure_ascii=False) + "\n"


def _gain(x: PlanItem) -> str:
    if not x.gain:
        return ""
    lo, hi = x.gain
    return f"×{lo:g}–{hi:g} {x.metric}, about {x.effort_h:g} h of work to try"


def _decides(u: Unknown, shown: int = 3) -> str:
    """What settling an unknown fact would decide, in the levers' titles: the first ``shown``,
    then how many more (the ids stay in the JSON's ``decides``)."""
    titles = u.decides_titles or u.decides
    more = len(titles) - shown
    n = f"{len(titles)} change{'s' if len(titles) != 1 else ''}"
    return f"would decide {n}: " + "; ".join(titles[:shown]) + (f"; and {more} more" if more > 0 else "")


def render_text(plan: Plan, color: bool = False, width: int | None = None) -> str:
    """Terminal report: gap, host fixes, levers by tier (with evidence chains), will-not-help,
    unknowns. Lines are wrapped at ``width`` columns when given (a terminal), never when ``None``
    (a file or a pipe: a shell command stays on one line)."""
    buf = io.StringIO()
    c = safe_console(file=buf, force_terminal=color, no_color=not color, width=width or 1000, highlight=False, soft_wrap=width is None,
                     markup=True)  # every value below goes through rich.markup.escape
    c.print("[bold]infergap plan[/]  " + escape("  ".join(s.text() for s in plan.stages)))
    c.print()
    if plan.failure_lines():
        c.print("[bold]FAILED REQUESTS[/]")
        for line in plan.failure_lines():
            c.print(escape("  " + line))
        c.print()
    _text_gap(c, plan)
    c.print()
    if plan.top_actions:
        c.print("[bold]TOP ACTIONS[/]")
        for i, a in enumerate(plan.top_actions, 1):
            c.print(escape(f" {i}. {a}"))
    else:
        c.print("[bold]TOP ACTIONS[/]: none selected by " + escape(_no_actions_why(plan)))
    for note in (plan.url_note, plan.log_note):
        if note:
            c.print(escape(f"  note: {note}"))
    c.print()
    _text_host_fixes(c, plan)
    for tier in ("flag_flip", "small_change", "engineering"):
        items = plan.tier(tier)
        c.print()
        c.print(f"[bold]{TIER_LABEL[tier].upper()}[/] ({len(items)})")
        for x in items:
            c.print(escape(f"  • {x.title}  [{x.id}]"))
            c.print(escape(f"      because: {' ∧ '.join(x.selected_by)}"))
            for a in x.actions:
                c.print(escape(f"      do: {a}"))
            c.print(escape(f"      expect: {_gain(x)} — {x.source}"))
            c.print(escape(f"      risk: {x.risk}"))
            c.print(escape(f"      verify: {x.verify}"))
            c.print(escape(f"      undo: {x.undo}"))
            if x.measured:
                c.print(escape(f"      measured: {x.measured}"))
        if not items:
            c.print("  none selected by the facts at hand")
    c.print()
    c.print(f"[bold]WILL NOT HELP[/] ({len(plan.wont_help)})")
    for x in plan.wont_help:
        c.print(escape(f"  • {x.title}  [{x.id}]"))
        c.print(escape(f"      why: {x.why}"))
        c.print(escape(f"      because: {' ∧ '.join(x.selected_by)}"))
    if plan.tried:
        c.print()
        c.print(f"[bold]TRIED — WON'T HELP[/] ({len(plan.tried)}: measured by infergap tune on this host, engine version and model)")
        for t in plan.tried:
            c.print(escape(f"  • {t.title}  [{t.id}]"))
            c.print(escape(f"      {t.verdict}: {t.setting} — {t.measurement} (tune run {t.tune_run}, {t.created_at})"))
    if plan.helped:
        c.print()
        c.print(f"[bold]TRIED — HELPED[/] ({len(plan.helped)}: measured by infergap tune on this host, engine version and model; "
                "not selected by the facts at hand)")
        for t in plan.helped:
            c.print(escape(f"  • {t.title}  [{t.id}]"))
            c.print(escape(f"      helps: {t.setting} — {t.measurement} (tune run {t.tune_run}, {t.created_at})"))
    c.print()
    c.print(f"[bold]UNKNOWN[/] ({len(plan.unknowns)})")
    for u in plan.unknowns:
        c.print(escape(f"  • {(u.question or u.fact)[:1].upper()}{(u.question or u.fact)[1:]}  [{u.fact}]"))
        c.print(escape(f"      {_decides(u)}"))
        c.print(escape(f"      find out: {u.command}"))
    c.print()
    c.print("[dim]ranking: " + escape(plan.ranking) + "[/]")
    return buf.getvalue()


def _text_gap(c: Any, plan: Plan) -> None:
    """The EFFICIENCY GAP section: summary, what binds, headline bounds and the per-point table,
    or why there is nothing to compare."""
    c.print("[bold]EFFICIENCY GAP[/]")
    g = plan.gap
    if g.summary:
        c.print(escape("  " + g.summary))
    if g.binds:
        c.print(escape("  binds: " + g.binds))
    if g.headline:
        for h in g.headline:
            c.print(escape(f"    {h['label']:<28} {h['bound_tok_s']:>9.1f} tok/s   measured {h['measured_tok_s']:.2f} = {h['ratio']:.2%}"))
    if g.points:
        bounded = any(p.bound_tok_s for p in g.points)  # without any bound, only what was measured
        cols = ("concurrency", "measured tok/s", "bound tok/s", "bound", "binds", "efficiency", "note") if bounded \
            else ("concurrency", "measured tok/s", "note")
        t = Table(show_edge=False, pad_edge=False, box=None)
        for col in cols:
            t.add_column(col, justify="right" if col in ("concurrency", "measured tok/s", "bound tok/s", "efficiency") else "left")
        for p in g.points:
            row = [str(p.concurrency), f"{p.measured_tok_s:.2f}", f"{p.bound_tok_s:.1f}" if p.bound_tok_s else "–", p.bound or "–",
                   p.binds or "–", f"{p.ratio:.1%}" if p.ratio else "–", p.note or ""]
            t.add_row(*map(escape, row if bounded else row[:2] + row[-1:]))
        c.print(t)
    if not g.points and not g.headline:
        given = {s.name for s in plan.stages if s.status not in ("missing", "failed")}
        if "bench" not in given:
            c.print("  no bench result: run infergap bench (or infergap doctor) to measure the gap")
        else:
            c.print("  the bench given has no measured point to set against a bound (every point failed or was excluded)")


def _text_host_fixes(c: Any, plan: Plan) -> None:
    """The HOST FIXES section: each actionable finding with its first commands and its revert."""
    c.print(f"[bold]HOST FIXES[/] ({len(plan.host_fixes)}, from the audit: runtime first, P0 first)")
    for h in plan.host_fixes:
        c.print(escape(f"  {h.severity} {h.fix_kind:<8} {h.id} — {h.title}"))
        for cmd in h.commands[:2]:
            c.print(escape(f"      fix: {cmd}"))
        if len(h.commands) > 2:
            c.print(escape(f"      (+{len(h.commands) - 2} more commands)"))
        for cmd in h.revert[:1]:
            c.print(escape(f"      revert: {cmd}"))
    if not plan.host_fixes:
        c.print("  none" + ("" if any(s.name == "audit" and s.status in ("given", "ran", "partial") for s in plan.stages) else " (no audit)"))


def _md_host_fix(h: HostFix) -> str:
    return (f"- **{md_escape(h.severity)} {md_escape(h.fix_kind)}** {md_code(h.id)} — {md_escape(h.title)}"
            + (f"  \n  fix: {md_code(h.commands[0])}" if h.commands else "")
            + (f"  \n  revert: {md_code(h.revert[0])}" if h.revert else ""))


def _md_item(x: PlanItem) -> list[str]:
    e = md_escape
    return [f"### {e(x.title)} ({md_code(x.id)})", "", "- because: " + e("; ".join(x.selected_by)),
            *[f"- do: {md_code(a)}" for a in x.actions], f"- expect: {e(_gain(x))} — {e(x.source)}",
            f"- risk: {e(x.risk)}", f"- verify: {md_code(x.verify)}", f"- undo: {e(x.undo)}",
            *([f"- measured: {e(x.measured)}"] if x.measured else []), ""]


def _md_gap(plan: Plan) -> list[str]:
    e = md_escape
    out: list[str] = []
    g = plan.gap
    if g.summary:
        out.append(e(g.summary) + ".")
    if g.binds:
        out += ["", f"What binds: {e(g.binds)}."]
    if g.headline:
        out += ["", "| bound | tok/s | measured | efficiency |", "|---|---:|---:|---:|"]
        out += [f"| {e(h['label'])} | {h['bound_tok_s']:.1f} | {h['measured_tok_s']:.2f} | {h['ratio']:.2%} |" for h in g.headline]
    if g.points and not any(p.bound_tok_s for p in g.points):  # without any bound, only what was measured
        out += ["", "| concurrency | measured tok/s | note |", "|---:|---:|---|"]
        out += [f"| {p.concurrency} | {p.measured_tok_s:.2f} | {e(p.note or '')} |" for p in g.points]
    elif g.points:
        out += ["", "| concurrency | measured tok/s | bound tok/s | binds | efficiency | note |", "|---:|---:|---:|---|---:|---|"]
        out += [f"| {p.concurrency} | {p.measured_tok_s:.2f} | {p.bound_tok_s:.1f} | {e(p.binds or '–')} | {p.ratio:.1%} | {e(p.note or '')} |"
                if p.bound_tok_s and p.ratio else f"| {p.concurrency} | {p.measured_tok_s:.2f} | – | – | – | {e(p.note or '')} |" for p in g.points]
    return out


def render_markdown(plan: Plan) -> str:
    """Markdown report with the same sections as the text report; every value goes through
    :func:`infergap.guard.md_escape` or :func:`~infergap.guard.md_code`."""
    e = md_escape
    out = ["# infergap plan", ""]
    out.append("Inputs: " + e("; ".join(s.text(" ") for s in plan.stages)))
    if plan.failure_lines():
        out += ["", "## Failed requests", ""] + [f"- **{e(x)}**" for x in plan.failure_lines()]
    out += ["", "## Efficiency gap", ""] + _md_gap(plan)
    out += ["", "## Top actions", ""] + ([f"{i}. {e(a)}" for i, a in enumerate(plan.top_actions, 1)]
                                         or [e("None selected by " + _no_actions_why(plan))])
    for note in (plan.url_note, plan.log_note):
        if note:
            out += ["", f"Note: {e(note)}."]
    out += ["", "## Host fixes (runtime first, P0 first)", ""] + [_md_host_fix(h) for h in plan.host_fixes]
    if not plan.host_fixes:
        out.append("None.")
    for tier in ("flag_flip", "small_change", "engineering"):
        out += ["", f"## {TIER_LABEL[tier]}", ""]
        items = plan.tier(tier)
        for x in items:
            out += _md_item(x)
        if not items:
            out.append("None selected by the facts at hand.")
    out += ["", "## Will not help", ""]
    for x in plan.wont_help:
        out.append(f"- **{e(x.title)}** ({md_code(x.id)}): {e(x.why)}  \n  because: {e('; '.join(x.selected_by))}")
    if plan.tried:
        out += ["", "## Tried — won't help", "", "Measured by `infergap tune` on this host, engine version and model.", ""]
        for t in plan.tried:
            out.append(f"- **{e(t.title)}** ({md_code(t.id)}): {e(t.verdict)} with {md_code(t.setting)} — {e(t.measurement)} "
                       f"(tune run {t.tune_run}, {e(t.created_at)})")
    if plan.helped:
        out += ["", "## Tried — helped", "", "Measured by `infergap tune` on this host, engine version and model; not selected by the facts at hand.", ""]
        for t in plan.helped:
            out.append(f"- **{e(t.title)}** ({md_code(t.id)}): helps with {md_code(t.setting)} — {e(t.measurement)} "
                       f"(tune run {t.tune_run}, {e(t.created_at)})")
    out += ["", "## Unknown", ""]
    for u in plan.unknowns:
        q = u.question or u.fact
        out.append(f"- {e(q[:1].upper() + q[1:])} ({md_code(u.fact)}): {e(_decides(u, shown=len(u.decides)))} — find out: {md_code(u.command)}")
    out += ["", f"_Ranking: {e(plan.ranking)}_", ""]
    return "\n".join(out)
