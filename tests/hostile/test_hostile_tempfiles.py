"""Temporary files beside an output are created exclusively: a symlink planted at the name a
temporary file would take redirects no write (class 5 of docs/security.md)."""

from __future__ import annotations

import os
import tarfile

from hostile_helpers import SNAPSHOT

from infergap.snapshot import open_snapshot
from infergap.snapshot.collect import collect


def _victim(tmp_path):
    v = tmp_path / "victim.txt"
    v.write_text("precious\n")
    return v


def test_collect_archive_does_not_follow_a_planted_temporary_name(tmp_path):
    victim = _victim(tmp_path)
    out = tmp_path / "snap.tar.gz"
    # the names a fixed scheme would use: NAME.tmp and .NAME.<pid>.tmp beside the archive
    for name in (f".{out.name}.{os.getpid()}.tmp", f"{out.name}.tmp", f".{out.name}.tmp"):
        os.symlink(victim, tmp_path / name)
    with open_snapshot(str(SNAPSHOT)) as snap:
        collect(out, source=snap)
    assert victim.read_bytes() == b"precious\n"
    with tarfile.open(out) as tf:
        assert any(m.name.endswith("meta.json") for m in tf.getmembers())
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()]
