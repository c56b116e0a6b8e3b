"""Hostile fleet archives (class 6 of docs/security.md): the caps ``audit --snapshot`` applies
(members, bytes of one member, bytes in all) hold before a node's archive is read, so a node
over them is "not audited" and the others are still reported; node names are unique and do not
depend on the order of the nodes or on which other nodes are there."""

from __future__ import annotations

import io
import shutil
import tarfile

import pytest
from hostile_helpers import SNAPSHOT

from benchmarks.hostile import Zeros
from infergap.fleet.runner import audit_one, audit_stream, expand_snapshots, snapshot_stream
from infergap.snapshot.core import ARCHIVE_MAX_BYTES, ARCHIVE_MAX_MEMBER_BYTES, ARCHIVE_MAX_MEMBERS


def _many_members(p):
    with tarfile.open(p, "w:gz", compresslevel=1) as tf:
        for i in range(ARCHIVE_MAX_MEMBERS + 10):
            tf.addfile(tarfile.TarInfo(f"snap/files/x/{i}"), io.BytesIO(b""))


def _big_member(p):
    size = ARCHIVE_MAX_MEMBER_BYTES + (1 << 20)
    with tarfile.open(p, "w:gz", compresslevel=1) as tf:
        info = tarfile.TarInfo("snap/files/proc/cpuinfo")
        info.size = size
        tf.addfile(info, io.BufferedReader(Zeros(size), 1 << 20))


def _sparse_tar(p):
    """A plain tar whose one member claims more than the total cap; the file is sparse on disk."""
    size = ARCHIVE_MAX_BYTES + (16 << 20)
    info = tarfile.TarInfo("snap/files/proc/cpuinfo")
    info.size = size
    with open(p, "wb") as f:
        f.write(info.tobuf(format=tarfile.USTAR_FORMAT))
        f.truncate(512 + size + 1024)


@pytest.mark.parametrize("make,name,words", [
    (_many_members, "many.tar.gz", "members"),
    (_big_member, "big.tar.gz", "accepted for one file"),
    (_sparse_tar, "sparse.tar", "more than"),
])
def test_a_node_over_the_snapshot_caps_is_not_audited_and_the_others_are(tmp_path, make, name, words):
    shutil.copytree(SNAPSHOT, tmp_path / "good")
    make(tmp_path / name)
    items = list(snapshot_stream(expand_snapshots(str(tmp_path))))
    digests = {d.node.name: d for d in audit_stream(items, workers=0)}
    bad = digests[name.split(".")[0]]
    assert bad.state == "error" and words in bad.error, bad.error
    assert digests["good"].state == "audited"


def test_a_node_archive_given_as_bytes_is_held_to_the_caps(tmp_path):
    from infergap.fleet.runner import NodeIdentity

    p = tmp_path / "many.tar.gz"
    _many_members(p)
    d, _ = audit_one(NodeIdentity(name="n", address="x"), p.read_bytes())
    assert d.state == "error" and "members" in d.error, d.error


def test_node_names_are_unique_and_stable_when_nodes_are_added(tmp_path):
    for d in ("x/a", "x/b", "y/a", "z/c"):
        (tmp_path / d).mkdir(parents=True)
        shutil.copytree(SNAPSHOT, tmp_path / d / "snap")
    (tmp_path / "w").mkdir()
    shutil.copytree(SNAPSHOT, tmp_path / "w" / "a")
    (tmp_path / "w" / "a.tgz").write_bytes(b"")  # the same stem as the directory node beside it
    two = [tmp_path / "x/a/snap", tmp_path / "x/b/snap"]
    names2 = {n.address: n.name for n, _ in snapshot_stream(two)}
    assert len(set(names2.values())) == 2
    more = [tmp_path / "z/c/snap", *two, tmp_path / "y/a/snap"]
    names4 = {n.address: n.name for n, _ in snapshot_stream(more)}
    assert len(set(names4.values())) == 4, names4
    assert {k: names4[k] for k in names2 if k != str(tmp_path / "x/a/snap")} == \
        {k: v for k, v in names2.items() if k != str(tmp_path / "x/a/snap")}
    rev = {n.address: n.name for n, _ in snapshot_stream(list(reversed(more)))}
    assert rev == names4  # the order the nodes come in changes no name
    assert not any("#" in v for v in names4.values())
    same_stem = [tmp_path / "w/a", tmp_path / "w/a.tgz"]
    names = [n.name for n, _ in snapshot_stream(same_stem)]
    assert len(set(names)) == 2


def _damaged(data: bytes, how: str) -> bytes:
    """A real capture's archive (gzip'd tar) damaged after its first member: a later header's
    checksum broken, or the compressed stream cut short."""
    import gzip

    if how == "truncated":
        return data[: len(data) // 2]
    raw = bytearray(gzip.decompress(data))
    with tarfile.open(fileobj=io.BytesIO(bytes(raw))) as tf:
        third = tf.getmembers()[2].offset
    raw[third + 148:third + 156] = b"0000000\0"  # a checksum no header has
    return gzip.compress(bytes(raw))


@pytest.mark.parametrize("how,words", [("bad header", "bad header at byte"), ("truncated", "truncated")])
def test_a_damaged_node_archive_is_an_error_not_a_partial_audit(how, words):
    """Python's tar reader stops without a word at a bad header after the first member; a node
    audited from the members before it would look like a host that lacks the rest."""
    from infergap.fleet.runner import NodeIdentity
    from tests.conftest import HOSTS

    data = _damaged((HOSTS / "h200-1gpu-collect.tar.gz").read_bytes(), how)
    d, _ = audit_one(NodeIdentity(name="n", address="x"), data)
    assert d.state == "error" and words in d.error and d.error.startswith("snapshot n: "), d.error


def test_a_node_archive_in_memory_audits_as_the_same_archive_on_disk():
    """The fleet reads a node's archive in memory; it must conclude what ``audit --snapshot``
    concludes from the same file unpacked to disk."""
    from infergap.audit import run_audit
    from infergap.snapshot.core import ArchiveSnapshot
    from infergap.snapshot.memory import MemorySnapshot
    from tests.conftest import HOSTS

    path = HOSTS / "h200-2gpu-collect.tar.gz"

    def conclusions(snap):
        with snap:
            return sorted((f.id, f.subject or "", f.status.value, f.title) for f in run_audit(snap, parallel=False).findings)

    mem = conclusions(MemorySnapshot.from_archive(path.read_bytes(), str(path)))
    assert mem and mem == conclusions(ArchiveSnapshot(path))
