"""The audit of a real two-H200 machine, captured with ``infergap collect --active``."""

from __future__ import annotations

import pytest

from infergap.audit import run_audit
from infergap.findings import Status
from infergap.snapshot import open_snapshot
from tests.conftest import HOSTS

SNAP = HOSTS / "h200-2gpu-collect.tar.gz"
GPUS = ("0000:00:06.0", "0000:00:07.0")


@pytest.fixture(scope="module")
def report():
    with open_snapshot(SNAP) as snap:
        return run_audit(snap)


def test_nvlink_nv18_with_18_links(report):
    f = report.get("nvlink.topology")[0]
    assert f.status == Status.ok and "NV18" in f.title
    assert f.details["links_per_pair"] == [18]
    assert f.details["active_links_per_gpu"] == {0: 18, 1: 18}
    assert any("NV18" in e.value for e in f.evidence)


def test_p2p_ok_and_custom_allreduce_usable(report):
    assert report.get("gpu.p2p")[0].status == Status.ok
    ar = report.get("allreduce.custom")[0]
    assert ar.status == Status.ok and "NVLink" in ar.title


def test_pcie_facts(report):
    for bdf in GPUS:
        assert report.get("pcie.max_payload", bdf)[0].status == Status.expected
        assert report.get("pcie.max_read_request", bdf)[0].status == Status.ok
        assert report.get("pcie.link", bdf)[0].status == Status.ok
    # both GPUs hang off the root bus of the VM: no bridge, nothing for ACS to redirect
    acs = report.get("pcie.acs")[0]
    assert acs.status == Status.ok and "root bus" in acs.title


def test_measured_bandwidths(report):
    for bdf in GPUS:
        h2d = report.get("pcie.h2d_bandwidth", bdf)[0]
        assert h2d.status == Status.ok
        mem = report.get("gpu.memory_bandwidth", bdf)[0]
        assert mem.status == Status.ok
        assert 3800 < mem.details["measured_GBps"] < 4800  # copy counting read + write, H200 datasheet 4.8 TB/s
    ar = report.get("nccl.allreduce_bandwidth")[0]
    assert ar.status == Status.ok
    sizes = ar.details["sizes"]
    assert sizes[-1]["busbw_GBps"] > 100  # NVLink, not PCIe (gen5 x16 carries 63 GB/s per direction)
    assert sizes[0]["time_us"] < 200


def test_nccl_log_kept_and_scrubbed():
    import json

    with open_snapshot(SNAP) as snap:
        log = snap.probe("active")["nccl_log"]
    assert "NCCL INFO Channel 00/24 : 0 1" in log
    assert "P2P/CUMEM" in log or "P2P/IPC" in log or "via P2P" in log
    assert "redacted-host:" in log and "192.0.2.2" not in log
