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
    assert len(f.remedy.commands) == len(f.remedy.revert) == 1 and "state2/disable" in f.remedy.revert[0]


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
