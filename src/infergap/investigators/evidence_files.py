"""Evidence files as such: each unrecognised file (or stretch of one) becomes an
``evidence.unrecognized`` finding with status unknown, so the report says what was ignored; every
recognised part is matched against the catalog of failure signatures
(``infergap/data/signatures.yaml``), and a pasted kernel log gives ``gpu.xid`` and ``pcie.aer``.

Severity model: each signature's finding carries the severity, fix kind, fix and revert of its
catalog entry, with the entry's public sources as references. Xid codes take the entry of their
code (79 fallen off the bus, 154 reset required, 119/120 GSP, memory errors: P0; 13/31/43: P1,
the application faulted, not power or cooling); an Xid the catalog does not hold is P1. An
uncorrected PCIe error is P0 (hardware: reseat, power, riser, slot, RMA); corrected AER errors
alone P2 (a marginal link that retrains).
"""

from __future__ import annotations

import re
from typing import Any

from infergap import checks
from infergap.checks import finding
from infergap.evidence.common import _memo, nccl_logs
from infergap.evidence.recognize import KINDS
from infergap.parsers.dmesg import DmesgFacts, parse_dmesg
from infergap.evidence.signatures import Signature, SignatureHit, catalog, scan_lines, xid_signature
from infergap.findings import SEVERITY_ORDER, Finding, FixKind, Remedy, Severity, Status, ev

NAME = "evidence"
#: Check ids the signature catalog may yield: the catalog entries marked ``signatures: true`` (a
#: test keeps signatures.yaml within them); each is reported under its owner's name.
SIGNATURE_CHECKS = tuple(c.id for c in checks.load().values() if c.signatures)
#: Kinds of part whose investigator reads a signature marked ``read_by``.
_READER_KINDS = {"engine_log": {"sglang_log", "vllm_log"}, "nccl_log": {"nccl_log"}}


def signature_hits(snap: Any, part: Any) -> dict[str, SignatureHit]:
    """Message signatures matched in one evidence part (memoized per snapshot and part)."""
    return _memo(snap, ("sig", str(part.path), part.start, part.end), lambda: scan_lines(part.iter_lines()))


def _finding(sig: Signature, label: str, examples: list[str], count: int) -> Finding:
    f = sig.finding
    return finding(f.id, Status.actionable, subject=label, severity=f.severity, fix_kind=f.fix_kind,
        title=f.title.replace("{count}", str(count)), evidence_=[ev(label, x) for x in examples] + ([ev(label, f"{count} matching line(s)")] if count > len(examples) else []),
        impact=" ".join(sig.why.split()),
        remedy=Remedy(commands=list(f.fix), revert=list(f.revert), note=f.note),
        references=list(sig.sources), details={"signatures": [sig.id], "lines": count})


def _merge(into: dict[tuple[str, str], Finding], new: Finding) -> None:
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


def _read_elsewhere(sig: Signature, snap: Any, part: Any) -> bool:
    """Whether the investigator named by ``read_by`` reads this part (and so reports the line)."""
    if not sig.read_by or not part.kinds & _READER_KINDS[sig.read_by]:
        return False
    if sig.read_by == "nccl_log":
        return any(p is part for p, _ in nccl_logs(snap))
    return True


def _rdma_present(hits: dict[str, SignatureHit], ctx: Any, nccl: list[Any]) -> bool:
    """Whether an RDMA NIC is in the evidence (a line that shows one, NCCL's IB devices) or on the host."""
    if any(catalog().by_id(h).shows == "rdma_device" for h in hits) or any(f.ib_devices for f in nccl):
        return True
    facts = getattr(ctx, "facts", None)
    try:
        return bool(facts and facts.rdma_devices())
    except Exception:
        return False


def _condition(sig: Signature, snap: Any, part: Any, hits: dict[str, SignatureHit], ctx: Any) -> bool:
    if sig.when is None:
        return True
    nccl = [f for p, f in nccl_logs(snap) if p is part]
    multi_node = any(f.single_host is False or any(lk.transport.startswith("NET") for lk in f.links) for f in nccl)
    if sig.when == "multi_node":
        return multi_node
    if sig.when == "multi_node_rdma":
        return multi_node and _rdma_present(hits, ctx, nccl)
    if sig.when == "rdma_present":
        return _rdma_present(hits, ctx, nccl)
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


def _xid_finding(label: str, f: DmesgFacts) -> Finding:
    codes = sorted({x[0] for x in f.xids} | set(f.xid_causes))
    entries = {c: xid_signature(c) for c in codes}
    known = list({s.id: s for s in entries.values() if s is not None}.values())
    worst = min(known, key=lambda s: SEVERITY_ORDER[s.finding.severity]) if known else None
    unknown_codes = [c for c, s in entries.items() if s is None]
    severity = worst.finding.severity if worst else Severity.P1
    if unknown_codes and worst and SEVERITY_ORDER[worst.finding.severity] > SEVERITY_ORDER[Severity.P1]:
        severity = Severity.P1
    what = worst.finding.title if worst else "the driver reported GPU faults"
    refs: list[str] = []
    for s in known:
        refs += [r for r in s.sources if r not in refs]
    return finding("gpu.xid", Status.actionable, subject=label,
        severity=severity, fix_kind=worst.finding.fix_kind if worst else FixKind.hardware,
        title=f"NVIDIA Xid {', '.join(map(str, codes))} in the kernel log ({f.xid_count} event(s)): {what}",
        evidence_=[ev(label, f"Xid (PCI:{bdf}): {code}, {msg}") for code, bdf, msg in f.xids[:5]],
        expected_value="no Xid events",
        impact=" ".join(" ".join(s.why.split()) for s in known) or "The driver reported GPU faults; NVIDIA's XID Errors document lists each code.",
        remedy=Remedy(commands=(list(worst.finding.fix) if worst else []) + ["nvidia-smi -q -d ECC,PERFORMANCE,TEMPERATURE", "journalctl -k | grep -E 'NVRM|AER'"],
                      note=worst.finding.note if worst else "Check power connectors, cooling, the riser and slot, then the GPU itself."),
        references=refs or ["https://docs.nvidia.com/deploy/xid-errors/"],
        details={"xids": codes, "signatures": [s.id for s in known]})


def _kernel_log(label: str, f: DmesgFacts) -> list[Finding]:
    out = []
    if f.xid_count:
        out.append(_xid_finding(label, f))
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


def investigate(ctx: object) -> list[Finding]:
    """Findings of the failure-signature catalog over every evidence part, kernel-log findings,
    and ``evidence.unrecognized`` per unusable evidence file; none without evidence."""
    snap = ctx.snap  # type: ignore[attr-defined]
    getter = getattr(snap, "unrecognized", None)
    if getter is None:
        return []
    cat = catalog()
    merged: dict[tuple[str, str], Finding] = {}
    for part in snap.evidence_parts("dmesg"):
        facts = _memo(snap, ("dmesg", str(part.path), part.start, part.end), lambda p=part: parse_dmesg(p.iter_lines()))
        for f in _kernel_log(part.label, facts):
            _merge(merged, f)
    for part in getattr(snap, "parts", []):
        hits = signature_hits(snap, part)
        for sid, hit in hits.items():
            sig = cat.by_id(sid)
            if _read_elsewhere(sig, snap, part):
                continue  # that investigator reads the line and reports it
            if not _condition(sig, snap, part, hits, ctx):
                continue
            _merge(merged, _finding(sig, part.label, hit.examples, hit.count))
    out = list(merged.values())
    for u in getter():
        where = f"evidence/{u.path.name}" + (f"#L{u.first_line}" if u.first_line else "")
        out.append(finding("evidence.unrecognized", Status.unknown, subject=where,
                           title=f"{u.path.name}: {u.reason}", evidence_=[ev(where, u.reason)],
                           impact=checks.get("evidence.unrecognized").text("ignored")))
    return out


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
for _k in ("sglang_log", "vllm_log", "llamacpp_log"):
    _NEXT[_k] = _NEXT["engine"]
_NEXT_HOST = "`infergap collect` on the host (one snapshot of everything the checks read)"


def failure_lines(part: Any, limit: int = 3) -> tuple[int, list[str]]:
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


def _cites(f: Finding, label: str) -> bool:
    return f.subject == label or any(e.source == label for e in f.evidence)


def unmatched(snap: Any, findings: list[Finding]) -> list[Finding]:
    """``evidence.unmatched`` (unknown) for each recognised evidence part that would otherwise
    leave no trace in the report: a part with failure lines when no actionable finding cites its
    file, and a part no finding cites when nothing else of its file is cited either. Each says
    what was read (kind, lines, the failure lines) and what to collect next. Run after every
    investigator, over all their findings."""
    parts = list(getattr(snap, "parts", []) or [])
    if not parts:
        return []
    by_file: dict[str, list[Any]] = {}
    for p in parts:
        by_file.setdefault(str(p.path), []).append(p)
    out: list[Finding] = []
    for group in by_file.values():
        cited = {p.label: [f for f in findings if _cites(f, p.label)] for p in group}
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
