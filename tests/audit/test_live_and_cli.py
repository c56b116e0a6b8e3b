"""The audit of the machine the tests run on (no GPU here), the CLI contract, and collect."""

from __future__ import annotations

import json
import os
import resource
import tarfile

from infergap.audit import run_audit
from infergap.findings import Status
from infergap.snapshot import LiveSnapshot, open_snapshot
from tests.conftest import run_cli


def test_live_audit_without_gpu_reports_absence_once():
    with LiveSnapshot() as snap:
        r = run_audit(snap)
    assert all(i.error is None for i in r.investigators), [i.error for i in r.investigators]
    if r.host.gpus:  # a machine with a GPU: nothing more to assert here
        return
    absent = [f for f in r.findings if f.id == "gpu.present"]
    assert len(absent) == 1 and absent[0].status == Status.not_applicable
    # no GPU check reports an error or a dozen unknowns about the missing GPU
    gpu_ids = {"pcie.link", "pcie.max_read_request", "gpu.ecc", "gpu.clocks", "nvlink.topology", "gpu.persistence_mode", "driver.cuda_compat"}
    assert not [f for f in r.findings if f.id in gpu_ids]
    # the rest of the host is audited: sysctls read from /proc/sys of this machine
    swap = r.get("vm.swappiness")[0]
    assert swap.evidence[0].value == open("/proc/sys/vm/swappiness").read().strip()
    assert swap.evidence[0].source == "files/proc/sys/vm/swappiness"
    # the locked-memory limit matters for pinned GPU buffers and RDMA registration: neither exists here
    [memlock] = r.get("limits.memlock")
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    rdma = os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband")
    if soft != resource.RLIM_INFINITY and not rdma and r.host.gpu_summary == "no NVIDIA GPU":
        assert memlock.status == Status.not_applicable and memlock.severity is None, memlock.title
        assert "no NVIDIA GPU and no RDMA device" in memlock.title and memlock.impact


def test_cli_audit_live_text_json_md(tmp_path):
    p = run_cli("audit")
    assert p.returncode == 0, p.stderr
    assert "infergap audit — live host" in p.stdout and "CONFIRMED GOOD" in p.stdout
    out = tmp_path / "a.json"
    p = run_cli("audit", "--format", "json", "--output", str(out))
    assert p.returncode == 0 and p.stdout == ""
    d = json.loads(out.read_text())
    assert d["schema"] == "infergap.audit/1"
    p = run_cli("audit", "--format", "md")
    assert p.returncode == 0 and p.stdout.startswith("# infergap audit")


def test_cli_fail_on(tmp_path):
    from tests.conftest import HOSTS

    # the H200 capture has only P2 actionable findings
    p = run_cli("audit", "--snapshot", str(HOSTS / "h200-1gpu"), "--fail-on", "P1")
    assert p.returncode == 0, p.stderr
    p = run_cli("audit", "--snapshot", str(HOSTS / "h200-1gpu"), "--fail-on", "P2")
    assert p.returncode == 1


def test_collect_then_audit_roundtrip(tmp_path):
    out = tmp_path / "snap.tar.gz"
    p = run_cli("collect", "--output", str(out))
    assert p.returncode == 0, p.stderr
    with tarfile.open(out) as tf:
        names = tf.getnames()
    assert any(n.endswith("meta.json") for n in names)
    assert any(n.endswith("files/proc/sys/vm/swappiness") for n in names)
    assert any(n.endswith("cmds/uname.out") for n in names)
    with open_snapshot(out) as snap:
        meta = snap.meta()
        assert meta["schema"] == "infergap.snapshot/1"
        # a missing command is recorded, not fatal
        for name, info in meta["sources"].items():
            if info.get("rc") == 127:
                assert info["error"] == "command not found"
        env = snap.cmd("env").stdout
        for line in env.splitlines():
            assert line.split("=")[0].startswith(("NCCL_", "CUDA_", "NVIDIA_", "NV_", "TORCH_CUDA", "GPU_", "CUBLAS", "CUDNN"))
        live_r = run_audit(snap)
    assert live_r.get("vm.swappiness")[0].evidence[0].value == open("/proc/sys/vm/swappiness").read().strip()


def test_collect_to_directory(tmp_path):
    out = tmp_path / "dir"
    p = run_cli("collect", "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert (out / "meta.json").is_file() and (out / "cmds").is_dir() and (out / "files").is_dir()
    assert (out / "probes" / "nvml.json").is_file()


def test_runs_are_recorded_in_the_ledger(tmp_path, monkeypatch):
    import os

    db = tmp_path / "l.sqlite3"
    monkeypatch.setenv("INFERGAP_DB", str(db))
    from tests.conftest import HOSTS

    assert run_cli("audit", "--snapshot", str(HOSTS / "h200-1gpu"), "-f", "json").returncode == 0
    assert run_cli("audit", "--snapshot", str(HOSTS / "seed-8x-rtxpro6000"), "-f", "json").returncode == 0
    h = run_cli("history", "--format", "json")
    assert h.returncode == 0, h.stderr
    runs = json.loads(h.stdout)
    assert [r["kind"] for r in runs] == ["audit", "audit"]
    c = run_cli("compare", str(runs[1]["id"]), str(runs[0]["id"]))
    assert c.returncode == 0 and "nvidia.peermem" in c.stdout
    assert os.environ["INFERGAP_DB"] == str(db)
