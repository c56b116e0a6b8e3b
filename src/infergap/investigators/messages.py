"""The components' own messages (``data/messages``) matched on every line of every evidence part,
joined to the audit's findings after every investigator ran (:func:`join_messages`).

A matched message is never silent and never ok:

- a message whose catalog entry names a check feeds that check: its lines are added as evidence
  to the check's actionable finding; an ``ok`` (or ``unknown``) finding of the check is
  contradicted by a warning or error message, and becomes actionable with the message as evidence
  (the component's own statement outweighs a reading that found nothing wrong); with no finding
  of the check, one is made from the message. So an engine warning that restates a host finding
  (vLLM's ``Too many open files`` → ``limits.nofile``, NCCL's ``/dev/shm`` failure →
  ``container.shm``) is listed with that finding, not apart.
- a message without a check is explained on its own (``evidence.message``): what the component
  said, what it means, where upstream it is printed, and the command that tells more. A line an
  actionable finding already cites gets the explanation in that finding's details instead.

An entry without a curated check may still feed one: ``data/message_routes.yaml`` routes it by its
class, component, level and template (:mod:`infergap.messages.routes`) with the severity of its
level (error/fatal P1, warning P2, never P0); its finding says which rule routed it.

Severity of a message that feeds a check: the entry's own (curated) severity; else the check's;
else P1 for an error or fatal message and P2 for a warning. A message without a check is
``unknown`` (explained, its cause on the host not established: the evidence accounting still lists
its paste as read with no known cause) unless its entry carries a curated severity.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from infergap import checks
from infergap.checks import finding
from infergap.findings import Finding, Remedy, Severity, Status, ev
from infergap.investigators.evidence_files import MESSAGE_CHECK
from infergap.messages import LABELS, Message, MessageMatch
from infergap.messages.routes import routes

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.evidence.recognize import EvidencePart
    from infergap.facts import Facts

#: Example lines kept per message and part.
EXAMPLES = 3
#: Messages without a check explained one finding each per part; beyond this, one summary.
MAX_EXPLAINED = 40
_LOUD = ("fatal", "error", "warn")
#: Parts a check's own investigator reads line by line: a catalog message of that check in such a
#: part is already its evidence (the kernel log's Xid lines are tallied per kind by gpu.xid).
READ_BY_OWNER = {"gpu.xid": ("dmesg",)}
_QUIET_CLASSES = ("informational", "internal")


def _severity(m: Message) -> Severity:
    if m.severity:
        return Severity(m.severity)
    c = checks.get(m.check) if m.check else None
    if c is not None and c.severity:
        return Severity(c.severity)
    return Severity.P1 if m.level in ("fatal", "error") else Severity.P2


def _literal(mm: MessageMatch) -> int:
    """Characters of the line the template itself matched (its captured values left out)."""
    return (mm.span[1] - mm.span[0]) - sum(len(v or "") for v in mm.captures.values())


def _wrappers(matches: list[MessageMatch]) -> set[int]:
    """Indices of matches that only wrap a more specific one on the same line: a generic template
    (``CUDA error: %s``, printed in those words by several components) whose span holds another
    match with more literal text, and which feeds no check. The specific message explains the line."""
    by_line: dict[int, list[int]] = defaultdict(list)
    for i, mm in enumerate(matches):
        by_line[mm.line_no].append(i)
    out = set()
    for idx in by_line.values():
        for i in idx:
            a = matches[i]
            if a.message.check is None and any(
                    j != i and a.span[0] <= matches[j].span[0] and matches[j].span[1] <= a.span[1] and _literal(matches[j]) > _literal(a)
                    for j in idx):
                out.add(i)
    return out


def _grouped(facts: Facts) -> list[tuple[Any, Message, list[MessageMatch]]]:
    """(part, message, its matches) for every part, in part then first-line order; a match that
    only wraps a more specific one on its line is left out (:func:`_wrappers`)."""
    out = []
    for part, matches in facts.message_matches():
        by: dict[str, list[MessageMatch]] = defaultdict(list)
        drop = _wrappers(matches)
        for i, mm in enumerate(matches):
            if i not in drop:
                by[mm.message.id].append(mm)
        out += [(part, ms[0].message, ms) for ms in by.values()]
    return out


def _lines(label: str, ms: list[MessageMatch]) -> list[Any]:
    out = [ev(label, f"line {m.line_no}: {m.line.strip()}") for m in ms[:EXAMPLES]]
    if len(ms) > EXAMPLES:
        out.append(ev(label, f"{len(ms)} matching line(s)"))
    return out


def _said(m: Message, ms: list[MessageMatch]) -> str:
    who = " or ".join(LABELS.get(c, c) for c in (m.component, *ms[0].alike))
    return f"{who} {m.level}: {ms[0].text.strip()[:200]}"


def _note(m: Message) -> str:
    return f"Tells more: {m.more}" if m.more else f"Printed by {m.source}"


def _record(m: Message, ms: list[MessageMatch]) -> dict[str, Any]:
    rec = {"id": m.id, "lines": len(ms), "meaning": m.meaning, "source": m.source}
    return rec | ({"route": m.route} if m.route else {})


def _meaning(m: Message) -> str:
    """The entry's meaning, and for a routed entry why its class leads to its check."""
    if not m.route:
        return m.meaning
    why = routes().by_id(m.route).why
    return f"{m.meaning} Read as {m.check} evidence (class {m.cls}, rule '{m.route}' of data/message_routes.yaml: {why})"


def _feed(findings: list[Finding], part: EvidencePart, m: Message, ms: list[MessageMatch]) -> Finding | None:
    """Join a message with a check to that check's findings; a new finding when it has none to join."""
    assert m.check is not None
    if part.kind in READ_BY_OWNER.get(m.check, ()):
        return None  # the check's own reader parsed this part (an Xid line of a kernel log)
    own = [f for f in findings if f.id == m.check]
    loud = m.level in _LOUD or bool(m.severity)
    rec = _record(m, ms)
    target = next((f for f in own if f.status == Status.actionable), None)
    if target is None and not loud:
        target = next((f for f in own if f.status in (Status.ok, Status.expected, Status.unknown)), None)
    if target is None and loud:
        target = next((f for f in own if f.status == Status.expected), None)
    if target is not None:
        if not any(e.source == part.label for e in target.evidence):  # its owner read this part: its lines are there already
            target.evidence.extend(_lines(part.label, ms))
        target.details.setdefault("messages", []).append(rec)
        return None
    weaker = next((f for f in own if f.status in (Status.ok, Status.unknown)), None)
    status = Status.actionable if loud else Status.unknown
    impact = _meaning(m)
    if weaker is not None and loud:
        impact += (f" This contradicts '{weaker.title}' (ok), read from weaker evidence: the component itself reported the problem."
                   if weaker.status == Status.ok else f" The check had no evidence of its own ('{weaker.title}'); this message is its evidence.")
    new = finding(m.check, status, _said(m, ms), subject=weaker.subject if weaker else part.label,
                  evidence_=(list(weaker.evidence) if weaker else []) + _lines(part.label, ms),
                  severity=_severity(m) if loud else None, impact=impact, remedy=Remedy(note=_note(m)),
                  references=[m.source], details={"messages": [rec]} | ({"contradicts": weaker.status.value} if weaker else {}))
    if weaker is not None and loud:
        findings.remove(weaker)
    return new


def _cited_by(findings: list[Finding], part: EvidencePart, ms: list[MessageMatch]) -> Finding | None:
    """The actionable finding that already cites one of these lines (same text in its evidence)."""
    texts = {m.line.strip() for m in ms}
    for f in findings:
        if f.status == Status.actionable and any(e.value and any(e.value in t or t in e.value for t in texts)
                                                 for e in f.evidence if len(e.value) >= 12):
            return f
    return None


def _explain(part: EvidencePart, m: Message, ms: list[MessageMatch]) -> Finding:
    """``evidence.message`` of a message without a check: what was said, what it means, what tells more."""
    act = bool(m.severity) and m.level in _LOUD  # a person judged it; else explained, the cause left open
    return finding(MESSAGE_CHECK, Status.actionable if act else Status.unknown, _said(m, ms), subject=part.label,
                   evidence_=_lines(part.label, ms), severity=_severity(m) if act else None,
                   impact=f"{m.meaning} (class {m.cls}; printed by {m.source})", remedy=Remedy(note=_note(m)),
                   references=[m.source], details={"messages": [_record(m, ms)], "class": m.cls})


def _summary(part: EvidencePart, rest: list[tuple[Message, list[MessageMatch]]]) -> Finding:
    n = sum(len(ms) for _m, ms in rest)
    return finding(MESSAGE_CHECK, Status.unknown, f"{len(rest)} more recognised message(s) ({n} line(s))",
                   subject=part.label, evidence_=[ev(part.label, f"{m.id}: {m.meaning}") for m, _ms in rest[:10]],
                   impact="Further component messages matched the catalog; each is listed in details with its meaning and source.",
                   details={"messages": [_record(m, ms) for m, ms in rest]})


#: Checks that do not apply to a vLLM log of its CPU build (``device_config=cpu`` in the engine
#: config line): it has no CUDA graphs, so "Enforce eager set, disabling … CUDAGraphs" loses none.
NOT_ON_CPU = frozenset({"engine.cuda_graph"})


def _cpu_parts(facts: Facts) -> set[str]:
    """Labels of the evidence parts that are logs of vLLM's CPU build."""
    logs = facts.engine_logs() if hasattr(facts, "engine_logs") else []
    return {part.label for part, f in logs if str(f.args.get("device_config", "")).lower() == "cpu"}


def join_messages(facts: Facts, findings: list[Finding], owners: set[str] | None = None) -> list[Finding]:
    """``findings`` with every catalog message of every evidence part joined in (see the module
    docstring); returns the new list (joined findings are changed in place). Run after every
    investigator, before the evidence accounting (:func:`~infergap.investigators.evidence_files.unmatched`).
    A message whose check does not apply to the part (:data:`NOT_ON_CPU`) is explained, not joined.
    ``owners``: the investigators that ran when not all did; a message of a check another
    investigator owns is then left out (that investigator's reading of the part is missing too)."""
    out = list(findings)
    explained: dict[str, list[tuple[Message, list[MessageMatch]]]] = defaultdict(list)
    parts = {}
    cpu = _cpu_parts(facts)
    for part, m, ms in _grouped(facts):
        if m.check in NOT_ON_CPU and part.label in cpu:
            m = dataclasses.replace(m, check=None, severity=None, cls="informational",
                                    meaning=m.meaning + " On vLLM's CPU build (device_config=cpu) there are no CUDA graphs to lose.")
        if m.check:
            if owners is not None and checks.get(m.check).investigator not in owners:
                continue
            new = _feed(out, part, m, ms)
            if new is not None:
                out.append(new)
            continue
        cited = _cited_by(out, part, ms)
        if cited is not None:
            cited.details.setdefault("messages", []).append(_record(m, ms))
            continue
        explained[part.label].append((m, ms))
        parts[part.label] = part
    for label, items in explained.items():
        items.sort(key=lambda x: (x[0].level not in _LOUD, x[0].cls in _QUIET_CLASSES, x[1][0].line_no))
        out += [_explain(parts[label], m, ms) for m, ms in items[:MAX_EXPLAINED]]
        if len(items) > MAX_EXPLAINED:
            out.append(_summary(parts[label], items[MAX_EXPLAINED:]))
    return out
