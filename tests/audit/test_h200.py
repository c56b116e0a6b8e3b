"""The audit on real captures of a one-GPU H200 VM: the conclusions the evidence supports."""

from __future__ import annotations

import json

import pytest

from infergap.audit import run_audit
from infergap.findings import FixKind, Status
from infergap.snapshot import open_snapshot
from tests.conftest import HOSTS

BDF = "0000:00:06.0"


@pytest.fixture(scope="module", params=["h200-1gpu", "h200-1gpu-collect.tar.gz"])
def report(request):
    with open_snapshot(HOSTS / request.param) as snap:
        return run_audit(snap)


def one(report, cid, subject=None):
    fs = report.get(cid, subject)
    assert len(fs) == 1, f"{cid}: {[f.title for f in fs]}"
    return fs[0]


def test_pcie_link_at_max(report):
    f = one(report, "pcie.link", BDF)
    assert f.status == Status.ok
    assert "gen5 x16" in f.title


def test_max_payload_is_expected_hardware_limit(report):
    f = one(report, "pcie.max_payload", BDF)
    assert f.status == Status.expected
    assert any("DevCap MaxPayload 256" in e.value for e in f.evidence)
    assert any("DevCtl MaxPayload 256" in e.value for e in f.evidence)


def test_max_read_request_ok(report):
    f = one(report, "pcie.max_read_request", BDF)
    assert f.status == Status.ok
    assert "4096" in f.title


def test_swappiness_without_swap_not_applicable():
    """This VM has no swap device (its /proc/swaps lists none): swappiness cannot swap serving
    memory out, so it is reported, not flagged."""
    with open_snapshot(HOSTS / "h200-1gpu-collect.tar.gz") as snap:
        f = one(run_audit(snap), "vm.swappiness")
    assert f.status == Status.not_applicable and "no swap" in f.title
    assert [e.value for e in f.evidence] == ["60", "no swap configured"]


def test_swappiness_with_swap_actionable_runtime(tmp_path):
    import shutil

    d = tmp_path / "s"
    shutil.copytree(HOSTS / "h200-1gpu", d)
    (d / "files" / "proc" / "swaps").write_text("Filename\tType\tSize\tUsed\tPriority\n/swap.img\tfile\t8388604\t0\t-2\n")
    with open_snapshot(d) as snap:
        f = one(run_audit(snap), "vm.swappiness")
    assert f.status == Status.actionable and f.fix_kind == FixKind.runtime and f.severity.value == "P2"
    assert f.evidence[0].value == "60"
    assert f.remedy.revert[0] == "sysctl -w vm.swappiness=60"
    assert f.remedy.actions[0].type == "sysctl" and f.remedy.actions[0].previous == "60"


def test_numa_balancing_not_applicable_one_node(report):
    assert one(report, "kernel.numa_balancing").status == Status.not_applicable


def test_other_conclusions(report):
    assert one(report, "kernel.nmi_watchdog").status == Status.ok
    assert one(report, "limits.memlock").status == Status.ok
    assert one(report, "gpu.persistence_mode", BDF).status == Status.ok
    assert one(report, "gpu.ecc", BDF).status == Status.ok
    assert one(report, "nvlink.topology").status == Status.not_applicable
    # an idle GPU's low clock is expected, not a fault
    assert one(report, "gpu.clocks", BDF).status == Status.expected
    # a VM exposes no cpuidle/cpufreq: expected, not actionable
    assert one(report, "cpu.cstates").status == Status.expected
    # the reason reads as a sentence for plural names too ("Cpuidle states: managed by ...")
    assert one(report, "cpu.cstates").impact.startswith("Cpuidle states: managed by the hypervisor or host; inside a virtual machine")


def test_gpu_named_from_nvidia_smi_not_pci_ids(report):
    assert report.host.gpus[0].name == "NVIDIA H200"
    ident = one(report, "pci.unidentified")
    if ident.status == Status.ok:
        assert ident.details["devices"][BDF].startswith("NVIDIA H200 [10de:2335]")


def test_gpu_without_nvidia_smi_is_never_guessed(tmp_path):
    """With only sysfs, the name comes from pci.ids when it knows 10de:2335, else from the product's
    GPU data (the device id beside each GPU), never "unknown device" and never guessed."""
    import shutil

    from infergap.parsers.pci import system_pci_ids

    shutil.copytree(HOSTS / "h200-1gpu" / "files", tmp_path / "files")
    with open_snapshot(tmp_path) as snap:
        r = run_audit(snap)
    known = system_pci_ids().device_name(0x10DE, 0x2335)
    name = r.host.gpus[0].name
    assert name == (f"NVIDIA {known}" if known else "NVIDIA H200 SXM 141GB")


def test_json_contract(report):
    d = json.loads(json.dumps(report.to_json()))
    assert d["schema"] == "infergap.audit/1"
    assert {"host", "investigators", "findings", "summary"} <= set(d)
    assert len(d["investigators"]) >= 12 and all(i["error"] is None for i in d["investigators"])
    for f in d["findings"]:
        assert f["status"] in {"ok", "actionable", "expected", "unknown", "not_applicable"}
        if f["status"] == "actionable":
            assert f["severity"] in {"P0", "P1", "P2"} and f["fix_kind"]
        else:
            assert "severity" not in f


def test_actionable_ranking(report):
    act = report.by_status(Status.actionable)
    order = [(f.severity.value, f.fix_kind.value) for f in act]
    sev = [s for s, _ in order]
    assert sev == sorted(sev)
