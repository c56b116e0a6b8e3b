"""parsers/nvbandwidth.py: nvbandwidth output from public reports."""

from __future__ import annotations

from infergap.parsers.nvbandwidth import parse_nvbandwidth
from tests.parsers.inputs import lines


def test_a_whole_run_gives_devices_versions_matrices_and_sums() -> None:
    """nvbandwidth#15: eight RTX 4090, host-to-device and device-to-host CE copies."""
    r = parse_nvbandwidth(lines("nvbandwidth-15-4090-h2d.txt"))
    assert r.versions["Driver Version"] == "545.29.06" and r.devices[7] == "NVIDIA GeForce RTX 4090"
    assert r.per_gpu("host_to_device_memcpy_ce")[2] == 23.9 and r.per_gpu("device_to_host_memcpy_ce")[7] == 26.83
    assert r.sums == {"host_to_device_memcpy_ce": 205.04, "device_to_host_memcpy_ce": 214.28} and not r.waived


def test_quoted_matrices_without_a_header_are_named_by_their_title() -> None:
    """nvbandwidth#24: the SM copies of eight H100 pasted behind Markdown quotes, column header unindented."""
    r = parse_nvbandwidth(lines("nvbandwidth-24-h100-h2d-sm.txt"))
    assert sorted(r.tests) == ["device_to_host_memcpy_sm", "host_to_device_memcpy_sm"]
    assert len(r.per_gpu("host_to_device_memcpy_sm")) == 8 and r.per_gpu("host_to_device_memcpy_sm")[0] == 35.19
    assert not r.devices


def test_a_waived_peer_test_is_listed() -> None:
    """nvbandwidth#13: two RTX 2080 Ti, the device-to-device test waived."""
    r = parse_nvbandwidth(lines("nvbandwidth-13-2080ti-waived.txt"))
    assert r.waived == ["device_to_device_memcpy_write_ce"] and len(r.devices) == 2 and not r.tests


def test_n_a_cells_of_a_peer_matrix_are_left_out() -> None:
    """The diagonal of a device-to-device matrix is N/A (nvbandwidth#50, six RTX A6000)."""
    r = parse_nvbandwidth(["Running device_to_device_memcpy_read_ce.", "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
                           "           0         1         2", " 0       N/A     26.34     26.35", " 1     26.34       N/A     26.34",
                           " 2     26.34     26.35       N/A", "", "SUM device_to_device_memcpy_read_ce 158.08"])
    m = r.tests["device_to_device_memcpy_read_ce"]
    assert len(m) == 6 and "0-0" not in m and m["2-1"] == 26.35
