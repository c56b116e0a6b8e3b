"""Evidence files the audit could not use: each unrecognised file (or stretch of one) becomes an
``evidence.unrecognized`` finding with status unknown, so the report says what was ignored."""

from __future__ import annotations

from infergap.findings import Finding, Status, ev

NAME = "evidence"


def investigate(ctx: object) -> list[Finding]:
    """One ``evidence.unrecognized`` finding per unusable evidence file; none without evidence."""
    snap = ctx.snap  # type: ignore[attr-defined]
    getter = getattr(snap, "unrecognized", None)
    if getter is None:
        return []
    out = []
    for u in getter():
        where = f"evidence/{u.path.name}" + (f"#L{u.first_line}" if u.first_line else "")
        out.append(Finding(id="evidence.unrecognized", investigator=NAME, status=Status.unknown, subject=where,
                           title=f"{u.path.name}: {u.reason}", evidence=[ev(where, u.reason)],
                           impact="Not used by the audit. Known kinds: nvidia-smi (topo -m, -q, -q -x, nvlink -s, --query-gpu CSV), lspci, "
                                  "numactl -H, lscpu, sysctl -a, ulimit -a, /proc/cmdline, dmesg, NCCL_DEBUG=INFO logs, SGLang and vLLM logs, "
                                  "pip list/freeze, nvcc --version, torch collect_env."))
    return out
