"""Advice follows what a paste shows: a pasted log that says P2P is not used, but not why, must
not prescribe a firmware (BIOS) change; a P2P query answered "no" on GPUs that have no P2P by
product design is expected, not a fault."""

from __future__ import annotations

import pytest

from infergap.audit import run_audit
from infergap.evidence import EvidenceSnapshot
from infergap.findings import FixKind, Status
from tests.evidence.evidence_data import FIX

P2P_CHECKS = {"nccl.transport", "nccl.p2p", "allreduce.custom", "gpu.p2p"}


def audit(*paths):
    snap = EvidenceSnapshot(None, list(paths))
    try:
        return run_audit(snap)
    finally:
        snap.close()


@pytest.mark.parametrize("name", ["nccl-290-docker-shm.log", "nccl-1516-geforce-shm.log", "xgboost-5963-docker-shm.log",
                                  "nccl-2225-p2p-disabled.log", "nccl-1817-shm-8gpu.log", "vllm-4770-custom-ar-no-p2p.log",
                                  "trtllm-1374-a10-can-access-peer.txt"])
def test_p2p_finding_without_cause_prescribes_no_firmware_change(name):
    found = [f for f in audit(FIX / name).findings if f.id in P2P_CHECKS and f.status == Status.actionable]
    assert found, name
    for f in found:
        assert f.fix_kind != FixKind.bios, (name, f.id, f.remedy)
        assert not any("setpci" in c for c in f.remedy.commands), (name, f.id)
        assert any("topo -p2p" in c or "nvidia-smi -L" in c for c in f.remedy.commands), (name, f.id, f.remedy.commands)


def test_p2p_test_on_geforce_is_expected():
    rep = audit(FIX / "nccltests-117-2080ti-no-peer.txt")
    assert not [f for f in rep.findings if f.id == "evidence.unrecognized"]
    p2p = [f for f in rep.findings if f.id == "gpu.p2p" and f.status != Status.unknown]
    assert p2p and all(f.status == Status.expected for f in p2p), [(f.status, f.title) for f in p2p]
    assert "RTX 2080 Ti" in " ".join(e.value for e in p2p[0].evidence)


def test_p2p_test_on_datacenter_gpus_is_actionable(tmp_path):
    text = (FIX / "nccltests-117-2080ti-no-peer.txt").read_text().replace("NVIDIA GeForce RTX 2080 Ti", "NVIDIA A100-SXM4-80GB")
    (tmp_path / "p2p.txt").write_text(text)
    p2p = [f for f in audit(tmp_path / "p2p.txt").findings if f.id == "gpu.p2p"]
    assert [f.status for f in p2p] == [Status.actionable] and p2p[0].severity.value == "P1", [(f.status, f.title) for f in p2p]


def test_shm_between_consumer_gpus_is_expected_when_the_model_is_pasted():
    rep = audit(FIX / "nccl-1516-geforce-shm.log", FIX / "nvsmi-libc6shim14-rtx5070.txt")
    tr = [f for f in rep.findings if f.id == "nccl.transport"]
    assert [f.status for f in tr] == [Status.expected], [(f.status, f.title) for f in tr]
    assert "product limit" in " ".join(e.value for e in tr[0].evidence)
