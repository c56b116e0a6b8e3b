"""Versions are ok only after the catalog of known issues was checked, and read from every paste
that carries them (sglang.check_env, NCCL's version line, pip listings)."""

from __future__ import annotations

from types import SimpleNamespace

from infergap.evidence import EvidenceSnapshot
from infergap.evidence.versions import stack_versions
from infergap.investigators import engine_log, nccl_log
from tests.evidence.evidence_data import FIX


def test_check_env_gives_driver_gpus_and_stack():
    sv = stack_versions(EvidenceSnapshot(None, [FIX / "sglang-1148-check-env-a800.txt"]))
    assert sv.versions["driver"][0] == "525.125.06" and sv.versions["torch"][0] == "2.4.0+cu121"
    assert sv.versions["sglang"][0] == "0.2.12" and sv.gpu_sm == {80}
    sv = stack_versions(EvidenceSnapshot(None, [FIX / "sglang-4814-4090-peer-access.txt"]))
    assert sv.gpu_names == ["NVIDIA GeForce RTX 4090"] and sv.gpu_sm == {89}


def test_nccl_version_is_unknown_when_the_issue_depends_on_gpus_not_shown(tmp_path):
    log = tmp_path / "nccl.log"
    log.write_text("gpu-host:1:1 [0] NCCL INFO NCCL version 2.25.1+cuda12.8\n")
    (f,) = [x for x in nccl_log.investigate(SimpleNamespace(snap=EvidenceSnapshot(None, [log]))) if x.id == "nccl.version"]
    assert f.status.value == "unknown" and "sm_120" in f.title and "compute_cap" in f.impact


def test_nccl_version_ok_names_what_was_checked(tmp_path):
    log = tmp_path / "nccl.log"
    log.write_text("gpu-host:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n")
    (f,) = [x for x in nccl_log.investigate(SimpleNamespace(snap=EvidenceSnapshot(None, [log]))) if x.id == "nccl.version"]
    assert f.status.value == "ok" and "known-issue entries" in f.title
    assert any(e.source == "signatures.yaml" for e in f.evidence)


def test_sglang_custom_allreduce_v2_forms(tmp_path):
    log = tmp_path / "sglang.log"
    log.write_text("[2025-06-01 10:00:00 TP0] CustomAllReduceV2 is disabled because it's not supported on more than two PCIe-only GPUs.\n"
                   "[2025-06-01 10:00:00 TP1] CustomAllreduce is disabled because it's not supported on more than two PCIe-only GPUs.\n")
    (f,) = [x for x in engine_log.investigate(SimpleNamespace(snap=EvidenceSnapshot(None, [log]))) if x.id == "allreduce.custom"]
    assert f.status.value == "expected"


def test_check_env_answers_pip_list():
    from infergap.parsers.host import parse_pip_list

    snap = EvidenceSnapshot(None, [FIX / "sglang-1148-check-env-a800.txt"])
    assert parse_pip_list(snap.cmd("pip_list").stdout) == {"torch": "2.4.0+cu121", "sglang": "0.2.12", "flashinfer": "0.1.4+"}


def test_engine_log_version_is_checked_against_known_issues(tmp_path):
    """A vLLM server log names its version on its second line; that version is checked like one
    from pip: the real log of vllm#24162 is ok after the check, and the same log saying 0.6.1
    (with its TP 2) meets the known 0.6.1 regression."""
    from tests.investigators.memsnap import audit_ids, one, pasted_text, replaced

    sv = stack_versions(EvidenceSnapshot(None, [FIX / "vllm-24162-nondefault.log"]))
    assert sv.versions["vllm"] == ("0.10.2.dev378+g4d7fe40fc.d20250829", "evidence/vllm-24162-nondefault.log")
    f = one(audit_ids(EvidenceSnapshot(None, [FIX / "vllm-24162-nondefault.log"]), "runtime"), "runtime.versions")
    assert f.status.value == "ok" and "vLLM 0.10.2" in f.title and "known-issue entries" in f.title
    old = replaced((FIX / "vllm-24162-nondefault.log").read_text(), "version 0.10.2.dev378+g4d7fe40fc.d20250829", "version 0.6.1")
    f = one(audit_ids(pasted_text(tmp_path, "vllm.log", old), "runtime"), "runtime.versions")
    assert (f.status.value, f.severity.value) == ("actionable", "P1") and "vLLM 0.6.1" in f.title
