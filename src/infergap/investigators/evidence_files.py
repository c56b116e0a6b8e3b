"""Evidence files as such: each unrecognised file (or stretch of one) becomes an
``evidence.unrecognized`` finding with status unknown, so the report says what was ignored; every
recognised part is matched against the catalog of failure signatures
(``infergap/data/signatures.yaml``), and a pasted kernel log gives ``gpu.xid`` and ``pcie.aer``.
A host audited itself (live or a snapshot), with an NVIDIA GPU and no pasted kernel log, has its
own kernel log's GPU and PCIe lines read the same way (``cmds/kernel_log``); ``gpu.xid`` is ok only
over lines that were read, and unknown when the log was not captured or could not be read.

Severity model: each signature's finding carries the severity, fix kind, fix and revert of its
catalog entry, with the entry's public sources as references. Xid events are grouped by kind
(the catalog's ``xid.*`` entries: memory, NVLink, PCIe bus, firmware, the driver's recovery
action, the application, power), one ``gpu.xid`` finding per kind with its events counted per
GPU; each code's row (from NVIDIA's Xid catalog) gives its severity and whether the GPU needs a
reset, and a kind's finding takes the severity of its worst event (a non-fatal or informational
Xid never raises P0). An Xid the catalog does not hold is its own P1 finding naming the code. An
uncorrected PCIe error is P0 (hardware: reseat, power, riser, slot, RMA); corrected AER errors
alone P2 (a marginal link that retrains).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from infergap import checks
from infergap.checks import finding, unknown
from infergap.evidence.recognize import KINDS
from infergap.evidence.signatures import Signature, SignatureHit, XidCode, catalog, xid_code
from infergap.findings import SEVERITY_ORDER, Finding, FixKind, Remedy, Severity, Status, ev
from infergap.guard import name_safe
from infergap.investigators.base import facts_of
from infergap.investigators.interconnect import p2p_product_limit
from infergap.parsers.dmesg import MAX_TALLIES, DmesgFacts, XidTally
from infergap.snapshot.sources import ENGINE_LOG_KINDS

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.evidence.recognize import EvidencePart
    from infergap.facts import Facts

NAME = "evidence"
#: Check ids the signature catalog may yield: the catalog entries marked ``signatures: true`` (a
#: test keeps signatures.yaml within them); each is reported under its owner's name.
SIGNATURE_CHECKS = tuple(c.id for c in checks.load().values() if c.signatures)
#: Check of a component message without a check of its own (investigators/messages.py reports it
#: after every investigator, with the catalog match that explains it).
MESSAGE_CHECK = "evidence.message"
#: Kinds of part whose investigator reads a signature marked ``read_by``.
_READER_KINDS = {"engine_log": {"sglang_log", "vllm_log"}, "nccl_log": {"nccl_log"}}


def signature_hits(facts: Facts, part: EvidencePart) -> dict[str, SignatureHit]:
    """Message signatures matched in one evidence part (:meth:`infergap.facts.Facts.signature_hits`)."""
    return facts.signature_hits(part)


def signature_finding(sig: Signature, label: str, examples: list[str], count: int) -> Finding:
    """The actionable finding of one catalog entry matched in a part: its title, fix and sources."""
    f = sig.finding
    return finding(f.id, Status.actionable, subject=label, severity=f.severity, fix_kind=f.fix_kind,
        title=f.title.replace("{count}", str(count)), evidence_=[ev(label, x) for x in examples] + ([ev(label, f"{count} matching line(s)")] if count > len(examples) else []),
        impact=" ".join(sig.why.split()),
        remedy=Remedy(commands=list(f.fix), revert=list(f.revert), note=f.note),
        references=list(sig.sources), details={"signatures": [sig.id], "lines": count})


def merge_finding(into: dict[tuple[str, str], Finding], new: Finding) -> None:
    """One finding per (check id, subject): the most severe entry's text, every entry's evidence."""
    key = new.key()
    old = into.get(key)
    if old is None:
        into[key] = new
        return
    first, second = (new, old) if SEVERITY_ORDER[new.severity] < SEVERITY_ORDER[old.severity] else (old, new)  # type: ignore[index]
    merged = first.model_copy(deep=True)
    merged.evidence += [e for e in second.evidence if e not in merged.evidence][:6]
    merged.references += [r for r in second.references if r not in merged.references]
    merged.details["signatures"] = first.details.get("signatures", []) + second.details.get("signatures", [])
    into[key] = merged


def _explained_by(root: Finding) -> Any:
    """The ``explains`` of the first catalog entry behind ``root`` that has one, else None."""
    cat = catalog()
    for sid in root.details.get("signatures", []):
        try:
            e = cat.by_id(sid).explains
        except KeyError:
            continue
        if e is not None:
            return e
    return None


def _fold_consequences(merged: dict[tuple[str, str], Finding]) -> None:
    """One incident, one cause: a ``gpu.xid`` finding of the same evidence file whose Xid codes
    all follow from a root finding's fault (its entry's ``explains``: the GSP stalled, then Xid 120
    and 154 and the reset-required status) is reported inside the root finding as a consequence,
    with its title and counts kept as evidence, instead of as a cause of its own. A finding with
    any code the root does not explain stays separate."""
    for root in list(merged.values()):
        exp = _explained_by(root)
        if exp is None or root.key() not in merged:
            continue
        label = root.subject or ""
        for key, g in list(merged.items()):
            if g is root or g.id != "gpu.xid" or (g.subject or "").split(": ")[0] != label:
                continue
            xids, sigs = set(g.details.get("xids", [])), set(g.details.get("signatures", []))
            if not (xids <= set(exp.xid) if xids else bool(sigs) and sigs <= set(exp.signatures)):
                continue
            del merged[key]
            if SEVERITY_ORDER[g.severity] < SEVERITY_ORDER[root.severity]:  # type: ignore[index]
                root.severity = g.severity
            root.evidence += [ev(g.subject or label, f"then: {g.title}")] + [e for e in g.evidence if e.value.startswith(("0000", "Xid"))][:2]
            root.details.setdefault("consequences", []).append(
                {"id": g.id, "subject": g.subject, "title": g.title, "severity": g.severity.value if g.severity else None,
                 "xids": sorted(xids), "events": g.details.get("events"), "reset_gpus": g.details.get("reset_gpus", [])})
            root.references += [r for r in g.references + [exp.source] if r not in root.references]
        if root.details.get("consequences"):
            then = "; ".join(c["title"] for c in root.details["consequences"])
            root.impact = f"{root.impact or ''} In this log the same incident then shows as: {then}.".strip()


def _read_elsewhere(sig: Signature, facts: Facts, part: EvidencePart) -> bool:
    """Whether the investigator named by ``read_by`` reads this part (and so reports the line)."""
    if not sig.read_by or not part.kinds & _READER_KINDS[sig.read_by]:
        return False
    if sig.read_by == "nccl_log":
        return any(p is part for p, _ in facts.nccl_logs())
    return True


def _rdma_present(hits: dict[str, SignatureHit], facts: Facts, nccl: list[Any]) -> bool:
    """Whether an RDMA NIC is in the evidence (a line that shows one, NCCL's IB devices) or on the host."""
    if any(catalog().by_id(h).shows == "rdma_device" for h in hits) or any(f.ib_devices for f in nccl):
        return True
    try:
        return bool(facts.rdma_devices())
    except Exception:
        return False


def signature_applies(sig: Signature, facts: Facts, part: EvidencePart, hits: dict[str, SignatureHit]) -> bool:
    """Whether the entry's ``when`` holds for this part (multi-node, an RDMA NIC present ...)."""
    if sig.when is None:
        return True
    nccl = [f for p, f in facts.nccl_logs() if p is part]
    multi_node = any(f.single_host is False or any(lk.transport.startswith("NET") for lk in f.links) for f in nccl)
    if sig.when == "multi_node":
        return multi_node
    if sig.when == "multi_node_rdma":
        return multi_node and _rdma_present(hits, facts, nccl)
    if sig.when == "rdma_present":
        return _rdma_present(hits, facts, nccl)
    if sig.when == "peer_result_false":
        asked = False
        for line in part.iter_lines():
            t = line.strip()
            if any(c in t for c in sig.contains):
                asked = True
            elif asked and t in ("0", "False", "result: 0", "(0, 0)"):
                return True
        return False
    return False




#: NVIDIA's Xid catalog, cited by an Xid the signature catalog does not classify.
XID_CATALOG = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
#: Per-GPU tally lines and example lines shown in one Xid finding's evidence.
_GPU_LINES, _XID_EXAMPLES = 8, 3


def _tally_text(t: XidTally) -> str:
    unit = f" {t.unit}" if t.unit else ""
    how = f", named by Xid {t.named_by}" if t.named_by is not None else {True: f",{unit} Fatal", False: f",{unit} Nonfatal", None: ""}[t.fatal]
    how += f", to {t.recovery}" if t.recovery else ""
    return f"Xid {t.code} ×{t.count}{how}"


def _xid_evidence(label: str, tallies: list[XidTally]) -> list[Any]:
    """The counts of these tallies per GPU, then their first lines."""
    per_gpu: dict[str, list[str]] = {}
    for t in tallies:
        per_gpu.setdefault(t.gpu, []).append(_tally_text(t))
    rows = [ev(label, f"{gpu}: {'; '.join(v)}") for gpu, v in per_gpu.items()]
    more = [ev(label, f"… {len(rows) - _GPU_LINES} more GPU(s)")] if len(rows) > _GPU_LINES else []
    lines = [ev(label, f"Xid (PCI:{t.gpu}): {t.named_by if t.named_by is not None else t.code}, {t.example}") for t in tallies[:_XID_EXAMPLES]]
    return rows[:_GPU_LINES] + more + lines


def _xid_details(kind: str, tallies: list[XidTally]) -> dict[str, Any]:
    gpus: dict[str, dict[str, int]] = {}
    for t in tallies:
        gpus.setdefault(t.gpu, {})
        gpus[t.gpu][str(t.code)] = gpus[t.gpu].get(str(t.code), 0) + t.count
    return {"xids": sorted({t.code for t in tallies}), "kind": kind, "events": sum(t.count for t in tallies), "gpus": gpus}


def _xid_actions(rows: dict[int, Any], codes: list[int]) -> list[str]:
    """NVIDIA's action text for each Xid code (from the catalog; the codes are integers)."""
    return ["Xid %d: %s" % (int(c), rows[c].action) for c in codes]


def _kind_finding(label: str, sig: Signature, group: list[tuple[XidTally, XidCode]]) -> Finding:
    """One ``gpu.xid`` finding for the Xids of one kind (an entry of the catalog): the severity of
    its worst event, each code's meaning and action, the GPUs that need a reset."""
    judged = [(t, row, *row.judged(t.fatal, t.recovery)) for t, row in group]
    severity = min((j[2] for j in judged), key=lambda v: SEVERITY_ORDER[v])
    tallies = [t for t, _ in group]
    rows = {row.code: row for _, row in group}
    details = _xid_details(sig.id, tallies)
    reset = sorted({t.gpu for t, _, _, r in judged if r})
    codes = sorted(rows)
    what = rows[codes[0]].meaning if len(codes) == 1 else sig.finding.title
    refs = list(sig.sources) + sorted({r.source for r in rows.values()} - set(sig.sources))
    return finding("gpu.xid", Status.actionable, subject=f"{label}: {sig.id}", severity=severity, fix_kind=sig.finding.fix_kind,
        title=f"NVIDIA Xid {', '.join(map(str, codes))} in the kernel log, {details['events']} event(s) on {len(details['gpus'])} GPU(s): {what}",
        evidence_=_xid_evidence(label, tallies), expected_value="no Xid events",
        impact=" ".join(f"Xid {c} ({rows[c].name}): {rows[c].meaning}." for c in codes) + " " + " ".join(sig.why.split()),
        remedy=Remedy(commands=[*sig.finding.fix, *_xid_actions(rows, codes)], revert=list(sig.finding.revert),
                      note=(f"Needs a reset before it takes work: {', '.join(reset)}." if reset else "No GPU needs an immediate reset for these events (NVIDIA's Xid catalog); each code's action says what to do.")
                           + (f" {sig.finding.note}" if sig.finding.note else "")),
        references=refs, details=details | {"signatures": [sig.id], "reset_gpus": reset})


def _unknown_finding(label: str, tallies: list[XidTally], untallied: int) -> Finding:
    """``gpu.xid`` for Xid codes the catalog does not classify (and lines past the tally bound):
    P1, never dropped and never ok."""
    details = _xid_details("unknown", tallies)
    codes = ", ".join(map(str, details["xids"])) or "codes"
    extra = f" (and {untallied} line(s) past the first {MAX_TALLIES} GPU/code pairs, not classified)" if untallied else ""
    return finding("gpu.xid", Status.actionable, subject=f"{label}: xid.unknown", severity=Severity.P1, fix_kind=FixKind.hardware,
        title=f"Unknown NVIDIA Xid {codes} in the kernel log, {details['events'] + untallied} event(s){extra}: not in the Xid catalog infergap holds",
        evidence_=_xid_evidence(label, tallies), expected_value="no Xid events",
        impact="The driver reported GPU faults whose codes infergap does not classify; NVIDIA's Xid catalog gives each code's meaning and action.",
        remedy=Remedy(commands=["nvidia-smi -q -d ECC,PERFORMANCE,TEMPERATURE", "journalctl -k | grep -E 'NVRM|AER'"],
                      note="Look each code up in NVIDIA's Xid catalog: its immediate action says whether the GPU needs a reset."),
        references=[XID_CATALOG], details=details)


def _xid_findings(label: str, f: DmesgFacts) -> list[Finding]:
    """One ``gpu.xid`` finding per kind of Xid in the log (memory, NVLink, PCIe, firmware …),
    each with its events counted per GPU; codes the catalog does not hold in one finding of
    their own."""
    kinds: dict[str, tuple[Signature, list[tuple[XidTally, XidCode]]]] = {}
    unknown: list[XidTally] = []
    for t in f.xid_tallies:
        hit = xid_code(t.code)
        if hit is None:
            unknown.append(t)
        else:
            kinds.setdefault(hit[0].id, (hit[0], []))[1].append((t, hit[1]))
    out = [_kind_finding(label, sig, group) for sig, group in kinds.values()]
    untallied = f.xid_count - sum(t.count for t in f.xid_tallies)
    if unknown or untallied:
        out.append(_unknown_finding(label, unknown, untallied))
    return out


def _kernel_log(label: str, f: DmesgFacts) -> list[Finding]:
    out = []
    if f.xid_count:
        out += _xid_findings(label, f)
    if f.aer:
        fatal = sum(v for k, v in f.aer.items() if not k.lower().startswith("correct"))
        out.append(finding("pcie.aer", Status.actionable, subject=label,
            severity=Severity.P0 if fatal else Severity.P2,
            title="PCIe errors in the kernel log: " + ", ".join(f"{k} ×{v}" for k, v in sorted(f.aer.items())),
            evidence_=[ev(label, d) for d in f.aer_devices[:5]],
            expected_value="no AER errors",
            impact=("Uncorrected PCIe errors take the device off the bus. " if fatal else "")
                   + "Corrected errors mean link-level retries (replays) that cost bandwidth and often precede failures.",
            remedy=Remedy(commands=["lspci -vvv | grep -E 'LnkSta|UESta|CESta'"],
                          note="Reseat the card and riser, try another slot, or lower the slot's PCIe generation in the BIOS.")))
    return out


def _host_kernel_log(facts: Facts) -> list[Finding]:
    """Kernel-log findings of the audited host itself (``cmds/kernel_log``: its GPU, PCIe and IOMMU
    lines), for a host with an NVIDIA GPU: the Xid and AER findings, ``gpu.xid`` ok citing the
    lines read when none is an Xid (errors since the ring buffer's oldest line), unknown with the
    command to run when the log was not captured or cannot be read (``dmesg_restrict``)."""
    if not facts.gpus():
        return []
    cmd = "sudo dmesg -T | grep -E 'NVRM|Xid'"
    res = facts.kernel_log()
    if res is None:
        return [unknown("gpu.xid", "Kernel log: not captured",
                        f"Xid errors are only in the kernel log; run `{cmd}` and pass it with --evidence.")]
    if not res.ok:
        why = (res.stderr or res.error or f"exit status {res.rc}").strip().splitlines()[-1][:160]
        return [unknown("gpu.xid", "Kernel log: not readable", f"{why}. Run `{cmd}` (reading it needs root when "
                        "kernel.dmesg_restrict is 1) and pass it with --evidence.", evidence_=[ev(res.source, why)])]
    log = facts.kernel_log_facts()
    out = _kernel_log(res.source, log)
    if not log.xid_count:
        out.append(finding("gpu.xid", Status.ok, subject=res.source, title="No NVIDIA Xid in the kernel log",
                           evidence_=[ev(res.source, f"{log.lines} GPU/PCIe/IOMMU line(s) of the kernel log, no Xid")]))
    return out


def _signature_findings(facts: Facts, merged: dict[tuple[str, str], Finding], with_xids: set[str]) -> None:
    """The catalog's signatures matched in every part (those another investigator reads left to it)."""
    cat = catalog()
    for part in facts.all_parts():
        hits = signature_hits(facts, part)
        for sid, hit in hits.items():
            sig = cat.by_id(sid)
            if _read_elsewhere(sig, facts, part):
                continue  # that investigator reads the line and reports it
            if sig.finding.id == "gpu.xid" and part.label in with_xids and all("NVRM: Xid" in x for x in hit.examples):
                continue  # the message is an Xid line's own text ("79, GPU has fallen off the bus"): its Xid finding reports it
            if not signature_applies(sig, facts, part, hits):
                continue
            limit = p2p_product_limit(sig, part)
            merge_finding(merged, limit or signature_finding(sig, part.label, hit.examples, hit.count))


def investigate(ctx: object) -> list[Finding]:
    """Findings of the failure-signature catalog over every evidence part, kernel-log findings,
    and ``evidence.unrecognized`` per unusable evidence file; none without evidence."""
    facts = facts_of(ctx)
    if not facts.pasted():
        return _host_kernel_log(facts)
    merged: dict[tuple[str, str], Finding] = {}
    with_xids: set[str] = set()
    logs = facts.kernel_logs()
    for part, log in logs:
        if log.xid_count:
            with_xids.add(part.label)
        for f in _kernel_log(part.label, log):
            merge_finding(merged, f)
    _signature_findings(facts, merged, with_xids)
    _fold_consequences(merged)
    out = list(merged.values())
    if not logs and facts.with_host():
        out += _host_kernel_log(facts)  # the host the evidence came with, when no kernel log was pasted
    for u in facts.unrecognized():
        name = name_safe(u.path.name)
        where = f"evidence/{name}" + (f"#L{u.first_line}" if u.first_line else "")
        out.append(finding("evidence.unrecognized", Status.unknown, subject=where,
                           title=f"{name}: {u.reason}", evidence_=[ev(where, u.reason)],
                           impact=checks.get("evidence.unrecognized").text("ignored", count=len(_KNOWN), kinds=", ".join(_KNOWN))))
    return out


#: What each recognised kind is, as its source record names it (``nvidia-smi topo -m``, ``dcgmi diag -r N``),
#: without the record's parenthesised detail: the list an unrecognised paste is told.
_KNOWN = tuple(dict.fromkeys(what.split(" (")[0] for what, _ in KINDS.values()))


#: Lines that report a failure: an exception line, a CUDA or NCCL error, a fatal log line. Every
#: repeat is bounded, so a long line costs a linear scan.
_FAILURE = re.compile(r"\b[A-Z][\w.]{0,100}(?:Error|Exception): \S|CUDA error|CUDA_ERROR_[A-Z]|NCCL WARN|\bnccl[A-Za-z]{0,40}Error\b"
                      r"|Segmentation fault|core dumped|\b(?:CRITICAL|FATAL)\b")
_FAILURE_WORDS = ("Error", "Exception", "CUDA error", "CUDA_ERROR_", "WARN", "Segmentation fault", "core dumped", "CRITICAL", "FATAL")
#: What to collect next, per kind of part, when nothing in it matched a known cause.
_NEXT = {
    "traceback": "the whole log up to the traceback (the startup lines name versions and settings), `dmesg -T | grep -E 'NVRM|Xid'` "
                 "from the GPU host, and `python -m torch.utils.collect_env`; for a CUDA error rerun once with CUDA_LAUNCH_BLOCKING=1 "
                 "to name the failing kernel, for an NCCL error with NCCL_DEBUG=INFO",
    "nccl_log": "the NCCL_DEBUG=INFO log of every rank (NCCL_DEBUG_SUBSYS=INIT,NET), `nvidia-smi topo -m`, and `ibv_devinfo` where "
                "InfiniBand or RoCE is used",
    "dmesg": "`nvidia-smi -q` and `lspci -vvv` of the GPUs the messages name",
    "engine": "the server log from its first line (version and settings), `dmesg -T | grep -E 'NVRM|Xid'` and `nvidia-smi -q`",
}
_NEXT["fragment"] = _NEXT["traceback"]
for _k in ENGINE_LOG_KINDS:  # every engine's log (the records of family "engine")
    _NEXT[_k] = _NEXT["engine"]
_NEXT_HOST = "`infergap collect` on the host (one snapshot of everything the checks read)"


def failure_lines(part: EvidencePart, limit: int = 3) -> tuple[int, list[str]]:
    """(count, first ``limit`` distinct lines cut at 300 characters) of the lines of ``part`` that
    report a failure (see :data:`_FAILURE`), streamed."""
    n, ex = 0, []
    for line in part.iter_lines():
        if not any(w in line for w in _FAILURE_WORDS) or not _FAILURE.search(line):
            continue
        n += 1
        t = line.strip()[:300]
        if len(ex) < limit and t not in ex:
            ex.append(t)
    return n, ex


#: Checks whose actionable findings count lines rather than name a cause (``names_cause: false``
#: in the catalog): a paste with only these is unmatched.
_TALLIES = {c.id for c in checks.load().values() if not c.names_cause}


def unmatched(facts: Facts, findings: list[Finding]) -> list[Finding]:
    """``evidence.unmatched`` (unknown) for each recognised evidence part that would otherwise
    leave no trace in the report: a part with failure lines when no actionable finding cites its
    file, and a part no finding cites when nothing else of its file is cited either. Each says
    what was read (kind, lines, the failure lines) and what to collect next. Run after every
    investigator, over all their findings."""
    parts = facts.all_parts()
    if not parts:
        return []
    by_file: dict[str, list[Any]] = {}
    for p in parts:
        by_file.setdefault(str(p.path), []).append(p)
    # findings by the labels they cite, once: a paste of thousands of parts (a repeated tool's
    # output) tested every finding against every part
    by_label: dict[str, list[Finding]] = {}
    for f in findings:
        for lab in dict.fromkeys([f.subject, *(e.source for e in f.evidence)]):
            if lab is not None:
                by_label.setdefault(lab, []).append(f)
    out: list[Finding] = []
    for group in by_file.values():
        cited = {p.label: by_label.get(p.label, []) for p in group}
        if any(f.status == Status.actionable and f.id not in _TALLIES for fs in cited.values() for f in fs):
            continue  # a cause was found in this paste
        for p in group:
            n, ex = failure_lines(p)
            what = f"{KINDS.get(p.kind, (p.kind,))[0]} ({p.n_lines} line(s))"
            nxt = _NEXT.get(p.kind, _NEXT_HOST)
            if n:
                title = f"read as {what}; {n} failure line(s), no known cause matched: {ex[0]}"
            elif not cited[p.label] and not any(cited.values()):
                title = f"read as {what}; no finding cites it and no known cause matched"
            else:
                continue
            out.append(finding("evidence.unmatched", Status.unknown, subject=p.label, title=title,
                evidence_=[ev(p.label, x) for x in ex] + ([ev(p.label, f"{n} failure line(s)")] if n > len(ex) else []),
                impact=f"The input was read, but none of the {len(catalog().messages)} failure signatures of the catalog matched it, so this "
                       f"report names no cause for it. Collect next: {nxt}.",
                details={"kind": p.kind, "lines": p.n_lines, "failure_lines": n}))
    return out
