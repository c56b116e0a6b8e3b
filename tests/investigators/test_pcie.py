"""pcie investigator: link, MaxReadReq, MaxPayload, RCB per GPU, ACS on the bridges, IOMMU mode,
from the seed host's sysfs and config space (registers changed one at a time) and the H200 VM."""

from __future__ import annotations

from tests.investigators.memsnap import (MemorySnapshot, audit_ids, config_word, host_cmds, host_files, one, pasted, pasted_text,
                                         statuses, with_config_word)

SEED = "seed-8x-rtxpro6000"
H1 = "h200-1gpu"
DEV = "/sys/bus/pci/devices/"
GPU = "0000:01:00.0"
CFG = f"{DEV}{GPU}/config.hex"
BRIDGE_CFG = f"{DEV}0000:00:01.1/config.hex"
# Offsets in the seed GPU's config space: PCI Express capability at 0x78 (DevCap +4, DevCtl +8, LnkCtl +0x10);
# the root port 0000:00:01.1 has its ACS extended capability at 0x2a0 (ACS Control at +6).
DEVCAP, DEVCTL, LNKCTL, ACSCTL = 0x7C, 0x80, 0x88, 0x2A6


def _seed_with(edits: dict[str, str], nvsmi: bool = True, drop: tuple[str, ...] = ()) -> dict:
    fs = host_files(SEED, DEV, "/proc/cmdline", "/sys/kernel/iommu_groups/", "/sys/class/infiniband/")
    fs.update(edits)
    for p in drop:
        fs = {k: v for k, v in fs.items() if not k.startswith(p)}
    return audit_ids(MemorySnapshot(fs, cmds=host_cmds(SEED, "nvsmi_q") if nvsmi else {}), "pcie")


def _gpu_word(off: int, value: int) -> dict[str, str]:
    return {CFG: with_config_word(host_files(SEED, CFG)[CFG], off, value)}


def _for(found: dict, cid: str, bdf: str = GPU):
    return next(f for f in found[cid] if f.subject == bdf)


def test_seed_gpus_links_at_gen5_x16_are_ok() -> None:
    found = _seed_with({})
    assert statuses(found, "pcie.link") == ["ok"] * 8
    f = _for(found, "pcie.link")
    assert f.title == f"GPU {GPU}: PCIe gen5 x16 at its maximum" and f.evidence[0].value == "current 32 GT/s x16"


def test_narrow_link_is_p0_hardware() -> None:
    f = _for(_seed_with({f"{DEV}{GPU}/current_link_width": "8\n"}), "pcie.link")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "hardware") and f.expected_value == "x16"


def test_slow_link_is_p0_when_busy() -> None:
    slow = {f"{DEV}{GPU}/current_link_speed": "2.5 GT/s PCIe\n"}
    f = _for(_seed_with(slow), "pcie.link")  # nvidia-smi -q: the seed GPUs run at full clocks, not idle
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "bios")


def test_slow_link_of_an_idle_gpu_is_expected() -> None:
    h1 = host_files(H1, DEV)
    link = f"{DEV}0000:00:06.0/current_link_speed"
    assert h1[link].startswith("32.0 GT/s")
    h1[link] = "2.5 GT/s PCIe\n"
    f = one(audit_ids(MemorySnapshot(h1, cmds=host_cmds(H1, "nvsmi_q")), "pcie"), "pcie.link")  # the capture's GPU is idle
    assert f.status == "expected" and "while idle" in f.title


def test_slow_link_without_load_information_is_unknown_not_p0() -> None:
    f = _for(_seed_with({f"{DEV}{GPU}/current_link_speed": "2.5 GT/s PCIe\n"}, nvsmi=False), "pcie.link")
    assert f.status == "unknown" and "PERFORMANCE" in f.impact and f.evidence[0].value == "current 2.5 GT/s x16"


def test_link_not_captured_is_unknown() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(H1, "nvsmi")), "pcie"), "pcie.link")
    assert f.status == "unknown"


def test_mrrs_512_is_p1_with_setpci_and_exact_revert() -> None:
    f = _for(_seed_with({}), "pcie.max_read_request")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "runtime")
    assert f.remedy.commands == [f"setpci -s {GPU} CAP_EXP+8.w=5000:7000"]
    assert f.remedy.revert == [f"setpci -s {GPU} CAP_EXP+8.w=2000:7000"] and f.evidence[0].source == f"files{CFG}"


def test_mrrs_4096_is_ok() -> None:
    word = config_word(host_files(SEED, CFG)[CFG], DEVCTL)
    f = _for(_seed_with(_gpu_word(DEVCTL, (word & ~0x7000) | 0x5000)), "pcie.max_read_request")
    assert f.status == "ok" and f.evidence[0].value == "DevCtl MaxReadReq 4096 bytes"
    f = one(audit_ids(MemorySnapshot(host_files(H1, DEV)), "pcie"), "pcie.max_read_request")
    assert f.status == "ok"  # the H200 VM's firmware programs 4096


def test_mrrs_mps_rcb_without_config_space_are_unknown() -> None:
    found = _seed_with({}, drop=(CFG,))
    for cid in ("pcie.max_read_request", "pcie.max_payload", "pcie.rcb"):
        f = _for(found, cid)
        assert f.status == "unknown" and "config space" in f.impact


def test_mps_256_at_the_gpus_limit_is_expected() -> None:
    f = _for(_seed_with({}), "pcie.max_payload")
    assert f.status == "expected" and f.severity is None and "hardware limit" in f.impact


def test_mps_below_the_path_is_p2() -> None:
    word = config_word(host_files(SEED, CFG)[CFG], DEVCTL)
    f = _for(_seed_with(_gpu_word(DEVCTL, word & ~0x00E0)), "pcie.max_payload")  # 128 bytes in use
    assert (f.status, f.severity) == ("actionable", "P2") and f.title == f"GPU {GPU}: MaxPayload 128 bytes in use, 256 supported along the path"


def test_mps_at_a_limit_above_256_is_ok() -> None:
    hexs = host_files(SEED, CFG)[CFG]
    cap, ctl = config_word(hexs, DEVCAP), config_word(hexs, DEVCTL)
    hexs = with_config_word(hexs, DEVCAP, (cap & ~0x7) | 0x2)  # supports 512
    hexs = with_config_word(hexs, DEVCTL, (ctl & ~0x00E0) | 0x0040)  # uses 512, as the root port supports
    f = _for(_seed_with({CFG: hexs}), "pcie.max_payload")
    assert f.status == "ok" and f.title == f"GPU {GPU}: MaxPayload 512 bytes"


def test_rcb_64_is_expected_128_is_ok() -> None:
    assert _for(_seed_with({}), "pcie.rcb").status == "expected"
    word = config_word(host_files(SEED, CFG)[CFG], LNKCTL)
    f = _for(_seed_with(_gpu_word(LNKCTL, word | 0x8)), "pcie.rcb")
    assert f.status == "ok" and f.evidence[0].value == "LnkCtl RCB 128 bytes"


def test_acs_without_redirection_is_ok_citing_each_bridge() -> None:
    f = one(_seed_with({}), "pcie.acs")
    assert f.status == "ok" and "9 bridge(s)" in f.title
    assert f.evidence[0] .source == f"files{BRIDGE_CFG}" and f.evidence[0].value == "0000:00:01.1: ACSCtl 0x0000: no control bit set"


def test_acs_redirection_on_bare_metal_is_p0_with_the_old_word_to_revert() -> None:
    hexs = with_config_word(host_files(SEED, BRIDGE_CFG)[BRIDGE_CFG], ACSCTL, 0x001D)  # SrcValid ReqRedir CmpltRedir UpstreamFwd
    found = _seed_with({BRIDGE_CFG: hexs})
    f = one(found, "pcie.acs")
    assert (f.status, f.severity, f.fix_kind, f.subject) == ("actionable", "P0", "runtime", "0000:00:01.1")
    assert f.remedy.commands == ["setpci -s 0000:00:01.1 ECAP_ACS+6.w=0000:ffff"] and f.remedy.revert == ["setpci -s 0000:00:01.1 ECAP_ACS+6.w=001d:ffff"]


def test_acs_redirection_in_a_vm_is_expected() -> None:
    hexs = with_config_word(host_files(SEED, BRIDGE_CFG)[BRIDGE_CFG], ACSCTL, 0x001D)
    fs = host_files(SEED, DEV, "/proc/cmdline", "/sys/kernel/iommu_groups/", "/sys/class/infiniband/")
    fs[BRIDGE_CFG] = hexs
    snap = MemorySnapshot(fs, cmds={**host_cmds(SEED, "nvsmi_q"), "systemd_detect_virt": "kvm\n"})
    f = one(audit_ids(snap, "pcie"), "pcie.acs")
    assert f.status == "expected" and f.evidence[-1].value == "kvm"


def test_acs_one_gpu_without_nic_is_not_applicable() -> None:
    f = one(audit_ids(MemorySnapshot(host_files(H1, DEV)), "pcie"), "pcie.acs")
    assert f.status == "not_applicable"


def test_iommu_identity_groups_are_ok() -> None:
    f = one(_seed_with({}), "iommu.mode")
    assert f.status == "ok" and f.title == "IOMMU in passthrough (identity) mode for the GPUs (iommu=pt)"
    assert f.evidence[0].source == "files/proc/cmdline"


def test_iommu_translating_groups_are_p1_reboot() -> None:
    groups = host_files(SEED, "/sys/kernel/iommu_groups/")
    dma = {k: "DMA-FQ\n" for k in groups if k.endswith("/type")}
    assert dma
    f = one(_seed_with(dma), "iommu.mode")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "reboot")
    assert f.remedy.persist[0].startswith("add iommu=pt")


def test_iommu_on_by_cmdline_without_pt_is_p1_and_no_groups_is_ok() -> None:
    cl = host_files(SEED, "/proc/cmdline")["/proc/cmdline"].replace("iommu=pt", "amd_iommu=on")
    f = one(audit_ids(MemorySnapshot({"/proc/cmdline": cl}), "pcie"), "iommu.mode")
    assert (f.status, f.severity) == ("actionable", "P1") and "amd_iommu=on" in f.title
    found = audit_ids(MemorySnapshot(host_files(H1, "/proc/cmdline"), cmds=host_cmds(H1, "iommu_ls")), "pcie")
    f = one(found, "iommu.mode")
    assert f.status == "ok" and f.evidence[-1].value == "ls -l /sys/kernel/iommu_groups: total 0"


def test_iommu_pasted_cmdline_with_pt_is_ok_and_a_silent_one_unknown() -> None:
    f = one(audit_ids(pasted("cmdline-rccl1129-iommu-pt.txt"), "pcie"), "iommu.mode")
    assert f.status == "ok" and "iommu=pt" in f.evidence[0].value
    f = one(audit_ids(MemorySnapshot(host_files(H1, "/proc/cmdline")), "pcie"), "iommu.mode")
    assert f.status == "unknown" and "iommu_groups" in f.impact
    assert one(audit_ids(MemorySnapshot({}), "pcie"), "iommu.mode").status == "unknown"


def test_pasted_lnksta_lines_without_their_device_report_the_slow_link() -> None:
    # janhq/jan#183: LnkCap and LnkSta of an RTX 4090 behind a riser, copied out of lspci -vv without the device line.
    f = one(audit_ids(pasted("lspci-jan183-lnksta-downgraded.txt"), "pcie"), "pcie.link")
    assert f.status == "unknown" and f.subject == "evidence/lspci-jan183-lnksta-downgraded.txt LnkSta"
    assert "PCIe link at 2.5 GT/s below 16 GT/s; whether the GPU was idle is not captured" in f.title
    assert f.evidence[0].value == "current 2.5 GT/s x16 (lspci: speed downgraded, width ok)"
    assert f.evidence[1].value == "maximum 16 GT/s x16"


def test_width_downgraded_note_is_actionable_without_the_capability_line(tmp_path) -> None:
    # geerlingguy/raspberry-pi-pcie-devices#480: a Quadro RTX 8000 in a Raspberry Pi's x1 slot (lines of its block).
    snap = pasted_text(tmp_path, "lnk.txt", "\t\tLnkCtl:\tASPM Disabled; RCB 64 bytes, Disabled- CommClk+\n"
                                            "\t\t\tExtSynch- ClockPM- AutWidDis- BWInt- AutBWInt-\n"
                                            "\t\tLnkSta:\tSpeed 5GT/s (downgraded), Width x1 (downgraded)\n")
    f = one(audit_ids(snap, "pcie"), "pcie.link")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "hardware")
    assert f.title.endswith("PCIe link width x1 below its maximum (lspci: downgraded)")


def test_lnksta_without_capability_or_notes_is_unknown_not_ok(tmp_path) -> None:
    seed_line = next(l for l in host_cmds(SEED, "lspci_vvv")["lspci_vvv"].splitlines() if "LnkSta:" in l)
    f = one(audit_ids(pasted_text(tmp_path, "lnk.txt", seed_line + "\n"), "pcie"), "pcie.link")
    assert f.status == "unknown" and "maximum is not captured" in f.title and "LnkCap" in (f.impact or "")
