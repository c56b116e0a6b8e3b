"""evidence investigator (evidence_files.py): pcie.aer, gpu.xid, gpu.gsp, nccl.net, the signature
findings of other ids, and evidence.unrecognized, from public kernel logs and NCCL reports."""

from __future__ import annotations

from pathlib import Path

from infergap.evidence import EvidenceSnapshot
from tests.investigators.memsnap import FIXTURES, MemorySnapshot, audit_ids, evidence_text, one, pasted, pasted_text, replaced

DMESG = "dmesg-gpuburn1-xid79.txt"


def test_xid_79_is_p0_citing_the_line() -> None:
    f = one(audit_ids(pasted(DMESG), "evidence"), "gpu.xid")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "hardware")
    assert f.title.startswith("NVIDIA Xid 79 in the kernel log (1 event(s))")
    assert f.evidence[0].value == "Xid (PCI:0000:02:00): 79, GPU has fallen off the bus." and f.details["xids"] == [79]


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
    f = one(audit_ids(pasted("nccl-210-no-ip-interface.txt"), "evidence"), "nccl.net")
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
