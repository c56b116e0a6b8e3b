"""Evidence files as such: each unrecognised file (or stretch of one) becomes an
``evidence.unrecognized`` finding with status unknown, so the report says what was ignored; a
pasted kernel log gives ``gpu.xid`` and ``pcie.aer``.

Severity model: an Xid that means the GPU or its link is failing (79 fallen off the bus, 48
double-bit ECC, 74 NVLink …) and an uncorrected PCIe error are P0 (hardware: reseat, power,
riser, slot, RMA); other Xids P1; corrected AER errors alone P2 (a marginal link that retrains).
"""

from __future__ import annotations

from infergap.evidence.common import _memo
from infergap.evidence.dmesg import SEVERE_XIDS, DmesgFacts, parse_dmesg
from infergap.findings import Finding, FixKind, Remedy, Severity, Status, ev

NAME = "evidence"


def _kernel_log(label: str, f: DmesgFacts) -> list[Finding]:
    out = []
    if f.xid_count:
        codes = sorted({x[0] for x in f.xids})
        severe = [c for c in codes if c in SEVERE_XIDS]
        out.append(Finding(
            id="gpu.xid", investigator=NAME, status=Status.actionable, subject=label,
            severity=Severity.P0 if severe else Severity.P1, fix_kind=FixKind.hardware,
            title=f"NVIDIA Xid {', '.join(map(str, codes))} in the kernel log ({f.xid_count} event(s))",
            evidence=[ev(label, f"Xid (PCI:{bdf}): {code}, {msg}") for code, bdf, msg in f.xids[:5]],
            expected_value="no Xid events",
            impact=("Xid 79: the GPU dropped off the PCIe bus (power, thermals, riser or slot); " if 79 in codes else "")
                   + "the driver reported GPU faults; a server on this GPU fails or hangs until the cause is fixed and the GPU reset.",
            remedy=Remedy(commands=["nvidia-smi -q -d ECC,PERFORMANCE,TEMPERATURE", "journalctl -k | grep -E 'NVRM|AER'"],
                          note="Check power connectors, cooling, the riser and slot (reseat), then the GPU itself (NVIDIA's XID Errors document lists each code)."),
            references=["https://docs.nvidia.com/deploy/xid-errors/"]))
    if f.aer:
        fatal = sum(v for k, v in f.aer.items() if not k.lower().startswith("correct"))
        out.append(Finding(
            id="pcie.aer", investigator=NAME, status=Status.actionable, subject=label,
            severity=Severity.P0 if fatal else Severity.P2, fix_kind=FixKind.hardware,
            title="PCIe errors in the kernel log: " + ", ".join(f"{k} ×{v}" for k, v in sorted(f.aer.items())),
            evidence=[ev(label, d) for d in f.aer_devices[:5]],
            expected_value="no AER errors",
            impact=("Uncorrected PCIe errors take the device off the bus. " if fatal else "")
                   + "Corrected errors mean link-level retries (replays) that cost bandwidth and often precede failures.",
            remedy=Remedy(commands=["lspci -vvv | grep -E 'LnkSta|UESta|CESta'"],
                          note="Reseat the card and riser, try another slot, or lower the slot's PCIe generation in the BIOS.")))
    return out


def investigate(ctx: object) -> list[Finding]:
    """``evidence.unrecognized`` per unusable evidence file, and kernel-log findings; none without evidence."""
    snap = ctx.snap  # type: ignore[attr-defined]
    getter = getattr(snap, "unrecognized", None)
    if getter is None:
        return []
    out = []
    for part in snap.evidence_parts("dmesg"):
        facts = _memo(snap, ("dmesg", str(part.path), part.start, part.end), lambda p=part: parse_dmesg(p.iter_lines()))
        out.extend(_kernel_log(part.label, facts))
    for u in getter():
        where = f"evidence/{u.path.name}" + (f"#L{u.first_line}" if u.first_line else "")
        out.append(Finding(id="evidence.unrecognized", investigator=NAME, status=Status.unknown, subject=where,
                           title=f"{u.path.name}: {u.reason}", evidence=[ev(where, u.reason)],
                           impact="Not used by the audit. Known kinds: nvidia-smi (topo -m, -q, -q -x, nvlink -s, --query-gpu CSV), lspci, "
                                  "numactl -H, lscpu, sysctl -a, ulimit -a, /proc/cmdline, dmesg, NCCL_DEBUG=INFO logs, SGLang and vLLM logs, "
                                  "pip list/freeze, nvcc --version, torch collect_env."))
    return out
