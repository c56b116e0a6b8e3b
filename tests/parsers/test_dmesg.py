"""The kernel log parser on a public dmesg (gpu-burn#1: AER errors, then Xid 79) and on
open-gpu-kernel-modules#1150 (Xid 45 naming the Xid behind it)."""

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
