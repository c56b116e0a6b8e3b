"""kernel_version investigator: kernel.version, kernel.pending_reboot, kernel.cmdline from the seed
host's uname, /lib/modules and /boot listings and /proc/cmdline."""

from __future__ import annotations

from tests.investigators.memsnap import MemorySnapshot, audit_ids, host_cmds, host_files, one, replaced

SEED = "seed-8x-rtxpro6000"


def _seed(cmdline: str | None = None) -> MemorySnapshot:
    files = host_files(SEED, "/proc/cmdline")
    if cmdline is not None:
        files["/proc/cmdline"] = cmdline
    return MemorySnapshot(files, cmds=host_cmds(SEED, "uname", "modules_installed", "boot_ls"))


def test_newer_installed_kernel_is_p1_reboot() -> None:
    f = one(audit_ids(_seed(), "kernel_version"), "kernel.pending_reboot")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "reboot")
    assert f.expected_value == "6.8.12-13-pve" and "running 6.8.12-4-pve" in f.title
    assert {e.source for e in f.evidence} == {"cmds/uname.out", "cmds/modules_installed.out"}


def test_running_the_newest_kernel_is_ok() -> None:
    mods = replaced(host_cmds(SEED, "modules_installed")["modules_installed"], "6.8.12-13-pve\n", "")
    snap = MemorySnapshot({}, cmds={**host_cmds(SEED, "uname"), "modules_installed": mods})
    f = one(audit_ids(snap, "kernel_version"), "kernel.pending_reboot")
    assert f.status == "ok" and f.evidence[1].value == "6.8.12-4-pve"


def test_installed_kernels_missing_is_unknown_and_nothing_is_unknown() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(SEED, "uname")), "kernel_version"), "kernel.pending_reboot")
    assert f.status == "unknown" and "/lib/modules" in (f.impact or "")
    found = audit_ids(MemorySnapshot({}), "kernel_version")
    assert one(found, "kernel.pending_reboot").status == "unknown"
    # never ok, never silent without the release or the command line: unknown with the command
    assert one(found, "kernel.version").status == "unknown" and "uname -r" in (one(found, "kernel.version").impact or "")
    assert one(found, "kernel.cmdline").status == "unknown" and "cat /proc/cmdline" in (one(found, "kernel.cmdline").impact or "")


def test_unreadable_kernel_release_is_unknown() -> None:
    snap = MemorySnapshot({"/proc/sys/kernel/osrelease": "not-a-release\n"})
    f = one(audit_ids(snap, "kernel_version"), "kernel.version")
    assert f.status == "unknown" and "'not-a-release' is not a kernel release" in (f.impact or "")


def test_kernel_version_lists_feature_gates() -> None:
    f = one(audit_ids(_seed(), "kernel_version"), "kernel.version")
    assert f.status == "ok" and f.title == "Kernel 6.8.12-4-pve"
    assert f.details["feature_gates"]["amd_pstate guided (6.4)"] is True


def test_cmdline_without_pci_options_is_ok() -> None:
    f = one(audit_ids(_seed(), "kernel_version"), "kernel.cmdline")
    assert f.status == "ok" and f.evidence[0].source == "files/proc/cmdline" and "iommu=pt" in f.evidence[0].value


def test_pci_noacs_is_ignored_by_the_kernel_p2() -> None:
    cl = replaced(host_files(SEED, "/proc/cmdline")["/proc/cmdline"], "iommu=pt", "iommu=pt pci=noacs,realloc")
    f = one(audit_ids(_seed(cl), "kernel_version"), "kernel.cmdline")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P2", "reboot")
    assert f.title == "Kernel ignores pci= option(s): noacs"  # realloc is a real option
