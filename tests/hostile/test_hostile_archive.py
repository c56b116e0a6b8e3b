"""Hostile snapshot archives: caps on members and bytes, and no unpacked copy left behind after
a refusal or a SIGTERM."""

from __future__ import annotations

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
from tests.conftest import ROOT


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
