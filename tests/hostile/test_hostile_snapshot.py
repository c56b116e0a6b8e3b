"""Hostile snapshots: containment (evidence/ included), terminal injection, unreadable files,
malformed documents inside the snapshot, outputs that are the input."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile

import pytest
from hostile_helpers import cli, no_traceback, one_line_error, snapshot_copy

from tests.conftest import ROOT

ESC = "\x1b]0;owned\x07\x1b[2J\x1b[8m"


# -- kind 1: nothing read from outside the input ------------------------------------------------

def test_evidence_symlink_out_of_the_snapshot_is_not_followed(tmp_path):
    outside = tmp_path / "outside-topo.txt"
    outside.write_text("\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \nSECRET-FROM-THE-AUDITING-MACHINE\n")
    snap = snapshot_copy(tmp_path)
    (snap / "evidence").mkdir()
    os.symlink(outside, snap / "evidence" / "topo.txt")
    p = cli("audit", "--snapshot", str(snap), "--format", "json")
    no_traceback(p)
    assert "SECRET-FROM-THE-AUDITING-MACHINE" not in p.stdout
    doc = json.loads(p.stdout)
    refused = [f for f in doc["findings"] if f["id"] == "evidence.unrecognized"]
    assert refused and "out of the snapshot" in refused[0]["title"]


def test_evidence_folder_that_is_a_symlink_is_not_followed(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "dmesg.txt").write_text("[ 1.000000] NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.\n")
    snap = snapshot_copy(tmp_path)
    os.symlink(outside, snap / "evidence")
    p = cli("audit", "--snapshot", str(snap), "--format", "json")
    no_traceback(p)
    doc = json.loads(p.stdout)
    xid = [f for f in doc["findings"] if f["id"] == "gpu.xid"]
    # The snapshot holds no kernel log of its own: unknown, never the Xid of the log outside it.
    assert [(f["status"], f["title"]) for f in xid] == [("unknown", "Kernel log: not captured")], \
        "a log outside the snapshot changed a conclusion"


# -- kind 2: terminal injection ------------------------------------------------------------------

def _inject_cpu_name(snap):
    cpuinfo = snap / "files" / "proc" / "cpuinfo"
    cpuinfo.write_text(cpuinfo.read_text().replace("Intel(R) Xeon(R) Processor", f"Xeon{ESC}hidden"))


def test_escape_sequences_from_a_snapshot_never_reach_the_terminal(tmp_path):
    snap = snapshot_copy(tmp_path)
    _inject_cpu_name(snap)
    p = cli("audit", "--snapshot", str(snap))
    no_traceback(p)
    assert "\x1b" not in p.stdout and "\x07" not in p.stdout
    assert "Xeon\\x1b]0;owned\\x07" in p.stdout  # shown, visibly escaped


def test_markdown_report_escapes_values(tmp_path):
    snap = snapshot_copy(tmp_path)
    cpuinfo = snap / "files" / "proc" / "cpuinfo"
    cpuinfo.write_text(cpuinfo.read_text().replace("Intel(R) Xeon(R) Processor", "<img src=x onerror=alert(1)>[link](http://evil)\x1b[31m"))
    p = cli("audit", "--snapshot", str(snap), "--format", "md")
    no_traceback(p)
    assert "<img" not in p.stdout and "\x1b" not in p.stdout
    assert not re.search(r"(?<!\\)\]\(http://evil", p.stdout)  # the link syntax is escaped, not live
    assert "&lt;img" in p.stdout


def test_rich_markup_in_a_value_is_text():
    from infergap.guard import safe_console, term_safe

    import io
    buf = io.StringIO()
    con = safe_console(file=buf, markup=False, highlight=False, force_terminal=True)
    con.print("[/bold] [link=http://x]y[/link] \x1b[2J")  # would raise MarkupError with markup on
    assert "[/bold]" in buf.getvalue() and "\x1b[2J" not in buf.getvalue()
    assert term_safe("a\u202eb\tc\n") == "a\\u202eb\tc\n"


# -- kind 3: unreadable is unknown, with the reason ---------------------------------------------

@pytest.fixture
def open_tmp():
    """A temporary directory the unprivileged user can reach (pytest's own is private to root)."""
    import tempfile

    d = tempfile.mkdtemp(prefix="infergap-hostile-")
    os.chmod(d, 0o755)
    yield __import__("pathlib").Path(d)
    for top, dirs, _files in os.walk(d):
        for n in dirs:
            os.chmod(os.path.join(top, n), 0o755)
    shutil.rmtree(d, ignore_errors=True)


def _as_nobody(args, tmp_path):
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the audit as an unprivileged user")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "INFERGAP_DB": str(tmp_path / "nobody-ledger.sqlite3"),
           "HOME": str(tmp_path)}
    probe = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", sys.executable, "-c", "import infergap"],
                           capture_output=True, text=True, env=env, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"the unprivileged user cannot run this Python: {probe.stderr.strip()[:200]}")
    return subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", sys.executable, "-m", "infergap", *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_unreadable_snapshot_is_unknown_not_absent(open_tmp):
    tmp_path = open_tmp
    snap = snapshot_copy(tmp_path)
    for d, dirs, files in os.walk(snap):
        for n in files:
            os.chmod(os.path.join(d, n), 0)
    p = _as_nobody(["audit", "--snapshot", str(snap), "--format", "json"], tmp_path)
    no_traceback(p)
    doc = json.loads(p.stdout)
    text = json.dumps(doc)
    assert "no NVIDIA GPU" not in text and "No NVIDIA GPU" not in text
    assert "permission denied" in doc["host"]["gpu_summary"]
    present = [f for f in doc["findings"] if f["id"] == "gpu.present"]
    assert present and present[0]["status"] == "unknown" and "permission denied" in present[0]["title"]
    assert not [f for f in doc["findings"] if f["status"] == "ok"], [f["id"] for f in doc["findings"] if f["status"] == "ok"]


def test_unreadable_cpu_directory_is_not_no_cpuidle_states(open_tmp):
    tmp_path = open_tmp
    snap = snapshot_copy(tmp_path)
    (snap / "files" / "sys" / "devices" / "system" / "cpu").chmod(0)
    p = _as_nobody(["audit", "--snapshot", str(snap), "--format", "json"], tmp_path)
    no_traceback(p)
    cst = [f for f in json.loads(p.stdout)["findings"] if f["id"] == "cpu.cstates"]
    assert cst[0]["status"] == "unknown" and "permission denied" in cst[0]["title"]


# -- kind 5: documents inside the snapshot ------------------------------------------------------

@pytest.mark.parametrize("where", ["meta.json", "probes/nvml.json"])
def test_deeply_nested_json_in_a_snapshot(tmp_path, where):
    snap = snapshot_copy(tmp_path)
    (snap / where).parent.mkdir(parents=True, exist_ok=True)
    (snap / where).write_text("[" * 100_000 + "]" * 100_000)
    p = cli("audit", "--snapshot", str(snap))
    no_traceback(p)
    assert p.returncode == 0


def test_probe_with_wrong_types_does_not_cost_the_report(tmp_path):
    snap = snapshot_copy(tmp_path)
    (snap / "probes").mkdir()
    (snap / "probes" / "nvml.json").write_text(json.dumps({"available": "yes", "gpus": {"a": [1, {"b": None}]}, "driver": 5}))
    (snap / "probes" / "torch.json").write_text("NaN")
    p = cli("audit", "--snapshot", str(snap), "--format", "json")
    no_traceback(p)
    assert json.loads(p.stdout)["host"]["snapshot"]["kind"] == "directory"


# -- kind 6: outputs never overwrite inputs, writes are whole -----------------------------------

def test_output_that_is_the_snapshot_archive_is_refused(tmp_path):
    arch = tmp_path / "snap.tar.gz"
    shutil.copy(ROOT / "tests" / "fixtures" / "hosts" / "h200-1gpu-collect.tar.gz", arch)
    before = arch.read_bytes()
    one_line_error(cli("audit", "--snapshot", str(arch), "-o", str(arch)), "refusing to overwrite")
    assert arch.read_bytes() == before


def test_output_inside_the_snapshot_directory_is_refused(tmp_path):
    snap = snapshot_copy(tmp_path)
    one_line_error(cli("audit", "--snapshot", str(snap), "-o", str(snap / "files" / "proc" / "cpuinfo")), "inside the input")


def test_failed_write_keeps_the_previous_report(tmp_path):
    """A write cut short (file size limit: EFBIG, like a full disk) leaves the old report whole."""
    import resource
    import signal

    out = tmp_path / "report.json"
    out.write_text('{"previous": true}\n')

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    p = subprocess.run([sys.executable, "-m", "infergap", "audit", "--snapshot", str(ROOT / "tests" / "fixtures" / "hosts" / "h200-1gpu"),
                        "--format", "json", "-o", str(out)], capture_output=True, text=True, env=env, timeout=120, preexec_fn=small_files)
    one_line_error(p, "--output", "cannot write")
    assert out.read_text() == '{"previous": true}\n'
    assert [x.name for x in tmp_path.iterdir()] == ["report.json"]  # no temporary file left


def test_full_disk_is_named(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    one_line_error(cli("audit", "--snapshot", str(ROOT / "tests" / "fixtures" / "hosts" / "h200-1gpu"), "-o", "/dev/full"), "disk full")


def test_collect_into_a_non_empty_directory_is_refused(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    (d / "stale.txt").write_text("from another host")
    one_line_error(cli("collect", "-o", str(d)), "not empty")
    assert (d / "stale.txt").exists()
    one_line_error(cli("collect", "-o", str(d), "--force"), "previous snapshot")  # not a snapshot: never emptied
    assert (d / "stale.txt").exists()


def test_collect_force_empties_a_previous_snapshot(tmp_path):
    from infergap.snapshot.collect import prepare_output

    d = tmp_path / "out"
    (d / "files" / "proc").mkdir(parents=True)
    (d / "meta.json").write_text("{}")
    (d / "files" / "proc" / "stale").write_text("x")
    prepare_output(d, force=True)
    assert list(d.iterdir()) == []


def test_unreadable_snapshot_root_is_one_line(open_tmp):
    snap = snapshot_copy(open_tmp)
    os.chmod(open_tmp, 0o711)
    snap.chmod(0)
    line = one_line_error(_as_nobody(["audit", "--snapshot", str(snap)], open_tmp), str(snap))
    assert "permission denied" in line or "not readable" in line
    (open_tmp / "sealed").mkdir(mode=0o700)
    line = one_line_error(_as_nobody(["audit", "--snapshot", str(open_tmp / "sealed" / "x.tar.gz")], open_tmp))
    assert "permission denied" in line or "not readable" in line or "does not exist" in line


def test_probe_file_with_wrong_field_types_is_one_unknown_naming_the_field(tmp_path):
    snap = snapshot_copy(tmp_path)
    (snap / "probes").mkdir()
    (snap / "probes" / "nvml.json").write_text(json.dumps({"available": True, "gpus": [1, "x", {"memory_total_B": "a"}],
                                                           "driver_version": {"a": 1}}))
    p = cli("audit", "--snapshot", str(snap), "--format", "json")
    no_traceback(p)
    doc = json.loads(p.stdout)
    assert not [i for i in doc["investigators"] if i.get("error")], [i for i in doc["investigators"] if i.get("error")]
    bad = [f for f in doc["findings"] if f["id"] == "evidence.unreadable" and f.get("subject") == "probes/nvml.json"]
    assert bad and "field" in bad[0]["impact"]


def test_collect_keeps_an_existing_archive_unless_forced(tmp_path):
    """``collect -o FILE.tar.gz`` overwrote an existing file without a word (last week's capture
    of another host); now it is refused, and --force replaces it with a snapshot of this host."""
    arch = tmp_path / "snap.tar.gz"
    arch.write_bytes(b"an earlier capture")
    one_line_error(cli("collect", "-o", str(arch)), f"--output {arch}", "the file exists", "--force")
    assert arch.read_bytes() == b"an earlier capture"
    (tmp_path / "dir.tar.gz").mkdir()
    one_line_error(cli("collect", "-o", str(tmp_path / "dir.tar.gz"), "--force"), "not a regular file")
    p = cli("collect", "-o", str(arch), "--force", timeout=300)
    assert p.returncode == 0 and f"wrote {arch}" in p.stdout, p.stderr
    with tarfile.open(arch) as tf:
        assert any(n.endswith("meta.json") for n in tf.getnames())
