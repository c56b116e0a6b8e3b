"""cpu_power investigator: C-states and governor, read from the seed host's real sysfs values."""

from __future__ import annotations

from tests.investigators.memsnap import MemorySnapshot, audit_ids, one

CPU = "/sys/devices/system/cpu"


def _cpus(n: int, governor: str | None, states: list[tuple[str, int, int]]) -> dict[str, str]:
    """sysfs of ``n`` CPUs: each with the cpuidle ``states`` (name, latency µs, disable) and a governor."""
    files = {f"{CPU}/online": f"0-{n - 1}\n"}
    for c in range(n):
        for i, (name, lat, dis) in enumerate(states):
            base = f"{CPU}/cpu{c}/cpuidle/state{i}"
            files.update({f"{base}/name": name + "\n", f"{base}/latency": f"{lat}\n", f"{base}/disable": f"{dis}\n"})
        if governor:
            files[f"{CPU}/cpu{c}/cpufreq/scaling_governor"] = governor + "\n"
            files[f"{CPU}/cpu{c}/cpufreq/scaling_driver"] = "acpi-cpufreq\n"
    return files


SEED_STATES = [("POLL", 0, 0), ("C1", 1, 0), ("C2", 100, 0)]  # seed-8x-rtxpro6000, cpu0/cpuidle


def test_deep_c_state_enabled_is_p1_with_revert_per_state() -> None:
    found = audit_ids(MemorySnapshot(_cpus(2, "performance", SEED_STATES)), "cpu_power")
    f = one(found, "cpu.cstates")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "runtime")
    assert "C2 (100 µs)" in f.title
    assert len(f.remedy.commands) == len(f.remedy.revert) == 1
    assert "= C2 ] && echo 1 > $s/disable" in f.remedy.commands[0] and "= C2 ] && echo 0 > $s/disable" in f.remedy.revert[0]


def test_deep_c_state_disabled_everywhere_is_ok() -> None:
    found = audit_ids(MemorySnapshot(_cpus(2, "performance", [("POLL", 0, 0), ("C1", 1, 0), ("C2", 100, 1)])), "cpu_power")
    assert one(found, "cpu.cstates").status == "ok"


def test_governor_performance_is_ok_powersave_is_actionable() -> None:
    assert one(audit_ids(MemorySnapshot(_cpus(2, "performance", SEED_STATES)), "cpu_power"), "cpu.governor").status == "ok"
    f = one(audit_ids(MemorySnapshot(_cpus(2, "powersave", SEED_STATES)), "cpu_power"), "cpu.governor")
    assert f.status == "actionable" and f.remedy.revert == ["cpupower frequency-set -g powersave"]


def test_nothing_captured_is_unknown() -> None:
    found = audit_ids(MemorySnapshot({}), "cpu_power")
    assert {f.status for fs in found.values() for f in fs} == {"unknown"}


def _zen4(driver: str, release: str | None = "6.8.12-4-pve\n") -> MemorySnapshot:
    """Two CPUs of the seed host's AMD EPYC 9124 (Zen 4) with scaling driver ``driver``."""
    from tests.investigators.memsnap import host_files

    files = _cpus(2, "performance", SEED_STATES)
    files = {k: (driver + "\n" if k.endswith("scaling_driver") else v) for k, v in files.items()}
    files.update(host_files("seed-8x-rtxpro6000", "/proc/cpuinfo"))
    if release:
        files["/proc/sys/kernel/osrelease"] = release
    return MemorySnapshot(files)


def test_acpi_cpufreq_on_zen4_with_a_6_8_kernel_is_p1_reboot() -> None:
    f = one(audit_ids(_zen4("acpi-cpufreq"), "cpu_power"), "cpu.freq_driver")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "reboot")
    assert f.expected_value == "amd-pstate-epp (amd_pstate=active)" and "AMD EPYC 9124 16-Core Processor (family 0x19)" in [e.value for e in f.evidence]


def test_acpi_cpufreq_on_a_kernel_before_amd_pstate_is_expected() -> None:
    f = one(audit_ids(_zen4("acpi-cpufreq", "5.15.0-101-generic\n"), "cpu_power"), "cpu.freq_driver")
    assert f.status == "expected" and f.severity is None


def test_amd_pstate_epp_is_ok() -> None:
    f = one(audit_ids(_zen4("amd-pstate-epp"), "cpu_power"), "cpu.freq_driver")
    assert f.status == "ok" and f.evidence[0].value == "amd-pstate-epp on 2 CPU(s)"
