"""Class → check routing (data/message_routes.yaml): an explained-only catalog entry whose class,
component, level and template say which check it concerns feeds that check, with a severity by
level that is never P0; every rule is shown on a line pasted in a public thread."""

from __future__ import annotations

from pathlib import Path

import pytest

from infergap import checks, datafile
from infergap.audit import run_audit
from infergap.evidence.overlay import EvidenceSnapshot
from infergap.findings import Severity, Status
from infergap.messages import catalog, match_lines
from infergap.messages.routes import FILE, Routes, routes
from infergap.snapshot import open_snapshot

FIX = Path(__file__).resolve().parents[1] / "fixtures"
HOST = FIX / "hosts" / "h200-1gpu"

#: (line as pasted, public thread it is quoted from, rule, check, severity)
REAL = [
    ("RuntimeError: CUDA error: invalid device ordinal",
     "https://github.com/wdrink/PyDeepFakeDet/issues/1", "no_device", "gpu.present", "P1"),
    ("[74889.644138] NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus.",
     "tests/fixtures/evidence/dmesg-gpuburn1-xid79.txt", "gpu_lost", "gpu.health", "P1"),
    ("pynvml.nvml.NVMLError_FunctionNotFound: Function Not Found",
     "https://github.com/gpuopenanalytics/pynvml/issues/59", "driver_library", "driver.version", "P1"),
    ("CUDA error 222 at /home/test/test06/jdz/PowerInfer/ggml-cuda.cu:9635: the provided PTX was compiled with an unsupported toolchain.",
     "https://github.com/Tiiny-AI/PowerInfer/issues/229", "driver_too_old", "driver.cuda_compat", "P1"),
    ("1.06.520.107 W sched_reserve: compute buffer allocation failed, retrying without pipeline parallelism",
     "https://github.com/ggml-org/llama.cpp/pull/26297", "out_of_memory", "engine.oom", "P2"),
    ("c11efb988616:1346195:1346232 [0] include/alloc.h:105 NCCL WARN Failed to CUDA calloc 1048576 bytes",
     "https://github.com/microsoft/NPKit/issues/37", "out_of_memory", "engine.oom", "P2"),
    ("<cluster_name>:922:1149 [3] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer <cluster_name>.ibnet<53735>",
     "https://github.com/NVIDIA/nccl/issues/952", "nccl_net", "nccl.net", "P2"),
    ("transport/net_ib.cc:148 NCCL WARN NET/IB : Unable to open device mlx5_bond_0",
     "tests/fixtures/evidence/nccl-451-docker-ib.log", "nccl_net", "nccl.net", "P2"),
    ("CUDA error: peer mapping resources exhausted",
     "https://github.com/ggml-org/llama.cpp/issues/21883", "gpu_peer_access", "gpu.p2p", "P1"),
    ("[2026-04-22 21:34:20] runner-host:202016:202235 [0] misc/shmutils.cc:88 NCCL WARN Error: failed to extend "
     "/dev/shm/nccl-WU88OE to 9637892 bytes, error: No space left on device (28)",
     "tests/fixtures/evidence/ciinfra-490-pod-shm.log", "nccl_shm_segment", "container.shm", "P2"),
]


@pytest.mark.parametrize(("line", "origin", "rule", "check", "severity"), REAL, ids=[f"{r[2]}:{r[1].rsplit('/', 2)[-2]}" for r in REAL])
def test_a_real_line_feeds_the_check_its_class_names(line, origin, rule, check, severity):
    found = [mm for mm in match_lines([line]) if mm.message.route]
    assert found, f"{origin}: no routed message on {line!r}"
    m = found[0].message
    assert (m.route, m.check, m.severity) == (rule, check, severity)
    assert m.cls in routes().by_id(rule).classes


def test_every_rule_is_shown_on_a_real_line_and_names_a_known_check():
    shown = {r[2] for r in REAL}
    for r in routes().rules:
        assert r.id in shown, f"rule {r.id} has no real line in REAL"
        assert checks.get(r.check) is not None and r.source and r.why


def test_a_curated_check_wins_and_info_is_never_routed():
    cat = catalog()
    own = cat.by_id("cuda.runtime_text.cudaerrornodevice")  # curated: gpu.present with its own severity
    assert own.route is None and own.check == "gpu.present"
    r = routes()
    assert r.route("cuda", "info", "device_not_visible", "no CUDA-capable device is detected", "") is None
    assert r.route("nccl", "warn", "network_fallback", "NET/IB : Unable to open device %s", "src/transport/net_ib.cc:649")[0] == "nccl.net"
    assert r.route("nccl", "warn", "network_fallback", "NET/IB : Unable to open device %s", "src/init.cc:1") is None  # not the network transport's file


def test_a_template_that_calls_itself_harmless_is_not_routed():
    r = routes()
    assert r.route("vllm", "error", "p2p_refused", "peer access failed", "") == ("gpu.p2p", "P1", "gpu_peer_access")
    assert r.route("vllm", "error", "p2p_refused", "peer access failed. This is normal if your machine has no NVLink", "") is None


def test_no_route_gives_p0():
    """The healthy no-P0 guarantee of routing: P0 is a person's judgement (a curated severity); a
    routes file that would give it is refused, and no routed entry of the catalogs carries it."""
    doc = datafile.packaged(FILE)
    doc["severity"]["error"] = "P0"
    with pytest.raises(ValueError, match="P0"):
        Routes(doc)
    routed = [m for m in catalog().all_routed() if m.route]
    assert routed and all(m.severity in ("P1", "P2") and m.level != "info" for m in routed)


def _audit(paths, base=None):
    with EvidenceSnapshot(open_snapshot(base) if base else None, paths) as snap:
        return run_audit(snap, parallel=False)


def test_a_routed_message_is_a_ranked_finding_not_an_explanation(tmp_path):
    paste = tmp_path / "paste.log"
    paste.write_text("ggml_cuda_init: found 10 CUDA devices:\n"
                     "CUDA error: peer mapping resources exhausted\n"
                     "  current device: 0, in function ggml_cuda_init at ggml/src/ggml-cuda/ggml-cuda.cu:336\n")
    report = _audit([paste])
    p2p = report.get("gpu.p2p")
    assert p2p and p2p[0].status == Status.actionable and p2p[0].severity == Severity.P1
    assert "gpu_peer_access" in p2p[0].impact and "data/message_routes.yaml" in p2p[0].impact
    assert p2p[0].details["messages"][0]["route"] == "gpu_peer_access"
    assert not any("peer mapping" in f.title for f in report.get("evidence.message"))


def test_a_routed_message_contradicts_an_ok_from_weaker_evidence(tmp_path):
    """The H200 capture's driver supports its stack's CUDA (driver.cuda_compat ok from the versions
    alone); CUDA refusing the PTX as built by a newer toolchain (a routed error of the runtime's
    catalog) outweighs that reading."""
    alone = run_audit(open_snapshot(HOST), parallel=False).get("driver.cuda_compat")
    assert alone and alone[0].status == Status.ok
    paste = tmp_path / "run.log"
    paste.write_text(REAL[3][0] + "\n")
    found = _audit([paste], HOST).get("driver.cuda_compat")
    assert len(found) == 1 and found[0].status == Status.actionable and found[0].details["contradicts"] == "ok"
    assert found[0].severity == Severity.P1 and "driver_too_old" in found[0].impact
