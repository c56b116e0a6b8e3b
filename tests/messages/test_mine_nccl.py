"""tools/messages/mine_nccl.py on an excerpt of NCCL v2.27.7-1 (tests/fixtures/upstream/nccl/ORIGIN.md)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tools.messages import mine_nccl

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "upstream" / "nccl"


def _mine(tmp_path: Path) -> dict:
    out = tmp_path / "nccl.yaml"
    assert mine_nccl.main([str(FIX), "v2.27.7-1", "--out", str(out)]) == 0
    return yaml.safe_load(out.read_text())


def test_result_codes_warn_and_info_sites(tmp_path):
    doc = _mine(tmp_path)
    assert doc["upstream"]["repo"] == "NVIDIA/nccl" and doc["upstream"]["tag"] == "v2.27.7-1"
    by_t = {m["template"]: m for m in doc["messages"]}
    codes = {m["name"]: m["code"] for m in doc["messages"] if m.get("name")}
    assert codes["ncclRemoteError"] == 6 and "ncclSuccess" not in codes and len(codes) == 7
    assert by_t["NET/IB : %s:%d Got async error event: %s"]["level"] == "warn"
    assert by_t["NET/IB : %s:%d Got async error event: %s"]["where"] == "src/transport/net_ib.cc:5"
    assert by_t["Call to %s failed: %s"]["where"] == "src/include/checks.h:6"  # macro parameter folded to %s
    assert by_t["Error: failed to create shared memory file %s, error %s (%d)"]["check"] == "container.shm"
    info = by_t["NET/IB : No device found."]
    assert info["level"] == "info" and info["check"] == "nccl.net" and info["curated"] is True
    assert doc["call_sites"] == 3  # the async event, SYSCHECK's "Call to", the shm file


def test_patterns_match_real_lines(tmp_path):
    doc = _mine(tmp_path)
    line = "node1:2345:2389 [0] NCCL INFO NET/IB : No device found."
    hits = [m["id"] for m in doc["messages"] if re.search(m["pattern"], line)]
    assert hits == ["nccl.net_ib.net_ib_no_device_found"]
    line = "gpu-3:102:102 [2] NCCL WARN Error: failed to create shared memory file /dev/shm/nccl-AbC, error No space left on device (28)"
    m = next(x for x in doc["messages"] if re.search(x["pattern"], line))
    assert re.search(m["pattern"], line).group("a2") == "No space left on device"


def test_area_of():
    assert mine_nccl.area_of("src/transport/net_ib.cc") == "net_ib"
    assert mine_nccl.area_of("src/transport/net_ib/connect.cc") == "net_ib"
    assert mine_nccl.area_of("src/misc/shmutils.cc") == "shmutils"
