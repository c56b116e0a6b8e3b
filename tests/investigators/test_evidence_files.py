"""evidence investigator (evidence_files.py): pcie.aer, gpu.xid, gpu.gsp, nccl.net, the signature
findings of other ids, and evidence.unrecognized, from public kernel logs and NCCL reports."""

from __future__ import annotations

from pathlib import Path

from infergap.evidence import EvidenceSnapshot
from tests.investigators.memsnap import FIXTURES, MemorySnapshot, audit_ids, evidence_text, one, pasted, pasted_text, replaced

DMESG = "dmesg-gpuburn1-xid79.txt"


def test_xid_79_is_p0_citing_the_line() -> None:
    f = one(audit_ids(pasted(DMESG), "evidence"), "gpu.xid")  # the "fallen off the bus" text is the Xid line's own: one finding
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "hardware")
    assert f.title == "NVIDIA Xid 79 in the kernel log, 1 event(s) on 1 GPU(s): the GPU fell off the PCIe bus"
    assert [e.value for e in f.evidence] == ["0000:02:00: Xid 79 ×1", "Xid (PCI:0000:02:00): 79, GPU has fallen off the bus."]
    assert f.details["xids"] == [79]
    assert f.details["gpus"] == {"0000:02:00": {"79": 1}} and f.details["reset_gpus"] == ["0000:02:00"]


def _xid_kinds(found: dict) -> dict[str, object]:
    """The gpu.xid findings by kind (the catalog entry each groups)."""
    return {f.details.get("kind"): f for f in found.get("gpu.xid", [])}


def test_xid_kinds_on_several_gpus_are_separate_findings_with_their_own_severity() -> None:
    """leptonai/gpud#1174's lines: fatal 149s on two GPUs, a non-fatal 145 on a third, a contained
    ECC error (94) on a fourth: an NVLink finding (P0, from the fatal 149s) and a memory finding
    (P1: restart the application), each counted per GPU; the NVLink Xids are not folded into the
    memory finding."""
    kinds = _xid_kinds(audit_ids(pasted("gpud-1174-nvlink-nonfatal.txt"), "evidence"))
    assert set(kinds) == {"xid.nvlink", "xid.memory"}
    nvl, mem = kinds["xid.nvlink"], kinds["xid.memory"]
    assert (nvl.severity, nvl.fix_kind, nvl.details["xids"]) == ("P0", "hardware", [145, 149])
    assert nvl.details["gpus"] == {"0019:01:00": {"149": 1}, "0000:00:00": {"149": 1}, "0018:01:00": {"145": 1}}
    assert nvl.details["reset_gpus"] == ["0000:00:00", "0019:01:00"]  # not the GPU with the non-fatal 145
    assert "0018:01:00: Xid 145 ×1, RLW_RXPIPE Nonfatal" in [e.value for e in nvl.evidence]  # the sub-unit the line names
    assert "0019:01:00: Xid 149 ×1, NETIR Fatal" in [e.value for e in nvl.evidence]
    assert (mem.severity, mem.details["xids"], mem.details["gpus"]) == ("P1", [94], {"0000:9b:00": {"94": 1}})
    assert mem.details["reset_gpus"] == [] and "149" not in mem.title + (mem.impact or "")
    assert "docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html" in " ".join(nvl.references + mem.references)


def test_a_nonfatal_nvlink_xid_alone_is_p2_never_p0(tmp_path: Path) -> None:
    line = next(ln for ln in evidence_text("gpud-1174-nvlink-nonfatal.txt").splitlines() if ": 145," in ln)
    f = one(audit_ids(pasted_text(tmp_path, "dmesg.txt", line + "\n"), "evidence"), "gpu.xid")
    assert (f.status, f.severity, f.details["kind"], f.details["reset_gpus"]) == ("actionable", "P2", "xid.nvlink", [])
    fatal = replaced(line, "Nonfatal", "Fatal")  # the same event reported fatal: the link needs a reset
    f = one(audit_ids(pasted_text(tmp_path, "dmesg.txt", fatal + "\n"), "evidence"), "gpu.xid")
    assert (f.severity, f.details["reset_gpus"]) == ("P0", ["0018:01:00"])


def test_xid_94_and_application_faults_on_other_gpus(tmp_path: Path) -> None:
    """akash-network/support#244: Xid 43 (twice) and 31 on two GPUs, Xid 94 on a third: a memory
    finding for the GPU with the contained error, an application finding for the others."""
    kinds = _xid_kinds(audit_ids(pasted("akash-244-xid94-multi-gpu.txt"), "evidence"))
    assert set(kinds) == {"xid.memory", "xid.application"}
    mem, app = kinds["xid.memory"], kinds["xid.application"]
    assert (mem.severity, mem.details["gpus"]) == ("P1", {"0000:00:08": {"94": 1}}) and "contained memory error" in mem.title
    assert (app.severity, app.details["gpus"]) == ("P1", {"0000:00:05": {"43": 2}, "0000:00:07": {"31": 1}})
    only43 = "\n".join(ln for ln in evidence_text("akash-244-xid94-multi-gpu.txt").splitlines() if ": 43," in ln) + "\n"
    f = one(audit_ids(pasted_text(tmp_path, "dmesg.txt", only43), "evidence"), "gpu.xid")
    assert f.severity == "P2"  # the application was stopped; NVIDIA: the GPU stays healthy, no action


def test_xid_154_takes_the_severity_of_the_recovery_action_it_names(tmp_path: Path) -> None:
    """open-gpu-kernel-modules#446: the action changed to GPU Reset Required is P0; the same line
    changing it back to None (recovery done) is P2, never P0. (The Xid 154 follows the GSP RPC
    timeouts of the same log, so it is reported as a consequence inside the gpu.gsp finding.)"""
    def xid154(found: dict) -> dict:
        (c,) = [c for c in one(found, "gpu.gsp").details["consequences"] if c["xids"] == [154]]
        return c

    found = audit_ids(pasted("open-gpu-446-gsp-rpc-talos.log"), "evidence")
    c = xid154(found)
    assert (c["severity"], c["reset_gpus"]) == ("P0", ["0000:0b:00"]) and "to GPU Reset Required" in " ".join(e.value for e in one(found, "gpu.gsp").evidence)
    text = replaced(evidence_text("open-gpu-446-gsp-rpc-talos.log"), "to 0x1 (GPU Reset Required)", "to 0x0 (None)")
    c = xid154(audit_ids(pasted_text(tmp_path, "dmesg.log", text), "evidence"))
    assert (c["severity"], c["reset_gpus"]) == ("P2", [])


def test_double_bit_ecc_error_is_p0_with_a_reset() -> None:
    f = one(audit_ids(pasted("nvidiadocker-849-xid48-dbe.txt"), "evidence"), "gpu.xid")
    assert (f.severity, f.details["kind"], f.details["xids"], f.details["reset_gpus"]) == ("P0", "xid.memory", [48, 63], ["0000:8a:00"])
    assert any(c.startswith("Xid 48:") for c in f.remedy.commands) and any(c.startswith("Xid 63:") for c in f.remedy.commands)


def test_an_xid_outside_the_catalog_is_reported_unknown_with_its_code(tmp_path: Path) -> None:
    text = replaced(evidence_text(DMESG), "): 79, GPU has fallen off the bus.", "): 999, Ch 00000008")
    found = audit_ids(pasted_text(tmp_path, "dmesg.txt", text), "evidence")
    f = _xid_kinds(found)["unknown"]
    assert (f.status, f.severity) == ("actionable", "P1") and f.title.startswith("Unknown NVIDIA Xid 999 in the kernel log")
    assert f.details["gpus"] == {"0000:02:00": {"999": 1}} and not [g for g in found.get("gpu.xid", []) if g.status == "ok"]


def test_fatal_aer_is_p0_and_corrected_only_p2(tmp_path: Path) -> None:
    f = one(audit_ids(pasted(DMESG), "evidence"), "pcie.aer")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "hardware") and "Uncorrected (Fatal) ×1" in f.title
    corrected = "\n".join(evidence_text(DMESG).splitlines()[:5]) + "\n"  # the replay-timer error before the fatal one
    found = audit_ids(pasted_text(tmp_path, "dmesg.txt", corrected), "evidence")
    f = one(found, "pcie.aer")
    assert (f.status, f.severity) == ("actionable", "P2") and f.title == "PCIe errors in the kernel log: Corrected ×1"
    assert "gpu.xid" not in found  # no Xid line: never an ok either


def test_gsp_heartbeat_timeout_is_p0_reboot() -> None:
    f = one(audit_ids(pasted("open-gpu-1080-gsp-heartbeat.txt"), "evidence"), "gpu.gsp")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "reboot") and "GSP RM heartbeat timed out" in f.evidence[0].value


def test_nccl_without_an_ip_interface_is_p0_nccl_net() -> None:
    f = one(audit_ids(pasted("nccl-210-no-ip-interface.txt"), "evidence"), "nccl.net")  # a line of no NCCL log: read here
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "runtime")
    assert f.references and f.details["signatures"]


def test_signatures_of_other_checks_come_with_the_entrys_severity() -> None:
    found = audit_ids(pasted("nccl-304-acs-plx.txt"), "evidence")
    f = one(found, "pcie.acs")
    assert (f.status, f.severity) == ("actionable", "P1")
    f = one(audit_ids(pasted("hfhub-4134-err802-fabric.txt"), "evidence"), "nvlink.fabric")
    assert (f.status, f.severity) == ("actionable", "P0")


def test_unrecognized_input_is_unknown_never_silent() -> None:
    snap = EvidenceSnapshot(None, [FIXTURES / "hosts" / "seed-8x-rtxpro6000" / "files" / "etc" / "os-release"])
    f = one(audit_ids(snap, "evidence"), "evidence.unrecognized")
    assert (f.status, f.subject) == ("unknown", "evidence/os-release#L1") and "Known kinds:" in f.impact


def test_no_evidence_no_finding() -> None:
    assert audit_ids(MemorySnapshot({}), "evidence") == {}


def test_amd_vi_page_faults_of_the_gpu_are_iommu_fault_p0() -> None:
    f = one(audit_ids(pasted("cudasamples-48-amdvi-page-fault.txt"), "evidence"), "iommu.fault")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "reboot")
    assert len(f.evidence) >= 3 and all("IO_PAGE_FAULT" in e.value for e in f.evidence[:3])


# -- the audited host's own kernel log (cmds/kernel_log) ------------------------------------------

SEED = "seed-8x-rtxpro6000"


def _host(kernel_log=None, gpus: bool = True) -> MemorySnapshot:
    from tests.investigators.memsnap import host_cmds

    cmds = host_cmds(SEED, "nvsmi_qx") if gpus else {}
    if kernel_log is not None:
        cmds["kernel_log"] = kernel_log
    return MemorySnapshot({}, cmds=cmds)


def test_a_hosts_own_kernel_log_gives_its_xid() -> None:
    """A live audit never read the kernel log: a GPU that fell off the bus went unreported unless
    the log was pasted. The host's own GPU/PCIe lines (gpu-burn#1's, as `dmesg | grep` keeps them)
    give the same P0 as the paste, citing cmds/kernel_log.out."""
    f = one(audit_ids(_host(evidence_text(DMESG)), "evidence"), "gpu.xid")
    assert (f.status, f.severity) == ("actionable", "P0") and f.details["xids"] == [79]
    assert f.evidence[0].source == "cmds/kernel_log.out"
    assert one(audit_ids(_host(evidence_text(DMESG)), "evidence"), "pcie.aer").severity == "P0"


def test_a_kernel_log_without_xid_is_ok_citing_what_was_read() -> None:
    lines = [ln for ln in evidence_text(DMESG).splitlines() if "Xid" not in ln and "AER" not in ln and "Bus Error" not in ln]
    f = one(audit_ids(_host("\n".join(lines) + "\n"), "evidence"), "gpu.xid")
    assert f.status == "ok" and f.evidence[0].source == "cmds/kernel_log.out"
    assert f"{len(lines)} GPU/PCIe/IOMMU line(s)" in f.evidence[0].value


def test_an_unreadable_or_missing_kernel_log_is_unknown_and_no_gpu_no_finding() -> None:
    from infergap.snapshot.core import CmdResult

    denied = CmdResult(name="kernel_log", stderr="dmesg: read kernel buffer failed: Operation not permitted\n", rc=1)
    f = one(audit_ids(_host(denied), "evidence"), "gpu.xid")
    assert f.status == "unknown" and "Operation not permitted" in f.impact and "dmesg_restrict" in f.impact
    f = one(audit_ids(_host(), "evidence"), "gpu.xid")
    assert f.status == "unknown" and f.title == "Kernel log: not captured" and "sudo dmesg" in f.impact
    assert "gpu.xid" not in audit_ids(_host(evidence_text(DMESG), gpus=False), "evidence")


def test_one_gsp_incident_reads_as_one_cause_with_its_consequences() -> None:
    """open-gpu-kernel-modules#1125: the GSP heartbeat timed out on resume; the GSP error (Xid 120),
    the reset-required status and the recovery action (Xid 154) in the same log are that incident,
    reported inside the gpu.gsp finding with their counts, not as three more causes."""
    found = audit_ids(pasted("open-gpu-1125-gsp-resume.log"), "evidence")
    assert sorted(found) == ["gpu.gsp"]
    f = one(found, "gpu.gsp")
    assert (f.status, f.severity) == ("actionable", "P0")
    cons = f.details["consequences"]
    assert [c["xids"] for c in cons if c["xids"]] == [[120], [154]] and len(cons) == 3
    assert any("NV_ERR_RESET_REQUIRED" in c["title"] for c in cons)
    values = [e.value for e in f.evidence]
    assert "0000:01:00: Xid 120 ×1" in values and "0000:01:00: Xid 154 ×1, to PF FLR" in values
    assert "Xid 154" in (f.impact or "")


def test_an_xid_the_gsp_fault_does_not_explain_stays_a_cause_of_its_own(tmp_path: Path) -> None:
    # the #1125 log with the Xid 79 line of wilicc/gpu-burn#1 after it: the GPU falling off the bus
    # is not a consequence of the GSP stall and keeps its own finding
    xid79 = next(ln for ln in evidence_text(DMESG).splitlines() if ": 79," in ln)
    text = evidence_text("open-gpu-1125-gsp-resume.log") + xid79 + "\n"
    found = audit_ids(pasted_text(tmp_path, "dmesg.txt", text), "evidence")
    assert one(found, "gpu.gsp").details["consequences"]
    assert [f.details["xids"] for f in found["gpu.xid"]] == [[79]]
