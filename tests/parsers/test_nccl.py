"""The NCCL log parser on public logs (tests/fixtures/evidence, each in ABOUT.md with its thread)."""

from __future__ import annotations

from infergap.parsers.nccl import parse_nccl_log, transport_family
from tests.parsers.inputs import lines


def test_two_nodes_over_sockets():
    f = parse_nccl_log(lines("nccl-1232-two-nodes.log"))
    assert (f.lines, f.nccl_lines) == (16, 16)
    assert f.hosts == ["host-a", "host-b"] and f.single_host is False and f.multi_dev_ranks
    assert f.transports == {"NET/Socket": 9, "SHM": 2}
    assert (f.coll_channels, f.nvls_channels, f.p2p_channels) == (2, 0, 2)
    # [send] lines place the sender on the printing host, [receive] lines the receiver
    assert f.rank_host[0] == "host-a" and f.rank_host[1] == "host-b"


def test_gpu_direct_rdma_disabled_per_hca():
    f = parse_nccl_log(lines("nccl-1537-gdr-disabled.log"))
    assert f.network == "IB" and f.ib_devices == ["mlx5_0", "mlx5_1"]
    assert f.gdr_disabled == ["mlx5_0", "mlx5_1"] and not f.gdr_enabled
    assert f.nranks == 16 and f.single_host is True


def test_p2p_disabled_pairs_are_sorted_and_unique():
    f = parse_nccl_log(lines("nccl-2225-p2p-disabled.log"))
    assert f.p2p_disabled_pairs == [(6, 7), (4, 5), (4, 6), (4, 7), (5, 6), (5, 7)]


def test_shm_between_eight_gpus_of_one_host():
    f = parse_nccl_log(lines("nccl-1817-shm-8gpu.log"))
    assert f.transports == {"SHM": 11} and f.single_host is True
    assert all(lk.transport == "SHM" for lk in f.intra_host_links())


def test_transport_families():
    assert [transport_family(v) for v in ("P2P/CUMEM/read", "SHM/direct/direct", "NET/Socket/0", "NET/IB/0/GDRDMA",
                                          "direct shared memory")] == ["P2P/CUMEM", "SHM", "NET/Socket", "NET/IB", "SHM"]


def test_old_nccl_format_is_read():
    """NCCL 2.2/2.3 lines (``host:pid:tid [dev] INFO Ring 00 : …``, no ``NCCL`` word), as pasted in
    https://github.com/pytorch/pytorch/issues/7019, give ranks and transports."""
    from infergap.evidence.recognize import log_kinds

    lines = [
        "gpu-host:13802:13802 [1] misc/ibvwrap.cu:61 WARN Failed to open libibverbs.so[.1]",
        "gpu-host:13802:13802 [1] INFO Using internal Network Socket",
        "NCCL version 2.2.13+cuda9.2",
        "gpu-host:13802:13802 [0] INFO comm 0xb25bf840 rank 0 nranks 2",
        "gpu-host:13802:13802 [1] INFO Ring 00 :    0   1",
        "gpu-host:13802:13802 [0] INFO Ring 00 : 0[0] -> 1[1] via P2P/direct pointer",
        "gpu-host:13802:13802 [1] INFO Ring 00 : 1[1] -> 0[0] via P2P/direct pointer",
        "gpu-host:11:11 [0] INFO Ring 01 : 0[1a000] -> 1[1b000] via direct shared memory",
    ]
    assert all(log_kinds(ln) == ("nccl_log",) for ln in lines if ln[0] != "N")
    f = parse_nccl_log(lines)
    assert f.version == "2.2.13" and f.cuda == "9.2"
    assert f.transports == {"P2P/direct": 2, "SHM": 1}


def test_nccl_tests_output_rows_and_checks() -> None:
    """nccl-tests#232: the launch command, the column header and five result rows of all_reduce_perf."""
    from infergap.parsers.nccl import parse_nccl_tests

    r = parse_nccl_tests(lines("nccltests-232-allreduce-two-nodes.txt"))
    assert len(r.rows) == 5 and r.rows[0] == (2097152, 18.53, 22.46) and r.best == (33554432, 41.52)
    assert (r.wrong, r.avg_busbw_GBps, r.ranks) == (0, None, [])
