"""CPU power management: C-states, the cpufreq scaling driver, the governor.

Sources and thresholds:
- cpuidle sysfs (Documentation/admin-guide/pm/cpuidle.rst): ``state*/latency`` is the exit latency
  in µs, ``disable`` per CPU. States with exit latency >= 50 µs hurt the launch latency of the
  threads that feed the GPUs; tuned's accelerator-performance profile holds ``/dev/cpu_dma_latency``
  at 99 µs and latency-performance at 1 µs.
- amd-pstate (Documentation/admin-guide/pm/amd-pstate.rst): passive mode from Linux 6.1, active
  (EPP) from 6.3, guided from 6.4; Zen 2 and later (CPU family 0x17 model >= 0x30, 0x19, 0x1a)
  with CPPC. acpi-cpufreq on such a CPU leaves boost and fine-grained P-states unused.
- governor: Documentation/admin-guide/pm/cpufreq.rst; intel_pstate's ``powersave`` is its own
  algorithm (Documentation/admin-guide/pm/intel_pstate.rst), not the generic powersave governor.
"""

from __future__ import annotations

from infergap import checks
from infergap.findings import Action, Finding, Status
from infergap.investigators.base import Context, evidence, finding, not_applicable, unknown
from infergap.parsers.host import KernelVersion

NAME = "cpu_power"
DEEP_STATE_US = checks.threshold("cpu.cstates", "deep_exit_latency_us")


def _no_cpu_pm(ctx: Context, cid: str, what: str) -> Finding:
    denied = ctx.facts.unreadable_under("/sys/devices/system/cpu")
    if denied:
        path, why = denied[0]
        return unknown(cid, f"{what.capitalize()}: unreadable ({why})",
                       f"{len(denied)} file(s) under /sys/devices/system/cpu could not be read ({path}: {why}); run as root.")
    if ctx.facts.listing("/sys/devices/system/cpu") is None:
        return unknown(cid, f"{what.capitalize()}: not captured", "Needs /sys/devices/system/cpu.")
    vm = ctx.facts.virtualization()
    c = ctx.facts.container()
    where = "a virtual machine" if vm else ("a container" if c.inside else None)
    if where:
        return finding(cid, Status.expected, f"No {what} exposed: the host runs in {where}",
                       evidence_=evidence(vm) if vm else evidence(*c.evidence),
                       impact=f"{what.capitalize()}: managed by the hypervisor or host; inside {where} there is nothing to tune. Check the host if you own it.")
    return not_applicable(cid, f"No {what} exposed", f"The kernel exposes no {what} (driver not loaded or disabled on the command line).")


def _cstates(ctx: Context) -> Finding:
    cid = "cpu.cstates"
    states = ctx.facts.idle_states()
    if not states:
        return _no_cpu_pm(ctx, cid, "cpuidle states")
    deep = [s for s in states if s.latency_us >= DEEP_STATE_US and s.enabled_cpus]
    evs = evidence(*[(f"files/sys/devices/system/cpu/cpu0/cpuidle/state{s.index}", f"{s.name}: latency {s.latency_us} µs, enabled on {len(s.enabled_cpus)} CPU(s), disabled on {len(s.disabled_cpus)}") for s in states])
    if not deep:
        return finding(cid, Status.ok, f"No idle state with exit latency >= {DEEP_STATE_US} µs is enabled", evidence_=evs, expected_value=f"states >= {DEEP_STATE_US} µs disabled")
    host = ctx.in_container
    names = ", ".join(f"{s.name} ({s.latency_us} µs)" for s in deep)
    # The command infergap fix runs for each action (by state name), so report and action agree.
    cmds = [("cpuidle_set_by_name", {"name": s.name, "value": "1"}) for s in deep]
    reverts = [("cpuidle_set_by_name", {"name": s.name, "value": "0"}) for s in deep]
    return finding(cid, Status.actionable, f"Deep C-states enabled: {names}",
        evidence_=evs, expected_value=f"idle states with exit latency >= {DEEP_STATE_US} µs disabled",
        impact="A CPU thread that launches kernels or polls for completions and wakes from a deep state pays its exit latency each time; at batch 1 the GPU waits on those threads every step.",
        remedy=checks.remedy(cid, commands=cmds, persist=["tuned-adm profile accelerator-performance (holds /dev/cpu_dma_latency), or processor.max_cstate=1 on the kernel command line, or disable C-states in the BIOS"],
                      revert=reverts, actions=[Action(type="cpuidle", target=s.name, value="1", previous="0") for s in deep], host_controlled=host,
                      note="Inside a container: cpuidle belongs to the host; run these on the host." if host else "Equivalent: cpupower idle-set -D 10 (revert: cpupower idle-set -E)."),
        references=["Documentation/admin-guide/pm/cpuidle.rst", "tuned: profiles/accelerator-performance/tuned.conf"],
    )


def _zen2_plus(ctx: Context) -> bool:
    vendor, _model, fam = ctx.facts.cpu_vendor_model()
    if vendor != "AuthenticAMD" or fam is None:
        return False
    if fam in (0x19, 0x1A):
        return True
    if fam == 0x17:
        model = ctx.facts.cpu_model_number()
        return model is not None and model >= 0x30
    return False


def _freq_driver(ctx: Context) -> Finding:
    cid = "cpu.freq_driver"
    cf = ctx.facts.cpufreq()
    if cf is None:
        return _no_cpu_pm(ctx, cid, "cpufreq scaling driver")
    drivers = cf["drivers"]
    drv = max(drivers, key=drivers.get) if drivers else None
    evs = evidence(("files/sys/devices/system/cpu/cpu0/cpufreq/scaling_driver", f"{drv} on {drivers.get(drv, 0)} CPU(s)"))
    if cf.get("amd_pstate_status"):
        evs += evidence(("files/sys/devices/system/cpu/amd_pstate/status", cf["amd_pstate_status"]))
    kr = ctx.facts.kernel_release()
    kv = KernelVersion.parse(kr.value) if kr else None
    if drv == "acpi-cpufreq" and _zen2_plus(ctx):
        _v, model, fam = ctx.facts.cpu_vendor_model()
        evs += evidence(("files/proc/cpuinfo", f"{model} (family 0x{fam:x})"), kr)
        if kv is None or kv.at_least(6, 1):
            mode = "active" if kv is None or kv.at_least(6, 3) else "passive"
            return finding(cid, Status.actionable, f"acpi-cpufreq drives a Zen CPU whose kernel offers amd_pstate ({kr.value if kr else 'kernel unknown'})",
                evidence_=evs, expected_value=f"amd-pstate-epp (amd_pstate={mode})",
                impact="acpi-cpufreq exposes only a few coarse P-states; amd_pstate uses CPPC for fine-grained frequency and lets the firmware boost the cores that feed the GPUs.",
                remedy=checks.remedy(cid, persist=[("add", {"mode": mode}), "enable CPPC in the BIOS if /sys/devices/system/cpu/amd_pstate stays absent"],
                                    revert=[("remove", {"mode": mode})], host_controlled=ctx.in_container),
                references=["Documentation/admin-guide/pm/amd-pstate.rst"],
            )
        return finding(cid, Status.expected, "acpi-cpufreq on a Zen CPU: this kernel predates amd_pstate", evidence_=evs,
                       impact="amd_pstate needs Linux 6.1 or later; upgrading the kernel is the way to it.")
    return finding(cid, Status.ok, f"CPU frequency driver {drv}", evidence_=evs)


def _governor(ctx: Context) -> Finding:
    cid = "cpu.governor"
    cf = ctx.facts.cpufreq()
    if cf is None:
        return _no_cpu_pm(ctx, cid, "cpufreq governor")
    govs = cf["governors"]
    evs = evidence(("files/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", ", ".join(f"{g} on {n} CPU(s)" for g, n in govs.items())))
    if cf.get("epp"):
        evs += evidence(("files/sys/devices/system/cpu/cpu0/cpufreq/energy_performance_preference", cf["epp"]))
    bad = {g: n for g, n in govs.items() if g != "performance"}
    if not bad:
        return finding(cid, Status.ok, "CPU governor: performance on every CPU", evidence_=evs, expected_value="performance")
    host = ctx.in_container
    prev = max(bad, key=bad.get)
    return finding(cid, Status.actionable, f"CPU governor is {prev} on {bad[prev]} CPU(s)",
                   evidence_=evs, expected_value="performance",
                   impact="A power-saving governor ramps frequency up only after load appears: the CPU work between GPU steps (scheduling, sampling, detokenizing) runs slower.",
                   remedy=checks.remedy(cid, commands=[("set", {"governor": "performance"})], persist=["tuned-adm profile throughput-performance, or a systemd unit running cpupower at boot"],
                                       revert=[("set", {"governor": prev})], host_controlled=host,
                                 note="intel_pstate's 'powersave' is its own algorithm, not the generic governor." if "intel_pstate" in cf["drivers"] else None),
                   references=["Documentation/admin-guide/pm/cpufreq.rst"])


def investigate(ctx: Context) -> list[Finding]:
    """cpu.cstates, cpu.freq_driver, cpu.governor."""
    return [_cstates(ctx), _freq_driver(ctx), _governor(ctx)]
