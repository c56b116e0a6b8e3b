"""CPU facts: vendor and model, NUMA nodes, cpuidle states, cpufreq driver and governors.

Sources: /proc/cpuinfo, ``/sys/devices/system/node/node*/cpulist`` (else ``numactl -H``),
``/sys/devices/system/cpu/cpu*/cpuidle`` and ``cpufreq``; cpulists are parsed by
:func:`infergap.parsers.host.parse_cpulist`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from infergap.facts.base import FactsBase, memo
from infergap.parsers import host as hp


@dataclass
class IdleState:
    """A cpuidle state as seen on CPUs: name, wake latency in µs, CPUs where it is enabled."""

    index: int
    name: str
    latency_us: int
    enabled_cpus: list[int]
    disabled_cpus: list[int]


class CpuDomain(FactsBase):
    """CPU accessors of :class:`infergap.facts.Facts`."""

    @memo
    def numa_nodes(self) -> dict[int, list[int]] | None:
        """NUMA node -> CPUs, from /sys/devices/system/node/node*/cpulist (or ``numactl -H``)."""
        nodes: dict[int, list[int]] = {}
        for p in self.snap.glob("/sys/devices/system/node/node*/cpulist"):
            m = re.search(r"/node(\d+)/cpulist$", p)
            txt = self.snap.read_value(p)
            if m and txt is not None:
                try:
                    nodes[int(m.group(1))] = hp.parse_cpulist(txt)
                except ValueError:
                    self.problems["files" + p] = f"unreadable cpulist {txt[:40]!r}"
        if nodes:
            return nodes
        r = self.cmd_ok("numactl")
        if r:
            return hp.parse_numactl(r.stdout) or None
        return None

    @memo
    def cpu_vendor_model(self) -> tuple[str | None, str | None, int | None]:
        """(vendor_id, model name, CPU family) from /proc/cpuinfo."""
        t = self.snap.read("/proc/cpuinfo") or ""
        v = re.search(r"^vendor_id\s*:\s*(.+)$", t, flags=re.M)
        m = re.search(r"^model name\s*:\s*(.+)$", t, flags=re.M)
        fam = re.search(r"^cpu family\s*:\s*(\d+)$", t, flags=re.M)
        return (v.group(1).strip() if v else None, m.group(1).strip() if m else None, int(fam.group(1)) if fam else None)

    @memo
    def cpu_model_number(self) -> int | None:
        """The ``model`` number of the first CPU in /proc/cpuinfo (with ``cpu family``, it names the
        generation: AMD family 0x17 model >= 0x30 is Zen 2), or None."""
        t = self.snap.read("/proc/cpuinfo") or ""
        m = re.search(r"^model\s*:\s*(\d+)$", t, flags=re.M)
        return int(m.group(1)) if m else None

    @memo
    def idle_states(self) -> list[IdleState] | None:
        """cpuidle states aggregated over CPUs; None when the host exposes no cpuidle states."""
        paths = self.snap.glob("/sys/devices/system/cpu/cpu*/cpuidle/state*/name")
        if not paths:
            return None
        states: dict[int, IdleState] = {}
        for p in paths:
            m = re.search(r"/cpu(\d+)/cpuidle/state(\d+)/name$", p)
            if not m:
                continue
            cpu, idx = int(m.group(1)), int(m.group(2))
            d = p.rsplit("/", 1)[0]
            name = self.snap.read_value(p) or f"state{idx}"
            lat_s = self.snap.read_value(d + "/latency") or "0"
            dis = self.snap.read_value(d + "/disable") or "0"
            try:
                lat = int(lat_s)
            except ValueError:
                lat = -1
            st = states.setdefault(idx, IdleState(idx, name, lat, [], []))
            (st.disabled_cpus if dis.strip() == "1" else st.enabled_cpus).append(cpu)
        return [states[k] for k in sorted(states)]

    @memo
    def cpufreq(self) -> dict[str, Any] | None:
        """cpufreq: ``drivers``/``governors`` ({value: count of CPUs}), plus amd_pstate status,
        EPP and boost. None when no CPU has a cpufreq directory."""
        drivers: dict[str, int] = {}
        govs: dict[str, int] = {}
        for p in self.snap.glob("/sys/devices/system/cpu/cpu*/cpufreq/scaling_driver"):
            v = self.snap.read_value(p)
            if v:
                drivers[v] = drivers.get(v, 0) + 1
        for p in self.snap.glob("/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor"):
            v = self.snap.read_value(p)
            if v:
                govs[v] = govs.get(v, 0) + 1
        if not drivers and not govs:
            return None
        return {
            "drivers": drivers,
            "governors": govs,
            "amd_pstate_status": self.snap.read_value("/sys/devices/system/cpu/amd_pstate/status"),
            "epp": self.snap.read_value("/sys/devices/system/cpu/cpu0/cpufreq/energy_performance_preference"),
            "boost": self.snap.read_value("/sys/devices/system/cpu/cpufreq/boost"),
            "available_governors": self.snap.read_value("/sys/devices/system/cpu/cpu0/cpufreq/scaling_available_governors"),
        }
