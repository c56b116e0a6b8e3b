"""Partial and broken inputs: findings for what the evidence supports, unknown for the rest, or
one clear error line (exit 2) — never a traceback."""

from __future__ import annotations

import gzip
import shutil

import pytest

from infergap.audit import run_audit
from infergap.findings import Status
from infergap.snapshot import open_snapshot
from tests.conftest import HOSTS, run_cli

H200 = HOSTS / "h200-1gpu"


def _no_traceback(p):
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout


def test_only_topo(tmp_path):
    (tmp_path / "cmds").mkdir()
    shutil.copy(H200 / "cmds" / "nvsmi_topo.out", tmp_path / "cmds" / "nvsmi_topo.out")
    with open_snapshot(tmp_path) as snap:
        r = run_audit(snap)
    assert all(i.error is None for i in r.investigators)
    assert r.get("vm.swappiness")[0].status == Status.unknown
    assert r.get("kernel.numa_balancing")[0].status == Status.unknown
    p = run_cli("audit", "--snapshot", str(tmp_path))
    assert p.returncode == 0
    _no_traceback(p)


def test_truncated_nvsmi_xml(tmp_path):
    snap_dir = tmp_path / "s"
    shutil.copytree(H200, snap_dir)
    xml = (snap_dir / "cmds" / "nvsmi_qx.out").read_text()
    (snap_dir / "cmds" / "nvsmi_qx.out").write_text(xml[: len(xml) // 3])
    # remove the other nvidia-smi forms so that the XML is the only per-GPU source besides sysfs
    for other in ("nvsmi_csv", "nvsmi_q", "nvsmi"):
        (snap_dir / "cmds" / f"{other}.out").unlink()
    with open_snapshot(snap_dir) as snap:
        r = run_audit(snap)
    bad = [f for f in r.findings if f.id == "evidence.unreadable" and f.subject == "cmds/nvsmi_qx.out"]
    assert bad and "not well-formed" in bad[0].impact
    # the link still comes from sysfs; GPU health has no data left: unknown, not a crash
    assert r.get("pcie.link", "0000:00:06.0")[0].status == Status.ok
    assert r.get("gpu.health", "0000:00:06.0")[0].status == Status.unknown


def test_garbage_in_sysfs(tmp_path):
    snap_dir = tmp_path / "s"
    shutil.copytree(H200, snap_dir)
    (snap_dir / "files/proc/sys/vm/swappiness").write_bytes(b"\xff\xfe garbage \x00")
    (snap_dir / "files/sys/bus/pci/devices/0000:00:06.0/config.hex").write_text("zz qq not hex\n")
    (snap_dir / "files/sys/devices/system/node/node0/cpulist").write_text("banana\n")
    with open_snapshot(snap_dir) as snap:
        r = run_audit(snap)
    assert all(i.error is None for i in r.investigators), [i.error for i in r.investigators]
    assert r.get("vm.swappiness")[0].status == Status.unknown
    mrrs = r.get("pcie.max_read_request", "0000:00:06.0")[0]
    assert mrrs.status == Status.unknown and "unreadable" in mrrs.impact


def test_empty_directory(tmp_path):
    p = run_cli("audit", "--snapshot", str(tmp_path), "--format", "json")
    assert p.returncode == 0
    _no_traceback(p)
    import json

    d = json.loads(p.stdout)
    assert d["summary"]["counts"]["actionable"] == 0
    assert d["summary"]["counts"]["unknown"] > 5


def test_missing_path():
    p = run_cli("audit", "--snapshot", "/nonexistent/snap")
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0
    assert p.stderr.startswith("infergap: error: snapshot /nonexistent/snap: no such file or directory")
    _no_traceback(p)


@pytest.mark.parametrize("content", [b"this is not a tar archive", gzip.compress(b"gzip but not tar" * 100), b""])
def test_not_a_tar(tmp_path, content):
    f = tmp_path / "x.tar.gz"
    f.write_bytes(content)
    p = run_cli("audit", "--snapshot", str(f))
    assert p.returncode == 2
    assert "not a readable .tar.gz archive" in p.stderr and p.stderr.count("\n") == 1
    _no_traceback(p)


def test_unwritable_output(tmp_path):
    p = run_cli("audit", "--snapshot", str(H200), "--output", str(tmp_path / "no" / "such" / "dir" / "r.txt"))
    assert p.returncode == 2 and "--output" in p.stderr
    _no_traceback(p)


@pytest.mark.parametrize("name", ["nvsmi_q", "nvsmi", "nvsmi_csv"])
def test_single_nvidia_smi_output_names_the_gpu(tmp_path, name):
    """Each nvidia-smi form alone (-q text, the plain table, the CSV) is enough to know the GPU."""
    (tmp_path / "cmds").mkdir()
    shutil.copy(H200 / "cmds" / f"{name}.out", tmp_path / "cmds" / f"{name}.out")
    with open_snapshot(tmp_path) as snap:
        r = run_audit(snap)
    assert r.host.gpu_summary == "1 × NVIDIA H200"
    assert not r.get("gpu.present")
    clocks = r.get("gpu.clocks", "0000:00:06.0")
    if name != "nvsmi":  # the table has no clocks; the others show an idle GPU, not a slow one
        assert clocks[0].status == Status.expected


def test_topology_alone_gives_gpu_count_and_links(tmp_path):
    (tmp_path / "cmds").mkdir()
    shutil.copy(HOSTS.parent / "evidence" / "topo-667-pxb-pix.txt", tmp_path / "cmds" / "nvsmi_topo.out")
    with open_snapshot(tmp_path) as snap:
        r = run_audit(snap)
    assert len(r.host.gpus) == 4
    nv = r.get("nvlink.topology")[0]
    assert nv.status == Status.unknown and "model is not known" in nv.title
    assert r.get("allreduce.custom")[0].status == Status.expected


def _copy(tmp_path, name="h200-1gpu"):
    d = tmp_path / "s"
    shutil.copytree(HOSTS / name, d)
    return d


def test_directory_where_a_command_output_belongs(tmp_path):
    d = _copy(tmp_path)
    for name in ("uname", "nvsmi_qx", "df"):
        (d / "cmds" / f"{name}.out").unlink()
        (d / "cmds" / f"{name}.out").mkdir()
    p = run_cli("audit", "--snapshot", str(d))
    assert p.returncode == 0, p.stderr
    _no_traceback(p)
    with open_snapshot(d) as snap:
        r = run_audit(snap)
    assert all(i.error is None for i in r.investigators), [i.error for i in r.investigators]


def test_fifo_in_a_snapshot_does_not_hang(tmp_path):
    import os

    d = _copy(tmp_path)
    (d / "cmds" / "nvsmi_topo.out").unlink()
    os.mkfifo(d / "cmds" / "nvsmi_topo.out")
    (d / "files/proc/cmdline").unlink()
    os.mkfifo(d / "files/proc/cmdline")
    p = run_cli("audit", "--snapshot", str(d), timeout=60)
    assert p.returncode == 0
    _no_traceback(p)


def test_symlink_out_of_the_snapshot_is_not_followed(tmp_path):
    import os

    d = _copy(tmp_path)
    (d / "files/proc/cmdline").unlink()
    secret = tmp_path / "outside-secret"
    secret.write_text("BOOT_IMAGE=/outside-the-snapshot root=/dev/secret\n")
    os.symlink(secret, d / "files/proc/cmdline")
    p = run_cli("audit", "--snapshot", str(d), "--format", "json")
    assert p.returncode == 0 and "outside-the-snapshot" not in p.stdout


@pytest.mark.parametrize("meta", [b"\xff\xfe\x00", b'{"sources": {"cmds/uname": "x"}}', b'{"sources": {"cmds/uname": {"duration_s": "abc"}}}', b"[1, 2]"])
def test_malformed_meta_json(tmp_path, meta):
    d = _copy(tmp_path)
    (d / "meta.json").write_bytes(meta)
    p = run_cli("audit", "--snapshot", str(d))
    assert p.returncode == 0
    _no_traceback(p)


def test_damaged_archive_is_an_error_not_a_partial_audit(tmp_path):
    data = bytearray((HOSTS / "h200-1gpu-collect.tar.gz").read_bytes())
    data[2000:2100] = bytes(b ^ 0xFF for b in data[2000:2100])
    f = tmp_path / "damaged.tar.gz"
    f.write_bytes(bytes(data))
    p = run_cli("audit", "--snapshot", str(f))
    assert p.returncode == 2 and "the archive is damaged" in p.stderr
    _no_traceback(p)


def test_huge_command_output_is_capped(tmp_path):
    from infergap.snapshot.core import MAX_FILE_BYTES

    d = _copy(tmp_path)
    with open(d / "cmds" / "lspci_vvv.out", "wb") as f:
        f.truncate(MAX_FILE_BYTES * 4)  # sparse: 64 MiB of NUL bytes
    with open_snapshot(d) as snap:
        assert len(snap.cmd("lspci_vvv").stdout) == MAX_FILE_BYTES


def test_missing_gpu_evidence_is_unknown_not_absent(tmp_path):
    (tmp_path / "files/proc/sys/vm").mkdir(parents=True)
    (tmp_path / "files/proc/sys/vm/swappiness").write_text("60\n")
    with open_snapshot(tmp_path) as snap:
        r = run_audit(snap)
    f = r.get("gpu.present")[0]
    assert f.status == Status.unknown and r.host.gpu_summary == "GPUs not captured"


def test_lspci_alone_lists_the_gpus(tmp_path):
    (tmp_path / "cmds").mkdir()
    shutil.copy(HOSTS / "seed-8x-rtxpro6000" / "cmds" / "lspci.out", tmp_path / "cmds" / "lspci.out")
    with open_snapshot(tmp_path) as snap:
        r = run_audit(snap)
    assert len(r.host.gpus) == 8 and not r.get("gpu.present")


def test_unreadable_files_are_named_in_the_title():
    """The text report shows a finding's title: "1 file(s) could not be read (permission denied)"
    did not say which file (only the JSON's evidence did). A container denies /proc/1/environ even
    to root without CAP_SYS_PTRACE; as root here no file can be made unreadable, so the snapshot's
    record of it is set directly."""
    from tests.investigators.memsnap import MemorySnapshot

    snap = MemorySnapshot({})
    snap.unreadable = {"/proc/1/environ": "permission denied"}
    (f,) = [f for f in run_audit(snap, parallel=False).findings if f.id == "evidence.unreadable"]
    assert f.title == "1 file(s) could not be read (permission denied): /proc/1/environ"


def test_checks_a_paste_does_not_cover_are_one_line(tmp_path):
    """One pasted nvidia-smi -q left 26 host checks 'not captured', listed one by one under the
    GPU findings; they are one line naming each check, and the header counts that line as one
    of the items listed."""
    import json
    import re

    smi = str(H200 / "cmds" / "nvsmi_q.out")
    text = run_cli("audit", "--no-host", "--evidence", smi).stdout
    doc = json.loads(run_cli("audit", "--no-host", "--evidence", smi, "-f", "json").stdout)
    uncaptured = [f for f in doc["findings"] if f["status"] == "unknown" and "not captured" in f["title"]]
    assert len(uncaptured) >= 20
    text = re.sub(r"\n {4,}(?=\S)", " ", text)  # an item's continuation lines (fitted to 100 columns)
    section = text.split("\nUNKNOWN: ", 1)[1].split("\n\n", 1)[0]
    items = [x for x in section.splitlines() if x.startswith("  ? ")]
    fold = [x for x in items if "checks not captured by the input given" in x]
    assert len(fold) == 1 and fold[0].startswith(f"  ? {len(uncaptured)} checks")
    assert all(f["id"] in fold[0] for f in uncaptured) and "infergap collect" in fold[0]
    assert not any("not captured" in x for x in items if x not in fold)
    assert section.startswith(f"{len(items)} ") and re.search(rf"· {len(items)} unknown ·", text.splitlines()[2])
