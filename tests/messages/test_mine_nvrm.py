"""tools/messages/mine_nvrm.py on an excerpt of open-gpu-kernel-modules 595.45.04
(tests/fixtures/upstream/nvrm/ORIGIN.md), and the packaged catalog on real kernel-log lines."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from infergap.messages import match_lines
from tools.messages import mine_nvrm

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "upstream" / "nvrm"


def test_error_prints_of_the_kernel_module(tmp_path):
    out = tmp_path / "nvrm.yaml"
    assert mine_nvrm.main([str(FIX), "595.45.04", "--out", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    by_t = {m["template"]: m for m in doc["messages"]}
    probe = by_t["NVRM: The NVIDIA probe routine was not called for %d device(s)."]
    assert probe["where"] == "kernel-open/nvidia/nv.c:3" and probe["check"] == "gpu.present" and probe["severity"] == "P0"
    init = by_t["RmInitAdapter failed! (0x%x:0x%x:%d)"]  # NV_DEV_PRINTF: the format is the third argument
    assert init["level"] == "error" and init["check"] == "gpu.present"
    assert "rm_init_adapter failed, device minor number %d" in by_t
    assert doc["call_sites"] == 4 and doc["upstream"]["repo"] == "NVIDIA/open-gpu-kernel-modules"
    line = "[188549.976351] NVRM: The NVIDIA probe routine was not called for 3 device(s)."
    assert re.search(probe["pattern"], line)


def test_real_kernel_log_lines():
    """open-gpu-kernel-modules#326 / #789 and Bumblebee#722 kernel logs (lines as the reports show)."""
    lines = ["[  903.610907] NVRM: GPU 0000:98:00.0: RmInitAdapter failed! (0x62:0x65:1792)",
             "[  903.611884] NVRM: GPU 0000:98:00.0: rm_init_adapter failed, device minor number 0",
             "[87669.726564] NVRM: RmInitAdapter failed! (0x26:0xffff:1375)"]
    ids = [m.message.id for m in match_lines(lines)]
    assert ids == ["nvrm.osinit.rminitadapter_failed_x_x", "nvrm.nv.rm_init_adapter_failed_device",
                   "nvrm.osinit.rminitadapter_failed_x_x"]
