"""Hostile snapshot archives: caps on members and bytes, and no unpacked copy left behind after
a refusal or a SIGTERM."""

from __future__ import annotations

import gzip
import io
import os
import signal
import subprocess
import sys
import tarfile
import time

import pytest
from hostile_helpers import one_line_error

from benchmarks.hostile import Zeros
from infergap.snapshot import core
from tests.conftest import ROOT, run_cli


def _env(tmp):
    return {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TMPDIR": str(tmp)}


def test_member_count_cap(tmp_path, monkeypatch):
    arch = tmp_path / "many.tar.gz"
    with tarfile.open(arch, "w:gz") as tf:
        for i in range(120):
            info = tarfile.TarInfo(f"snap/files/x/{i}")
            tf.addfile(info, io.BytesIO(b""))
    monkeypatch.setattr(core, "ARCHIVE_MAX_MEMBERS", 100)
    with pytest.raises(core.SnapshotError, match="more than 100 members"):
        core.ArchiveSnapshot(arch)


def test_bomb_member_is_refused_before_unpacking(tmp_path):
    """A member whose size is above the per-file cap is refused by its header, before any byte
    is written (a 2 GB zero file compresses to a few MB)."""
    arch = tmp_path / "bomb.tar.gz"
    size = core.ARCHIVE_MAX_MEMBER_BYTES + 1
    with tarfile.open(arch, "w:gz", compresslevel=1) as tf:
        info = tarfile.TarInfo("snap/files/proc/cpuinfo")
        info.size = size
        tf.addfile(info, io.BufferedReader(Zeros(size), 1 << 20))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = subprocess.run([sys.executable, "-m", "infergap", "audit", "--snapshot", str(arch)], capture_output=True, text=True,
                       env=_env(tmp), timeout=300)
    one_line_error(p, str(arch), "bytes")
    assert list(tmp.iterdir()) == [], "the unpacked copy was left behind"


def test_total_bytes_cap(tmp_path, monkeypatch):
    arch = tmp_path / "big.tar.gz"
    with tarfile.open(arch, "w:gz") as tf:
        for i in range(4):
            info = tarfile.TarInfo(f"snap/files/f{i}")
            info.size = 1000
            tf.addfile(info, io.BytesIO(bytes(1000)))
    monkeypatch.setattr(core, "ARCHIVE_MAX_BYTES", 2500)
    before = set(core._TEMP_DIRS)  # archives other code of this process holds open are not this one's
    with pytest.raises(core.SnapshotError, match="more than 2500 bytes"):
        core.ArchiveSnapshot(arch)
    assert core._TEMP_DIRS == before


def test_sigterm_while_unpacking_leaves_no_temporary_directory(tmp_path):
    arch = tmp_path / "slow.tar.gz"
    with tarfile.open(arch, "w:gz") as tf:
        link = tarfile.TarInfo("snap/files/link")  # a link: unpacked on disk, not read in memory (plain_archive)
        link.type, link.linkname = tarfile.SYMTYPE, "d0"
        tf.addfile(link)
        for i in range(15_000):
            info = tarfile.TarInfo(f"snap/files/d{i % 50}/{i}")
            info.size = 10
            tf.addfile(info, io.BytesIO(b"0123456789"))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "infergap", "audit", "--snapshot", str(arch)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp))
    deadline = time.monotonic() + 120
    while not any(tmp.iterdir()) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    if proc.poll() is not None:
        pytest.skip("the archive was unpacked before the signal could be sent")
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err
    assert proc.returncode == 130, err
    assert list(tmp.iterdir()) == [], "temporary directory left after SIGTERM"


def _tar(path, members):
    """A .tar.gz of ``members``: (name, bytes) for a file, (name, tarfile type, link) for others."""
    with tarfile.open(path, "w:gz") as t:
        for m in members:
            ti = tarfile.TarInfo(m[0])
            if len(m) == 2:
                ti.size = len(m[1])
                t.addfile(ti, io.BytesIO(m[1]))
            else:
                ti.type, ti.linkname = m[1], m[2]
                t.addfile(ti)
    return path


@pytest.mark.parametrize("members, words", [
    ([("snap/cmds/x.out", b"x"), ("../evil", b"x")], ["unsafe member '../evil'", "leading outside the snapshot"]),
    ([("snap/files/etc/x", tarfile.SYMTYPE, "/etc/passwd")], ["unsafe member 'snap/files/etc/x'", "a link to an absolute path"]),
    ([("snap/files/dev/x", tarfile.CHRTYPE, "")], ["unsafe member 'snap/files/dev/x'", "a device or special file"]),
    ([("notes/readme.txt", b"hello")], ["not an infergap snapshot", "the archive holds none of meta.json"]),
])
def test_each_archive_problem_is_named(tmp_path, members, words):
    """An unsafe member is a refusal naming it and why (it used to be dropped with a debug line,
    auditing what was left); an archive of something else is 'not an infergap snapshot'."""
    arch = _tar(tmp_path / "x.tar.gz", members)
    one_line_error(run_cli("audit", "--snapshot", str(arch)), f"snapshot {arch}", *words)


@pytest.mark.parametrize("content, reason", [
    (b"", "an empty file"), (b"plain text, not an archive", "neither gzip nor tar data"),
    (gzip.compress(b"gzip of a text file\n" * 50), "gzip-compressed, but no tar archive inside"),
])
def test_a_file_that_is_no_archive_says_what_it_is(tmp_path, content, reason):
    f = tmp_path / "x.tar.gz"
    f.write_bytes(content)
    line = one_line_error(run_cli("audit", "--snapshot", str(f)), "not a readable .tar.gz archive", reason)
    assert "could not be opened successfully" not in line


def test_a_plain_directory_is_not_a_snapshot(tmp_path):
    """A folder of notes (a typo'd path, the home directory) was audited as an empty host: 22
    unknowns, exit 0. An empty directory stays a valid, empty snapshot."""
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("buy GPUs\n")
    one_line_error(run_cli("audit", "--snapshot", str(tmp_path / "notes")), "not an infergap snapshot",
                   "the directory holds none of", "--evidence")
    (tmp_path / "empty").mkdir()
    p = run_cli("audit", "--snapshot", str(tmp_path / "empty"))
    assert p.returncode == 0 and "GPUs not captured" in p.stdout, p.stderr
