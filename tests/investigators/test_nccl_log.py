"""nccl_log investigator: nccl.transport, nccl.gdr, nccl.p2p, nccl.env, nccl.version, nccl.warnings,
from public NCCL_DEBUG=INFO logs and the NCCL log of the two-H200 capture's --active run."""

from __future__ import annotations

from pathlib import Path

from tests.investigators.memsnap import (MemorySnapshot, audit_ids, evidence_text, host_cmds, host_probe, host_text, one,
                                         pasted, pasted_text)

SEED = "seed-8x-rtxpro6000"
H2 = "h200-2gpu-collect"


def _h200_log(tmp_path: Path, base: MemorySnapshot | None = None) -> dict:
    """The NCCL_DEBUG=INFO log of the all-reduce collect --active ran on the two-H200 VM."""
    return audit_ids(pasted_text(tmp_path, "nccl-h200.log", host_probe(H2, "active")["nccl_log"], base=base), "nccl_log")


def _no_p2p_seed() -> MemorySnapshot:
    """The seed host with its topo -p2p r matrix reading NS (not supported) for every pair."""
    return MemorySnapshot({}, cmds={"nvsmi_p2p": host_text(SEED, "cmds/nvsmi_p2p.out").replace("\tOK", "\tNS")})


def test_p2p_cumem_between_the_h200_pair_is_ok(tmp_path: Path) -> None:
    found = _h200_log(tmp_path)
    f = one(found, "nccl.transport")
    assert f.status == "ok" and f.title == "GPUs of one host use P2P/CUMEM"
    assert f.evidence[0].value == "0[0] -> 1[1] via P2P/CUMEM (24 channel(s))" and f.evidence[0].source == "evidence/nccl-h200.log"


def test_version_without_known_issue_is_ok(tmp_path: Path) -> None:
    f = one(_h200_log(tmp_path), "nccl.version")
    assert f.status == "ok" and f.evidence[0].value == "NCCL 2.28.9, NCCL's CUDA build 13.0" and f.evidence[1].source == "signatures.yaml"


def test_nccl_2_25_on_rtx_5090_is_p0() -> None:
    f = one(audit_ids(pasted("nccl-1637-5090-p2p-disable.log"), "nccl_log"), "nccl.version")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "software") and "NCCL 2.25.1" in f.title


def test_env_echoed_by_nccl_is_ok_unless_it_disables_a_transport(tmp_path: Path) -> None:
    f = one(_h200_log(tmp_path), "nccl.env")
    assert f.status == "ok" and f.evidence[0].value == "NCCL_NVLS_ENABLE set by environment to 0"
    log = host_probe(H2, "active")["nccl_log"].replace("NCCL_NVLS_ENABLE set by environment to 0", "NCCL_P2P_DISABLE set by environment to 1")
    assert log != host_probe(H2, "active")["nccl_log"]
    f = one(audit_ids(pasted_text(tmp_path, "nccl.log", log), "nccl_log"), "nccl.env")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "runtime") and f.remedy.revert == ["export NCCL_P2P_DISABLE=1"]


def test_ib_disable_without_ib_devices_is_not_flagged() -> None:
    f = one(audit_ids(pasted("nccl-451-docker-ib.log"), "nccl_log"), "nccl.env")
    assert f.status == "ok" and "NCCL_IB_DISABLE" in f.title


def test_shm_between_gpus_of_one_host_is_p1() -> None:
    f = one(audit_ids(pasted("nccl-1817-shm-8gpu.log"), "nccl_log"), "nccl.transport")
    # The log alone does not say why P2P is not used: the remedy is the commands that tell, not a firmware change.
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "runtime")
    assert f.evidence[0].value == "0[0] -> 4[4] via SHM/direct/direct (2 channel(s))"
    assert "does not say why" in f.remedy.note


def test_shm_with_p2p_reported_ok_points_at_the_pcie_path() -> None:
    # The driver reports every pair peer-capable (topo -p2p r: OK) and NCCL still uses SHM: ACS or the IOMMU (firmware).
    rows = ["\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7"] + [
        f"GPU{i}" + "".join("\tX" if i == j else "\tOK" for j in range(8)) for i in range(8)]
    base = MemorySnapshot({}, cmds={"nvsmi_p2p": "\n".join(rows) + "\n"})
    f = one(audit_ids(pasted("nccl-1817-shm-8gpu.log", base=base), "nccl_log"), "nccl.transport")
    assert (f.status, f.fix_kind) == ("actionable", "bios") and "peer-capable" in f.remedy.note


def test_shm_across_cpu_sockets_or_without_p2p_is_expected() -> None:
    # On the seed host GPUs 0-3 and 4-7 sit on different sockets (SYS in topo -m): NCCL's SHM default there.
    found = audit_ids(pasted("nccl-1817-shm-8gpu.log", base=MemorySnapshot({}, cmds=host_cmds(SEED, "nvsmi_topo"))), "nccl_log")
    f = one(found, "nccl.transport")
    assert f.status == "expected" and any("different CPU sockets (SYS)" in e.value for e in f.evidence)
    f = one(audit_ids(pasted("nccl-1817-shm-8gpu.log", base=_no_p2p_seed()), "nccl_log"), "nccl.transport")
    assert f.status == "expected" and any("reports NS" in e.value for e in f.evidence)


def test_log_without_channel_lines_is_unknown() -> None:
    f = one(audit_ids(pasted("nccl-1637-5090-p2p-disable.log"), "nccl_log"), "nccl.transport")
    assert f.status == "unknown" and "NCCL_DEBUG=INFO" in f.impact


def test_gdr_disabled_is_p0_between_nodes_and_p1_otherwise() -> None:
    f = one(audit_ids(pasted("nccl-1537-gdr-disabled.log"), "nccl_log"), "nccl.gdr")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "runtime") and "mlx5_0, mlx5_1" in f.title
    f = one(audit_ids(pasted("nccl-1676-gdr-peermem.log"), "nccl_log"), "nccl.gdr")
    assert (f.status, f.severity) == ("actionable", "P1")
    assert f.evidence[0].value == "NET/IB : GPU Direct RDMA Disabled for HCA 'mlx5_0'"


def test_p2p_disabled_is_p1_and_expected_where_the_driver_reports_none() -> None:
    f = one(audit_ids(pasted("nccl-2225-p2p-disabled.log"), "nccl_log"), "nccl.p2p")
    # The log names no GPU model and no P2P matrix: find out first (runtime commands), no firmware change.
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "runtime") and "6 GPU pair(s)" in f.title
    assert not any("setpci" in c for c in f.remedy.commands)
    f = one(audit_ids(pasted("nccl-2225-p2p-disabled.log", base=_no_p2p_seed()), "nccl_log"), "nccl.p2p")
    assert f.status == "expected" and f.evidence[-1].value == "NS"


def test_warnings_are_p1_with_their_lines() -> None:
    f = one(audit_ids(pasted("nccl-328-shm-permission.log"), "nccl_log"), "nccl.warnings")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "software") and f.title == "NCCL printed 2 warning(s)"
    assert [e.value for e in f.evidence] == ["Call to shm_open failed : Permission denied",
                                             "Error while creating shared memory segment nccl-shm-recv-b7948f403864987a-0-3-0 (size 4460544)"]


def test_no_nccl_log_no_finding() -> None:
    assert audit_ids(pasted("sglang-26248-kv-full.log"), "nccl_log") == {}
    assert evidence_text("nccl-952-multinode-ipc.log")  # a multi-node log: only the intra-node pairs are judged
    f = one(audit_ids(pasted("nccl-952-multinode-ipc.log"), "nccl_log"), "nccl.transport")
    assert f.status == "ok" and f.title == "GPUs of one host use P2P/IPC"


def test_p2p_channels_whose_set_up_failed_are_not_ok(tmp_path: Path) -> None:
    """Excerpt of https://github.com/ray-project/ray_lightning/issues/24: NCCL lists a P2P/IPC
    channel, then cannot open the CUDA IPC handle (error 217); the transport must not read ok."""
    log = ("z-pc:909608:910337 [0] NCCL INFO Channel 00 : 0[2d000] -> 1[2e000] via P2P/IPC\n"
           "z-pc:909608:910337 [0] transport/p2p.cc:238 NCCL WARN failed to open CUDA IPC handle : 217 "
           "peer access is not supported between these two devices\n"
           "z-pc:909608:910337 [0] NCCL INFO transport.cc:68 -> 1\n")
    f = one(audit_ids(pasted_text(tmp_path, "ipc.log", log), "nccl_log"), "nccl.transport")
    assert (f.status, f.severity) == ("actionable", "P1")
    assert "failed to open CUDA IPC handle" in f.evidence[-1].value
    ok = one(audit_ids(pasted_text(tmp_path, "fine.log", log.splitlines()[0] + "\n"), "nccl_log"), "nccl.transport")
    assert ok.status == "ok"


# -- nccl.net: the network path between hosts --------------------------------------------------

def _net(name: str):
    return one(audit_ids(pasted(name), "nccl_log"), "nccl.net")


def test_two_nodes_over_ib_with_gdr_is_ok_with_the_devices_and_channels() -> None:
    """NCCL#1357: two H100 nodes, four IB/SHARP HCAs, inter-node channels via NET/IBext/n/GDRDMA."""
    f = _net("nccl-1357-ib-gdr-two-nodes.log")
    assert (f.status, f.title) == ("ok", "Nodes exchange data over IB with GPU Direct RDMA")
    values = [e.value for e in f.evidence]
    assert values[0].startswith("NET/IB devices: [0]mlx5_0:1/IB/SHARP") and "OOB ibp25s0" in values[0]
    assert "4[4] -> 12[4] via NET/IBext/2/GDRDMA (3 channel(s), IB)" in values
    assert f.details["transports"] == {"4->12": "IB", "6->14": "IB"} and f.details["nics"] == ["mlx5_4", "mlx5_5"]
    assert "bound_GBps" not in f.details and "line rate of the NICs is not in the evidence" in f.impact


def test_busbw_measured_in_the_paste_is_shown_beside_the_path(tmp_path: Path) -> None:
    """The same reporter's all_reduce_perf rows (nccl-tests#232) pasted under the log."""
    rows = ("     2097152        524288     float     sum      -1    113.2   18.53   18.53      0    93.35   22.46   22.46      0\n"
            "    33554432       8388608     float     sum      -1    812.3   41.31   41.31      0    808.2   41.52   41.52      0\n")
    text = evidence_text("nccl-1357-ib-gdr-two-nodes.log") + rows
    f = one(audit_ids(pasted_text(tmp_path, "run.log", text), "nccl_log"), "nccl.net")
    assert f.status == "ok" and (f.details["busbw_max_GBps"], f.details["rate_mbps"]) == (41.52, [None, None])


def test_sockets_between_nodes_without_rdma_evidence_is_unknown_not_ok() -> None:
    """NCCL#1232: two nodes over NET/Socket; nothing in the paste says whether they have an RDMA NIC."""
    f = _net("nccl-1232-two-nodes.log")
    assert f.status == "unknown" and "TCP sockets" in f.title and f.details["transports"]["0->1"] == "Socket"


def test_known_network_failures_are_the_finding_with_the_path_beside_them() -> None:
    lo = _net("horovod-584-lo-interface.log")
    assert (lo.status, lo.severity) == ("actionable", "P0") and "loopback" in lo.title
    assert lo.details["socket_ifaces"] == ["lo", "eth0", "eth1"]
    ib = _net("nccl-451-docker-ib.log")
    assert (ib.status, ib.severity) == ("actionable", "P0") and "cannot open it" in ib.title
    assert "NET/IB : No device found." in [e.value for e in ib.evidence] and ib.details["bootstrap_ifaces"] == ["bond0"]
    # one line without NCCL's prefix: read as a fragment, the signature reader reports it under the owner's name
    retry = one(audit_ids(pasted("nccl-1664-ib-status12.log"), "evidence"), "nccl.net")
    assert (retry.status, retry.severity, retry.fix_kind) == ("actionable", "P0", "hardware")


def test_gdr_disabled_per_hca_without_channel_lines_is_unknown_and_names_the_hcas() -> None:
    """NCCL#1537: RoCE HCAs with GDR disabled, no channel line: the path is not shown (nccl.gdr is the finding)."""
    f = _net("nccl-1537-gdr-disabled.log")
    assert f.status == "unknown" and "no channel line between hosts" in f.title
    values = [e.value for e in f.evidence]
    assert "NET/IB devices: [0]mlx5_0:1/RoCE, [1]mlx5_1:1/RoCE" in values[0]
    assert "GPU Direct RDMA disabled for mlx5_0" in values
    assert any("NCCL_IB_HCA=mlx5" in v and "NCCL_IB_GID_INDEX=3" in v for v in values)  # the HCA and GID selection pasted below the log


def test_a_single_host_log_is_not_applicable() -> None:
    """NCCL#1817: eight GPUs of one host over SHM."""
    f = _net("nccl-1817-shm-8gpu.log")
    assert f.status == "not_applicable" and f.evidence and "One host" in f.title


def test_ib_channels_without_gdrdma_and_no_reason_are_unknown() -> None:
    """NCCL#1516: channels via NET/IB/1/Shared, no /GDRDMA and no GDR line: not ok."""
    f = _net("nccl-1516-geforce-shm.log")
    assert f.status == "unknown" and "no channel shows GPU Direct RDMA" in f.title


def test_ibstat_alone_gives_the_ports_and_their_bound_but_no_ok() -> None:
    """ucx#9515: two 400 Gb/s InfiniBand ports Active; without an NCCL log the path is unknown."""
    f = _net("ucx-9515-ibstat.txt")
    assert f.status == "unknown" and f.title.startswith("2 HCA port(s) Active, 800 Gb/s together")
    assert f.evidence[0].value == "mlx5_0 port 1: Active/LinkUp, 400 Gb/s, InfiniBand" and "100 GB/s" in f.impact


def test_ibstat_rates_give_the_bound_of_an_nccl_log(tmp_path: Path) -> None:
    """NCCL#1357's log with ibstat ports named like its HCAs: the bound is NICs used × rate."""
    ib = evidence_text("ucx-9515-ibstat.txt").replace("mlx5_0", "mlx5_4").replace("mlx5_1", "mlx5_5")
    f = one(audit_ids(pasted_text(tmp_path, "both.txt", evidence_text("nccl-1357-ib-gdr-two-nodes.log") + "\n" + ib), "nccl_log"), "nccl.net")
    assert f.status == "ok" and f.details["bound_GBps"] == 100.0 and "2 NIC(s) × 400 Gb/s = 100.0 GB/s" in f.impact


#: NCCL 2.5.6's log in nccl#302 (host names replaced): P2P/IPC inside the host, IB to the next one,
#: then the IB queue pair could not be set up.
NCCL_302 = """[155] gpu-host-19:5330:7970 [3] NCCL INFO Ring 00 : 5[3d000] -> 6[b2000] via P2P/IPC
[155] gpu-host-19:5330:7970 [3] NCCL INFO Ring 00 : 5[3d000] -> 4[1b000] via P2P/IPC
[155] gpu-host-19:5330:7970 [3] NCCL INFO Ring 01 : 2[b2000] -> 5[3d000] [receive] via NET/IB/3
[155] gpu-host-19:5330:7970 [3] NCCL INFO Ring 01 : 5[3d000] -> 4[1b000] via P2P/IPC
[155]
[155] gpu-host-19:5330:7970 [3] misc/ibvwrap.cc:284 NCCL WARN Call to ibv_modify_qp failed with error Invalid argument
[155] gpu-host-19:5330:7970 [3] NCCL INFO transport/net_ib.cc:368 -> 2
[155] gpu-host-19:5330:7970 [3] NCCL INFO init.cc:732 -> 2
"""


def test_a_transport_whose_set_up_failed_is_never_ok(tmp_path: Path) -> None:
    """The P2P links inside the host are fine, but the IB connection NCCL chose failed to set up
    (ibv_modify_qp): the communicator never came up, so nccl.transport is not ok."""
    f = one(audit_ids(pasted_text(tmp_path, "nccl-302.log", NCCL_302), "nccl_log"), "nccl.transport")
    assert (f.status, f.severity) == ("actionable", "P1") and "NET/IB" in f.title
    assert any("ibv_modify_qp" in e.value for e in f.evidence)


def test_show_gids_alone_names_the_routable_roce_v2_index(tmp_path: Path) -> None:
    """NCCL#1573's GID table: no NCCL log, so unknown, naming index 7 (RoCE v2 with IPv4) per HCA.
    With NCCL_IB_GID_INDEX=5 pasted beside it (the link-local v2 GID, the failing choice of
    NCCL#769) it is P1; with 7 it stays unknown."""
    from tests.investigators.memsnap import audit_ids, one, pasted, pasted_text

    f = one(audit_ids(pasted("nccl-1573-show-gids-pod.txt"), "nccl_log"), "nccl.net")
    assert f.status == "unknown" and f.evidence[0].value == "mlx5_0: RoCE v2 with IPv4 at index 7 (10.152.0.12)"
    table = evidence_text("nccl-1573-show-gids-pod.txt")
    bad = one(audit_ids(pasted_text(tmp_path, "gids5.txt", table + "\nNCCL_IB_GID_INDEX=5\n"), "nccl_log"), "nccl.net")
    assert (bad.status, bad.severity) == ("actionable", "P1") and "2 HCA(s)" in bad.title
    good = one(audit_ids(pasted_text(tmp_path, "gids7.txt", table + "\nNCCL_IB_GID_INDEX=7\n"), "nccl_log"), "nccl.net")
    assert good.status == "unknown"
