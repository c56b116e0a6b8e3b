"""``infergap audit --evidence`` / ``--server`` end to end, as a user runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from tests.evidence.evidence_data import FIX, H200, ROOT, free_port


def run(*args, cwd=None, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("INFERGAP_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "infergap", "audit", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=timeout)


def pasted_dir(tmp_path):
    """A directory of pasted real inputs under the names a user would give them."""
    d = tmp_path / "pasted"
    d.mkdir()
    shutil.copy(FIX / "topo-667-pxb-pix.txt", d / "topo.txt")
    shutil.copy(FIX / "nccl-1232-two-nodes.log", d / "nccl.log")
    shutil.copy(FIX / "sglang-13023-decode-no-graph.log", d / "sglang.log")
    (d / "notes.bin").write_bytes(b"\x00\x01\x02binary\x00" * 50)
    return d


def test_evidence_with_snapshot_one_report(tmp_path):
    d = pasted_dir(tmp_path)
    shutil.copy(H200 / "cmds" / "nvsmi_topo.out", d / "topo.txt")  # the snapshot's own GPU: the same host
    r = run("--snapshot", str(H200), "--format", "json", "--evidence", "topo.txt", "nccl.log", "sglang.log", "notes.bin", cwd=d)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    ids = {(f["id"], f["status"], f.get("subject")) for f in rep["findings"]}
    assert ("nccl.transport", "actionable", "evidence/nccl.log") in ids
    assert ("engine.cuda_graph", "actionable", "evidence/sglang.log") in ids
    assert ("evidence.unrecognized", "unknown", "evidence/notes.bin") in ids
    # the host audit of the snapshot is in the same report
    assert any(f["id"] == "vm.swappiness" and f["status"] == "actionable" for f in rep["findings"])
    names = {i["name"] for i in rep["investigators"]}
    assert {"nccl_log", "engine_log", "server_config", "evidence"} <= names
    assert all(i["error"] is None for i in rep["investigators"] if i["name"] in names)


def test_evidence_of_another_host_is_its_own_report(tmp_path):
    """A four-GPU topology pasted next to a one-H200 snapshot describes another host: it is audited
    on its own and the report says so, instead of merging into the H200's audit."""
    d = pasted_dir(tmp_path)
    r = run("--snapshot", str(H200), "--format", "json", "--evidence", "topo.txt", "nccl.log", cwd=d)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert "audited as its own host" in rep["host"]["snapshot"]["label"] and "4 GPU(s)" in rep["host"]["snapshot"]["label"]
    assert len(rep["host"]["gpus"]) == 4
    assert [f["status"] for f in rep["findings"] if f["id"] == "vm.swappiness"] == ["unknown"]  # nothing of the H200 snapshot leaks in


def test_evidence_with_live_host_text_report(tmp_path):
    d = pasted_dir(tmp_path)
    r = run("--evidence", "topo.txt", "nccl.log", "sglang.log", cwd=d)
    assert r.returncode == 0, r.stderr
    assert "engine.cuda_graph" in r.stdout and "nccl.transport" in r.stdout


def test_evidence_only_and_unreachable_server(tmp_path):
    d = pasted_dir(tmp_path)
    url = f"http://127.0.0.1:{free_port()}"
    r = run("--no-host", "--format", "json", "--url", url, "--evidence", "sglang.log", cwd=d)
    assert r.returncode == 2, r.stderr  # an input that could not be used, after the report of the rest
    warn, err = r.stderr.strip().splitlines()
    assert warn.startswith(f"infergap: warning: {url}: no answer")
    assert err == f"infergap: error: --url {url}: the server could not be reached; the report above has no server part"
    rep = json.loads(r.stdout)
    (srv,) = [f for f in rep["findings"] if f["id"] == "server.config"]
    assert srv["status"] == "unknown"
    assert any(f["id"] == "engine.cuda_graph" for f in rep["findings"])


def test_bad_evidence_path_is_one_line(tmp_path):
    r = run("--no-host", "--evidence", str(tmp_path / "missing.log"))
    assert r.returncode == 2
    assert r.stderr.strip() == f"infergap: error: --evidence {tmp_path / 'missing.log'}: no such file or directory"


def test_snapshot_evidence_folder_via_cli(tmp_path):
    snap = tmp_path / "snap"
    shutil.copytree(H200, snap)
    (snap / "evidence").mkdir()
    shutil.copy(FIX / "vllm-13719-custom-ar.log", snap / "evidence" / "vllm.log")
    r = run("--snapshot", str(snap), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert any(f["id"] == "allreduce.custom" and f["status"] == "expected" for f in json.loads(r.stdout)["findings"])
