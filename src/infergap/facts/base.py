"""What every domain of the facts layer shares: the snapshot, the memo cache, the parse problems,
and the few accessors that say where a value was read (a finding's evidence source)."""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from infergap.snapshot.core import Snapshot

T = TypeVar("T")


def memo(fn: Callable[..., T]) -> Callable[..., T]:
    """Memoize a zero-argument method per instance, computing it once even under concurrency."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(self: "FactsBase") -> T:
        with self._locks_guard:
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:
            if name not in self._cache:
                self._cache[name] = fn(self)
            return self._cache[name]

    return wrapper


@dataclass
class Value:
    """A value with the snapshot source it was read from (for a finding's evidence)."""

    value: str
    source: str


class FactsBase:
    """The snapshot, the memo cache and :attr:`problems` (source -> one-line message of a source
    that was present but could not be parsed). Domain mixins (:mod:`infergap.facts.pci`, ``gpu``,
    ``host``, ``container``, ``cpu``) add the accessors; :class:`infergap.facts.Facts` joins them."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self._cache: dict[str, Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self.problems: dict[str, str] = {}

    def value(self, path: str) -> Value | None:
        """The stripped text of a host file with its source, or None."""
        v = self.snap.read_value(path)
        return None if v is None else Value(v, self.snap.source_of(path))

    def src(self, name: str) -> str:
        """Evidence source label of command ``name``: ``cmds/<name>.out``, or the pasted file it
        came from when the snapshot answers it from evidence."""
        r = self.snap.cmd(name)
        return r.source if r is not None else f"cmds/{name}.out"

    def cmd_ok(self, name: str) -> Any:
        """The CmdResult of a command that ran successfully, else None."""
        r = self.snap.cmd(name)
        return r if r is not None and r.ok and r.stdout.strip() else None

    def command(self, name: str) -> Any:
        """The record of command ``name`` (a :class:`~infergap.snapshot.core.CmdResult`, ran or
        failed, with its source), or None when the snapshot has none: for what ran and where it
        was read, not for parsing its output (an accessor of the command's domain does that)."""
        return self.snap.cmd(name)

    def unreadable_under(self, prefix: str) -> list[tuple[str, str]]:
        """(path, reason) of the files under ``prefix`` that exist but could not be read."""
        return self.snap.unreadable_under(prefix)

    def listing(self, path: str) -> list[str] | None:
        """The names in directory ``path`` of the host, or None when it was not captured."""
        return self.snap.listdir(path)

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists on the host (as captured)."""
        return self.snap.exists(path)

    def excerpt(self, path: str, limit: int = 200) -> str | None:
        """The first ``limit`` characters of a host file (stripped), to cite as evidence, or None."""
        t = self.snap.read(path)
        return None if t is None else t.strip()[:limit]

    def sysfs_complete(self) -> bool:
        """Whether an absent sysfs path means absent on the host: a live host, or a snapshot written
        by ``infergap collect`` (which globs every sysfs path it reads, see ``snapshot/sources.py``)."""
        snap = getattr(self.snap, "base", None) or self.snap
        if getattr(snap, "kind", None) == "live":
            return True
        m = snap.meta() if hasattr(snap, "meta") else {}
        return str(m.get("schema", "")).startswith("infergap.snapshot") and "files" in (m.get("sources") or {})
