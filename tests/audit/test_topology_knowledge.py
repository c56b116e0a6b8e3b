"""Topology, GPU health and host-use rules that take the product's GPU data (gpus.yaml) and the
evidence actually given into account: no ok without evidence, no false P0 on designs that are
normal for the hardware, severity from the host's use.

Inputs are the real H200 captures and public reports of tests/fixtures. Where a case needs a
condition that healthy hardware cannot produce (a GPU throttling at 87 °C, bridged PCIe cards),
the test changes the named values of a real output in its temporary directory and says so.
"""

from __future__ import annotations

import pytest

from infergap.audit import run_audit
from infergap.evidence import EvidenceSnapshot
from infergap.findings import Status
from infergap.gpudata import pcie_x16_GBps, sku
from infergap.snapshot import open_snapshot
from tests.conftest import FIXTURES, HOSTS

EV = FIXTURES / "evidence"


def audit_files(*paths):
    return run_audit(EvidenceSnapshot(None, list(paths)))


def one(report, cid, subject=None):
    fs = report.get(cid, subject)
    assert len(fs) == 1, [f.title for f in fs]
    return fs[0]


# -- kind 1: ok needs evidence ----------------------------------------------------------------


@pytest.mark.parametrize("line,flag", [("BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=UUID=0 ro intel_iommu=on", "intel_iommu=on"),
                                       ("BOOT_IMAGE=/boot/vmlinuz-6.5.0 root=/dev/sda2 ro quiet amd_iommu=on", "amd_iommu=on")])
def test_iommu_on_without_pt_is_not_ok(tmp_path, line, flag):
    p = tmp_path / "cmdline.txt"
    p.write_text(line + "\n")
    f = one(audit_files(p), "iommu.mode")
    assert f.status == Status.actionable and f.severity.value == "P1" and flag in f.title
    assert "iommu=pt" in f.remedy.persist[0]


def test_iommu_pt_from_the_command_line_alone():
    f = one(audit_files(EV / "cmdline-rccl1129-iommu-pt.txt"), "iommu.mode")
    assert f.status == Status.ok and "iommu=pt" in f.title
    assert f.evidence[0].source == "evidence/cmdline-rccl1129-iommu-pt.txt"


def test_iommu_unset_on_the_command_line_is_unknown(tmp_path):
    p = tmp_path / "cmdline.txt"
    p.write_text("BOOT_IMAGE=/vmlinuz-5.15.0-101-generic root=/dev/mapper/ubuntu--vg-ubuntu--lv ro\n")
    f = one(audit_files(p), "iommu.mode")
    assert f.status == Status.unknown and "/sys/kernel/iommu_groups" in f.impact


def _q(h200x2, tmp_path, **repl):
    text = (h200x2 / "cmds" / "nvsmi_q.out").read_text()
    for old, new in repl.values():
        assert old in text
        text = text.replace(old, new, 1)
    p = tmp_path / "nvsmi-q.txt"
    p.write_text(text)
    return p


def test_hot_throttling_gpu_is_never_ok(h200x2, tmp_path):
    """The real H200 -q with its first GPU at 87 °C and SW thermal slowdown active."""
    p = _q(h200x2, tmp_path, temp=("GPU Current Temp                               : 37 C", "GPU Current Temp                               : 87 C"),
           reason=("        SW Thermal Slowdown                            : Not Active", "        SW Thermal Slowdown                            : Active"))
    r = audit_files(p)
    th = one(r, "gpu.thermals", "0000:00:06.0")
    assert th.status == Status.actionable and th.severity.value == "P0" and "87" in th.title and "sw_thermal_slowdown" in th.title
    tr = one(r, "gpu.throttle", "0000:00:06.0")
    assert tr.status == Status.actionable and tr.severity.value == "P0"
    assert one(r, "gpu.thermals", "0000:00:07.0").status == Status.ok


def test_accumulated_thermal_slowdown_is_a_past_finding(h200x2, tmp_path):
    """The real H200 -q with 2 h of SW thermal slowdown accumulated on its first GPU (idle now)."""
    p = _q(h200x2, tmp_path, counter=("        SW Thermal Slowdown                            : 0 us", "        SW Thermal Slowdown                            : 7200000000 us"))
    f = one(audit_files(p), "gpu.throttle", "0000:00:06.0")
    assert f.status == Status.actionable and f.severity.value == "P1"
    assert "in the past" in f.title and "7,200" in f.title and "not at this moment" in f.title
    assert any("accumulated" in e.value for e in f.evidence)


def test_topology_alone_gives_no_clock_or_health_ok(h200x2):
    r = audit_files(h200x2 / "cmds" / "nvsmi_topo.out")
    assert {f.status for f in r.get("gpu.throttle")} == {Status.unknown}
    assert not [f.id for f in r.findings if f.status == Status.ok and f.id.startswith(("gpu.", "allreduce."))]


def test_custom_allreduce_needs_p2p_between_the_pair():
    """Two RTX 5880 Ada on NODE, no P2P data: not usable, unknown, with the command that tells."""
    r = audit_files(EV / "topo-2079-rtx5880-node.txt")
    f = one(r, "allreduce.custom")
    assert f.status == Status.unknown and "nvidia-smi topo -p2p r" in f.impact


def test_custom_allreduce_usable_on_the_h200_pair(h200x2):
    with open_snapshot(h200x2) as snap:
        r = run_audit(snap)
    f = one(r, "allreduce.custom")
    assert f.status == Status.ok and "P2P" in f.title
    assert one(r, "gpu.p2p").title == "P2P supported between the 2 GPUs"


# -- kind 4: topology from the GPU data -------------------------------------------------------


def test_gpu_data_lookups():
    assert pcie_x16_GBps(4) == 31.5 and pcie_x16_GBps(5) == 63.0
    assert sku("NVIDIA A100 80GB PCIe").nvlink_layout == "bridge" and sku("NVIDIA A100-SXM4-80GB").nvlink_layout == "switch"
    assert sku("NVIDIA H100 NVL").nvlink_group == 2 and sku("NVIDIA H200 NVL").nvlink_group == 4
    assert sku("NVIDIA GeForce RTX 5090").p2p == "not_supported" and sku("NVIDIA GeForce RTX 5090").sm == 120
    assert sku(None, device_id=0x2335).id == "h200" and sku(None, device_id=0x2BB5).id == "rtx-pro-6000-server"
    assert all(s.source for s in (sku("NVIDIA H200"), sku("NVIDIA L4"), sku("NVIDIA RTX A6000")))


def _bridged(h200x2, tmp_path, name):
    """The real two-H200 capture's topo -m / -p2p / CSV, four GPUs in two NV pairs, renamed."""
    d = tmp_path / "snap"
    (d / "cmds").mkdir(parents=True)
    topo = ("\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tNV12\tSYS\tSYS\t0-31\t0\nGPU1\tNV12\t X \tSYS\tSYS\t0-31\t0\n"
            "GPU2\tSYS\tSYS\t X \tNV12\t32-63\t1\nGPU3\tSYS\tSYS\tNV12\t X \t32-63\t1\n")
    (d / "cmds" / "nvsmi_topo.out").write_text(topo)
    (d / "cmds" / "nvsmi_topo.rc").write_text("0")
    csv = (h200x2 / "cmds" / "nvsmi_csv.out").read_text().splitlines()
    rows = [csv[0]] + [csv[1].replace("00:06.0", f"{b}:00.0").replace("NVIDIA H200", name) for b in ("17", "31", "b1", "ca")]
    (d / "cmds" / "nvsmi_csv.out").write_text("\n".join(rows) + "\n")
    (d / "cmds" / "nvsmi_csv.rc").write_text("0")
    return d


def test_bridged_pairs_are_by_design(h200x2, tmp_path):
    with open_snapshot(_bridged(h200x2, tmp_path, "NVIDIA A100 80GB PCIe")) as snap:
        r = run_audit(snap)
    f = one(r, "nvlink.topology")
    assert f.status == Status.expected and "GPU0-GPU1, GPU2-GPU3" in f.title and "TP=2" in f.impact
    assert not [x for x in r.findings if x.severity and x.severity.value == "P0"]
    ar = one(r, "allreduce.custom")
    assert ar.status == Status.expected and "TP=2" in ar.impact


def test_missing_links_on_an_nvswitch_board_stay_p0(h200x2, tmp_path):
    with open_snapshot(_bridged(h200x2, tmp_path, "NVIDIA A100-SXM4-80GB")) as snap:
        f = one(run_audit(snap), "nvlink.topology")
    assert f.status == Status.actionable and f.severity.value == "P0" and "4 GPU pair(s)" in f.title


def test_geforce_gns_is_a_product_limit(tmp_path):
    """RTX 4090s report GNS: expected, with no BIOS/ACS/IOMMU advice."""
    (tmp_path / "topo.txt").write_text("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\t0-23\t0\nGPU1\tPHB\t X \t0-23\t0\n")
    (tmp_path / "p2p.txt").write_text(" \tGPU0\tGPU1\t\n GPU0\tX\tGNS\t\n GPU1\tGNS\tX\t\n\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n  GNS  = GPU not supported\n")
    (tmp_path / "csv.txt").write_text("name, pci.bus_id, temperature.gpu\nNVIDIA GeForce RTX 4090, 00000000:01:00.0, 40\nNVIDIA GeForce RTX 4090, 00000000:02:00.0, 41\n")
    r = audit_files(tmp_path / "topo.txt", tmp_path / "p2p.txt", tmp_path / "csv.txt")
    p = one(r, "gpu.p2p")
    assert p.status == Status.expected and "product limit" in p.impact and p.remedy is None
    assert one(r, "allreduce.custom").status == Status.expected
    assert one(r, "nvlink.topology").status == Status.expected


def test_gpu_named_from_the_data_when_pci_ids_is_older(tmp_path):
    """lspci -nn of the seed host lists 10de:2bb5, which the system pci.ids (2023) does not know."""
    from infergap.parsers.pci import system_pci_ids

    r = audit_files(HOSTS / "seed-8x-rtxpro6000" / "cmds" / "lspci.out")
    names = {g.name for g in r.host.gpus}
    known = system_pci_ids().device_name(0x10DE, 0x2BB5)
    assert names == {f"NVIDIA {known}" if known else "NVIDIA RTX PRO 6000 Blackwell Server Edition"}
    f = one(r, "pci.unidentified")
    assert "unknown device" not in f.details["devices"]["0000:01:00.0"]


def test_pci_tree_from_lspci_bus_numbers():
    """The seed host's lspci -vvv alone (no sysfs links): each GPU's root port is found from the
    bridges' secondary/subordinate bus numbers, and its ACS control read there."""
    snap = EvidenceSnapshot(None, [HOSTS / "seed-8x-rtxpro6000" / "cmds" / "lspci_vvv.out"])
    from infergap.facts import Facts

    funcs = Facts(snap).pci_functions()
    gpu = funcs["0000:01:00.0"]
    assert gpu.parent is not None and funcs[gpu.parent].lspci.secondary_bus == 0x01
    f = one(run_audit(snap), "pcie.acs")
    assert f.status == Status.ok and "no peer redirection" in f.title


# -- kind 5: severity from the host's use -----------------------------------------------------


def test_healthy_h200_pair_has_no_weak_p2(h200x2):
    with open_snapshot(h200x2) as snap:
        r = run_audit(snap)
    assert one(r, "vm.swappiness").status == Status.not_applicable
    sb = one(r, "net.socket_buffers")
    assert sb.status == Status.not_applicable and any(e.source == "probes/active.json (NCCL log)" for e in sb.evidence)
    assert one(r, "kernel.sched_autogroup").status == Status.expected


# -- kind 6: evidence of another host -----------------------------------------------------------


def test_paste_of_another_host_is_audited_on_its_own():
    from infergap.evidence.overlay import open_with_evidence

    snap = open_with_evidence(HOSTS / "h200-1gpu", [EV / "nvsmi-libc6shim14-rtx5070.txt"])
    try:
        assert snap.other_host and "RTX 5070" in snap.other_host and "PCI addresses" in snap.other_host
        r = run_audit(snap)
    finally:
        snap.close()
    assert "audited as its own host" in r.host.snapshot.label
    assert [g.name for g in r.host.gpus] == ["NVIDIA GeForce RTX 5070"]
    assert not r.get("gpu.present")


def test_paste_of_the_same_host_is_merged():
    from infergap.evidence.overlay import open_with_evidence

    snap = open_with_evidence(HOSTS / "h200-1gpu", [HOSTS / "h200-1gpu" / "cmds" / "nvsmi_q.out"])
    try:
        assert snap.other_host is None and snap.base is not None
    finally:
        snap.close()


def test_cli_paste_on_a_machine_without_that_gpu(cli):
    """On the machine running the tests (no RTX 5070 here), a pasted RTX 5070 table is its own host,
    not "no NVIDIA GPU" over it."""
    p = cli("audit", "--evidence", str(EV / "nvsmi-libc6shim14-rtx5070.txt"))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    # the header is one sentence wrapped to 100 columns: its continuation lines are indented
    cont = next((i for i, ln in enumerate(lines[1:], 1) if not ln.startswith("    ")), len(lines))
    head = " ".join(ln.strip() for ln in lines[:cont])
    assert "audited as its own host" in head and "RTX 5070" in head
    assert "No NVIDIA GPU" not in p.stdout


def test_pcie_switch_told_apart_from_nvswitch():
    f = one(audit_files(EV / "lspci-torchipc17-plx.txt"), "pci.unidentified")
    assert "PLX PCIe switch ports, not NVSwitches" in f.title
    assert all("NVSwitch" not in v.split("—")[0] for v in f.details["devices"].values())


def test_nvswitch_named_from_the_data(tmp_path):
    """lspci -nn lines of an HGX H200 (https://github.com/bigstack-oss/cubecos/issues/259, the
    script's "IOMMU Group N:" prefix dropped): the GPUs and the H100-generation NVSwitches are named
    even where the system pci.ids predates them, and the switches are told apart as NVSwitches."""
    (tmp_path / "lspci.txt").write_text(
        "18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H200 SXM 141GB] [10de:2335] (rev a1)\n"
        "2a:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H200 SXM 141GB] [10de:2335] (rev a1)\n"
        "05:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] (rev a1)\n"
        "06:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] (rev a1)\n")
    r = audit_files(tmp_path / "lspci.txt")
    f = one(r, "pci.unidentified")
    assert "0000:05:00.0: NVSwitch" in f.title and "unknown device" not in f.details["devices"]["0000:05:00.0"]
    assert {g.name for g in r.host.gpus} <= {"NVIDIA H200 SXM 141GB", "NVIDIA GH100 [H200 SXM 141GB]"}


def test_pasted_lspci_without_ids(tmp_path):
    """``lspci -v`` of an RTX 4090 as pasted in https://github.com/tinygrad/open-gpu-kernel-modules/issues/28
    (its first line): no ids, yet the GPU is found and named from lspci's own text."""
    (tmp_path / "lspci.txt").write_text("01:00.0 VGA compatible controller: NVIDIA Corporation AD102 [GeForce RTX 4090] (rev a1) (prog-if 00 [VGA controller])\n")
    r = audit_files(tmp_path / "lspci.txt")
    assert [g.name for g in r.host.gpus] == ["NVIDIA AD102 [GeForce RTX 4090]"]
    assert not r.get("gpu.present")


def test_filtered_lspci_paste_is_not_no_gpu():
    """``lspci | grep -i plx`` lists no GPU because it was filtered: unknown, never "No NVIDIA GPU"."""
    (f,) = audit_files(EV / "lspci-torchipc17-plx.txt").get("gpu.present")
    assert f.status == Status.unknown and "filtered" in f.title
