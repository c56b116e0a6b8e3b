"""The GPU table, name lookup, and the host's GPUs read from a real capture."""

from pathlib import Path

import pytest

from infergap.errors import UserError
from infergap.roofline import find_gpu, gpu_table, host_gpus, load_hardware
from infergap.snapshot import open_snapshot

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "hosts" / "h200-1gpu"


@pytest.mark.parametrize("name,gpu_id", [
    ("NVIDIA H200", "h200"),
    ("h200", "h200"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000-server"),
    ("rtx-pro-6000-server", "rtx-pro-6000-server"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx-pro-6000-workstation"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"),
    ("a100-80gb", "a100-80gb-sxm"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("RTX_5090", "rtx-5090"),
    ("mi300x", "mi300x"),
    ("NVIDIA L40S", "l40s"),
    ("NVIDIA B200", "b200"),
    ("NVIDIA L4", "l4"), ("l4", "l4"), ("NVIDIA A10G", "a10g"), ("a10g", "a10g"),
    ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"), ("rtx-6000-ada", "rtx-6000-ada"),
    ("NVIDIA H20", "h20"), ("h20", "h20"), ("NVIDIA GB200", "gb200"), ("gb200", "gb200"),
    ("NVIDIA B300", "b300"), ("b300", "b300"),
])
def test_names_map_to_entries(name, gpu_id):
    assert find_gpu(name).id == gpu_id


def test_table_is_complete_and_unambiguous():
    table = gpu_table()
    seen: dict[str, str] = {}
    for g in table:
        assert g.source and g.bandwidth_GBps > 0 and g.memory_GB > 0 and g.bf16_tflops > 0
        for n in {g.id, *g.aliases, *g.names}:
            key = "".join(ch for ch in n.lower() if ch.isalnum())
            assert seen.setdefault(key, g.id) == g.id, f"{n} names two GPUs"
    h200 = find_gpu("h200")
    assert h200.measured is not None and h200.measured.bandwidth_GBps < h200.bandwidth_GBps


def test_unknown_gpu_suggests_closest():
    with pytest.raises(UserError, match=r"closest: .*rtx-pro-6000"):
        find_gpu("rtx-pro-600-server")


def test_host_gpus_from_h200_capture():
    with open_snapshot(str(H200)) as snap:
        gpus = host_gpus(snap)
        hw = load_hardware("auto", snapshot=snap)
    assert [g.name for g in gpus] == ["NVIDIA H200"]
    assert gpus[0].memory_total_B == 143771 * 1024 * 1024
    assert hw.gpu.id == "h200" and hw.count == 1 and hw.memory_source.startswith("host")


def test_host_gpus_from_collected_archive():
    """The same machine type captured by ``infergap collect`` (a .tar.gz with NVML probes)."""
    with open_snapshot(str(H200.parent / "h200-1gpu-collect.tar.gz")) as snap:
        hw = load_hardware("auto", snapshot=snap)
    assert hw.gpu.id == "h200" and hw.count == 1


def test_auto_needs_the_hosts_gpus():
    """The roofline does not open a snapshot itself: --gpu auto needs the GPUs handed in."""
    with pytest.raises(UserError, match="GPUs were not read"):
        load_hardware("auto")


def test_auto_from_gpus_handed_in():
    from infergap.roofline.hardware import HostGpu

    hw = load_hardware("auto", host=[HostGpu(name="NVIDIA H200", memory_total_B=143771 * 2**20, bdf="0000:00:06.0")] * 2)
    assert hw.gpu.id == "h200" and hw.count == 2 and hw.memory_B == 143771 * 2**20


def test_auto_without_gpus(tmp_path):
    (tmp_path / "cmds").mkdir()
    with open_snapshot(str(tmp_path)) as snap:
        with pytest.raises(UserError, match="no NVIDIA GPU found"):
            load_hardware("auto", snapshot=snap)


def test_auto_on_this_host_answers():
    """On the machine running the tests: its GPUs if it has any, else one clear error."""
    try:
        with open_snapshot(None) as live:
            hw = load_hardware("auto", host=host_gpus(live))
    except UserError as e:
        assert "--gpu auto:" in str(e)
    else:
        assert hw.count >= 1


def test_datasheet_rows_cite_their_source_and_follow_the_units():
    """The rows added for GPUs users name (L4, A10G, RTX 6000 Ada, H20, GB200, B300): each cites a
    source, and the dense FP8 rate is at most twice BF16 (a with-sparsity figure left unhalved
    would break the header's units)."""
    for gid in ("l4", "a10g", "rtx-6000-ada", "h20", "gb200", "b300"):
        g = find_gpu(gid)
        assert g.source and ("nvidia.com" in g.source or "no datasheet" in g.source or "no public datasheet" in g.source), gid
        assert g.sm is not None and g.memory_GB > 0 and g.bandwidth_GBps > 0, gid
        if g.fp8_tflops:
            assert g.fp8_tflops <= 2 * g.bf16_tflops * 1.01, gid


def test_host_links_and_borrowed_figures_say_what_they_rest_on():
    """GB200's GPU has no PCIe host link (NVLink-C2C to its Grace CPU): no PCIe generation is
    claimed for it (it said gen 6, which its source did not support), and its source names the
    link; A10G's BF16 rate, for which NVIDIA publishes no sheet, is declared as the A10's."""
    from infergap.gpudata import sku

    gb = find_gpu("gb200")
    assert gb.pcie_gen is None and "NVLink-C2C" in (gb.topology_source or "")
    assert sku("NVIDIA GB200").pcie_gen is None
    for gid in ("b300", "h200", "l4"):
        assert find_gpu(gid).pcie_gen in (4, 5, 6), gid
    a10g = find_gpu("a10g")
    assert "A10's dense" in " ".join(a10g.source.split()) and "no datasheet for the A10G" in " ".join(a10g.source.split())
