"""A snapshot held in memory: the ``.tar.gz`` bytes a node returned, read without touching disk.

A fleet audit opens thousands of snapshots; unpacking each into a temporary directory (what
:class:`~infergap.snapshot.core.ArchiveSnapshot` does for one) costs more than auditing it. This
class reads the archive's regular files into a dict once and answers the same read API.
"""

from __future__ import annotations

import os
import posixpath
import tarfile
import zlib
from pathlib import Path

from infergap.snapshot.core import ARCHIVE_MAX_BYTES, MAX_FILE_BYTES, DirSnapshot, SnapshotError, check_archive

#: Unpacked size above which a snapshot archive is refused (a real one is a few MB): the cap of
#: ``audit --snapshot``.
MAX_SNAPSHOT_BYTES = ARCHIVE_MAX_BYTES


def _field(header: bytes, off: int, size: int) -> bytes:
    return header[off:off + size].split(b"\0", 1)[0]


def _octal(header: bytes, off: int, size: int) -> int:
    raw = header[off:off + size]
    if raw[:1] == b"\x80":  # GNU base-256 size
        return int.from_bytes(raw[1:], "big")
    text = raw.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def read_tar(data: bytes) -> dict[str, bytes]:
    """Regular files of a tar archive (gzip-compressed or not) as ``{relative path: bytes}``.

    Reads the ustar headers directly: :mod:`tarfile` builds an object per member and costs more
    than the audit for a snapshot of a few hundred small files. Handles ustar prefixes, POSIX pax
    ``path``/``size`` records and GNU long names; skips links, directories and devices, and names
    that leave the tree. Raises ValueError for a damaged archive and
    :class:`SnapshotError` above :data:`MAX_SNAPSHOT_BYTES`.
    """
    if data[:2] == b"\x1f\x8b":
        d = zlib.decompressobj(wbits=31)
        raw = d.decompress(data, MAX_SNAPSHOT_BYTES + 1)
        if len(raw) > MAX_SNAPSHOT_BYTES:
            raise SnapshotError(f"unpacks to more than {MAX_SNAPSHOT_BYTES >> 20} MiB")
        if not d.eof:
            raise ValueError("the compressed stream is truncated")
    else:
        raw = data
    out: dict[str, bytes] = {}
    pos, n = 0, len(raw)
    if n < 512:
        raise ValueError("not a tar archive (shorter than one header)")
    long_name: str | None = None
    pax: dict[str, str] = {}
    while pos + 512 <= n:
        h = raw[pos:pos + 512]
        if h == b"\0" * 512:
            break
        stored = _octal(h, 148, 8)
        if stored != sum(h[:148]) + 256 + sum(h[156:]):
            raise ValueError(f"bad header checksum at byte {pos}")
        size = _octal(h, 124, 12)
        kind = h[156:157]
        name = _field(h, 0, 100).decode("utf-8", "replace")
        if h[257:262] == b"ustar":
            prefix = _field(h, 345, 155).decode("utf-8", "replace")
            if prefix:
                name = f"{prefix}/{name}"
        body = raw[pos + 512:pos + 512 + size]
        if len(body) < size:
            raise ValueError(f"member {name} is truncated")
        pos += 512 + (size + 511) // 512 * 512
        if kind == b"L":  # GNU long name for the next member
            long_name = body.split(b"\0", 1)[0].decode("utf-8", "replace")
            continue
        if kind in (b"x", b"g"):  # pax extended header: "<len> key=value\n" records
            if kind == b"x":
                for rec in body.decode("utf-8", "replace").splitlines():
                    k, _, v = rec.partition(" ")[2].partition("=")
                    pax[k] = v
            continue
        if long_name is not None:
            name, long_name = long_name, None
        if "path" in pax:
            name = pax["path"]
        if "size" in pax and kind in (b"0", b"\0"):
            # the body was read with the header's size; a pax size means it was wrong
            raise ValueError(f"member {name}: pax size records are not supported")
        pax = {}
        if kind not in (b"0", b"\0"):
            continue
        rel = posixpath.normpath(name.lstrip("/"))
        if rel == "." or rel == ".." or rel.startswith("../"):
            continue
        out[rel] = body
    if not out:
        raise ValueError("no file in the archive")
    return out


class MemorySnapshot(DirSnapshot):
    """A snapshot from the bytes of a ``.tar.gz`` (or a plain ``.tar``) of one snapshot directory.

    Raises :class:`SnapshotError` (one line, naming ``label``) for bytes that are not a readable
    tar archive or unpack to more than :data:`MAX_SNAPSHOT_BYTES`. Links and device entries in the
    archive are ignored, like tarfile's ``data`` filter would refuse them.
    """

    kind = "archive"

    def __init__(self, data: bytes, label: str) -> None:
        self.label = label
        self._meta = None
        self._has_links = False
        self._blobs: dict[str, bytes] = {}
        self._dirs: dict[str, set[str]] = {}
        check_archive(data, label)  # members, one member's bytes, all bytes: before any is read
        try:
            self._blobs = read_tar(data)
        except SnapshotError as e:
            raise SnapshotError(f"snapshot {label}: {e}") from None
        except (tarfile.TarError, OSError, EOFError, zlib.error, ValueError) as e:
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise SnapshotError(f"snapshot {label}: not a readable .tar.gz archive ({reason})") from None
        # A tar of one directory: use that directory as the root.
        tops = {n.split("/", 1)[0] for n in self._blobs}
        prefix = ""
        if len(tops) == 1 and not any(n.startswith("files/") or n == "meta.json" for n in self._blobs):
            prefix = next(iter(tops)) + "/"
        if prefix:
            self._blobs = {n[len(prefix):]: b for n, b in self._blobs.items() if n.startswith(prefix)}
        for n in self._blobs:
            parts = n.split("/")
            for i in range(len(parts)):
                self._dirs.setdefault("/".join(parts[:i]), set()).add(parts[i])
        self.root = Path("/")
        self._files = "/files"
        self._real_root = "/"

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
        """Loose evidence files are not read from a node's archive."""
        return []

    def close(self) -> None:
        self._blobs = {}
        self._dirs = {}
