"""``audit --snapshot X.tar.gz`` reads a plain archive in memory
(:func:`infergap.snapshot.memory.plain_archive`) and unpacks anything else on disk
(:class:`~infergap.snapshot.core.ArchiveSnapshot`): both must read the same tree."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

from infergap.audit import run_audit
from infergap.snapshot import open_snapshot
from infergap.snapshot.core import ArchiveSnapshot, SnapshotError
from infergap.snapshot.memory import MemorySnapshot, plain_archive
from tests.conftest import HOSTS

CAPTURES = ["h200-1gpu-collect.tar.gz", "h200-2gpu-collect.tar.gz"]


def _conclusions(snap):
    with snap:
        rep = run_audit(snap, parallel=False)
        return sorted((f.id, f.subject or "", f.status.value, f.title, f.impact or "") for f in rep.findings), rep.host


@pytest.mark.parametrize("name", CAPTURES)
def test_a_capture_in_memory_audits_as_on_disk(name):
    path = str(HOSTS / name)
    mem = open_snapshot(path)
    assert isinstance(mem, MemorySnapshot) and mem.kind == "archive" and mem.label == path
    got, host = _conclusions(mem)
    want, want_host = _conclusions(ArchiveSnapshot(path))
    assert got and got == want
    assert host == want_host


def _tar(tmp_path, extra=(), drop_dirs=False) -> str:
    """The seed fixture's ``files/proc`` and ``cmds`` as a .tar.gz of one folder, plus ``extra``
    members (TarInfo, bytes or None)."""
    src = HOSTS / "seed-8x-rtxpro6000"
    out = tmp_path / "snap.tar.gz"
    with tarfile.open(out, "w:gz") as tf:
        for part in ("cmds", "files/proc"):
            tf.add(src / part, arcname=f"snap/{part}", filter=(lambda m: None if drop_dirs and m.isdir() else m))
        for info, data in extra:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return str(out)


def _info(name, kind=tarfile.REGTYPE, size=0, link=""):
    m = tarfile.TarInfo(name)
    m.type, m.size, m.linkname = kind, size, link
    return m


def test_an_empty_folder_exists_in_memory_as_on_disk(tmp_path):
    path = _tar(tmp_path, [(_info("snap/files/sys/class/infiniband", tarfile.DIRTYPE), None)])
    mem, disk = plain_archive(path), ArchiveSnapshot(path)
    try:
        assert mem is not None
        for p in ("/sys/class/infiniband", "/sys/class", "/proc"):
            assert mem.listdir(p) == disk.listdir(p) and mem.exists(p) == disk.exists(p), p
        assert mem.listdir("/sys/class/infiniband") == []
        assert mem.read("/proc/cpuinfo") == disk.read("/proc/cpuinfo") and mem.read("/proc/cpuinfo")
        assert mem.cmd("lspci_vvv").stdout == disk.cmd("lspci_vvv").stdout
    finally:
        disk.close()


@pytest.mark.parametrize("extra", [
    [(_info("snap/files/etc/x", tarfile.SYMTYPE, link="../proc/cpuinfo"), None)],  # a link: the disk reader's rules
    [(_info("snap/evidence/nccl.log", size=5), b"NCCL ")],  # pasted files are read by path
    [(_info("snap/files/etc/dup", size=1), b"a"), (_info("snap/files/etc/dup", size=1), b"b")],
], ids=["symlink", "evidence-folder", "duplicate"])
def test_what_memory_would_read_otherwise_is_unpacked_on_disk(tmp_path, extra):
    path = _tar(tmp_path, extra)
    assert plain_archive(path) is None
    snap = open_snapshot(path)
    assert isinstance(snap, ArchiveSnapshot)
    snap.close()


def test_damage_and_foreign_archives_keep_the_disk_readers_words(tmp_path):
    good = (HOSTS / "h200-1gpu-collect.tar.gz").read_bytes()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(good[: len(good) // 2])
    foreign = tmp_path / "foreign.tar.gz"
    with tarfile.open(foreign, "w:gz") as tf:
        tf.addfile(_info("notes.txt", size=2), io.BytesIO(b"hi"))
    for p in (cut, foreign):
        assert plain_archive(str(p)) is None
        with pytest.raises(SnapshotError) as ours:
            open_snapshot(p)
        with pytest.raises(SnapshotError) as disk:
            ArchiveSnapshot(p)
        assert str(ours.value) == str(disk.value) and str(ours.value).startswith(f"snapshot {p}: ")


def test_a_large_archive_is_unpacked_on_disk(tmp_path, monkeypatch):
    import infergap.snapshot.memory as memory

    path = _tar(tmp_path)
    assert plain_archive(path) is not None
    monkeypatch.setattr(memory, "IN_MEMORY_BYTES", os.stat(path).st_size + 10)  # the file fits, its contents do not
    assert plain_archive(path) is None
