"""``open_snapshot``: the one door from a path (or none) to a :class:`~infergap.snapshot.core.Snapshot`.

A directory is read in place (:class:`~infergap.snapshot.core.DirSnapshot`); an archive is read
into memory when that reads the same tree (:func:`infergap.snapshot.memory.plain_archive`), else
unpacked into a private temporary directory (:class:`~infergap.snapshot.core.ArchiveSnapshot`);
no path is this host (:class:`~infergap.snapshot.core.LiveSnapshot`).
"""

from __future__ import annotations

import os
from pathlib import Path

from infergap.guard import os_reason
from infergap.snapshot.core import ArchiveSnapshot, DirSnapshot, LiveSnapshot, Snapshot, SnapshotError
from infergap.snapshot.memory import plain_archive


def open_snapshot(path: str | os.PathLike[str] | None, active: bool = False) -> Snapshot:
    """Open ``path`` as a snapshot (directory or ``.tar.gz``), or the live host when None
    (``active``: also run the GPU measurements of :mod:`infergap.snapshot.active`).

    Raises :class:`SnapshotError` with a one-line message for a missing path, a file that is not
    a tar archive, or an unreadable directory.
    """
    if path is None:
        return LiveSnapshot(active=active)
    p = Path(path)
    try:
        os.stat(p)
    except FileNotFoundError:
        raise SnapshotError(f"snapshot {path}: no such file or directory") from None
    except OSError as e:
        raise SnapshotError(f"snapshot {path}: cannot read ({os_reason(e)})") from None
    if p.is_dir():
        try:
            os.listdir(p)
        except PermissionError:
            raise SnapshotError(f"snapshot {path}: permission denied") from None
        return DirSnapshot(p)
    return plain_archive(str(p)) or ArchiveSnapshot(p)
