"""kernel_runtime investigator: nmi_watchdog, sched_autogroup, vm.swappiness, socket buffers, from the
seed host's /proc/sys and the H200 capture's sysctl -a."""

from __future__ import annotations

from tests.investigators.memsnap import MemorySnapshot, audit_ids, host_cmds, host_files, one, pasted

SEED = "seed-8x-rtxpro6000"
SYS = "/proc/sys/"


def _seed(**over: str) -> MemorySnapshot:
    files = host_files(SEED, SYS, "/proc/swaps")
    files.update(over)
    return MemorySnapshot(files)


def test_nmi_watchdog_on_is_p2_with_revert() -> None:
    f = one(audit_ids(_seed(), "kernel_runtime"), "kernel.nmi_watchdog")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P2", "runtime")
    assert f.remedy.commands == ["sysctl -w kernel.nmi_watchdog=0"] and f.remedy.revert[0] == "sysctl -w kernel.nmi_watchdog=1"


def test_nmi_watchdog_off_from_sysctl_a_is_ok() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds("h200-1gpu", "sysctl_all")), "kernel_runtime"), "kernel.nmi_watchdog")
    assert f.status == "ok" and f.evidence[0].source == "cmds/sysctl_all.out" and f.evidence[0].value == "0"


def test_autogroup_on_is_expected_off_is_ok() -> None:
    f = one(audit_ids(_seed(), "kernel_runtime"), "kernel.sched_autogroup")
    assert f.status == "expected" and f.severity is None and f.evidence[0].source == "files/proc/sys/kernel/sched_autogroup_enabled"
    f = one(audit_ids(_seed(**{SYS + "kernel/sched_autogroup_enabled": "0\n"}), "kernel_runtime"), "kernel.sched_autogroup")
    assert f.status == "ok"


def test_swappiness_with_swap_in_use_is_p1() -> None:
    f = one(audit_ids(_seed(), "kernel_runtime"), "vm.swappiness")
    assert (f.status, f.severity) == ("actionable", "P1") and f.title == "vm.swappiness is 60 with swap in use"
    assert f.evidence[1].source == "files/proc/swaps" and "in use" in f.evidence[1].value


def test_swappiness_with_swap_unused_is_p2_without_swap_not_applicable() -> None:
    swaps = host_files(SEED, "/proc/swaps")["/proc/swaps"]
    header = swaps.splitlines()[0] + "\n"
    unused = swaps.replace("8388608\t262144", "8388608\t0")
    assert unused != swaps
    f = one(audit_ids(_seed(**{"/proc/swaps": unused}), "kernel_runtime"), "vm.swappiness")
    assert (f.status, f.severity) == ("actionable", "P2")
    f = one(audit_ids(_seed(**{"/proc/swaps": header}), "kernel_runtime"), "vm.swappiness")
    assert f.status == "not_applicable" and f.evidence[1].value == "no swap configured"


def test_swappiness_ten_is_ok() -> None:
    f = one(audit_ids(_seed(**{SYS + "vm/swappiness": "10\n"}), "kernel_runtime"), "vm.swappiness")
    assert f.status == "ok" and f.expected_value == "<= 10"


def test_socket_buffers_kernel_default_is_p2_without_nccl_log() -> None:
    f = one(audit_ids(_seed(), "kernel_runtime"), "net.socket_buffers")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P2", "runtime")
    assert "rmem_max 212992" in f.title and f.impact.startswith("Matters only when NCCL uses its socket transport")
    assert "sysctl -w net.core.wmem_max=16777216" in f.remedy.commands


def test_socket_buffers_on_a_host_without_gpu_do_not_apply() -> None:
    """A live audit of a machine without GPUs listed a P2 to raise buffers that only NCCL between GPU
    nodes uses. The seed host's whole lspci with its NVIDIA functions taken out is such a host."""
    lspci = "".join(ln for ln in host_cmds(SEED, "lspci")["lspci"].splitlines(True) if "NVIDIA" not in ln)
    snap = MemorySnapshot(host_files(SEED, SYS, "/proc/swaps"), cmds={"lspci": lspci})
    f = one(audit_ids(snap, "kernel_runtime"), "net.socket_buffers")
    assert f.status == "not_applicable" and "no NVIDIA GPU" in f.title


def test_socket_buffers_raised_is_ok() -> None:
    big = "16777216\n"
    f = one(audit_ids(_seed(**{SYS + "net/core/rmem_max": big, SYS + "net/core/wmem_max": big}), "kernel_runtime"), "net.socket_buffers")
    assert f.status == "ok" and len(f.evidence) == 4


def test_socket_buffers_not_applicable_when_nccl_stays_inside_the_node() -> None:
    # A public NCCL log of 8 GPUs on one host talking over SHM (no socket channels).
    f = one(audit_ids(pasted("nccl-1817-shm-8gpu.log", base=_seed()), "kernel_runtime"), "net.socket_buffers")
    assert f.status == "not_applicable" and "within one node" in f.title


def test_nothing_captured_is_unknown_for_every_check() -> None:
    found = audit_ids(MemorySnapshot({}), "kernel_runtime")
    assert set(found) == {"kernel.nmi_watchdog", "kernel.sched_autogroup", "vm.swappiness", "net.socket_buffers"}
    assert {f.status for fs in found.values() for f in fs} == {"unknown"}
