"""``MemorySnapshot``: a snapshot held in memory, in the layout a snapshot directory has.

Two callers need one without a directory on disk: a fleet audit, which opens thousands of node
archives (unpacking each into a temporary directory, as :class:`~infergap.snapshot.core.ArchiveSnapshot`
does for one, costs more than auditing it), and tests that give an investigator a few host files and
command outputs. Both hold ``{path inside the snapshot: bytes}`` (``files/proc/cmdline``,
``cmds/lspci.out``, ``probes/nvml.json``, ``meta.json``) and read it with the directory reader's
rules (:class:`~infergap.snapshot.core.DirSnapshot`: exit statuses, ``meta.json`` sources, probe
validation), so a snapshot read from memory answers as the same snapshot read from disk.

An archive is read through :func:`read_archive`, held to the caps of ``audit --snapshot``
(those of :func:`~infergap.snapshot.core.check_archive`).
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import tarfile
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from infergap.snapshot.core import (
    ARCHIVE_MAX_BYTES,
    ARCHIVE_MAX_MEMBERS,
    LAYOUT_PARTS,
    MAX_FILE_BYTES,
    CmdResult,
    DirSnapshot,
    SnapshotError,
    check_archive,
    check_members,
)

#: Bytes a plain tar may hold around :data:`ARCHIVE_MAX_BYTES` of files: a 512-byte header and up
#: to 511 bytes of padding per member, and the two closing blocks (the bound ``check_archive`` uses).
TAR_OVERHEAD = 1024 * (ARCHIVE_MAX_MEMBERS + 2)


def _inflate(data: bytes, label: str) -> bytes:
    """The tar bytes of ``data`` (gzip-compressed or plain), at most the archive cap; raise
    :class:`SnapshotError` naming ``label`` above it or for a truncated or damaged stream."""
    if data[:2] != b"\x1f\x8b":
        return data
    cap = ARCHIVE_MAX_BYTES + TAR_OVERHEAD
    d = zlib.decompressobj(wbits=31)
    try:
        raw = d.decompress(data, cap + 1)
    except zlib.error as e:
        raise SnapshotError(f"snapshot {label}: not a readable .tar.gz archive ({e})") from None
    if len(raw) > cap:
        raise SnapshotError(f"snapshot {label}: unpacks to more than {ARCHIVE_MAX_BYTES} bytes; not unpacked")
    if not d.eof:
        raise SnapshotError(f"snapshot {label}: not a readable .tar.gz archive (the compressed stream is truncated)")
    return raw


def _inside(name: str) -> str | None:
    """The member name as a path inside the snapshot, or None when it leaves the tree."""
    rel = posixpath.normpath(name.lstrip("/"))
    return None if rel in (".", "..") or rel.startswith("../") else rel


def read_archive(data: bytes, label: str) -> dict[str, bytes]:
    """The regular files of a snapshot archive (``.tar.gz`` or plain ``.tar`` bytes) as
    ``{path inside the archive: bytes}``.

    The archive is held to the caps of ``audit --snapshot`` (those of
    :func:`~infergap.snapshot.core.check_archive`): the inflated stream to
    :data:`~infergap.snapshot.core.ARCHIVE_MAX_BYTES` and the tar overhead, then every member
    header (members, bytes of one member, bytes in all, by
    :func:`~infergap.snapshot.core.check_members`) before any file is read; one pass over bytes
    already in memory, where a streaming pre-check would cost more than the audit. Links, directories and devices are skipped (what tarfile's ``data``
    filter refuses), and so are names that leave the tree. Damage is an error, not a silent
    stop: bytes after the last member that are not the closing zero blocks mean a bad header
    (Python's tar reader stops at one without a word). Raises :class:`SnapshotError`, one line
    naming ``label`` and the problem.
    """
    raw = _inflate(data, label)
    out: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tf:
            members = list(check_members(label, tf))  # every header, before any file is read
            for m in members:
                rel = _inside(m.name)
                f = tf.extractfile(m) if m.isreg() and rel is not None else None
                if f is not None:
                    out[rel] = f.read()
            end = tf.offset
    except (tarfile.TarError, OSError, EOFError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SnapshotError(f"snapshot {label}: not a readable .tar.gz archive ({reason})") from None
    if raw[end:].strip(b"\0"):
        raise SnapshotError(f"snapshot {label}: not a readable .tar.gz archive (bad header at byte {end})")
    if not out:
        raise SnapshotError(f"snapshot {label}: not a readable .tar.gz archive (no file in the archive)")
    return out


#: Archives of up to this many bytes unpacked are read into memory by :func:`plain_archive`
#: (a real snapshot unpacks to 5-30 MB); larger ones are unpacked on disk.
IN_MEMORY_BYTES = 32 << 20


def _inflated(data: bytes, cap: int) -> bytes | None:
    """The tar bytes of ``data`` (one gzip member, or plain tar bytes), or None when they pass
    ``cap`` or the stream is damaged, truncated or followed by more data."""
    if data[:2] != b"\x1f\x8b":
        return data if len(data) <= cap else None
    d = zlib.decompressobj(wbits=31)
    try:
        raw = d.decompress(data, cap + 1)
    except zlib.error:
        return None
    return raw if len(raw) <= cap and d.eof and not d.unused_data else None


def _plain_tree(raw: bytes, label: str) -> tuple[dict[str, bytes], set[str]] | None:
    """(files, folders) by their path inside the archive, when every member is a regular file or a
    folder inside the tree, named once, and the tar ends cleanly; else None. The caps of
    :func:`~infergap.snapshot.core.check_members` are held on every header first."""
    files: dict[str, bytes] = {}
    dirs: set[str] = set()
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tf:
        for m in list(check_members(label, tf)):
            rel = _inside(m.name)
            if rel is None or not (m.isreg() or m.isdir()) or rel in files or rel in dirs:
                return None
            if m.isdir():
                dirs.add(rel)
                continue
            f = tf.extractfile(m)
            files[rel] = f.read() if f is not None else b""
        end = tf.offset
    return None if raw[end:].strip(b"\0") or not files else (files, dirs)


def plain_archive(path: str) -> MemorySnapshot | None:
    """The snapshot archive ``path`` read into memory when the reader on disk
    (:class:`~infergap.snapshot.core.ArchiveSnapshot`) would see the same tree: gzip'd (one
    member) or plain tar, at most :data:`IN_MEMORY_BYTES` unpacked, only regular files and folders
    inside the tree, no ``evidence/`` folder (pasted files are read by path), a layout part at the
    top, no damage. Anything else is None, and the caller unpacks it on disk, which then reports
    the problem in its own words. Unpacking about 250 small files into a temporary directory costs
    more than the audit of them (``benchmarks/start_speed.py``); reading them here costs a tenth."""
    try:
        if os.stat(path).st_size > IN_MEMORY_BYTES:
            return None
        with open(path, "rb") as f:
            raw = _inflated(f.read(), IN_MEMORY_BYTES)
        tree = _plain_tree(raw, path) if raw is not None else None
    except (SnapshotError, tarfile.TarError, OSError, EOFError):
        return None
    if tree is None:
        return None
    files, dirs = _one_top(*tree)
    if not any(n.split("/", 1)[0] in LAYOUT_PARTS for n in files) or any(n.split("/", 1)[0] == "evidence" for n in (*files, *dirs)):
        return None
    snap = MemorySnapshot(members=files, dirs=dirs, label=path)
    snap.kind = "archive"
    return snap


def _one_top(members: dict[str, bytes], dirs: set[str] | None = None) -> Any:
    """``members`` with a single top directory taken off (``collect`` archives one directory);
    with ``dirs`` (folder paths), the pair (members, folders) with it taken off both."""
    tops = {n.split("/", 1)[0] for n in members}
    if len(tops) != 1 or any(n.startswith("files/") or n == "meta.json" for n in members):
        return members if dirs is None else (members, dirs)
    prefix = next(iter(tops)) + "/"
    kept = {n[len(prefix):]: b for n, b in members.items() if n.startswith(prefix)}
    return kept if dirs is None else (kept, {d[len(prefix):] for d in dirs if d.startswith(prefix)})


def _cmd_members(cmds: Mapping[str, str | CmdResult]) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Snapshot files (``cmds/<name>.out|.err|.rc``) and ``meta.json`` sources of command results,
    as ``infergap collect`` writes them; a plain string is a stdout with exit status 0."""
    out: dict[str, bytes] = {}
    sources: dict[str, Any] = {}
    for name, c in cmds.items():
        r = c if isinstance(c, CmdResult) else CmdResult(name=name, stdout=c, rc=0)
        if r.rc is not None or r.stdout:
            out[f"cmds/{name}.out"] = r.stdout.encode()
        out[f"cmds/{name}.err"] = r.stderr.encode()
        if r.rc is not None:
            out[f"cmds/{name}.rc"] = f"{r.rc}\n".encode()
        if r.error or r.duration_s:
            sources[f"cmds/{name}"] = {"error": r.error, "duration_s": r.duration_s}
    return out, sources


class MemorySnapshot(DirSnapshot):
    """A snapshot held in memory: host files, command results and probe documents.

    ``files``: host path (``/proc/cmdline``) → text or bytes; directories exist above every file.
    ``cmds``: command name → stdout (exit status 0) or a :class:`CmdResult`. ``probes``: probe
    name → its JSON document. ``members``: further snapshot files by their path in the layout
    (``meta.json``, ``evidence/…``), as :meth:`from_archive` passes them. Every read goes through
    the directory reader's rules, on these bytes instead of a directory.
    """

    kind = "memory"

    def __init__(self, files: Mapping[str, str | bytes] | None = None, cmds: Mapping[str, str | CmdResult] | None = None,
                 probes: Mapping[str, Any] | None = None, *, members: Mapping[str, bytes] | None = None,
                 dirs: Iterable[str] = (), label: str = "in-memory snapshot") -> None:
        blobs = dict(members or {})
        for path, text in (files or {}).items():
            blobs["files/" + path.strip("/")] = text.encode() if isinstance(text, str) else text
        cmd_files, sources = _cmd_members(cmds or {})
        blobs.update(cmd_files)
        blobs.update({f"probes/{n}.json": json.dumps(doc).encode() for n, doc in (probes or {}).items()})
        if sources:
            blobs["meta.json"] = json.dumps({"sources": sources}).encode()
        self.label = label
        self._meta = None
        self._has_links = False
        self._blobs = blobs
        self._dirs: dict[str, set[str]] = {}
        for n in blobs:
            self._add_path(n)
        for d in dirs:  # folders of an archive, empty ones too: they exist, as on disk
            self._add_path(d)
            self._dirs.setdefault(d, set())
        self.root = Path("/")
        self._files = "/files"
        self._real_root = "/"

    def _add_path(self, name: str) -> None:
        """List ``name`` (a path in the layout) in every folder above it."""
        parts = name.split("/")
        for i in range(len(parts)):
            self._dirs.setdefault("/".join(parts[:i]), set()).add(parts[i])

    @classmethod
    def from_archive(cls, data: bytes, label: str) -> MemorySnapshot:
        """The snapshot in the bytes of a ``.tar.gz`` (or plain ``.tar``) of one snapshot directory,
        read by :func:`read_archive` (its caps and errors; ``label`` names the archive in them)."""
        snap = cls(members=_one_top(read_archive(data, label)), label=label)
        snap.kind = "archive"
        return snap

    @classmethod
    def from_archive_file(cls, path: str) -> MemorySnapshot:
        """The snapshot in the archive file ``path``: held to the caps by
        :func:`~infergap.snapshot.core.check_archive` streaming over the file (nothing kept), then
        read whole into memory as :meth:`from_archive` reads bytes."""
        check_archive(path, path)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise SnapshotError(f"snapshot {path}: cannot read ({e.strerror or e})") from None
        snap = cls(members=_one_top(read_archive(data, path)), label=path)
        snap.kind = "archive"
        return snap

    def _key(self, p: str | os.PathLike[str]) -> str:
        return posixpath.normpath(os.fspath(p)).lstrip("/")

    def _read_file(self, p: str | os.PathLike[str], limit: int = MAX_FILE_BYTES) -> bytes | None:
        data = self._blobs.get(self._key(p))
        return None if data is None else data[:limit]

    def _listdir(self, path: str) -> list[str] | None:
        key = self._key(self._host(path))
        names = self._dirs.get("" if key == "." else key)
        return sorted(names) if names is not None else None

    def evidence_files(self) -> list[Path]:
        """Loose evidence files are not read from memory (a node's archive, a test's host)."""
        return []

    def refused_evidence(self) -> list[tuple[Path, str]]:
        """Nothing is refused: :meth:`evidence_files` reads none."""
        return []

    def close(self) -> None:
        self._blobs = {}
        self._dirs = {}
