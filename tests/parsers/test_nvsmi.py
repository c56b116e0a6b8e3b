"""nvidia-smi outputs of the captured H200 hosts, parsed: topology, P2P, the query CSV, ``-q``,
``-q -x``, the default table and NVLink status."""

from __future__ import annotations

from infergap.parsers.nvsmi import (
    csv_to_gpus,
    parse_nvlink_status,
    parse_nvsmi_q_text,
    parse_nvsmi_q_versions,
    parse_nvsmi_table,
    parse_nvsmi_xml,
    parse_p2p,
    parse_query_csv,
    parse_topo,
)
from tests.parsers.inputs import EVIDENCE, h200, h200x2


def test_topology_of_two_nvlinked_h200():
    topo = parse_topo(h200x2("cmds/nvsmi_topo.out"))
    assert topo.gpus == ["GPU0", "GPU1"]
    assert topo.link("GPU0", "GPU1") == "NV18" and topo.nvlink_count("GPU1", "GPU0") == 18
    assert topo.cpu_affinity == {"GPU0": "0-31", "GPU1": "0-31"} and topo.numa_affinity == {"GPU0": "0", "GPU1": "0"}


def test_topology_of_one_gpu():
    topo = parse_topo(h200("cmds/nvsmi_topo.out"))
    assert topo.gpus == ["GPU0"] and topo.cpu_affinity == {"GPU0": "0-15"}


def test_topology_whose_tabs_became_single_spaces():
    # A paste through a web form keeps one space of each tab: the same matrix must come out.
    tabs = h200x2("cmds/nvsmi_topo.out")
    spaced = parse_topo(tabs.replace("\t", " "))
    assert spaced == parse_topo(tabs) and spaced.link("GPU0", "GPU1") == "NV18" and spaced.numa_affinity == {"GPU0": "0", "GPU1": "0"}


def test_topology_pasted_with_single_spaces_in_the_header():
    # noonghunna/club-3090#1125: "GPU0 GPU1" one space apart, the rest padded by runs of spaces.
    topo = parse_topo((EVIDENCE / "topo-club3090-1125-single-space.txt").read_text(encoding="utf-8"))
    assert topo.gpus == ["GPU0", "GPU1"] and topo.link("GPU1", "GPU0") == "NODE" and topo.link("GPU0", "GPU0") == "X"
    assert topo.cpu_affinity == {"GPU0": "0-15", "GPU1": "0-15"} and topo.numa_affinity == {"GPU0": "0", "GPU1": "0"}


def test_p2p_matrix():
    assert parse_p2p(h200x2("cmds/nvsmi_p2p.out")) == {("GPU0", "GPU1"): "OK", ("GPU1", "GPU0"): "OK"}
    assert parse_p2p(h200("cmds/nvsmi_p2p.out")) == {}


def test_query_csv_rows_and_gpus():
    rows = parse_query_csv(h200("cmds/nvsmi_csv.out"))
    assert len(rows) == 1
    assert rows[0]["name"] == "NVIDIA H200" and rows[0]["clocks.max.sm"] == "1980 MHz"  # unit dropped from the key
    (gpu,) = csv_to_gpus(rows)
    assert gpu.bdf == "0000:00:06.0"
    assert (gpu.pcie_gen, gpu.pcie_gen_max, gpu.pcie_width, gpu.pcie_width_max) == (5, 5, 16, 16)
    assert (gpu.sm_clock_MHz, gpu.power_W, gpu.power_limit_W, gpu.temperature_C) == (345.0, 82.26, 700.0, 35.0)
    assert gpu.throttle_active == ["gpu_idle"] and gpu.persistence_mode is True and gpu.ecc_current is True


def test_xml_log():
    log = parse_nvsmi_xml(h200("cmds/nvsmi_qx.out"))
    assert (log.driver_version, log.cuda_version, log.truncated) == ("580.159.04", "13.0", False)
    (gpu,) = log.gpus
    assert (gpu.bdf, gpu.name, gpu.architecture) == ("0000:00:06.0", "NVIDIA H200", "Hopper")
    assert gpu.memory_total_B == 143771 * 2**20 and gpu.bar1_total_B == 256 * 2**30
    assert gpu.pcie_gen_max == 5


def test_q_text_agrees_with_the_xml():
    (q,) = parse_nvsmi_q_text(h200("cmds/nvsmi_q.out"))
    (x,) = parse_nvsmi_xml(h200("cmds/nvsmi_qx.out")).gpus
    assert (q.bdf, q.name, q.memory_total_B) == (x.bdf, x.name, x.memory_total_B) == ("0000:00:06.0", "NVIDIA H200", 150754820096)


def test_q_text_header_versions():
    assert parse_nvsmi_q_versions(h200("cmds/nvsmi_q.out")) == ("580.159.04", "13.0")
    assert parse_nvsmi_q_versions(h200("cmds/nvsmi.out")) == ("580.159.04", "13.0")  # the table's header row


def test_default_table():
    (gpu,) = parse_nvsmi_table(h200("cmds/nvsmi.out"))
    assert (gpu.bdf, gpu.name, gpu.persistence_mode, gpu.pstate) == ("0000:00:06.0", "NVIDIA H200", True, "P0")
    assert (gpu.power_W, gpu.power_limit_W, gpu.temperature_C, gpu.utilization_pct) == (97.0, 700.0, 35.0, 0.0)
    assert gpu.memory_total_B == 143771 * 2**20


def test_nvlink_status_of_two_h200():
    links = parse_nvlink_status(h200x2("cmds/nvsmi_nvlink.out"))
    assert sorted(links) == [0, 1]
    assert len(links[0]) == len(links[1]) == 18
    assert links[0][0] == 26.562


def test_the_tables_mig_cell_is_read() -> None:
    """ollama#4814: two A100s with MIG M. Enabled (the utilisation cell reads N/A in MIG mode)."""
    from infergap.parsers.nvsmi import parse_nvsmi_table
    from tests.parsers.inputs import EVIDENCE

    gpus = parse_nvsmi_table((EVIDENCE / "ollama-4814-mig-table.txt").read_text())
    assert [(g.bdf, g.mig_current) for g in gpus] == [("0000:05:00.0", "Enabled"), ("0000:86:00.0", "Enabled")]


def test_mig_lgi_instances_and_gpu_mig() -> None:
    """dra-driver-nvidia-gpu#933: GPU 3 left with three 1g.10gb instances at placements 0, 1, 5."""
    from infergap.findings import Status
    from infergap.parsers.nvsmi import parse_mig_instances
    from tests.investigators.memsnap import audit_ids, one, pasted
    from tests.parsers.inputs import lines

    rows = parse_mig_instances(lines("draf-933-mig-lgi.txt"))
    assert [(r["gpu"], r["profile"], r["id"], r["placement"]) for r in rows] == [(3, "1g.10gb", 7, "0:1"), (3, "1g.10gb", 8, "1:1"), (3, "1g.10gb", 12, "5:1")]
    f = one(audit_ids(pasted("draf-933-mig-lgi.txt"), "gpu_health"), "gpu.mig")
    assert f.status is Status.actionable and f.subject == "GPU3" and "3 MIG instance(s)" in f.title
    assert f.remedy.commands[-1] == "nvidia-smi -i 3 -mig 0"


def test_mig_lci_rows_are_compute_instances() -> None:
    from infergap.parsers.nvsmi import parse_mig_instances

    rows = parse_mig_instances(["| Compute instances:                                  |",
                                "|   0      1       MIG 1g.5gb           0         0          0:1     |"])
    assert rows == [{"kind": "compute_instance", "gpu": 0, "gi": 1, "profile": "1g.5gb", "profile_id": 0, "id": 0, "placement": "0:1"}]


# -- sections of nvidia-smi -q pasted without their header ------------------------------------

def _blocks(text: str, heading: str, n_lines: int) -> list[str]:
    """What ``nvidia-smi -q | grep -A<n_lines> '<heading>'`` prints: each block, grep's ``--`` between."""
    out, lines = [], text.splitlines()
    for i, ln in enumerate(lines):
        if ln.strip() == heading:
            out.append("\n".join(lines[i:i + n_lines + 1]))
    return out


def test_a_throttle_block_pasted_alone_is_one_gpu_by_index() -> None:
    """kubeflow#68: ``nvidia-smi -q | grep -A8 'Clocks Throttle'`` of one idle GPU."""
    from infergap.parsers.nvsmi import parse_nvsmi_q_text
    from tests.parsers.inputs import lines

    gpus = parse_nvsmi_q_text("\n".join(lines("nvsmiq-kubeflow68-throttle-idle.txt")[2:-1]))
    assert [(g.bdf, g.throttle_active, g.throttle_captured) for g in gpus] == [("GPU0", ["gpu_idle"], True)]


def test_clock_sections_pasted_alone_give_the_clock_and_its_max() -> None:
    """gpustat#135: ``Clocks`` and ``Max Clocks`` copied out of ``nvidia-smi -q``."""
    from infergap.parsers.nvsmi import parse_nvsmi_q_fragment
    from tests.parsers.inputs import lines

    (g,) = parse_nvsmi_q_fragment("\n".join(lines("nvsmiq-gpustat135-clocks.txt")[1:-1]))
    assert (g.bdf, g.sm_clock_MHz, g.sm_clock_max_MHz) == ("GPU0", 2025.0, 2100.0)


def test_grep_blocks_of_two_gpus_are_two_gpus_and_link_info_gets_its_parent() -> None:
    """The two-H200 capture's ``-q`` cut as grep prints it: one block per GPU between ``--``
    lines; ``GPU Link Info`` alone is read as ``PCI/GPU Link Info``."""
    from infergap.parsers.nvsmi import parse_nvsmi_q_fragment
    from tests.parsers.inputs import h200x2

    q = h200x2("cmds/nvsmi_q.out")
    throttle = parse_nvsmi_q_fragment("\n--\n".join(_blocks(q, "Clocks Event Reasons", 9)))
    assert [g.bdf for g in throttle] == ["GPU0", "GPU1"] and all(g.throttle_captured for g in throttle)
    link = parse_nvsmi_q_fragment("\n".join(_blocks(q, "GPU Link Info", 9)))
    assert [(g.bdf, g.pcie_gen_max, g.pcie_width, g.pcie_width_max) for g in link] == [("GPU0", 5, 16, 16), ("GPU1", 5, 16, 16)]


# -- nvidia-container-cli info ------------------------------------------------------------------

def test_container_cli_info_gives_driver_cuda_and_gpus() -> None:
    """nvidia-docker#904 and #895: the tail of ``nvidia-container-cli -k -d /dev/tty info``."""
    from infergap.parsers.nvsmi import parse_container_cli_info
    from tests.parsers.inputs import lines

    d, c, g = parse_container_cli_info("\n".join(lines("nvdocker-895-container-cli-920m.txt")))
    assert (d, c, [(x.bdf, x.name) for x in g]) == ("384.130", "9.0", [("0000:08:00.0", "GeForce 920M")])


def test_container_cli_info_of_a_jetson_leaves_null_fields_out_and_takes_the_nvml_library_version() -> None:
    """Lines of nvidia-docker#1775 (Jetson: ``(null)`` fields) and #1038 (the libnvidia-ml it selected)."""
    from infergap.parsers.nvsmi import parse_container_cli_info

    d, c, g = parse_container_cli_info(
        "I0805 18:23:54.119118 22497 nvc_info.c:148] selecting /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.418.56\n"
        "NVRM version:   (null)\nCUDA version:   10.2\n\nDevice Index:   0\nModel:          Xavier\nBus Location:   (null)\n")
    assert (d, c, g) == ("418.56", "10.2", [])


def test_xml_sections_pasted_alone_keep_only_their_complete_elements() -> None:
    """telegraf#16569: an excerpt that starts inside ``<clocks_event_reasons>`` and ends inside
    ``<fbc_stats>``: the complete elements between are one GPU."""
    from infergap.parsers.nvsmi import parse_nvsmi_xml
    from tests.parsers.inputs import lines

    log = parse_nvsmi_xml("\n".join(lines("nvsmiqx-telegraf16569-fragment.xml")))
    (g,) = log.gpus
    assert log.truncated and (g.bdf, g.compute_mode, g.memory_total_B, g.bar1_total_B) == ("GPU0", "Default", 12288 << 20, 256 << 20)
    assert g.utilization_pct == 0 and not g.throttle_captured


def test_xml_sections_of_two_gpus_are_two_gpus() -> None:
    """The two-H200 capture's ``-q -x``: its two ``<clocks_event_reasons>`` elements pasted one after the other."""
    import re

    from infergap.parsers.nvsmi import parse_nvsmi_xml_fragment
    from tests.parsers.inputs import h200x2

    blocks = re.findall(r"<clocks_event_reasons>.*?</clocks_event_reasons>", h200x2("cmds/nvsmi_qx.out"), re.S)
    gpus = parse_nvsmi_xml_fragment("\n".join(blocks))
    assert len(blocks) == 2 and [g.bdf for g in gpus] == ["GPU0", "GPU1"] and all(g.throttle_captured for g in gpus)
