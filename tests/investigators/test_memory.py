"""memory investigator: pcie.bar1 per GPU (nvidia-smi -q), mem.thp and mem.host (sysfs, meminfo)."""

from __future__ import annotations

from tests.investigators.memsnap import MemorySnapshot, audit_ids, host_cmds, host_files, one, replaced, statuses

SEED = "seed-8x-rtxpro6000"
THP = "/sys/kernel/mm/transparent_hugepage/"


def test_bar1_of_every_gpu_from_nvidia_smi_q_is_ok() -> None:
    found = audit_ids(MemorySnapshot({}, cmds=host_cmds(SEED, "nvsmi_q")), "memory")
    assert statuses(found, "pcie.bar1") == ["ok"] * 8
    f = found["pcie.bar1"][0]
    assert f.subject == "0000:01:00.0" and f.title.endswith("BAR1 128 GiB")
    assert (f.evidence[0].source, f.evidence[0].value) == ("cmds/nvsmi_q.out", "BAR1 total 128 GiB")


def test_256_mib_bar1_on_eight_gpus_is_p1_bios() -> None:
    q = replaced(host_cmds(SEED, "nvsmi_q")["nvsmi_q"], "Total                                          : 131072 MiB",
                 "Total                                          : 256 MiB")
    found = audit_ids(MemorySnapshot({}, cmds={"nvsmi_q": q}), "memory")
    fs = [f for f in found["pcie.bar1"] if f.title.endswith("(no Resizable BAR)")]
    assert len(fs) == 8
    assert {(f.status, f.severity, f.fix_kind) for f in fs} == {("actionable", "P1", "bios")}
    assert "Resizable BAR" in fs[0].remedy.note


def test_256_mib_bar1_on_one_gpu_is_p2() -> None:
    q = replaced(host_cmds("h200-1gpu", "nvsmi_q")["nvsmi_q"], "262144 MiB", "256 MiB")
    f = one(audit_ids(MemorySnapshot({}, cmds={"nvsmi_q": q}), "memory"), "pcie.bar1")
    assert (f.status, f.severity, f.subject) == ("actionable", "P2", "0000:00:06.0")


def test_bar1_absent_from_the_plain_table_is_unknown() -> None:
    found = audit_ids(MemorySnapshot({}, cmds=host_cmds(SEED, "nvsmi")), "memory")
    assert statuses(found, "pcie.bar1") == ["unknown"] * 8
    assert "nvidia-smi -q" in (found["pcie.bar1"][0].impact or "")


def test_thp_mode_is_reported_ok_with_both_files() -> None:
    f = one(audit_ids(MemorySnapshot(host_files(SEED, THP)), "memory"), "mem.thp")
    assert f.status == "ok" and f.title == "Transparent huge pages: madvise"
    assert [e.source for e in f.evidence] == [f"files{THP}enabled", f"files{THP}defrag"]


def test_thp_missing_is_unknown() -> None:
    f = one(audit_ids(MemorySnapshot({}), "memory"), "mem.thp")
    assert f.status == "unknown" and "transparent_hugepage/enabled" in (f.impact or "")


def test_host_memory_against_gpu_memory() -> None:
    found = audit_ids(MemorySnapshot(host_files(SEED, "/proc/meminfo"), cmds=host_cmds(SEED, "nvsmi_q")), "memory")
    f = one(found, "mem.host")
    assert f.status == "ok" and f.title.startswith("512 GiB host memory for ")
    assert f.evidence[0].source == "files/proc/meminfo" and f.evidence[0].value == "MemTotal 536870912 kB, SwapTotal 8388608 kB"
    assert f.details["host_B"] == 536870912 * 1024 and f.details["gpu_B"] > 8 * 90 * 2**30


def test_host_memory_without_meminfo_is_unknown_with_the_command() -> None:
    f = one(audit_ids(MemorySnapshot({}), "memory"), "mem.host")
    assert f.status == "unknown" and "cat /proc/meminfo" in (f.impact or "")
    f = one(audit_ids(MemorySnapshot({"/proc/meminfo": "HugePages_Total:       0\n"}), "memory"), "mem.host")
    assert f.status == "unknown" and "no MemTotal" in (f.impact or "")


def test_host_memory_never_invents_a_swap_size() -> None:
    meminfo = "\n".join(l for l in host_files(SEED, "/proc/meminfo")["/proc/meminfo"].splitlines() if not l.startswith("Swap")) + "\n"
    f = one(audit_ids(MemorySnapshot({"/proc/meminfo": meminfo}), "memory"), "mem.host")
    assert f.status == "ok" and f.evidence[0].value == "MemTotal 536870912 kB, no SwapTotal line"
