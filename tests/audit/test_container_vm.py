"""/.dockerenv alone does not make a container: the H200 VM's own snapshot, and the same snapshot
turned into a container's view (overlay root, nested PID namespace, a runtime's cgroup)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from infergap.audit import run_audit
from infergap.evidence.overlay import open_with_evidence

SNAP = Path(__file__).resolve().parents[1] / "fixtures" / "real-gpu" / "h200-llama-server" / "snapshot.tar.gz"


def _audit(root: Path):
    snap = open_with_evidence(str(root), [], host=False)
    try:
        return run_audit(snap)
    finally:
        snap.close()


@pytest.fixture
def vm(tmp_path) -> Path:
    with tarfile.open(SNAP) as t:
        t.extractall(tmp_path, filter="data")
    return tmp_path / "snapshot"


def test_a_vm_with_dockerenv_is_a_vm(vm):
    a = _audit(vm)
    assert a.host.container is None and a.host.virtualization == "hypervisor flag"
    f = a.get("container.detect")[0]
    assert f.status.value == "ok" and "/.dockerenv present" in f.evidence[0].value


@pytest.mark.parametrize("change, sign", [
    ("mountinfo", "root filesystem is overlay"),
    ("status", "nested PID namespace"),
    ("cgroup", "PID 1 in cgroup docker"),
])
def test_dockerenv_with_a_container_sign_is_a_container(vm, change, sign):
    files = vm / "files" / "proc"
    if change == "mountinfo":
        p = files / "self" / "mountinfo"
        p.write_text(p.read_text().replace(" / / rw,relatime - ext4 /dev/vda", " / / rw,relatime - overlay overlay"))
    elif change == "status":
        p = files / "self" / "status"
        p.write_text(p.read_text().replace("NSpid:\t2268", "NSpid:\t2268\t7"))
    else:
        (files / "1" / "cgroup").write_text("0::/system.slice/docker-3f2a9c.scope\n")
    a = _audit(vm)
    assert a.host.container == "docker"
    f = a.get("container.detect")[0]
    assert f.status.value == "expected" and any(sign in e.value for e in f.evidence)
