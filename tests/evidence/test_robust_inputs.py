"""Evidence given as a pipe, an empty directory, or with ANSI remnants whose ESC byte was lost."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infergap.evidence.recognize import scan_file
from infergap.evidence.overlay import open_with_evidence
from infergap.evidence.text import clean_line
from tests.evidence.evidence_data import FIX, H200, ROOT

SEED_QX = ROOT / "tests" / "fixtures" / "hosts" / "seed-8x-rtxpro6000" / "cmds" / "nvsmi_qx.out"


def _audit(*args, stdin=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "infergap", "audit", "--no-host", "--format", "json", *args],
                          input=stdin, capture_output=True, env=env, timeout=300)


def test_stdin_pipe_is_read():
    r = _audit("-e", "/dev/stdin", stdin=SEED_QX.read_bytes())
    assert r.returncode == 0, r.stderr.decode()
    rep = json.loads(r.stdout)
    assert not any(f["id"] == "evidence.unrecognized" for f in rep["findings"])
    assert any(f["id"].startswith("pcie.") and f["status"] == "ok" for f in rep["findings"])


def test_dash_reads_standard_input():
    r = _audit("-e", "-", stdin=(FIX / "nccl-1664-ib-status12.log").read_bytes())
    assert r.returncode == 0, r.stderr.decode()
    rep = json.loads(r.stdout)
    net = [f for f in rep["findings"] if f["id"] == "nccl.net"]
    assert net and net[0]["status"] == "actionable" and net[0]["subject"] == "evidence/stdin"
    empty = _audit("-e", "-", stdin=b"")
    assert empty.returncode == 0 and "stdin: empty file" in empty.stdout.decode()


def test_dash_with_this_host_is_split_like_a_file():
    """A paste read from standard input next to this machine is judged as the same file would be
    (another host's paste is audited on its own, never merged into this one's report)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    def host_of(*args, stdin=None):
        r = subprocess.run([sys.executable, "-m", "infergap", "audit", "--format", "json", *args], input=stdin,
                           capture_output=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr.decode()
        h = json.loads(r.stdout)["host"]
        return h["snapshot"]["label"], [g["name"] for g in h["gpus"]]

    assert host_of("-e", "-", stdin=SEED_QX.read_bytes()) == host_of("-e", str(SEED_QX))


def test_dash_stdin_has_the_pipe_cap():
    """Standard input is spooled under the same byte cap as any pipe: past it, the input is named
    and refused, never read without end."""
    code = ("import sys; from infergap.evidence import overlay as s; s.MAX_SPOOL_BYTES = 4096; "
            "snap = s.open_with_evidence(None, ['-'], host=False); "
            "print([(u.path.name, u.reason) for u in snap.unrecognized()]); snap.close()")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-c", code], input=(FIX / "nccl-1817-shm-8gpu.log").read_bytes() * 8,
                       capture_output=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert "('stdin', 'more than" in out and "from a pipe or device; not read')" in out


def test_fifo_is_spooled_and_copy_deleted(tmp_path):
    fifo = tmp_path / "paste"
    os.mkfifo(fifo)
    data = (FIX / "sglang-1362-server-args.log").read_bytes()
    writer = subprocess.Popen([sys.executable, "-c", f"import sys; open({str(fifo)!r}, 'wb').write(sys.stdin.buffer.read())"],
                              stdin=subprocess.PIPE)
    writer.stdin.write(data)
    writer.stdin.close()
    snap = open_with_evidence(None, [fifo], host=False)
    writer.wait(timeout=30)
    parts = snap.evidence_parts("sglang_log")
    assert [p.label for p in parts] == ["evidence/paste"]
    assert "server_args=ServerArgs(" in parts[0].text()
    spooled = parts[0].path
    assert spooled.exists() and spooled != fifo
    snap.close()
    assert not spooled.exists()


def test_empty_directory_is_reported(tmp_path):
    empty = tmp_path / "logs"
    empty.mkdir()
    snap = open_with_evidence(None, [empty], host=False)
    assert [(u.path, u.reason) for u in snap.unrecognized()] == [(empty, "directory holds no files")]
    r = _audit("-e", str(empty))
    rep = json.loads(r.stdout)
    assert any(f["id"] == "evidence.unrecognized" and "no files" in json.dumps(f) for f in rep["findings"])


def test_a_folder_counts_as_the_files_it_holds(tmp_path):
    """``--evidence DIR`` with 3 real pastes inside says 3 files read, not 1 (the folder)."""
    import shutil

    logs = tmp_path / "logs"
    (logs / "sub").mkdir(parents=True)
    pastes = sorted(p for p in FIX.iterdir() if p.suffix == ".log")[:3]
    for p, dest in zip(pastes, [logs, logs, logs / "sub"]):
        shutil.copy(p, dest / p.name)
    snap = open_with_evidence(None, [logs], host=False)
    try:
        assert snap.label == "3 evidence file(s)"
    finally:
        snap.close()


def _real_logs(folder, k: int):
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    pastes = sorted(p for p in FIX.iterdir() if p.suffix == ".log")[:k]
    for p in pastes:
        shutil.copy(p, folder / p.name)
    return pastes


def test_a_folder_walk_skips_fifos_links_to_read_files_and_pseudo_filesystems(tmp_path):
    """A FIFO in a folder would block the reader for ever; a link to a file already read is read
    once; a link to a folder is not followed (a loop would never end); each file is announced."""
    logs = tmp_path / "logs"
    pastes = _real_logs(logs, 2)
    os.mkfifo(logs / "pipe")
    (logs / "again.log").symlink_to(logs / pastes[0].name)
    (logs / "loop").symlink_to(logs, target_is_directory=True)
    seen = []
    snap = open_with_evidence(None, [logs], host=False, on_file=lambda p, k: seen.append((p.name, k)))
    try:
        assert snap.label == "2 evidence file(s)"
        assert [k for _, k in seen] == [1, 2] and {n for n, _ in seen} <= {"again.log", pastes[0].name, pastes[1].name}
    finally:
        snap.close()


def test_a_folder_too_large_is_read_in_part_and_says_so(tmp_path, monkeypatch):
    """``--evidence /`` must not read the whole disk silently: the walk stops at the limit and an
    unrecognised entry names the folder, how far it got and what to do."""
    from infergap.evidence import overlay as mod

    logs = tmp_path / "logs"
    _real_logs(logs, 4)
    monkeypatch.setattr(mod, "MAX_FOLDER_FILES", 3)
    snap = open_with_evidence(None, [logs], host=False)
    try:
        assert snap.label == "3 evidence file(s)"
        cut = [u for u in snap.unrecognized() if u.path == logs]
        assert len(cut) == 1 and "stopped at 3 files" in cut[0].reason and "smaller folder" in cut[0].reason
    finally:
        snap.close()
    monkeypatch.setattr(mod, "MAX_FOLDER_FILES", 100)
    monkeypatch.setattr(mod, "MAX_FOLDER_BYTES", 1)
    snap = open_with_evidence(None, [logs], host=False)
    try:
        assert any("stopped at 0 files" in u.reason for u in snap.unrecognized())
    finally:
        snap.close()


def test_the_root_folder_is_walked_without_pseudo_filesystems(monkeypatch):
    """``--evidence /`` skips /proc, /sys, /dev
    and /run by name and stops at the file limit instead of reading the disk."""
    from infergap.evidence import overlay as mod

    monkeypatch.setattr(mod, "MAX_FOLDER_FILES", 20)
    snap = mod.EvidenceSnapshot(None, ["/"])
    try:
        reasons = {str(u.path): u.reason for u in snap.unrecognized()}
        assert reasons.get("/proc") == "kernel pseudo-filesystem: not read"
        assert "stopped at 20 files" in reasons["/"]
    finally:
        snap.close()


def test_esc_less_remnant_before_lowercase_text(tmp_path):
    src = (H200 / "cmds" / "nvsmi_csv.out").read_text()
    p = tmp_path / "csv.txt"
    p.write_text("".join(f"[0;32m{ln}\n" for ln in src.splitlines()))
    parts, unknown = scan_file(p)
    assert [x.kind for x in parts] == ["nvsmi_csv"], unknown
    assert clean_line("[0;32mname, index") == "name, index"
    assert clean_line("[1;31mERROR: [0m x") == "ERROR:  x"


def test_bracket_text_kept():
    for s in ("grep '[a-z]m' x", "regex [0-9]+ matched", "[m]atch", "item[3]m", "[TP0] ready", "[2025-01-01 10:00:00] x"):
        assert clean_line(s) == s


@given(st.text(alphabet=st.sampled_from("[]am-z0;:x \t,.19"), max_size=40))
def test_only_digit_remnants_are_stripped(s):
    out = clean_line(s)
    if not re.search(r"\[\d[\d;]*m", s):
        assert out == s
    assert len(out) <= len(s)


def test_a_link_loop_is_named_as_such(tmp_path):
    from infergap.errors import UserError

    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(UserError, match="leads nowhere"):
        open_with_evidence(None, [tmp_path / "a"], host=False)


def test_audit_header_counts_the_time_spent_reading_the_evidence():
    """Reading a large evidence folder takes longer than the investigators; the header once showed
    only the investigators' time. A slow read (here each file waits 0.1 s, as on a slow disk)
    must show in the report, next to the investigators' time."""
    import time

    from infergap.audit import run_audit
    from infergap.render.audit import render_text

    files = sorted(FIX.glob("*.txt"))[:4]
    snap = open_with_evidence(None, files, host=False, on_file=lambda path, k: time.sleep(0.1))
    try:
        report = run_audit(snap)
    finally:
        snap.close()
    assert report.summary["read_s"] >= 0.4
    head = render_text(report, color=False).splitlines()
    line = next(x for x in head if "investigators in" in x)
    assert re.search(r"input read in (\d+\.\d\d) s, \d+ investigators in \d+\.\d\d s", line), line
    assert float(re.search(r"input read in (\d+\.\d\d) s", line).group(1)) >= 0.4
    r = _audit("-e", str(FIX / "nccl-1664-ib-status12.log"))
    assert r.returncode == 0 and json.loads(r.stdout)["summary"]["read_s"] >= 0, r.stderr.decode()
