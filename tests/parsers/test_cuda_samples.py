"""parsers/cuda_samples.py: p2pBandwidthLatencyTest output from public reports."""

from __future__ import annotations

from infergap.parsers.cuda_samples import parse_p2p_bandwidth
from tests.parsers.inputs import lines


def test_matrices_pasted_alone_are_read_per_pair() -> None:
    """NCCL#814: three unidirectional matrices of six GPUs, no device list."""
    r = parse_p2p_bandwidth(lines("nccl-814-p2p-slower.txt"))
    assert sorted(r.matrices) == ["uni_disabled_GBps", "uni_enabled_reads_GBps", "uni_enabled_writes_GBps"]
    assert len(r.uni(False)) == 36 and (r.uni(False)["3-4"], r.uni(True)["3-4"]) == (20.46, 10.23)
    assert r.matrices["uni_enabled_reads_GBps"]["5-2"] == 10.46 and not r.devices


def test_devices_and_peer_access_of_a_full_run() -> None:
    """nccl-tests#117: eight RTX 2080 Ti, every pair CANNOT access its peer."""
    r = parse_p2p_bandwidth(lines("nccltests-117-2080ti-no-peer.txt"))
    assert r.devices[7] == "NVIDIA GeForce RTX 2080 Ti" and r.bus[4] == "84"
    assert r.access and not any(r.access.values()) and not r.matrices
