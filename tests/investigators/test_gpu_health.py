"""gpu_health investigator: every per-GPU check from the one-H200 capture's nvidia-smi -q (one value
changed per branch), the --query-gpu CSV and the plain table; gpu.present and gpu.health."""

from __future__ import annotations

from tests.investigators.memsnap import MemorySnapshot, audit_ids, host_cmds, host_files, host_text, one, pasted, replaced, statuses

H200 = "h200-1gpu"
SEED = "seed-8x-rtxpro6000"
BDF = "0000:00:06.0"
Q = host_text(H200, "cmds/nvsmi_q.out")
PAD = " " * 40  # nvidia-smi -q pads every key to one column


def _q(*edits: tuple[str, str]) -> dict:
    q = Q
    for old, new in edits:
        q = replaced(q, old, new)
    return audit_ids(MemorySnapshot({}, cmds={"nvsmi_q": q}), "gpu_health")


def _busy(sm_mhz: int) -> tuple[tuple[str, str], ...]:
    """The idle H200 of the capture as if under load at ``sm_mhz``."""
    return (("Idle                                           : Active", "Idle                                           : Not Active"),
            ("GPU                                            : 0 %", "GPU                                            : 97 %"),
            ("SM                                             : 345 MHz", f"SM                                             : {sm_mhz} MHz"))


def test_healthy_idle_h200_every_check_cites_nvidia_smi_q() -> None:
    found = _q()
    assert {k: statuses(found, k) for k in found} == {
        "gpu.ecc": ["ok"], "gpu.clocks": ["expected"], "gpu.power_limit": ["ok"], "gpu.throttle": ["ok"],
        "gpu.thermals": ["ok"], "gpu.mig": ["ok"], "gpu.compute_mode": ["ok"]}
    for fs in found.values():
        assert fs[0].subject == BDF and fs[0].evidence and all(e.source == "cmds/nvsmi_q.out" for e in fs[0].evidence)
    assert one(found, "gpu.thermals").title == f"GPU {BDF}: 35 °C, 50 °C below slowdown"


def test_uncorrectable_ecc_errors_are_p0() -> None:
    f = one(_q(("DRAM Uncorrectable                         : 0", "DRAM Uncorrectable                         : 2")), "gpu.ecc")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "hardware") and "volatile uncorrectable 2" in f.evidence[0].value


def test_pending_row_remap_is_p0() -> None:
    f = one(_q(("        Pending                                        : No", "        Pending                                        : Yes")), "gpu.ecc")
    assert (f.status, f.severity) == ("actionable", "P0") and f.remedy.commands == [f"nvidia-smi -r -i {BDF}   # drain the GPU first"]


def test_ecc_disabled_is_p2_reboot() -> None:
    f = one(_q(("ECC Mode\n        Current                                        : Enabled", "ECC Mode\n        Current                                        : Disabled")), "gpu.ecc")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P2", "reboot") and f.remedy.revert == [f"nvidia-smi -i {BDF} -e 0"]


def test_the_plain_tables_ecc_column_is_read() -> None:
    """A pasted `nvidia-smi` table whose "Volatile Uncorr. ECC" column reads 0 said "ECC state not
    captured"; it shows ECC on with no volatile uncorrectable error (pending repairs still unknown),
    a count above 0 is P0, and "N/A" (ECC off or not supported) stays not captured."""
    table = host_text("h200-1gpu", "cmds/nvsmi.out")
    f = one(audit_ids(MemorySnapshot({}, cmds={"nvsmi": table}), "gpu_health"), "gpu.ecc")
    assert f.status == "unknown" and f.title.endswith("ECC on; uncorrectable error counts or pending repairs not captured")
    bad = replaced(table, "Off |                    0 |", "Off |                    2 |")
    f = one(audit_ids(MemorySnapshot({}, cmds={"nvsmi": bad}), "gpu_health"), "gpu.ecc")
    assert (f.status, f.severity) == ("actionable", "P0")
    f = one(audit_ids(pasted("nvsmi-libc6shim14-rtx5070.txt"), "gpu_health"), "gpu.ecc")
    assert f.status == "unknown" and "ECC state not captured" in f.title


def test_csv_without_error_counts_or_slowdown_threshold_is_unknown() -> None:
    found = audit_ids(MemorySnapshot({}, cmds=host_cmds(H200, "nvsmi_csv")), "gpu_health")
    assert one(found, "gpu.ecc").status == "unknown" and "ROW_REMAPPER" in one(found, "gpu.ecc").impact
    assert one(found, "gpu.thermals").status == "unknown" and "slowdown threshold" in one(found, "gpu.thermals").title
    assert one(found, "gpu.throttle").status == "ok"  # the CSV carries clocks_event_reasons.active


def test_busy_gpu_at_its_clock_is_ok_and_below_is_p1() -> None:
    f = one(_q(*_busy(1900)), "gpu.clocks")
    assert f.status == "ok" and "96% of max under load" in f.title
    f = one(_q(*_busy(1200)), "gpu.clocks")
    assert (f.status, f.severity) == ("actionable", "P1") and "only 61% of max while busy" in f.title


def test_low_clock_without_load_information_is_unknown() -> None:
    # The plain table gives neither clocks nor reasons; the CSV gives clocks and reasons: an idle reason there is expected.
    assert one(audit_ids(MemorySnapshot({}, cmds=host_cmds(H200, "nvsmi")), "gpu_health"), "gpu.clocks").status == "unknown"
    assert one(audit_ids(MemorySnapshot({}, cmds=host_cmds(H200, "nvsmi_csv")), "gpu_health"), "gpu.clocks").status == "expected"


def test_power_limit_below_default_is_p1_with_exact_revert() -> None:
    f = one(_q(("Current Power Limit                            : 700.00 W", "Current Power Limit                            : 500.00 W")), "gpu.power_limit")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "runtime")
    assert f.remedy.commands == [f"nvidia-smi -i {BDF} -pl 700"] and f.remedy.revert == [f"nvidia-smi -i {BDF} -pl 500"]


def test_power_limit_below_max_without_the_default_is_unknown_not_actionable() -> None:
    # The CSV has no default limit: 500 W of a 700 W maximum may be the card's default.
    csv = replaced(host_text(H200, "cmds/nvsmi_csv.out"), "700.00 W, 700.00 W, 700.00 W", "500.00 W, 500.00 W, 700.00 W")
    f = one(audit_ids(MemorySnapshot({}, cmds={"nvsmi_csv": csv}), "gpu_health"), "gpu.power_limit")
    assert f.status == "unknown" and "default limit is not captured" in f.title
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(H200, "nvsmi_csv")), "gpu_health"), "gpu.power_limit")
    assert f.status == "ok"  # at the maximum, it cannot be below the default


def test_hardware_slowdown_now_is_p0() -> None:
    f = one(_q(("HW Slowdown                                    : Not Active", "HW Slowdown                                    : Active")), "gpu.throttle")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "hardware") and "hw_slowdown" in f.title


def test_accumulated_thermal_slowdown_is_p1_past() -> None:
    f = one(_q(("HW Thermal Slowdown                            : 0 us", "HW Thermal Slowdown                            : 120000000 us")), "gpu.throttle")
    assert (f.status, f.severity) == ("actionable", "P1") and "has throttled in the past" in f.title
    assert any("hw_thermal_slowdown 120.0 s" in e.value for e in f.evidence)


def test_software_power_cap_is_expected() -> None:
    f = one(_q(("SW Power Cap                                   : Not Active", "SW Power Cap                                   : Active")), "gpu.throttle")
    assert f.status == "expected" and f.severity is None


def test_throttle_reasons_not_in_the_table_are_unknown() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(H200, "nvsmi")), "gpu_health"), "gpu.throttle")
    assert f.status == "unknown" and "PERFORMANCE" in f.impact


def test_thermal_slowdown_now_is_p0_and_near_the_threshold_p1() -> None:
    found = _q(("SW Thermal Slowdown                            : Not Active", "SW Thermal Slowdown                            : Active"))
    f = one(found, "gpu.thermals")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "hardware")
    # 80 °C: the T.Limit headroom nvidia-smi prints beside it shrinks from 52 to 7 °C (slowdown stays at 85 °C).
    f = one(_q(("GPU Current Temp                               : 35 C", "GPU Current Temp                               : 80 C"),
               ("GPU T.Limit Temp                               : 52 C", "GPU T.Limit Temp                               : 7 C")), "gpu.thermals")
    assert (f.status, f.severity) == ("actionable", "P1") and f.expected_value == "< 75 °C"


def test_mig_enabled_and_exclusive_compute_mode_are_p2() -> None:
    found = _q(("MIG Mode\n        Current                                        : Disabled", "MIG Mode\n        Current                                        : Enabled"),
               ("Compute Mode                                       : Default", "Compute Mode                                       : Exclusive_Process"))
    mig, cm = one(found, "gpu.mig"), one(found, "gpu.compute_mode")
    assert (mig.status, mig.severity, mig.fix_kind) == ("actionable", "P2", "runtime") and mig.remedy.commands == [f"nvidia-smi -i {BDF} -mig 0"]
    assert (cm.status, cm.severity) == ("actionable", "P2") and cm.remedy.revert == [f"nvidia-smi -i {BDF} -c EXCLUSIVE_PROCESS"]


def test_gpu_on_the_bus_without_driver_data_is_unknown() -> None:
    found = audit_ids(MemorySnapshot(host_files(SEED, "/sys/bus/pci/devices/0000:01:00.0/")), "gpu_health")
    assert set(found) == {"gpu.health"}
    f = found["gpu.health"][0]
    assert (f.status, f.subject) == ("unknown", "0000:01:00.0") and "driver not loaded" in f.impact


def test_inventory_missing_is_unknown_and_no_nvidia_gpu_not_applicable() -> None:
    f = one(audit_ids(MemorySnapshot({}), "gpu_health"), "gpu.present")
    assert f.status == "unknown" and "nvidia-smi" in f.impact
    # The seed host's ASPEED BMC alone on the bus: a host with no NVIDIA GPU.
    bmc = host_files(SEED, "/sys/bus/pci/devices/0000:51:00.0/")
    assert bmc, "the seed capture lists the BMC at 0000:51:00.0"
    f = one(audit_ids(MemorySnapshot(bmc), "gpu_health"), "gpu.present")
    assert f.status == "not_applicable" and f.evidence[0].value == "no NVIDIA display-class function"


def test_filtered_pasted_lspci_without_gpu_is_unknown() -> None:
    f = one(audit_ids(pasted("lspci-torchipc17-plx.txt"), "gpu_health"), "gpu.present")
    assert f.status == "unknown" and "may be filtered" in f.title
    assert f.evidence[0].value == "11 PCI functions, none an NVIDIA GPU"


def test_pasted_link_lines_without_any_device_are_no_pci_list() -> None:
    # LnkCap/LnkSta lines alone (janhq/jan#183) name no PCI function: the inventory is not captured, not "filtered".
    f = one(audit_ids(pasted("lspci-jan183-lnksta-downgraded.txt"), "gpu_health"), "gpu.present")
    assert f.status == "unknown" and f.title == "GPU inventory not captured"


def test_a_pasted_table_in_mig_mode_is_gpu_mig_actionable() -> None:
    """ollama#4814: both GPUs of the pasted nvidia-smi table are in MIG mode."""
    from tests.investigators.memsnap import audit_ids, pasted

    found = audit_ids(pasted("ollama-4814-mig-table.txt"), "gpu_health")["gpu.mig"]
    assert [(f.subject, f.status) for f in found] == [("0000:05:00.0", "actionable"), ("0000:86:00.0", "actionable")]


# -- sections of nvidia-smi -q pasted without their header ------------------------------------

def test_a_pasted_throttle_block_is_judged_for_its_gpu() -> None:
    """kubeflow#68: the grep of one idle GPU's throttle reasons: Idle only, no slowdown: ok."""
    from tests.investigators.memsnap import audit_ids, one, pasted

    f = one(audit_ids(pasted("nvsmiq-kubeflow68-throttle-idle.txt"), "gpu_health"), "gpu.throttle")
    assert f.status == "ok" and f.subject == "GPU0" and f.evidence[0].value == "active: gpu_idle"


def test_pasted_clock_sections_judge_the_clock() -> None:
    """gpustat#135: SM 2025 of 2100 MHz (96 %) pasted as two sections: gpu.clocks ok."""
    from tests.investigators.memsnap import audit_ids, one, pasted

    f = one(audit_ids(pasted("nvsmiq-gpustat135-clocks.txt"), "gpu_health"), "gpu.clocks")
    assert f.status == "ok" and "96%" in f.title


def test_a_pasted_block_by_index_lands_on_the_gpu_of_that_index(tmp_path) -> None:
    """The H200 capture's ``nvidia-smi`` table with the kubeflow#68 throttle block pasted: the
    block's GPU0 is the table's one GPU (its PCI address), not a second GPU."""
    from tests.investigators.memsnap import MemorySnapshot, audit_ids, host_cmds, one, pasted

    snap = pasted("nvsmiq-kubeflow68-throttle-idle.txt", base=MemorySnapshot(cmds=host_cmds("h200-1gpu", "nvsmi")))
    f = one(audit_ids(snap, "gpu_health"), "gpu.throttle")
    assert f.status == "ok" and f.subject is not None and f.subject.count(":") == 2


def test_counters_pasted_alone_judge_the_past_slowdowns() -> None:
    """The two-H200 capture's ``Clocks Event Reasons Counters`` block as ``grep -A5`` prints it
    (the section alone, no current reasons): zero thermal and hardware slowdown is ok for the
    time since the driver loaded; 500 s of HW thermal slowdown is actionable."""
    import tempfile
    from pathlib import Path

    from tests.investigators.memsnap import audit_ids, one, pasted_text, replaced
    from tests.parsers.inputs import h200x2

    q = h200x2("cmds/nvsmi_q.out").splitlines()
    i = next(n for n, ln in enumerate(q) if ln.strip() == "Clocks Event Reasons Counters")
    block = "\n".join(q[i:i + 6])
    with tempfile.TemporaryDirectory() as d:
        f = one(audit_ids(pasted_text(Path(d), "counters.txt", block), "gpu_health"), "gpu.throttle")
        assert f.status == "ok" and "accumulated since the driver loaded" in f.title
        hot = replaced(block, "HW Thermal Slowdown                            : 0 us", "HW Thermal Slowdown                            : 500000000 us")
        f2 = one(audit_ids(pasted_text(Path(d), "counters2.txt", hot), "gpu_health"), "gpu.throttle")
        assert (f2.status, f2.severity) == ("actionable", "P1")


def test_pasted_xml_sections_are_judged() -> None:
    """telegraf#16569: the compute mode in a cut ``-q -x`` excerpt is read for its GPU."""
    from tests.investigators.memsnap import audit_ids, one, pasted

    f = one(audit_ids(pasted("nvsmiqx-telegraf16569-fragment.xml"), "gpu_health"), "gpu.compute_mode")
    assert f.status == "ok" and f.subject == "GPU0"


def test_an_unlicensed_vgpu_is_actionable() -> None:
    """gpu-operator#220: a VM's vGPU (NVIDIA Virtual Compute Server) ``Unlicensed``, the
    allocations slowing after a few minutes: gpu.vgpu_license actionable P1."""
    f = one(audit_ids(pasted("nvsmiq-gpuoperator220-vgpu-unlicensed.txt"), "gpu_health"), "gpu.vgpu_license")
    assert (f.status, f.severity) == ("actionable", "P1") and "Unlicensed" in f.title


def test_a_licensed_vgpu_is_ok_and_bare_metal_has_no_licence_check() -> None:
    """The one-H200 capture (pass-through, no vGPU section) reports no licence check; the same
    output with a licensed product section is ok, citing its status."""
    assert "gpu.vgpu_license" not in _q()
    section = ("    vGPU Software Licensed Product\n        Product Name                      : NVIDIA Virtual Compute Server\n"
               "        License Status                    : Licensed (Expiry: 2026-12-31 0:0:0 GMT)\n    GPU Recovery Action")
    f = one(_q(("    GPU Recovery Action", section)), "gpu.vgpu_license")
    assert f.status == "ok" and "Licensed (Expiry" in f.evidence[0].value


def test_a_gpu_failing_dcgmi_diag_is_actionable_with_dcgms_message() -> None:
    """go-dcgm#52: GPU 0 fails GPU Memory (no CUDA context on it), GPU 1 passes: gpu.health
    actionable P0 for GPU 0 alone, citing the failing test and dcgmi's warning."""
    found = audit_ids(pasted("dcgmi-godcgm52-gpu0-memory-fail.txt"), "gpu_health")
    bad = [f for f in found["gpu.health"] if f.status == "actionable"]
    assert [(f.subject, f.severity) for f in bad] == [("GPU0", "P0")]
    values = [e.value for e in bad[0].evidence]
    assert "Hardware / GPU Memory: Fail (GPU 0)" in values and any("cuCtxCreate" in v for v in values)


def test_dcgmi_diag_passing_a_hardware_test_is_ok_and_deployment_checks_alone_are_not(tmp_path) -> None:
    """DCGM#253's top rows (software and memory pass) are ok; its deployment rows alone say nothing
    of the GPU (unknown)."""
    from tests.investigators.memsnap import evidence_text, pasted_text

    f = one(audit_ids(pasted("dcgmi-dcgm253-diag-4x-layout.txt"), "gpu_health"), "gpu.health")
    assert f.status == "ok" and "memory" in f.title
    text = evidence_text("dcgmi-dcgm253-diag-4x-layout.txt")
    f = one(audit_ids(pasted_text(tmp_path, "top.txt", text[: text.index("+-----  Hardware")]), "gpu_health"), "gpu.health")
    assert f.status == "unknown" and "deployment" in f.title
