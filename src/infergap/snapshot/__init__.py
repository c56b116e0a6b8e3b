"""Snapshots: one read API over a live host, a snapshot directory or a ``.tar.gz`` archive."""

from infergap.snapshot.core import (
    ArchiveSnapshot,
    CmdResult,
    DirSnapshot,
    LiveSnapshot,
    Snapshot,
    SnapshotError,
)
from infergap.snapshot.opener import open_snapshot

__all__ = ["ArchiveSnapshot", "CmdResult", "DirSnapshot", "LiveSnapshot", "Snapshot", "SnapshotError", "open_snapshot"]
