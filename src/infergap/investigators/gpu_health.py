"""GPU health: ECC and pending repairs, clocks, power limit, throttle reasons, thermals, MIG,
compute mode. Also the single "no NVIDIA GPU" finding of a host without one.

Sources: NVML (nvml.h: ``nvmlClocksEventReason*`` bits 0x1 idle, 0x4 SW power cap, 0x8 HW slowdown,
0x20 SW thermal, 0x40 HW thermal, 0x80 HW power brake; temperature thresholds), ``nvidia-smi -q -x``.
Clocks are judged only when the GPU is busy (idle downclocking is normal): >= 90 % of the maximum SM
clock under load is ok (the seed host ran at 96-97 %). Thermal headroom < 10 °C to the slowdown
threshold is flagged; a thermal slowdown active now is P0 whatever the temperature. ``nvidia-smi -q``
"Clocks Event Reasons Counters" (µs of each slowdown since the driver loaded) of 60 s or more of
thermal/hardware slowdown is reported as past throttling (P1). No check says ok without the fields it
judges: topo -m or the plain table alone give unknown, with the command that would tell.
"""

from __future__ import annotations

from collections import Counter

from infergap import checks
from infergap.facts import GpuFacts
from infergap.findings import Finding, FixKind, Remedy, Severity, Status
from infergap.investigators.base import Context, evidence, finding, not_applicable, unknown

NAME = "gpu_health"
CLOCK_OK_RATIO = checks.threshold("gpu.clocks", "min_fraction_of_max_under_load")
THERMAL_HEADROOM_C = checks.threshold("gpu.thermals", "headroom_below_slowdown_c")
#: Accumulated thermal/hardware slowdown (clocks-event counters) from which past throttling is
#: reported: 60 s. Below that, short transients (a fan spinning up) are not worth a finding.
PAST_THROTTLE_US = checks.threshold("gpu.throttle", "past_slowdown_us")
BAD_THROTTLE = frozenset(checks.get("gpu.throttle").lists["slowdown_reasons"])


def _src(g: GpuFacts, *fields: str) -> str:
    return g.src(*fields) if fields else (g.sources[-1] if g.sources else "nvidia-smi")


def _idle(g: GpuFacts) -> bool:
    return "gpu_idle" in g.throttle_active or (g.utilization_pct is not None and g.utilization_pct < 5)


def _ecc(g: GpuFacts) -> Finding:
    cid = "gpu.ecc"
    if g.ecc_current is None:
        return unknown(cid, f"GPU {g.bdf}: ECC state not captured", "Needs NVML or nvidia-smi -q.", subject=g.bdf)
    evs = evidence((_src(g, "ecc_current"), f"ECC {'Enabled' if g.ecc_current else 'Disabled'}; volatile uncorrectable {g.ecc_volatile_uncorrected}; remap pending {g.remap_pending}; retirement pending {g.retired_pending}"))
    if (g.ecc_volatile_uncorrected or 0) > 0 or g.remap_pending or g.retired_pending or g.remap_failure:
        return finding(cid, Status.actionable, f"GPU {g.bdf}: uncorrectable memory errors or a pending repair", severity=Severity.P0,
                       subject=g.bdf, evidence_=evs, expected_value="0 uncorrectable, nothing pending",
                       impact="Pending page retirement / row remapping takes effect only after a GPU reset; until then the faulty memory can corrupt results or crash the engine.",
                       remedy=checks.remedy("gpu.ecc", commands=[("reset", {"bdf": g.bdf})], note="If errors recur after reset, RMA the GPU."),
                       references=["NVIDIA GPU memory error management (dynamic page retirement, row remapping)"])
    if not g.ecc_current:
        return finding(cid, Status.actionable, f"GPU {g.bdf}: ECC is disabled", severity=Severity.P2, fix_kind=FixKind.reboot, subject=g.bdf,
                       evidence_=evs, expected_value="Enabled",
                       impact="Without ECC a memory error silently corrupts weights or KV cache; the capacity/bandwidth ECC costs is small on HBM GPUs.",
                       remedy=checks.remedy("gpu.ecc", commands=[("enable", {"bdf": g.bdf})], note="Takes effect after a GPU reset or reboot.", revert=[("disable", {"bdf": g.bdf})]))
    if g.ecc_volatile_uncorrected is None or (g.remap_pending is None and g.retired_pending is None):
        return unknown(cid, f"GPU {g.bdf}: ECC on; uncorrectable error counts or pending repairs not captured",
                       "Needs nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT (or -q -x, NVML) to rule out errors and pending repairs.", subject=g.bdf, evidence_=evs)
    return finding(cid, Status.ok, f"GPU {g.bdf}: ECC on, no uncorrectable errors, nothing pending", subject=g.bdf, evidence_=evs, expected_value="Enabled")


def _clocks(g: GpuFacts) -> Finding:
    cid = "gpu.clocks"
    if g.sm_clock_MHz is None or not g.sm_clock_max_MHz:
        return unknown(cid, f"GPU {g.bdf}: SM clocks not captured", "Needs NVML or nvidia-smi.", subject=g.bdf)
    ratio = g.sm_clock_MHz / g.sm_clock_max_MHz
    evs = evidence((_src(g, "sm_clock_MHz"), f"SM {g.sm_clock_MHz:g} MHz of max {g.sm_clock_max_MHz:g} MHz ({ratio:.0%}); reasons: {', '.join(g.throttle_active) or 'none'}"))
    if _idle(g):
        return finding(cid, Status.expected, f"GPU {g.bdf}: idle, SM clock {ratio:.0%} of max", subject=g.bdf, evidence_=evs,
                       impact="Idle GPUs lower their clocks; clocks are only meaningful under load (infergap bench samples them while the load runs).")
    if ratio >= CLOCK_OK_RATIO:
        return finding(cid, Status.ok, f"GPU {g.bdf}: SM clock {ratio:.0%} of max under load", subject=g.bdf, evidence_=evs, expected_value=f">= {CLOCK_OK_RATIO:.0%} of max")
    if g.utilization_pct is None and not g.throttle_captured:
        return unknown(cid, f"GPU {g.bdf}: SM clock {ratio:.0%} of max; whether the GPU was busy is not known", "Needs the utilization or the clock event reasons "
                       "(nvidia-smi -q -d UTILIZATION,PERFORMANCE) sampled while the server is under load.", subject=g.bdf, evidence_=evs)
    return finding(cid, Status.actionable, f"GPU {g.bdf}: SM clock only {ratio:.0%} of max while busy", fix_kind=FixKind.hardware,
                   subject=g.bdf, evidence_=evs, expected_value=f">= {CLOCK_OK_RATIO:.0%} of max",
                   impact="The GPU runs below its boost clock under load; see gpu.throttle and gpu.thermals for the reason.",
                   remedy=Remedy(note="Check cooling, power delivery and application clocks (nvidia-smi -q -d CLOCK,PERFORMANCE)."))


def _power(g: GpuFacts) -> Finding:
    cid = "gpu.power_limit"
    if g.power_limit_W is None:
        return unknown(cid, f"GPU {g.bdf}: power limit not captured", "Needs NVML or nvidia-smi.", subject=g.bdf)
    # Without the default, only a limit at the maximum rules out a lowered one (default <= max);
    # a limit below the maximum may be the default itself (e.g. 450 W default, 600 W maximum).
    ref = g.power_default_limit_W or (g.power_max_limit_W if g.power_max_limit_W and g.power_limit_W >= g.power_max_limit_W - 1 else None)
    evs = evidence((_src(g, "power_limit_W"), f"limit {g.power_limit_W:g} W, default {g.power_default_limit_W}, max {g.power_max_limit_W}, draw {g.power_W}"))
    if ref and g.power_limit_W < ref - 1:
        return finding(cid, Status.actionable, f"GPU {g.bdf}: power limit {g.power_limit_W:g} W below the default {ref:g} W", subject=g.bdf, evidence_=evs, expected_value=f"{ref:g} W",
                       impact="A lowered power limit caps clocks under load (SW power cap); decode and prefill slow down proportionally once the GPU is compute- or power-bound.",
                       remedy=checks.remedy("gpu.power_limit", commands=[("set", {"bdf": g.bdf, "watts": f"{ref:g}"})], revert=[("set", {"bdf": g.bdf, "watts": f"{g.power_limit_W:g}"})], note="Leave it if it was lowered on purpose (facility power or cooling)."))
    if not ref:
        return unknown(cid, f"GPU {g.bdf}: power limit {g.power_limit_W:g} W; the default limit is not captured",
                       "Needs nvidia-smi -q -d POWER (or -q -x, NVML) for the default and maximum limits.", subject=g.bdf, evidence_=evs)
    return finding(cid, Status.ok, f"GPU {g.bdf}: power limit {g.power_limit_W:g} W (default)", subject=g.bdf, evidence_=evs, expected_value=f"{ref:g} W" if ref else None)


def _throttle(g: GpuFacts) -> Finding:
    cid = "gpu.throttle"
    if not g.throttle_captured and not g.throttle_counters_us:
        return unknown(cid, f"GPU {g.bdf}: clock event (throttle) reasons not captured",
                       "Needs nvidia-smi -q -d PERFORMANCE (or -q / -q -x, NVML); this evidence has no clock data.", subject=g.bdf)
    # The counters alone (a pasted "Clocks Event Reasons Counters" block) judge the past, not the moment.
    bad = sorted(set(g.throttle_active) & BAD_THROTTLE)
    src = g.src("throttle_active", "throttle_captured")
    evs = evidence((src, "active: " + (", ".join(g.throttle_active) or "none"))) if g.throttle_captured else []
    past = {k: v for k, v in g.throttle_counters_us.items() if k in BAD_THROTTLE and v >= PAST_THROTTLE_US}
    if past:
        evs += evidence((g.src("throttle_counters_us"), "accumulated: " + ", ".join(f"{k} {v / 1e6:,.1f} s" for k, v in sorted(past.items()))))
    if bad:
        return finding(cid, Status.actionable, f"GPU {g.bdf}: clocks slowed by {', '.join(bad)}", severity=Severity.P0, subject=g.bdf,
                       evidence_=evs, expected_value="no thermal or hardware slowdown",
                       impact="Thermal or hardware slowdown cuts the SM clock far below boost; every kernel runs slower.",
                       remedy=Remedy(note="Check airflow, fan/coolant, PSU and power-brake signals; nvidia-smi -q -d PERFORMANCE shows the counters."))
    if past:
        total = sum(past.values()) / 1e6
        return finding(cid, Status.actionable, f"GPU {g.bdf}: has throttled in the past ({', '.join(sorted(past))}: {total:,.0f} s accumulated), not at this moment",
                       severity=Severity.P1, subject=g.bdf, evidence_=evs, expected_value=f"< {PAST_THROTTLE_US / 1e6:g} s of thermal or hardware slowdown",
                       impact="The clocks-event counters add up the time each slowdown was engaged since the driver loaded: this GPU ran slowed for that long, "
                              "most likely under load. A snapshot taken at idle does not show it; sample nvidia-smi -q -d PERFORMANCE while the server is busy.",
                       remedy=Remedy(note="Check airflow, fan/coolant and power delivery; compare with the other GPUs' counters."),
                       references=["nvidia-smi -q: Clocks Event Reasons Counters (NVML nvmlDeviceGetFieldValues, clock-event reason counters in µs)"])
    if "sw_power_cap" in g.throttle_active:
        return finding(cid, Status.expected, f"GPU {g.bdf}: at its software power cap", subject=g.bdf, evidence_=evs,
                       impact="Drawing the full power limit under heavy load is normal for compute-bound work.")
    when = (" (now or accumulated)" if g.throttle_captured else " accumulated since the driver loaded (the current reasons are not in the evidence)") if g.throttle_counters_us else ""
    return finding(cid, Status.ok, f"GPU {g.bdf}: no thermal or hardware slowdown" + when, subject=g.bdf,
                   evidence_=evs + (evidence((g.src("throttle_counters_us"), "accumulated thermal/HW slowdown: " + ", ".join(f"{k} {v:g} us" for k, v in sorted(g.throttle_counters_us.items()) if k in BAD_THROTTLE))) if g.throttle_counters_us else []))


def _thermals(g: GpuFacts) -> Finding:
    cid = "gpu.thermals"
    if g.temperature_C is None:
        return unknown(cid, f"GPU {g.bdf}: temperature not captured", "Needs NVML or nvidia-smi.", subject=g.bdf)
    evs = evidence((g.src("temperature_C"), f"{g.temperature_C:g} °C, slowdown at {g.temp_slowdown_C}"))
    thermal = sorted(set(g.throttle_active) & {"sw_thermal_slowdown", "hw_thermal_slowdown"})
    if thermal:
        evs += evidence((g.src("throttle_active"), "active: " + ", ".join(thermal)))
        return finding(cid, Status.actionable, f"GPU {g.bdf}: {g.temperature_C:g} °C and thermally throttling ({', '.join(thermal)})", severity=Severity.P0, subject=g.bdf, evidence_=evs, expected_value="no thermal slowdown",
                       impact="The GPU is hot enough that the driver lowers its clocks right now; every kernel runs slower until cooling catches up.",
                       remedy=Remedy(note="Improve cooling: airflow, fan curves, coolant, inlet temperature; check that the GPU's neighbours are not blowing hot air into it."))
    if g.temp_slowdown_C is not None and g.temperature_C > g.temp_slowdown_C - THERMAL_HEADROOM_C:
        return finding(cid, Status.actionable, f"GPU {g.bdf}: {g.temperature_C:g} °C, within {THERMAL_HEADROOM_C} °C of slowdown", severity=Severity.P1, subject=g.bdf, evidence_=evs, expected_value=f"< {g.temp_slowdown_C - THERMAL_HEADROOM_C:g} °C",
                       impact="Close to the slowdown threshold the GPU will throttle under sustained load.", remedy=Remedy(note="Improve cooling."))
    if g.temp_slowdown_C is None or not g.throttle_captured:
        missing = "its slowdown threshold" if g.temp_slowdown_C is None else "whether a thermal slowdown is active"
        return unknown(cid, f"GPU {g.bdf}: {g.temperature_C:g} °C; {missing} not captured",
                       "Needs nvidia-smi -q -d TEMPERATURE,PERFORMANCE (or -q -x, NVML) to compare the temperature with the slowdown threshold and the throttle reasons.",
                       subject=g.bdf, evidence_=evs)
    evs += evidence((g.src("throttle_active", "throttle_captured"), "no thermal slowdown active"))
    return finding(cid, Status.ok, f"GPU {g.bdf}: {g.temperature_C:g} °C, {g.temp_slowdown_C - g.temperature_C:g} °C below slowdown", subject=g.bdf, evidence_=evs)


def _modes(g: GpuFacts) -> list[Finding]:
    out = []
    if g.mig_current is not None:
        if g.mig_current == "Enabled":
            out.append(finding("gpu.mig", Status.actionable, f"GPU {g.bdf}: MIG is enabled", subject=g.bdf,
                               evidence_=evidence((_src(g, "mig_current"), "MIG Enabled")), impact="An inference server that expects whole GPUs sees only MIG slices.",
                               remedy=checks.remedy("gpu.mig", commands=[("set", {"bdf": g.bdf, "mode": "0"})], revert=[("set", {"bdf": g.bdf, "mode": "1"})], note="Needs a GPU reset; leave it if slicing is intended.")))
        else:
            out.append(finding("gpu.mig", Status.ok, f"GPU {g.bdf}: MIG {g.mig_current}", subject=g.bdf, evidence_=evidence((_src(g, "mig_current"), g.mig_current))))
    if g.compute_mode is not None:
        if g.compute_mode in ("Exclusive_Process", "Exclusive_Thread", "Prohibited"):
            out.append(finding("gpu.compute_mode", Status.actionable, f"GPU {g.bdf}: compute mode {g.compute_mode}", subject=g.bdf, evidence_=evidence((_src(g, "compute_mode"), g.compute_mode)), impact="Engines that open several contexts per GPU (workers, NCCL, graphs) fail without MPS.",
                               remedy=checks.remedy("gpu.compute_mode", commands=[("set", {"bdf": g.bdf, "mode": "DEFAULT"})], revert=[("set", {"bdf": g.bdf, "mode": g.compute_mode.upper()})])))
        else:
            out.append(finding("gpu.compute_mode", Status.ok, f"GPU {g.bdf}: compute mode {g.compute_mode}", subject=g.bdf, evidence_=evidence((_src(g, "compute_mode"), g.compute_mode))))
    return out


def _vgpu_license(g: GpuFacts) -> list[Finding]:
    """gpu.vgpu_license of a GPU whose ``nvidia-smi -q`` shows the ``vGPU Software Licensed
    Product`` section: ok when Licensed, actionable otherwise. NVIDIA's licensing guide: an
    unlicensed vGPU runs at full capability for 20 minutes, then its performance is restricted
    (frame rate capped, GPU resource allocations limited)."""
    if g.vgpu_license is None:
        return []
    cid = "gpu.vgpu_license"
    what = f"{g.vgpu_product or 'vGPU software'}: {g.vgpu_license}"
    ev = evidence((_src(g, "vgpu_license"), f"License Status: {g.vgpu_license}" + (f" ({g.vgpu_product})" if g.vgpu_product else "")))
    if g.vgpu_license.startswith("Licensed"):
        return [finding(cid, Status.ok, f"GPU {g.bdf}: {what}", subject=g.bdf, evidence_=ev, expected_value="Licensed")]
    return [finding(cid, Status.actionable, f"GPU {g.bdf}: the vGPU is not licensed ({g.vgpu_license})", subject=g.bdf, evidence_=ev,
                    expected_value="Licensed",
                    impact="An unlicensed vGPU runs at full capability only for its first 20 minutes; after that NVIDIA's driver restricts it "
                           "(GPU resource allocations limited, frame rate capped), so an inference server slows to a crawl after start-up.",
                    remedy=Remedy(commands=["place the client configuration token in /etc/nvidia/ClientConfigToken/ (NVIDIA License System)",
                                            "set FeatureType in /etc/nvidia/gridd.conf, then: systemctl restart nvidia-gridd",
                                            "nvidia-smi -q | grep -A2 'vGPU Software Licensed Product'"],
                                  note="In Kubernetes the GPU Operator's driver takes the licence from its licensingConfig (a ConfigMap with gridd.conf and the token)."),
                    references=["https://docs.nvidia.com/vgpu/latest/grid-licensing-user-guide/index.html",
                                "https://github.com/NVIDIA/gpu-operator/issues/220"])]


#: dcgmi diag sections whose failure is the GPU's (or its link's) own, not the software around it
#: (DCGM user guide, "Run Levels and Tests": deployment checks the environment; integration,
#: hardware and stress exercise the GPU, its memory and its PCIe/NVLink links).
_DCGM_HW_SECTIONS = ("Integration", "Hardware", "Stress")


def _dcgm_diag(ctx: Context) -> list[Finding]:
    """gpu.health from each pasted ``dcgmi diag`` table: a GPU failing a test is actionable (P0
    for an integration, hardware or stress test, P1 for a deployment check), a warning P2, with
    the test, the section and dcgmi's own message for that GPU; every test passing, a hardware or
    integration test among them, is ok; deployment checks alone say nothing of the GPU."""
    out: list[Finding] = []
    for part, d in ctx.facts.parsed("dcgmi_diag"):
        bad = d.results("Fail") or d.results("Warn")
        if bad:
            out += _dcgm_bad(part.label, d, bad)
            continue
        passed = d.results("Pass")
        hw = sorted({t.name for t, _ in passed if t.section in _DCGM_HW_SECTIONS})
        if hw:
            out.append(finding("gpu.health", Status.ok, f"dcgmi diag: every test passed ({', '.join(hw)} among them)", subject=part.label,
                               evidence_=evidence((part.label, f"{len(passed)} (test, GPU) results Pass: " + ", ".join(sorted({t.name for t, _ in passed}))))))
        elif passed:
            out.append(unknown("gpu.health", "dcgmi diag: only deployment checks in the paste",
                               "The pasted rows pass, but none is a hardware, integration or stress test; paste the whole table of dcgmi diag -r 2 (or -r 3).",
                               subject=part.label, evidence_=evidence((part.label, ", ".join(sorted({t.name for t, _ in passed}))))))
    return out


def _dcgm_bad(label: str, d, bad: list) -> list[Finding]:
    """One gpu.health finding per GPU that failed (or warned in) a ``dcgmi diag`` test."""
    by_gpu: dict[str, list] = {}
    for t, g in bad:
        by_gpu.setdefault(g, []).append(t)
    out = []
    for g, tests in sorted(by_gpu.items()):
        word = tests[0].gpus[g]
        hw = any(t.section in _DCGM_HW_SECTIONS for t in tests)
        sev = Severity.P2 if word == "Warn" else Severity.P0 if hw else Severity.P1
        who = "every GPU" if g == "all" else f"GPU {g}"
        notes = [n for n in d.notes if n.kind == "Warning" and (n.gpu == g or g == "all")] + [n for n in d.notes if n.kind == "Info" and n.gpu == g]
        ev = [(label, f"{t.section or 'dcgmi diag'} / {t.name}: {word} ({who})") for t in tests] + [(label, f"{n.kind}: {n.text}") for n in notes[:3]]
        out.append(finding("gpu.health", Status.actionable, f"dcgmi diag: {who} {'fails' if word == 'Fail' else 'warns in'} {', '.join(t.name for t in tests)}",
                           subject=f"GPU{g}" if g != "all" else label, severity=sev, fix_kind=FixKind.hardware if hw else FixKind.software,
                           evidence_=evidence(*ev), expected_value="Pass in every test",
                           impact="DCGM's diagnostic exercised the GPU and it did not pass: a GPU that fails its memory, PCIe or stress tests gives wrong "
                                  "results, errors or stalls under an inference load; the message says what failed.",
                           remedy=checks.remedy("gpu.health", commands=[("error_state", {"gpu": g}) if g != "all" else ("error_state_all", {}),
                                                                        "dmesg | grep -E 'NVRM|Xid'", "drain the GPU, nvidia-smi -r (reset), then dcgmi diag -r 3 again"],
                                                note="A failure that stays after a reset and a re-run is one for the vendor (RMA), with the dcgmi diag output and nvidia-bug-report.log."),
                           references=["https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html"]))
    return out


def _device_plugin(ctx: Context) -> Finding | None:
    """gpu.present from a pasted NVIDIA device plugin log: NVML not loadable in its container, or
    loaded with no GPU (``internal/rm/rm.go``, ``internal/plugin/factory.go`` of
    NVIDIA/k8s-device-plugin); None when no such log says either."""
    for part, f in ctx.facts.device_plugin_logs():
        if f.nvml_error is None and not f.no_devices:
            continue
        key = "nvml_error" if f.nvml_error is not None else "no_devices"
        ev = [(part.label, f.evidence[key])] + ([(part.label, f.evidence["mig_strategy"])] if f.mig_strategy else [])
        title = (f"The Kubernetes device plugin could not load NVML: {f.nvml_error}" if f.nvml_error is not None
                 else "The Kubernetes device plugin found no GPU")
        return finding("gpu.present", Status.actionable, title, evidence_=evidence(*ev), severity=Severity.P0, fix_kind=FixKind.software,
                       expected_value="NVML loaded in the plugin's container and nvidia.com/gpu registered with the kubelet",
                       impact="The node advertises no nvidia.com/gpu: pods asking for GPUs stay Pending, and a container started without the NVIDIA runtime sees no GPU"
                              + (f"; mig-strategy {f.mig_strategy} needs NVML too." if f.mig_strategy and f.mig_strategy != "none" else "."),
                       remedy=Remedy(commands=["nvidia-ctk runtime configure --runtime=containerd --set-as-default  (or --runtime=docker)",
                                               "systemctl restart containerd", "kubectl -n kube-system delete pod <device-plugin pod>"]),
                       references=["https://github.com/NVIDIA/k8s-device-plugin#prerequisites",
                                   "https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html"])
    return None


def _mig_listed(ctx: Context, found: list[Finding]) -> list[Finding]:
    """gpu.mig of each GPU a pasted ``nvidia-smi mig -lgi``/``-lci`` shows split into instances,
    unless the GPU's MIG mode is already judged from its own record."""
    judged = any(f.id == "gpu.mig" for f in found)
    out = []
    for part, rows in ctx.facts.mig_instances():
        by_gpu: dict[int, list[dict]] = {}
        for r in rows:
            by_gpu.setdefault(r["gpu"], []).append(r)
        for gpu, rs in sorted(by_gpu.items()):
            if judged:
                continue
            gis = [r for r in rs if r["kind"] == "gpu_instance"] or rs
            profiles = ", ".join(f"{n}× {p}" for p, n in sorted(Counter(r["profile"] for r in gis).items()))
            out.append(finding("gpu.mig", Status.actionable, f"GPU {gpu} is split into {len(gis)} MIG instance(s): {profiles}", subject=f"GPU{gpu}",
                               evidence_=evidence(*((part.label, f"GPU {gpu} MIG {r['profile']} (profile {r['profile_id']}, instance {r['id']}, placement {r['placement']})") for r in gis[:8])),
                               impact="An inference server on this GPU gets one slice (the profile's compute slices and memory), and a MIG instance has no "
                                      "peer-to-peer or NVLink to another: tensor parallelism across instances falls back to copies through host memory.",
                               remedy=checks.remedy("gpu.mig", commands=[("destroy_ci", {"gpu": gpu}), ("destroy_gi", {"gpu": gpu}), ("set_index", {"gpu": gpu, "mode": 0})],
                                                    revert=[("set_index", {"gpu": gpu, "mode": 1})], note="Needs a GPU reset; leave it if slicing is intended."),
                               references=["https://docs.nvidia.com/datacenter/tesla/mig-user-guide/"]))
    return out


def investigate(ctx: Context) -> list[Finding]:
    """gpu.present (only when absent), and per GPU gpu.ecc, gpu.clocks, gpu.power_limit,
    gpu.throttle, gpu.thermals, gpu.mig (also from a pasted ``nvidia-smi mig -lgi``),
    gpu.compute_mode, gpu.vgpu_license (a vGPU's licence); gpu.health also from a pasted
    ``dcgmi diag`` table."""
    found = _by_gpu(ctx)
    return found + _mig_listed(ctx, found) + _dcgm_diag(ctx)


def _by_gpu(ctx: Context) -> list[Finding]:
    gpus = ctx.facts.gpus()
    plugin = _device_plugin(ctx) if not gpus else None
    if plugin is not None:
        return [plugin]
    if not gpus and not ctx.facts.pci_inventory_captured() and ctx.facts.nvml() is None and ctx.facts.pci_pasted() and ctx.facts.pci_functions():
        return [unknown("gpu.present", "No NVIDIA GPU in the pasted PCI list, which may be filtered",
                        "A pasted lspci is often a part of the list (lspci | grep …); whether the host has NVIDIA GPUs needs the whole list (lspci -nn) or nvidia-smi.",
                        evidence_=evidence((ctx.facts.pci_pasted(), f"{len(ctx.facts.pci_functions())} PCI functions, none an NVIDIA GPU")))]
    if not gpus and not ctx.facts.pci_inventory_captured() and ctx.facts.nvml() is None:
        return [unknown("gpu.present", "GPU inventory not captured",
                        "Neither the PCI device list (sysfs, lspci) nor NVML or nvidia-smi output is in this evidence, so whether the host has NVIDIA GPUs is not known.")]
    denied = ctx.facts.unreadable_under("/sys/bus/pci") + ctx.facts.unreadable_under("cmds/lspci") + ctx.facts.unreadable_under("cmds/nvsmi")
    if not gpus and denied:
        path, why = denied[0]
        return [unknown("gpu.present", f"GPU inventory unreadable ({why})",
                        f"{len(denied)} file(s) of the PCI device list or nvidia-smi output could not be read ({path}: {why}), "
                        "so whether the host has NVIDIA GPUs is not known. Run as root or make them readable.")]
    if not gpus:
        nv = ctx.facts.command("nvsmi")
        why = "No NVIDIA GPU on the PCI bus"
        if nv is not None and nv.error:
            why += f"; nvidia-smi: {nv.error}"
        return [not_applicable("gpu.present", "No NVIDIA GPU", why + ". GPU, driver and interconnect checks do not apply to this host.",
                               evidence_=evidence(("files/sys/bus/pci/devices", "no NVIDIA display-class function")))]
    out: list[Finding] = []
    pci_sources = {f.source for f in ctx.facts.gpu_functions()}
    for g in gpus:
        has_data = any(s not in pci_sources for s in g.sources)
        if not has_data:
            out.append(unknown("gpu.health", f"GPU {g.bdf}: no NVML or nvidia-smi data", "The GPU is on the PCI bus but neither NVML nor nvidia-smi output was captured (driver not loaded?).", subject=g.bdf))
            continue
        out += [_ecc(g), _clocks(g), _power(g), _throttle(g), _thermals(g), *_modes(g), *_vgpu_license(g)]
    return out
