"""interconnect investigator: nvlink.topology, nvlink.fabric, gpu.p2p, nvidia.peermem,
pci.unidentified and allreduce.custom, from the seed host (8 PCIe-only GPUs, an RDMA NIC), the
two-H200 capture (NV18) and public pastes."""

from __future__ import annotations

from tests.investigators.memsnap import MemorySnapshot, audit_ids, host_cmds, host_files, host_text, one, pasted, replaced

SEED = "seed-8x-rtxpro6000"
H2 = "h200-2gpu-collect"


def _seed(p2p: str | None = None, modules: str | None = None, nic: bool = True, base_only: bool = False) -> MemorySnapshot:
    files = host_files(SEED, "/proc/modules")
    if modules is not None:
        files["/proc/modules"] = modules
    if nic:
        files.update(host_files(SEED, "/sys/class/infiniband/"))
    cmds = host_cmds(SEED, "nvsmi_q", "nvsmi_topo", "nvsmi_p2p", "lspci")
    if p2p is not None:
        cmds["nvsmi_p2p"] = p2p
    return MemorySnapshot(files, cmds=cmds)


def _h2(q: str | None = None, p2p: str | None = None, vm: bool = False) -> MemorySnapshot:
    cmds = host_cmds(H2, "nvsmi_q", "nvsmi_topo", "nvsmi_p2p", "nvsmi_nvlink")
    if q is not None:
        cmds["nvsmi_q"] = q
    if p2p is not None:
        cmds["nvsmi_p2p"] = p2p
    return MemorySnapshot(host_files(H2, "/proc/cpuinfo") if vm else {}, cmds=cmds)


def test_pcie_only_gpus_have_no_nvlink_by_design() -> None:
    f = one(audit_ids(_seed(), "interconnect"), "nvlink.topology")
    assert f.status == "expected" and f.title == "No NVLink: NVIDIA RTX PRO 6000 Blackwell Server Edition is a PCIe-only GPU"
    assert f.evidence[0].value == "GPU-GPU links: NODE, SYS" and f.evidence[-1].source == "infergap gpus.yaml"


def test_nv18_pair_is_ok_with_link_speeds() -> None:
    f = one(audit_ids(_h2(), "interconnect"), "nvlink.topology")
    assert f.status == "ok" and f.title == "NVLink between every GPU pair (NV18)"
    assert [e.source for e in f.evidence] == ["cmds/nvsmi_topo.out", "cmds/nvsmi_nvlink.out"]
    assert "18 active links" in f.evidence[1].value


def test_nvlink_gpus_talking_over_pcie_is_p0() -> None:
    topo = replaced(host_text(H2, "cmds/nvsmi_topo.out"), "NV18", "SYS")
    snap = MemorySnapshot({}, cmds={**host_cmds(H2, "nvsmi_q", "nvsmi_p2p"), "nvsmi_topo": topo})
    f = one(audit_ids(snap, "interconnect"), "nvlink.topology")
    assert (f.status, f.severity) == ("actionable", "P0") and f.title == "No NVLink between GPUs that have it"


def test_nvlink_of_an_unknown_model_is_unknown() -> None:
    f = one(audit_ids(pasted("topo-667-pxb-pix.txt"), "interconnect"), "nvlink.topology")
    assert f.status == "unknown" and "model is not known" in f.title


def test_nvlink_missing_topology_is_unknown_and_one_gpu_not_applicable() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(H2, "nvsmi_q")), "interconnect"), "nvlink.topology")
    assert f.status == "unknown" and "topo -m" in f.impact
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds("h200-1gpu", "nvsmi_q", "nvsmi_topo")), "interconnect"), "nvlink.topology")
    assert f.status == "not_applicable"


def test_fabric_not_completed_is_p0_software() -> None:
    qx = replaced(host_text(H2, "cmds/nvsmi_qx.out"), "<state>Completed</state>", "<state>In Progress</state>")
    snap = MemorySnapshot({}, cmds={**host_cmds(H2, "nvsmi_topo", "nvsmi_p2p"), "nvsmi_qx": qx})
    f = one(audit_ids(snap, "interconnect"), "nvlink.fabric")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "software")
    assert f.remedy.commands == ["systemctl enable --now nvidia-fabricmanager"] and len(f.evidence) == 2
    assert "nvlink.fabric" not in audit_ids(_h2(), "interconnect")  # Completed: nothing to report


def test_p2p_ok_between_all_pairs() -> None:
    f = one(audit_ids(_seed(), "interconnect"), "gpu.p2p")
    assert f.status == "ok" and f.title == "P2P supported between all 8 GPUs"
    assert (f.evidence[0].source, f.evidence[0].value) == ("cmds/nvsmi_p2p.out", "OK over 28 GPU pair(s)")


def test_p2p_not_supported_on_bare_metal_is_p1_bios() -> None:
    p2p = replaced(host_text(SEED, "cmds/nvsmi_p2p.out"), " GPU0\tX\tOK", " GPU0\tX\tNS")
    f = one(audit_ids(_seed(p2p=p2p), "interconnect"), "gpu.p2p")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "bios") and f.title == "P2P unavailable between 1 GPU pair(s): NS"


def test_p2p_chipset_not_supported_in_a_vm_is_expected() -> None:
    p2p = replaced(host_text(H2, "cmds/nvsmi_p2p.out"), "OK", "CNS")
    f = one(audit_ids(_h2(p2p=p2p, vm=True), "interconnect"), "gpu.p2p")
    assert f.status == "expected" and f.evidence[-1].value == "hypervisor flag"
    f = one(audit_ids(_h2(p2p=p2p), "interconnect"), "gpu.p2p")
    assert (f.status, f.severity) == ("actionable", "P1")  # without VM evidence it is a host problem


def test_p2p_not_captured_is_unknown() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(H2, "nvsmi_q", "nvsmi_topo")), "interconnect"), "gpu.p2p")
    assert f.status == "unknown" and "nvidia-smi topo -p2p r" in f.impact


def test_peermem_missing_with_rdma_nic_is_p1_without_nccl_log() -> None:
    f = one(audit_ids(_seed(), "interconnect"), "nvidia.peermem")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "runtime")
    assert [e.value for e in f.evidence] == ["mlx5_0", "nvidia_peermem not loaded"]
    assert f.remedy.commands == ["modprobe nvidia_peermem"] and f.remedy.revert[0] == "modprobe -r nvidia_peermem"


def test_peermem_p2_when_nccl_stays_inside_one_node() -> None:
    f = one(audit_ids(pasted("nccl-1817-shm-8gpu.log", base=_seed()), "interconnect"), "nvidia.peermem")
    assert (f.status, f.severity) == ("actionable", "P2") and f.evidence[-1].value == "one host, no NET channels"


def test_peermem_loaded_is_ok() -> None:
    mods = host_files(SEED, "/proc/modules")["/proc/modules"]
    nv = next(l for l in mods.splitlines() if l.startswith("nvidia "))
    loaded = mods + nv.replace("nvidia 14376960 25 nvidia_uvm,nvidia_modeset,", "nvidia_peermem 16384 0 -,") + "\n"
    f = one(audit_ids(_seed(modules=loaded), "interconnect"), "nvidia.peermem")
    assert f.status == "ok" and f.evidence[1].value == "nvidia_peermem loaded"


def test_peermem_without_module_list_is_unknown_and_without_nic_not_applicable() -> None:
    snap = MemorySnapshot(host_files(SEED, "/sys/class/infiniband/"), cmds=host_cmds(SEED, "nvsmi_q"))
    f = one(audit_ids(snap, "interconnect"), "nvidia.peermem")
    assert f.status == "unknown" and "/proc/modules" in f.impact
    f = one(audit_ids(MemorySnapshot(host_files(H2, "/sys/bus/pci/devices/"), cmds=host_cmds(H2, "nvsmi_q")), "interconnect"), "nvidia.peermem")
    assert f.status == "not_applicable" and f.evidence[0].value == "no RDMA NIC"


def test_pci_devices_named_with_bmc_and_new_gpus_noted() -> None:
    f = one(audit_ids(_seed(), "interconnect"), "pci.unidentified")
    assert f.status == "ok" and f.title.startswith("All 70 PCI functions identified")
    assert "0000:51:00.0: ASPEED BMC, not an NVSwitch" in f.title
    assert "baseboard management" in f.details["devices"]["0000:51:00.0"]


def test_custom_allreduce_on_eight_pcie_gpus_is_expected() -> None:
    f = one(audit_ids(_seed(), "interconnect"), "allreduce.custom")
    assert f.status == "expected" and "8 GPUs without NVLink" in f.title


def test_custom_allreduce_ok_on_the_nvlink_pair_and_expected_without_p2p() -> None:
    f = one(audit_ids(_h2(), "interconnect"), "allreduce.custom")
    assert f.status == "ok" and [e.source for e in f.evidence] == ["cmds/nvsmi_p2p.out", "cmds/nvsmi_topo.out"]
    p2p = replaced(host_text(H2, "cmds/nvsmi_p2p.out"), "OK", "CNS")
    f = one(audit_ids(_h2(p2p=p2p), "interconnect"), "allreduce.custom")
    assert f.status == "expected" and "no P2P between 1 GPU pair(s)" in f.title


def test_custom_allreduce_unknown_without_p2p_status() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(H2, "nvsmi_q", "nvsmi_topo")), "interconnect"), "allreduce.custom")
    assert f.status == "unknown" and f.evidence[0].value == "NVLink between all pairs"


def test_plx_switch_ports_are_named_not_taken_for_nvswitches() -> None:
    f = one(audit_ids(pasted("lspci-torchipc17-plx.txt"), "interconnect"), "pci.unidentified")
    assert f.status == "ok" and f.title.endswith("Broadcom/PLX PCIe switch ports, not NVSwitches")
    assert any(e.value == "11 PCI functions" for e in f.evidence)


def test_topology_pasted_with_single_spaces_names_both_gpus() -> None:
    # noonghunna/club-3090#1125: the header's "GPU0 GPU1" is one space apart; the matrix still counts.
    f = one(audit_ids(pasted("topo-club3090-1125-single-space.txt"), "interconnect"), "nvlink.topology")
    assert f.status == "unknown" and "No NVLink between the 2 GPUs" in f.title


def test_topology_with_device_names_printed_without_a_tab_is_read() -> None:
    # vllm-project/vllm#13855: a DGX's topo -m with "NIC8NIC9" in the header and "NODENODE" /
    # "NODEPXB" in the rows of GPU4-7; the paste was not recognised and the CPU affinity column
    # was read one column early ("SYS") before.
    from infergap.facts import Facts

    snap = pasted("topo-vllm13855-glued-nic.txt")
    f = one(audit_ids(snap, "interconnect"), "nvlink.topology")
    assert f.status == "ok" and "NV18" in f.title
    topo = Facts(snap).topology()
    assert len(topo.devices) == 20 and topo.devices[16:18] == ["NIC8", "NIC9"]
    assert topo.cpu_affinity["GPU0"] == "0-55,112-167" and topo.cpu_affinity["GPU4"] == "56-111,168-223"
    assert topo.numa_affinity["GPU7"] == "1"
    assert (topo.link("GPU4", "NIC8"), topo.link("GPU5", "NIC9"), topo.link("GPU7", "NIC11")) == ("NODE", "PXB", "PXB")


def test_p2p_slower_than_the_staged_copy_is_p1_acs_or_iommu() -> None:
    """NCCL#814: P2P writes at ~10 GB/s against 20-22 GB/s through host memory, for every pair."""
    f = one(audit_ids(pasted("nccl-814-p2p-slower.txt"), "interconnect"), "gpu.p2p")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "bios")
    assert f.title == "P2P is slower than copying through host memory for 30 of 30 GPU pair(s)"
    assert f.evidence[0].value == "GPU0 -> GPU1: P2P 9.9 GB/s, without P2P 20.1 GB/s" and "ACSCtl" in f.remedy.commands[0]


def test_p2p_test_whose_pairs_cannot_peer_gives_no_measured_verdict() -> None:
    """nccl-tests#117: no pair can access its peer, so no bandwidth comparison (the refusal is expected on GeForce)."""
    found = audit_ids(pasted("nccltests-117-2080ti-no-peer.txt"), "interconnect")
    assert "gpu.p2p" not in found or all(f.status != "actionable" for f in found["gpu.p2p"])


def test_nvbandwidth_waiving_peer_copies_on_geforce_is_expected() -> None:
    """nvbandwidth#13: two RTX 2080 Ti, the peer test waived; the maintainer: peer mapping over
    PCIe is not supported there (a product limit, no firmware advice)."""
    f = one(audit_ids(pasted("nvbandwidth-13-2080ti-waived.txt"), "interconnect"), "gpu.p2p")
    assert f.status == "expected" and "product limit" in f.title
    assert f.evidence[0].value == "Waiving device_to_device_memcpy_write_ce."


def test_nvbandwidth_waiving_peer_copies_on_p2p_capable_gpus_is_actionable(tmp_path) -> None:
    """The same run on GPUs that offer P2P (the names changed to RTX A6000): the failed peer mapping is a fault."""
    from tests.investigators.memsnap import pasted_text
    from tests.parsers.inputs import lines

    snap = pasted_text(tmp_path, "nvbw.txt", replaced("\n".join(lines("nvbandwidth-13-2080ti-waived.txt")), "GeForce RTX 2080 Ti", "RTX A6000"))
    f = one(audit_ids(snap, "interconnect"), "gpu.p2p")
    assert (f.status, f.severity) == ("actionable", "P1") and "peer mapping failed" in f.title
