"""Kernel version: running vs installed kernels, feature gates, command-line options.

Feature gates by version (kernel documentation): amd_pstate passive 6.1, active 6.3, guided 6.4
(Documentation/admin-guide/pm/amd-pstate.rst); ``pci=disable_acs_redir`` 5.1
(Documentation/admin-guide/kernel-parameters.txt). ``pci=noacs`` is not an option the kernel
parses (drivers/pci/pci.c ``pci_setup`` logs "PCI: Unknown option" and ignores it).
"""

from __future__ import annotations

from infergap import checks
from infergap.findings import Finding, Remedy, Status
from infergap.investigators.base import Context, evidence, finding, unknown
from infergap.parsers.host import KernelVersion

NAME = "kernel_version"

#: pci= options drivers/pci/pci.c pci_setup() and arch/x86/pci/common.c pcibios_setup() accept.
KNOWN_PCI_OPTS = frozenset(checks.get("kernel.cmdline").lists["known_pci_options"])


def _pending_reboot(ctx: Context) -> Finding:
    cid = "kernel.pending_reboot"
    kr = ctx.facts.kernel_release()
    inst = ctx.facts.installed_kernels()
    if kr is None:
        return unknown(cid, "Running kernel: not captured", "Needs uname -a or /proc/sys/kernel/osrelease.")
    if inst is None:
        return unknown(cid, "Installed kernels: not captured", "Needs a listing of /lib/modules or /boot.", evidence_=evidence(kr))
    rels, src = inst
    run = KernelVersion.parse(kr.value)
    evs = evidence(kr, (src, ", ".join(rels)))
    if run is None:
        return unknown(cid, "Running kernel version unreadable", f"{kr.value!r} is not a kernel release.", evidence_=evs)
    same_flavour = [KernelVersion.parse(r) for r in rels]
    newer = sorted(k for k in same_flavour if k is not None and k.flavour == run.flavour and (k.major, k.minor, k.patch, k.abi) > (run.major, run.minor, run.patch, run.abi))
    if newer:
        latest = newer[-1].release
        return finding(cid, Status.actionable, f"A newer kernel is installed but not booted: running {kr.value}, installed {latest}",
            evidence_=evs, expected_value=latest,
            impact="Fixes and driver updates in the installed kernel are not in effect, and the reboot-class fixes of this report can be combined with booting it.",
            remedy=checks.remedy(cid, persist=[("boot", {"release": latest})], revert=[("select", {"release": kr.value})], host_controlled=ctx.in_container),
            references=["uname(1); /lib/modules/<release>"])
    return finding(cid, Status.ok, f"Running the newest installed kernel ({kr.value})", evidence_=evs)


def _version(ctx: Context) -> Finding:
    kr = ctx.facts.kernel_release()
    if kr is None:
        return unknown("kernel.version", "Running kernel: not captured", "Needs uname -r or /proc/sys/kernel/osrelease.")
    kv = KernelVersion.parse(kr.value)
    if kv is None:
        return unknown("kernel.version", "Running kernel version unreadable", f"{kr.value!r} is not a kernel release; needs uname -r.", evidence_=evidence(kr))
    gates = {
        "amd_pstate passive (6.1)": kv.at_least(6, 1),
        "amd_pstate active/EPP (6.3)": kv.at_least(6, 3),
        "amd_pstate guided (6.4)": kv.at_least(6, 4),
        "pci=disable_acs_redir (5.1)": kv.at_least(5, 1),
    }
    avail = [k for k, v in gates.items() if v]
    return finding("kernel.version", Status.ok, f"Kernel {kr.value}", evidence_=evidence(kr),
                   impact="Feature gates available: " + (", ".join(avail) if avail else "none of the tracked ones"), details={"feature_gates": gates})


def _cmdline(ctx: Context) -> Finding:
    cl = ctx.facts.cmdline()
    if cl is None:
        return unknown("kernel.cmdline", "Kernel command line: not captured", "Needs cat /proc/cmdline.")
    bad = []
    for tok in cl.value.split():
        if tok.startswith("pci="):
            for opt in tok[4:].split(","):
                if opt.split("=")[0] not in KNOWN_PCI_OPTS:
                    bad.append(opt)
    if bad:
        return finding("kernel.cmdline", Status.actionable, f"Kernel ignores pci= option(s): {', '.join(bad)}",
                       evidence_=evidence(cl),
                       impact="The kernel logs 'PCI: Unknown option' and ignores these; whatever they were meant to do is not happening (pci=noacs in particular does nothing; use pci=disable_acs_redir=<BDFs>).",
                       remedy=Remedy(persist=["remove or correct the option on the kernel command line, reboot"]),
                       references=["Documentation/admin-guide/kernel-parameters.txt: pci="])
    return finding("kernel.cmdline", Status.ok, "Kernel command line has no ignored pci= options", evidence_=evidence(cl))


def investigate(ctx: Context) -> list[Finding]:
    """kernel.pending_reboot, kernel.version, kernel.cmdline."""
    return [_pending_reboot(ctx), _version(ctx), _cmdline(ctx)]
