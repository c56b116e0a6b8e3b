"""bandwidth investigator: the measured copies and all-reduce of ``infergap collect --active`` on the
two-H200 capture, judged against the link (nvidia-smi -q) and the datasheet."""

from __future__ import annotations

import copy
from typing import Any

from tests.investigators.memsnap import MemorySnapshot, audit_ids, host_cmds, host_probe, one, pasted, statuses

H2 = "h200-2gpu-collect"


def _active() -> dict[str, Any]:
    return copy.deepcopy(host_probe(H2, "active"))


def _audit(active: Any, with_gpus: bool = True) -> dict:
    return audit_ids(MemorySnapshot({}, cmds=host_cmds(H2, "nvsmi_q") if with_gpus else {}, probes={"active": active}), "bandwidth")


def test_measured_h200_pair_is_ok_against_link_and_datasheet() -> None:
    found = _audit(_active())
    assert statuses(found, "pcie.h2d_bandwidth") == ["ok", "ok"]
    h2d = found["pcie.h2d_bandwidth"][0]
    assert h2d.subject == "0000:00:06.0" and "54.1 GB/s = 86% of gen5 x16 (63.0 GB/s)" in h2d.title
    assert h2d.evidence[0].source == "probes/active.json"
    assert statuses(found, "gpu.memory_bandwidth") == ["ok", "ok"]
    mem = found["gpu.memory_bandwidth"][1]
    assert "4.19 TB/s = 87% of the 4.8 TB/s" in mem.title and mem.details["datasheet_TBps"] == 4.8
    ar = one(found, "nccl.allreduce_bandwidth")
    assert ar.status == "ok" and "302 GB/s bus bandwidth at 256 MiB" in ar.title


def test_slow_pinned_copy_is_p1() -> None:
    a = _active()
    a["copies"][0]["h2d_pinned_GBps"] = 20.0
    f = _audit(a)["pcie.h2d_bandwidth"][0]
    assert (f.status, f.severity, f.subject) == ("actionable", "P1", "0000:00:06.0")
    assert "= 32% of gen5 x16" in f.title and f.expected_value == ">= 60% of 63.0 GB/s"


def test_slow_memory_copy_is_p1_hardware() -> None:
    a = _active()
    a["copies"][1]["d2d_copy_GBps"] = 2500.0
    fs = {f.subject: f for f in _audit(a)["gpu.memory_bandwidth"]}
    assert fs["0000:00:06.0"].status == "ok"
    f = fs["0000:00:07.0"]
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "hardware") and "= 52% of the 4.8 TB/s" in f.title


def test_wrong_allreduce_result_is_p0_and_a_failed_run_unknown() -> None:
    a = _active()
    a["allreduce"]["result_ok"] = False
    f = one(_audit(a), "nccl.allreduce_bandwidth")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "software")
    a = _active()
    a["allreduce"] = {"error": "NCCL error: unhandled system error"}
    f = one(_audit(a), "nccl.allreduce_bandwidth")
    assert f.status == "unknown" and f.impact == "NCCL error: unhandled system error"


def test_without_the_link_the_copy_is_unknown_not_silent() -> None:
    found = _audit(_active(), with_gpus=False)
    assert statuses(found, "pcie.h2d_bandwidth") == ["unknown", "unknown"]
    assert found["pcie.h2d_bandwidth"][0].subject == "cuda:0"
    assert "nvidia-smi -q" in found["pcie.h2d_bandwidth"][0].impact
    # The probe names its GPU, so the datasheet still applies to the memory copy.
    assert statuses(found, "gpu.memory_bandwidth") == ["ok", "ok"]


def test_memory_copy_of_a_gpu_without_datasheet_figure_is_unknown() -> None:
    a = _active()
    for c in a["copies"]:
        c["name"] = "NVIDIA Graphics Device"
    found = _audit(a, with_gpus=False)
    assert statuses(found, "gpu.memory_bandwidth") == ["unknown", "unknown"]
    assert "gpus.yaml" in found["gpu.memory_bandwidth"][0].impact


def test_probe_that_did_not_run_or_is_malformed() -> None:
    f = one(_audit({"available": False, "error": "torch not installed"}), "active.probes")
    assert f.status == "unknown" and f.impact == "torch not installed"
    f = one(_audit({"available": False, "error": "no GPU"}, with_gpus=False), "active.probes")
    assert f.status == "not_applicable"
    assert one(_audit(["not", "an", "object"]), "active.probes").status == "unknown"
    a = _active()
    del a["copies"][0]["h2d_pinned_GBps"]
    found = _audit(a)
    assert set(found) == {"active.probes"} and found["active.probes"][0].status == "unknown"
    assert "h2d_pinned_GBps" in found["active.probes"][0].impact


def test_no_active_probe_on_a_gpu_host_is_unknown_with_the_command() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(H2, "nvsmi_q")), "bandwidth"), "active.probes")
    assert f.status == "unknown" and "infergap audit --active" in (f.impact or "")


def test_no_active_probe_without_a_known_gpu_is_silent() -> None:
    # A pasted NCCL log names no GPU inventory: gpu.present reports that, the measurements do not apply.
    assert audit_ids(MemorySnapshot({}), "bandwidth") == {}
    assert audit_ids(pasted("nccl-1817-shm-8gpu.log"), "bandwidth") == {}


def test_pasted_nccl_tests_run_with_correct_results_is_ok_with_its_busbw() -> None:
    from tests.investigators.memsnap import audit_ids, one, pasted

    f = one(audit_ids(pasted("nccltests-232-allreduce-two-nodes.txt"), "bandwidth"), "nccl.allreduce_bandwidth")
    assert (f.status, f.title) == ("ok", "nccl-tests: correct results, best busbw 41.52 GB/s")
    assert f.evidence[0].value == "best busbw 41.52 GB/s at 32 MiB (5 sizes, ranks not listed)"


def test_pasted_nccl_tests_run_with_wrong_values_is_p0(tmp_path) -> None:
    """The same rows with the in-place #wrong column of one row set, as nccl-tests prints a corrupted result."""
    from tests.investigators.memsnap import audit_ids, evidence_text, one, pasted_text

    text = evidence_text("nccltests-232-allreduce-two-nodes.txt").replace("41.52   41.52      0", "41.52   41.52   1024")
    f = one(audit_ids(pasted_text(tmp_path, "run.txt", text), "bandwidth"), "nccl.allreduce_bandwidth")
    assert (f.status, f.severity) == ("actionable", "P0") and "1024 wrong" in f.title


# -- pasted nvbandwidth runs ------------------------------------------------------------------

def test_nvbandwidth_h2d_of_named_gpus_is_held_against_their_datasheet_link() -> None:
    """nvbandwidth#15: eight RTX 4090 copy from host memory at 23.9-26.4 GB/s, 76 % or more of
    gen4 x16 (31.5 GB/s): ok, with the link named."""
    from tests.investigators.memsnap import audit_ids, one, pasted

    f = one(audit_ids(pasted("nvbandwidth-15-4090-h2d.txt"), "bandwidth"), "pcie.h2d_bandwidth")
    assert f.status == "ok" and "76%" in f.title
    assert any("gen4 x16" in e.value and "23.9 GB/s" in e.value for e in f.evidence)


def test_nvbandwidth_h2d_below_the_link_is_actionable() -> None:
    """The same run with GPU 1 at 12.13 GB/s (an x8 link's figure): actionable, GPU 1 named."""
    import tempfile
    from pathlib import Path

    from tests.investigators.memsnap import audit_ids, one, pasted_text, replaced
    from tests.parsers.inputs import lines

    with tempfile.TemporaryDirectory() as d:
        paste = "\n".join(lines("nvbandwidth-15-4090-h2d.txt"))
        snap = pasted_text(Path(d), "nvbw.txt", replaced(paste, "0     25.50     24.26", "0     25.50     12.13"))
        f = one(audit_ids(snap, "bandwidth"), "pcie.h2d_bandwidth")
    assert f.status == "actionable" and "1 of 8" in f.title
    assert [e.value for e in f.evidence] == ["host_to_device_memcpy_ce GPU 1: 12.13 GB/s = 39% of 31.5 GB/s (gen4 x16 of the NVIDIA GeForce RTX 4090 datasheet)"]


def test_nvbandwidth_h2d_of_unnamed_gpus_is_unknown() -> None:
    """nvbandwidth#24: the matrices pasted without the device lines: no link to hold them against."""
    from tests.investigators.memsnap import audit_ids, one, pasted

    f = one(audit_ids(pasted("nvbandwidth-24-h100-h2d-sm.txt"), "bandwidth"), "pcie.h2d_bandwidth")
    assert f.status == "unknown" and "35.03-35.39 GB/s" in f.title
