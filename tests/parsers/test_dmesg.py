"""The kernel log parser on a public dmesg (gpu-burn#1: AER errors, then Xid 79), on
open-gpu-kernel-modules#1150 (Xid 45 naming the Xid behind it), and on the Xid tallies per GPU
of leptonai/gpud#1174 (NVLink Fatal/Nonfatal) and akash-network/support#244 (three GPUs)."""

from __future__ import annotations

from infergap.parsers.dmesg import parse_dmesg
from tests.parsers.inputs import lines


def test_xid_79_after_aer_errors():
    f = parse_dmesg(lines("dmesg-gpuburn1-xid79.txt"))
    assert f.lines == 14
    assert f.xids == [(79, "0000:02:00", "GPU has fallen off the bus.")] and f.xid_count == 1 and f.xid_causes == []
    assert f.aer == {"Corrected": 1, "Uncorrected (Fatal)": 1} and f.aer_devices == ["pcieport 0000:00:02.0"]


def test_xid_45_names_its_causes():
    f = parse_dmesg(lines("open-gpu-1150-xid45-after-149.log"))
    assert {x[0] for x in f.xids} == {45} and f.xid_causes == [149, 145]


def test_xid_45_lines_are_tallied_under_their_cause_per_gpu():
    f = parse_dmesg(lines("open-gpu-1150-xid45-after-149.log"))
    got = [(t.gpu, t.code, t.named_by, t.count) for t in f.xid_tallies]
    assert got == [("0000:dc:00", 149, 45, 2), ("0000:ed:00", 145, 45, 2), ("0000:ba:00", 145, 45, 2), ("0000:97:00", 145, 45, 1)]
    assert sum(t.count for t in f.xid_tallies) == f.xid_count == 7


def test_nvlink_xids_keep_the_fatal_word_of_their_line():
    """leptonai/gpud#1174: ``149, NETIR Fatal …`` and ``145, RLW_RXPIPE Nonfatal …``; Xid 94's
    message has no such word."""
    f = parse_dmesg(lines("gpud-1174-nvlink-nonfatal.txt"))
    assert [(t.gpu, t.code, t.fatal) for t in f.xid_tallies] == [
        ("0019:01:00", 149, True), ("0000:00:00", 149, True), ("0018:01:00", 145, False), ("0000:9b:00", 94, None)]


def test_xid_tallies_per_gpu_and_code():
    """akash-network/support#244 (``dmesg -T | grep NVRM``): two Xid 43 on one GPU, 31 and 94 on two others."""
    f = parse_dmesg(lines("akash-244-xid94-multi-gpu.txt"))
    assert [(t.gpu, t.code, t.count) for t in f.xid_tallies] == [("0000:00:05", 43, 2), ("0000:00:07", 31, 1), ("0000:00:08", 94, 1)]


def test_xid_154_keeps_the_recovery_action_it_names():
    """open-gpu-kernel-modules#446 (Talos prefixes) and #1125 (no timestamps)."""
    f = parse_dmesg(lines("open-gpu-446-gsp-rpc-talos.log"))
    assert [(t.code, t.recovery) for t in f.xid_tallies if t.code == 154] == [(154, "GPU Reset Required")]
    f = parse_dmesg(lines("open-gpu-1125-gsp-resume.log"))
    assert [(t.code, t.recovery) for t in f.xid_tallies] == [(120, None), (154, "PF FLR")]
