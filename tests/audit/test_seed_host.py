"""The audit of the seed host (8 × RTX PRO 6000 Blackwell in an LXC container on Proxmox): the
conclusions the project's seed report reached by hand, derived from the evidence."""

from __future__ import annotations

import pytest

from infergap.audit import run_audit
from infergap.findings import FixKind, Status
from infergap.snapshot import open_snapshot
from tests.conftest import HOSTS

SEED = HOSTS / "seed-8x-rtxpro6000"


@pytest.fixture(scope="module")
def report():
    with open_snapshot(SEED) as snap:
        return run_audit(snap)


def statuses(report, cid):
    fs = report.get(cid)
    assert fs, f"no finding for {cid}"
    return {f.status for f in fs}, fs


@pytest.mark.parametrize("cid", ["nvidia.peermem", "pcie.max_read_request", "kernel.numa_balancing", "cpu.cstates", "limits.memlock",
                                 "kernel.nmi_watchdog", "vm.swappiness", "net.socket_buffers"])
def test_actionable_runtime(report, cid):
    st, fs = statuses(report, cid)
    assert st == {Status.actionable}
    assert all(f.fix_kind == FixKind.runtime for f in fs)
    assert all(f.remedy and (f.remedy.commands or f.remedy.note) for f in fs)


@pytest.mark.parametrize("cid", ["cpu.freq_driver", "kernel.pending_reboot"])
def test_actionable_reboot(report, cid):
    st, fs = statuses(report, cid)
    assert st == {Status.actionable} and all(f.fix_kind == FixKind.reboot for f in fs)


@pytest.mark.parametrize("cid", ["allreduce.custom", "pcie.max_payload", "pcie.rcb", "nvlink.topology", "kernel.sched_autogroup"])
def test_expected(report, cid):
    st, fs = statuses(report, cid)
    assert st == {Status.expected}
    assert all(f.impact for f in fs)  # each says why it is not a problem


@pytest.mark.parametrize("cid", ["iommu.mode", "pcie.link", "pcie.acs", "pcie.bar1", "gpu.thermals", "gpu.power_limit", "gpu.clocks", "gpu.ecc", "cpu.governor", "pci.unidentified"])
def test_ok(report, cid):
    st, _ = statuses(report, cid)
    assert st == {Status.ok}


def test_per_gpu_findings_cover_eight_gpus(report):
    assert len(report.get("pcie.max_read_request")) == 8
    assert len(report.get("pcie.link")) == 8
    assert report.host.gpu_summary == "8 × NVIDIA RTX PRO 6000 Blackwell Server Edition"


def test_mrrs_remedy_and_exact_revert(report):
    f = report.get("pcie.max_read_request", "0000:01:00.0")[0]
    assert "512" in f.title
    a = f.remedy.actions[0]
    assert (a.type, a.target, a.pci_register, a.value, a.mask) == ("setpci", "0000:01:00.0", "CAP_EXP+8.w", "5000", "7000")
    assert a.previous == "2000"  # code 2 = 512 bytes in DevCtl bits 14:12
    assert f.remedy.revert == ["setpci -s 0000:01:00.0 CAP_EXP+8.w=2000:7000"]
    assert f.severity.value == "P1"


def test_inside_container_host_settings_are_host_controlled(report):
    assert report.host.container == "lxc"
    for cid in ("kernel.numa_balancing", "vm.swappiness", "cpu.cstates", "pcie.max_read_request", "nvidia.peermem"):
        for f in report.get(cid):
            assert f.remedy.host_controlled, cid
            assert "host" in (f.remedy.note or "")


def test_bmc_identified_not_nvswitch(report):
    f = report.get("pci.unidentified")[0]
    assert "0000:52:00.0: ASPEED BMC, not an NVSwitch" in f.title
    assert "ASPEED" in f.details["devices"]["0000:52:00.0"] and "NVSwitch" not in f.details["devices"]["0000:52:00.0"].split("—")[0]


def test_ranking_runtime_before_reboot_within_severity(report):
    act = report.by_status(Status.actionable)
    assert act[0].severity.value == "P1" and act[0].fix_kind == FixKind.runtime
    p1 = [f for f in act if f.severity.value == "P1"]
    kinds = [f.fix_kind for f in p1]
    assert kinds.index(FixKind.reboot) > max(i for i, k in enumerate(kinds) if k == FixKind.runtime)


def test_peermem_severity_follows_the_hosts_use(report):
    """An RDMA NIC without nvidia_peermem is P0 only when NCCL's inter-node traffic runs over it;
    nothing in this capture shows inter-node traffic, so P1 saying when it becomes P0."""
    (f,) = report.get("nvidia.peermem")
    assert f.severity.value == "P1" and "P0 when this host exchanges tensors with other nodes" in f.impact


def test_pending_kernel_named(report):
    f = report.get("kernel.pending_reboot")[0]
    assert "6.8.12-4-pve" in f.title and "6.8.12-13-pve" in f.title


def test_text_report_groups_gpus(report):
    from infergap.render.audit import render_text

    txt = render_text(report)
    assert "pcie.max_read_request [8×: 0000:01:00.0" in txt
    assert txt.index("ACTIONABLE") < txt.index("EXPECTED") < txt.index("CONFIRMED GOOD")
