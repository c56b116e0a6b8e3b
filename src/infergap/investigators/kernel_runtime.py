"""Kernel runtime settings (sysctls) that cost inference hosts latency or throughput.

Thresholds and their sources:
- ``kernel.nmi_watchdog``: Documentation/admin-guide/sysctl/kernel.rst; holds one perf counter per CPU.
- ``kernel.sched_autogroup_enabled``: Documentation/admin-guide/sysctl/kernel.rst (desktop feature).
- ``vm.swappiness``: Documentation/admin-guide/sysctl/vm.rst; tuned's throughput-performance and
  accelerator-performance profiles set 10.
- ``net.core.{r,w}mem_max``, ``net.ipv4.tcp_{r,w}mem``: Documentation/networking/ip-sysctl.rst;
  tuned's network-throughput profile raises the maxima to 16 MiB (16777216).

Severity model (``kernel.numa_balancing`` lives in the numa investigator): P2 for hygiene items whose
public evidence of inference impact is weak; swappiness is P1 when swap is in use (pages of the serving
process can be swapped out), P2 with swap configured but unused, not applicable without swap. Socket
buffers are not applicable when the NCCL logs show collectives within one node or over RDMA. Autogroup
is reported as expected (no cited effect).
"""

from __future__ import annotations

from infergap import checks
from infergap.findings import Finding, FixKind, Severity, Status
from infergap.investigators.base import Context, evidence, finding, not_applicable, sysctl_remedy, unknown

NAME = "kernel_runtime"
SOCKET_BUF_GOOD_B = checks.threshold("net.socket_buffers", "good_max_bytes")  # tuned network-throughput profile


def _simple(ctx: Context, cid: str, key: str, good: str, title_bad: str, title_ok: str, impact: str, ref: str) -> Finding:
    v = ctx.facts.sysctl(key)
    if v is None:
        return unknown(cid, f"{key}: not captured", f"Needs /proc/sys/{key.replace('.', '/')} or sysctl -a.")
    if v.value == good:
        return finding(cid, Status.ok, title_ok, evidence_=evidence(v), expected_value=good)
    return finding(cid, Status.actionable, title_bad, severity=Severity.P2, fix_kind=FixKind.runtime,
                   evidence_=evidence(v), expected_value=good, impact=impact,
                   remedy=sysctl_remedy(ctx, key, good, v.value), references=[ref])


def _swappiness(ctx: Context) -> Finding:
    cid = "vm.swappiness"
    v = ctx.facts.sysctl("vm.swappiness")
    if v is None:
        return unknown(cid, "vm.swappiness: not captured", "Needs /proc/sys/vm/swappiness or sysctl -a.")
    try:
        val = int(v.value)
    except ValueError:
        return unknown(cid, "vm.swappiness: unreadable value", f"Value {v.value!r} is not a number.", evidence_=evidence(v))
    swaps = ctx.facts.swaps()
    swap_ev = None
    used = False
    if swaps is not None:
        total = sum(int(s.get("Size", 0) or 0) for s in swaps)
        used = any(int(s.get("Used", 0) or 0) > 0 for s in swaps)
        swap_ev = ("files/proc/swaps", f"{len(swaps)} swap device(s), {total} KiB" + (", in use" if used else "") if swaps else "no swap configured")
    if val <= 10:
        return finding(cid, Status.ok, f"vm.swappiness is {val}", evidence_=evidence(v, swap_ev), expected_value="<= 10")
    if swaps is not None and not swaps:
        return not_applicable(cid, f"vm.swappiness is {val}, but no swap is configured",
                              "Without a swap device the kernel cannot swap out the serving process's memory, whatever swappiness says; it matters once swap is added.",
                              evidence_=evidence(v, swap_ev))
    sev = Severity.P1 if used else Severity.P2
    return finding(cid, Status.actionable, f"vm.swappiness is {val}" + (" with swap in use" if used else ""),
        severity=sev, evidence_=evidence(v, swap_ev), expected_value="<= 10 (tuned throughput profiles: 10)",
        impact="A high swappiness lets the kernel swap out anonymous pages of the serving process (tokenizer, scheduler, pinned-buffer bookkeeping) to keep page cache; a swapped-in page on the request path costs milliseconds." if swaps else
        "No swap is configured, so the effect is limited to reclaim balance; set it anyway so a later swap device does not take serving memory.",
        remedy=sysctl_remedy(ctx, "vm.swappiness", "10", v.value),
        references=["Documentation/admin-guide/sysctl/vm.rst#swappiness", "tuned: profiles/throughput-performance/tuned.conf"],
    )


def _socket_buffers(ctx: Context) -> Finding:
    cid = "net.socket_buffers"
    rmem, wmem = ctx.facts.sysctl("net.core.rmem_max"), ctx.facts.sysctl("net.core.wmem_max")
    if rmem is None or wmem is None:
        return unknown(cid, "Socket buffer limits: not captured", "Needs net.core.rmem_max and wmem_max.")
    try:
        r, w = int(rmem.value), int(wmem.value)
    except ValueError:
        return unknown(cid, "Socket buffer limits: unreadable", "Values are not numbers.", evidence_=evidence(rmem, wmem))
    tr, tw = ctx.facts.sysctl("net.ipv4.tcp_rmem"), ctx.facts.sysctl("net.ipv4.tcp_wmem")
    evs = evidence(rmem, wmem, tr, tw)
    if r >= SOCKET_BUF_GOOD_B and w >= SOCKET_BUF_GOOD_B:
        return finding(cid, Status.ok, "Socket buffer maxima are raised", evidence_=evs, expected_value=f">= {SOCKET_BUF_GOOD_B}")
    net, nsrc = ctx.facts.collective_network()
    if net is None and not ctx.facts.gpus() and ctx.facts.pci_inventory_captured():
        return not_applicable(cid, f"Socket buffer maxima below 16 MiB (rmem_max {r}, wmem_max {w} bytes), but this host "
                              "has no NVIDIA GPU", "These maxima matter for NCCL's socket transport between GPU nodes; "
                              "no NCCL runs on a host without GPUs.", evidence_=evs)
    if net in ("local", "rdma"):
        how = "within one node (P2P, SHM or NVLink)" if net == "local" else "over RDMA (NET/IB), not TCP"
        return not_applicable(cid, f"Socket buffer maxima below 16 MiB (rmem_max {r}, wmem_max {w} bytes), but NCCL moves data {how}",
                              "These maxima cap TCP windows, which matter for NCCL's socket transport between nodes; the NCCL log shows no socket channel.",
                              evidence_=evs + evidence((nsrc, f"NCCL channels {how}")))
    good = str(SOCKET_BUF_GOOD_B)
    rem = checks.sysctl_remedy([("net.core.rmem_max", good, rmem.value), ("net.core.wmem_max", good, wmem.value)])
    if ctx.in_container:
        rem.host_controlled = True
        rem.note = "Inside a container the socket buffer maxima of the container's network namespace can differ from the host's; NCCL traffic between containers uses the host's. Apply on the host as well."
    return finding(cid, Status.actionable, f"Socket buffer maxima below 16 MiB (rmem_max {r}, wmem_max {w} bytes)",
        evidence_=evs, expected_value=f"{SOCKET_BUF_GOOD_B} (tuned network-throughput)",
        impact=("The NCCL log shows socket (TCP) channels: " if net == "socket" else "Matters only when NCCL uses its socket transport between nodes (no NCCL log here tells): ")
        + "NCCL's socket transport and multi-node TCP windows are capped by these maxima (the kernel default is 212992 bytes); tuned's network-throughput profile raises them to 16 MiB. tcp_rmem/tcp_wmem are min, default and max per socket.",
        remedy=rem, references=["Documentation/networking/ip-sysctl.rst", "tuned: profiles/network-throughput/tuned.conf"],
    )


def _autogroup(ctx: Context) -> Finding:
    """kernel.sched_autogroup: reported, not flagged. Autogroup only shares CPU time fairly between
    sessions (setsid); an engine's processes start in one session, and no public measurement shows an
    effect on inference (Documentation/admin-guide/sysctl/kernel.rst, sched(7) "autogroup")."""
    cid, key = "kernel.sched_autogroup", "kernel.sched_autogroup_enabled"
    v = ctx.facts.sysctl(key)
    if v is None:
        return unknown(cid, f"{key}: not captured", f"Needs /proc/sys/{key.replace('.', '/')} or sysctl -a.")
    if v.value == "0":
        return finding(cid, Status.ok, "Scheduler autogroup is off", evidence_=evidence(v), expected_value="0")
    return finding(cid, Status.expected, "Scheduler autogroup is on (the kernel's default)", evidence_=evidence(v),
                   impact="Autogroup balances CPU time between sessions, not between the processes of one session; an inference server's workers "
                          "start in one session, so it does not change their share. No public measurement shows an effect on serving; no action.",
                   references=["Documentation/admin-guide/sysctl/kernel.rst#sched-autogroup-enabled", "sched(7): The autogroup feature"])


def investigate(ctx: Context) -> list[Finding]:
    """kernel.nmi_watchdog, kernel.sched_autogroup, vm.swappiness,
    net.socket_buffers."""
    return [
        _simple(ctx, "kernel.nmi_watchdog", "kernel.nmi_watchdog", "0", "The NMI watchdog is on", "The NMI watchdog is off",
                "The hard-lockup detector keeps one performance counter per CPU busy and fires periodic NMIs; small cost, but no use on a serving host.",
                "Documentation/admin-guide/sysctl/kernel.rst#nmi-watchdog"),
        _autogroup(ctx),
        _swappiness(ctx),
        _socket_buffers(ctx),
    ]
