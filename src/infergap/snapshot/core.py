"""One read API over a live host, a snapshot directory and a ``.tar.gz`` snapshot.

Paths are absolute host paths (``/proc/sys/vm/swappiness``); the snapshot maps them to
``files/<path>``. Two virtual file kinds keep live and captured hosts identical:
``<pci function>/config.hex`` (PCI config space as ``od -An -tx1 -v`` text) and ``<name>.link``
(the target of a symlink). Commands are read by name (:data:`infergap.snapshot.sources.COMMANDS`);
on a live host they run on first use, in parallel, each with its timeout.
"""

from __future__ import annotations

import errno
import fnmatch
import io
import logging
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import threading
import time
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from infergap.errors import SnapshotError, UserError
from infergap.guard import loads, validate
from infergap.snapshot.sources import COMMANDS, ENV_PREFIXES, ENV_SECRET_WORDS

log = logging.getLogger(__name__)

#: Bytes read at most from one file (a runaway sysfs/procfs file must not exhaust memory).
MAX_FILE_BYTES = 16 * 1024 * 1024


@dataclass
class CmdResult:
    """Output of a named command: stdout/stderr text, exit status (None when it never ran),
    ``error`` (why it did not run or was cut: "not found", "timed out after 10 s"), duration."""

    name: str
    stdout: str = ""
    stderr: str = ""
    rc: int | None = None
    error: str | None = None
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the command ran and exited 0."""
        return self.rc == 0 and self.error is None

    @property
    def source(self) -> str:
        """The snapshot path of its stdout, used as evidence source."""
        return f"cmds/{self.name}.out"


def read_limited(path: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """Read at most ``limit`` bytes in 64 KiB chunks (procfs/sysctl files refuse one huge read
    with ENOMEM, and sysfs attributes report a size of 4096 whatever they hold)."""
    chunks, total = [], 0
    with open(path, "rb", buffering=0) as f:
        while total < limit:
            b = f.read(min(65536, limit - total))
            if not b:
                break
            chunks.append(b)
            total += len(b)
    return b"".join(chunks)


def od_hex(data: bytes) -> str:
    """Format bytes like ``od -An -tx1 -v``: 16 bytes a line, each `` xx``."""
    lines = []
    for i in range(0, len(data), 16):
        lines.append("".join(f" {b:02x}" for b in data[i : i + 16]))
    return "\n".join(lines) + ("\n" if lines else "")


def filter_env(env: dict[str, str]) -> dict[str, str]:
    """Keep only GPU/CUDA/NCCL variables (prefixes in :data:`ENV_PREFIXES`), minus secret-looking names."""
    return {
        k: v
        for k, v in env.items()
        if k.startswith(ENV_PREFIXES) and not any(w in k.upper() for w in ENV_SECRET_WORDS)
    }


class Snapshot:
    """Abstract read API. Subclasses implement ``_read_bytes``, ``_listdir``, ``_cmd``, ``_probe``."""

    kind: str = "abstract"
    label: str = ""
    #: Seconds spent opening the snapshot and reading the evidence given with it before the audit
    #: (set by :func:`infergap.evidence.overlay.open_with_evidence`; None: nothing read up front,
    #: as on a live host, whose files are read while the investigators run).
    read_s: float | None = None
    #: Paths that exist but could not be read (permission denied, I/O error) → the reason. Such a
    #: path is unknown, not absent: see :meth:`unreadable_under`.
    unreadable: dict[str, str]

    def note_unreadable(self, path: str, e: OSError) -> None:
        """Remember that ``path`` exists but could not be read, and why."""
        if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ENXIO):
            return
        if not hasattr(self, "unreadable"):
            self.unreadable = {}
        self.unreadable[path] = "permission denied" if e.errno in (errno.EACCES, errno.EPERM) else (e.strerror or str(e))

    def unreadable_under(self, prefix: str) -> list[tuple[str, str]]:
        """(path, reason) of every path under ``prefix`` that exists but could not be read so far."""
        bad = dict(getattr(self, "unreadable", None) or {})
        base = getattr(self, "base", None)  # an evidence overlay reads through its base snapshot
        if isinstance(base, Snapshot):
            bad.update(getattr(base, "unreadable", None) or {})
        return sorted((p, r) for p, r in bad.items() if p == prefix or p.startswith(prefix.rstrip("/") + "/"))

    # -- files -------------------------------------------------------------------------------
    def read_bytes(self, path: str) -> bytes | None:
        """The bytes of host file ``path`` (absolute), or None when absent or unreadable (an
        unreadable path is remembered in :attr:`unreadable` with the reason)."""
        try:
            return self._read_bytes(path)
        except OSError as e:
            log.debug("read %s: %s", path, e)
            self.note_unreadable(path, e)
            return None
        except ValueError as e:
            log.debug("read %s: %s", path, e)
            return None

    def read(self, path: str) -> str | None:
        """The text of host file ``path`` (UTF-8, undecodable bytes replaced), or None."""
        data = self.read_bytes(path)
        if data is None:
            return None
        return data.decode("utf-8", errors="replace")

    def read_value(self, path: str) -> str | None:
        """The stripped one-line text of a sysfs/procfs value file, or None."""
        text = self.read(path)
        return None if text is None else text.strip()

    def exists(self, path: str) -> bool:
        """Whether host file or directory ``path`` is present in this snapshot."""
        return self.read_bytes(path) is not None or self.listdir(path) is not None

    def listdir(self, path: str) -> list[str] | None:
        """Sorted entry names of host directory ``path``, or None when it is absent."""
        try:
            return self._listdir(path)
        except OSError as e:
            self.note_unreadable(path, e)
            return None

    def glob(self, pattern: str) -> list[str]:
        """Host paths matching ``pattern`` (``*`` and ``?`` within one path component), sorted."""
        parts = [p for p in pattern.split("/") if p]
        found = [""]
        for i, part in enumerate(parts):
            nxt = []
            for base in found:
                if any(ch in part for ch in "*?["):
                    names = self.listdir(base or "/") or []
                    nxt.extend(f"{base}/{n}" for n in names if fnmatch.fnmatchcase(n, part))
                else:
                    nxt.append(f"{base}/{part}")
            found = nxt
        return sorted(p for p in found if self.exists(p))

    def source_of(self, path: str) -> str:
        """The evidence source label of a host path (``files/proc/...``)."""
        return "files" + path

    # -- commands and probes -----------------------------------------------------------------
    def cmd(self, name: str) -> CmdResult | None:
        """The result of named command ``name``, or None when this snapshot has no record of it."""
        return self._cmd(name)

    def probe(self, name: str) -> Any | None:
        """The JSON of in-process probe ``name`` (``probes/<name>.json``), or None."""
        return self._probe(name)

    def meta(self) -> dict[str, Any]:
        """The snapshot's ``meta.json`` (empty when absent)."""
        return {}

    def evidence_parts(self, kind: str) -> list[Any]:
        """Recognised evidence of ``kind`` (``nccl_log``, ``sglang_log``, ``vllm_log``, ``dmesg`` …):
        a list of :class:`infergap.evidence.recognize.EvidencePart`. A plain snapshot has none;
        :class:`infergap.evidence.overlay.EvidenceSnapshot` overrides this."""
        return []

    # -- to be implemented -------------------------------------------------------------------
    def _read_bytes(self, path: str) -> bytes | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _listdir(self, path: str) -> list[str] | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _cmd(self, name: str) -> CmdResult | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _probe(self, name: str) -> Any | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:
        """Release temporary files (archives) and worker threads (live)."""

    def __enter__(self) -> "Snapshot":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: The parts a snapshot directory is made of (``infergap collect`` writes them); a directory
#: holding none of them is some other folder, not a snapshot.
LAYOUT_PARTS = ("meta.json", "files", "cmds", "probes", "evidence")


def _check_layout(root: Path, label: str, archive: bool) -> None:
    """Raise :class:`SnapshotError` when ``root`` holds entries but none of :data:`LAYOUT_PARTS`
    (a folder of logs, a home directory, an unrelated tarball), naming ``label`` and what was
    expected. An empty directory stays a valid, empty snapshot (everything reads as absent)."""
    try:
        names = os.listdir(root)
    except OSError:
        return  # unreadable: reported per file as unknown, with the reason
    if not names or any(n in LAYOUT_PARTS for n in names):
        return
    what = "the archive holds" if archive else "the directory holds"
    raise SnapshotError(f"snapshot {label}: not an infergap snapshot ({what} none of meta.json, files/, cmds/, "
                        f"probes/, evidence/); write one with 'infergap collect', or read logs with --evidence")


def _holds_symlink(top: str) -> bool:
    """Whether the tree under ``top`` holds a symlink (file or folder; symlinked folders are not
    entered). One ``scandir`` per folder: the entry types come with the listing, so a snapshot of
    thousands of files costs no system call per file. An unreadable folder is skipped (its files
    are reported unreadable when read)."""
    todo = [top]
    while todo:
        try:
            with os.scandir(todo.pop()) as it:
                for e in it:
                    if e.is_symlink():
                        return True
                    if e.is_dir(follow_symlinks=False):
                        todo.append(e.path)
        except OSError:
            continue
    return False


class DirSnapshot(Snapshot):
    """A snapshot directory in the layout ``files/``, ``cmds/``, ``probes/``, ``meta.json``.

    Raises :class:`SnapshotError` when ``root`` does not exist, is not a directory, or holds
    entries but none of the layout's parts (:func:`_check_layout`); an empty directory is a
    valid, empty snapshot (everything reads as absent).
    """

    kind = "directory"

    def __init__(self, root: str | os.PathLike[str], label: str | None = None) -> None:
        self.root = Path(root)
        if not self.root.exists():
            raise SnapshotError(f"snapshot {root}: no such file or directory")
        if not self.root.is_dir():
            raise SnapshotError(f"snapshot {root}: not a directory or .tar.gz archive")
        self.label = label or str(root)
        _check_layout(self.root, self.label, archive=label is not None)
        self._meta: dict[str, Any] | None = None
        self._files = str(self.root / "files")
        self._real_root = os.path.realpath(self.root)
        # Snapshot files are plain files (symlinks are stored as ``.link`` text). A tree that holds
        # real symlinks anyway gets every read checked against the root, so that a link cannot
        # make the audit read (and report) the machine it runs on; a normal tree skips the check.
        self._has_links = _holds_symlink(str(self.root))

    def _host(self, path: str) -> str:
        # String normalisation, not Path.resolve(): resolving costs syscalls per component and
        # an audit reads thousands of files; symlinks are handled by _inside().
        rel = os.path.normpath(path.lstrip("/"))
        if rel == ".." or rel.startswith("../") or os.path.isabs(rel):
            raise ValueError(f"path escapes snapshot: {path}")
        return os.path.join(self._files, rel) if rel != "." else self._files

    def _inside(self, p: str) -> bool:
        if not self._has_links:
            return True
        real = os.path.realpath(p)
        return real == self._real_root or real.startswith(self._real_root + os.sep)

    def _read_file(self, p: str | os.PathLike[str], limit: int = MAX_FILE_BYTES) -> bytes | None:
        """Bytes of a regular file inside the snapshot (at most ``limit``), else None: absent,
        a directory, a FIFO or device (opened non-blocking, never read), or a link out of the tree.
        This is the one reader of snapshot contents; a file that exists but cannot be read is
        remembered with the reason (:meth:`Snapshot.note_unreadable`)."""
        p = os.fspath(p)
        if not self._inside(p):
            log.debug("snapshot path %s leads outside the snapshot: ignored", p)
            return None
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:  # the common case (an audit asks for many optional files): no name to work out
            return None
        except OSError as e:
            self.note_unreadable(self._name_of(p), e)
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            chunks, total = [], 0
            while total < limit:
                b = os.read(fd, min(1 << 20, limit - total))
                if not b:
                    break
                chunks.append(b)
                total += len(b)
                if total == st.st_size and len(b) < (1 << 20):  # a whole small file in one read: no second read to see its end
                    break
            return b"".join(chunks)
        except OSError as e:
            self.note_unreadable(self._name_of(p), e)
            return None
        finally:
            os.close(fd)

    def _read_bytes(self, path: str) -> bytes | None:
        return self._read_file(self._host(path))

    def _name_of(self, p: str) -> str:
        """The host path of a file under ``files/`` (``/proc/cpuinfo``), else its snapshot path."""
        if p.startswith(self._files + os.sep):
            return "/" + os.path.relpath(p, self._files)
        return os.path.relpath(p, self.root)

    def _listdir(self, path: str) -> list[str] | None:
        p = self._host(path)
        if not self._inside(p):
            return None
        try:
            return sorted(os.listdir(p))
        except OSError as e:
            self.note_unreadable(path, e)
            return None

    def _cmd(self, name: str) -> CmdResult | None:
        base = self.root / "cmds"
        out = self._read_file(base / f"{name}.out")
        err = self._read_file(base / f"{name}.err")
        rc_b = self._read_file(base / f"{name}.rc", 64)
        if out is None and err is None and rc_b is None:
            why = (getattr(self, "unreadable", None) or {}).get(f"cmds/{name}.out")
            return CmdResult(name=name, error=f"cmds/{name}.out: {why}") if why else None
        res = CmdResult(name=name)
        if out is not None:
            res.stdout = out.decode("utf-8", errors="replace")
        if err is not None:
            res.stderr = err.decode("utf-8", errors="replace")
        if rc_b is not None:
            try:
                res.rc = int(rc_b.decode("ascii", errors="replace").strip())
            except ValueError:
                res.error = f"unreadable exit status in cmds/{name}.rc"
        else:
            res.rc = 0 if out is not None else None  # a captured output without .rc: assume success
        info = (self.meta().get("sources") or {}).get(f"cmds/{name}")
        info = info if isinstance(info, dict) else {}
        if info.get("error"):
            res.error = str(info["error"])
        elif res.rc == 127:
            res.error = "command not found"
        elif res.rc == 124:
            res.error = "timed out"
        try:
            res.duration_s = float(info.get("duration_s", 0.0) or 0.0)
        except (TypeError, ValueError):
            res.duration_s = 0.0
        return res

    def _probe(self, name: str) -> Any | None:
        data = self._read_file(self.root / "probes" / f"{name}.json")
        if data is None:
            return None
        from infergap.snapshot.probes import PROBE_MODELS

        source = f"probes/{name}.json"
        try:
            doc = loads(data.decode("utf-8", errors="replace"), source)
            model = PROBE_MODELS.get(name)
            if model is None:
                return doc
            return validate(model, doc, source).model_dump()
        except UserError as e:  # unusable: unknown, with the file and the field named
            return {"available": False, "error": str(e), "invalid": True}

    def meta(self) -> dict[str, Any]:
        if self._meta is None:
            data = self._read_file(self.root / "meta.json")
            from infergap.errors import UserError
            from infergap.guard import loads

            try:
                m = loads(data.decode("utf-8", errors="replace"), "meta.json") if data is not None else {}
            except UserError as e:
                log.warning("snapshot %s: %s", self.label, e)
                m = {}
            m = m if isinstance(m, dict) else {}
            if not isinstance(m.get("sources"), dict):
                m["sources"] = {}
            self._meta = m
        return self._meta

    def evidence_files(self) -> list[Path]:
        """Regular files dropped into the snapshot's ``evidence/`` folder (pasted outputs and logs).

        The folder is held to the same containment rule as ``files/``: a symlink (the folder
        itself, a subfolder or a file) that leads out of the snapshot is not followed; it is listed
        by :meth:`refused_evidence` with the reason instead."""
        d = self.root / "evidence"
        self._refused: list[tuple[Path, str]] = []
        if not os.path.lexists(d):
            return []
        if not self._contained(str(d)) or not d.is_dir():
            if os.path.islink(d):
                self._refused.append((d, "a symlink leading out of the snapshot: not followed"))
            return []
        found: list[Path] = []
        for top, dirs, files in os.walk(d):  # does not descend into symlinked folders
            for n in list(dirs):
                full = os.path.join(top, n)
                if os.path.islink(full):
                    self._refused.append((Path(full), "a symlinked folder: not followed"))
            for n in files:
                full = os.path.join(top, n)
                if os.path.islink(full) and not self._contained(full):
                    self._refused.append((Path(full), "a symlink leading out of the snapshot: not followed"))
                elif os.path.isfile(full):
                    found.append(Path(full))
        return sorted(found)

    def refused_evidence(self) -> list[tuple[Path, str]]:
        """Entries of ``evidence/`` that :meth:`evidence_files` did not follow, with the reason."""
        if not hasattr(self, "_refused"):
            self.evidence_files()
        return list(self._refused)

    def _contained(self, p: str) -> bool:
        real = os.path.realpath(p)
        return real == self._real_root or real.startswith(self._real_root + os.sep)


def _check_compressed_stream(path: str | os.PathLike[str]) -> None:
    """One pass over a gzip-compressed archive before anything is unpacked: the member headers
    are read (not their files) and held to the caps (:data:`ARCHIVE_MAX_MEMBERS`, bytes of one
    member, bytes in all), so that a bomb is refused by its headers in about a second; then the
    compressed stream is read to its end, so that damage is an error (Python's tar reader stops
    silently at the first bad header after the first member, which would audit a fraction of the
    snapshot). Raises :class:`SnapshotError` naming the file."""
    import gzip

    try:
        with open(path, "rb") as f:
            if f.read(2) != b"\x1f\x8b":
                return
        with gzip.open(path, "rb") as g:
            try:
                with tarfile.open(fileobj=g, mode="r|") as tf:
                    for _m in check_members(path, tf):
                        pass
            except tarfile.TarError:
                pass  # not a tar inside: reported by the unpacking step with its own reason
            # the rest of the stream (tar padding), at most what a damaged tail could hide
            left = 64 << 20
            while left > 0:
                b = g.read(1 << 20)
                if not b:
                    break
                left -= len(b)
    except (OSError, EOFError, zlib.error) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SnapshotError(f"snapshot {path}: the archive is damaged ({reason})") from None


def check_archive(source: str | os.PathLike[str] | bytes, label: str) -> None:
    """Hold an archive — a file, or the bytes a fleet node sent — to the caps ``audit
    --snapshot`` applies (:data:`ARCHIVE_MAX_MEMBERS`, :data:`ARCHIVE_MAX_MEMBER_BYTES`,
    :data:`ARCHIVE_MAX_BYTES`) before anything reads its files: one streaming pass over the
    member headers (gzip inflated in steps, member data skipped, nothing kept), and a plain tar
    larger than the total cap is refused by its size (a sparse file of gigabytes costs nothing
    to make). Raises :class:`SnapshotError` naming ``label`` and the cap; damage is left to the
    reader, which names it."""
    if isinstance(source, (bytes, bytearray)):
        f: Any = io.BytesIO(source)
        size = len(source)
    else:
        try:
            size = os.stat(source).st_size
            f = open(source, "rb")
        except OSError as e:
            raise SnapshotError(f"snapshot {label}: cannot read ({e.strerror or e})") from None
    with f:
        gz = f.read(2) == b"\x1f\x8b"
        f.seek(0)
        if not gz and size > ARCHIVE_MAX_BYTES + 1024 * (ARCHIVE_MAX_MEMBERS + 2):  # data + headers and padding
            raise SnapshotError(f"snapshot {label}: {size} bytes, more than the {ARCHIVE_MAX_BYTES} accepted unpacked")
        try:
            with tarfile.open(fileobj=f, mode="r|gz" if gz else "r|") as tf:
                for _m in check_members(label, tf):
                    pass
        except (tarfile.TarError, OSError, EOFError, zlib.error):
            pass  # not a readable archive: the reader reports it with its own reason


def check_members(path: str | os.PathLike[str], members: Any) -> Any:
    """Yield the members of an archive while holding their headers to the caps; raise
    :class:`SnapshotError` naming the cap that was hit."""
    count = 0
    total = 0
    for m in members:
        count += 1
        if count > ARCHIVE_MAX_MEMBERS:
            raise SnapshotError(f"snapshot {path}: more than {ARCHIVE_MAX_MEMBERS} members; not a snapshot infergap wrote")
        if m.size > ARCHIVE_MAX_MEMBER_BYTES:
            raise SnapshotError(f"snapshot {path}: member {m.name[:100]!r} is {m.size} bytes, more than the "
                                f"{ARCHIVE_MAX_MEMBER_BYTES} accepted for one file")
        total += m.size
        if total > ARCHIVE_MAX_BYTES:
            raise SnapshotError(f"snapshot {path}: unpacks to more than {ARCHIVE_MAX_BYTES} bytes; not unpacked")
        yield m


class ArchiveSnapshot(DirSnapshot):
    """A ``.tar.gz`` of one snapshot directory, unpacked into a private temporary directory.

    Raises :class:`SnapshotError` when the file is not a gzip'd tar archive. Members are unpacked
    with tarfile's ``data`` filter (no absolute paths, links out of the tree or device files).
    """

    kind = "archive"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        _check_compressed_stream(path)
        self._tmp = tempfile.mkdtemp(prefix="infergap-snap-")
        _register_tmp(self._tmp)
        try:
            _extract_capped(path, self._tmp)
        except SnapshotError:
            self.close()
            raise
        except (tarfile.TarError, OSError, EOFError) as e:
            self.close()
            raise SnapshotError(f"snapshot {path}: not a readable .tar.gz archive ({_not_tar_reason(path, e)})") from None
        except BaseException:  # interrupted: leave no unpacked copy behind
            self.close()
            raise
        root = Path(self._tmp)
        entries = [p for p in root.iterdir()]
        # A tar of one directory: use that directory as the snapshot root.
        if len(entries) == 1 and entries[0].is_dir() and not (root / "files").exists():
            root = entries[0]
        super().__init__(root, label=str(path))

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)
        _TEMP_DIRS.discard(self._tmp)


#: Caps on what one snapshot archive may unpack to. A real snapshot holds about 2,000 members and
#: 5-30 MB; the caps are far above that and far below what fills a disk or takes minutes.
ARCHIVE_MAX_MEMBERS = 20_000
ARCHIVE_MAX_BYTES = 512 << 20
ARCHIVE_MAX_MEMBER_BYTES = MAX_FILE_BYTES * 4

#: Temporary directories of open archives, removed at exit even when the process is ended by
#: SIGTERM (see :func:`infergap.cli.main`) or an uncaught exception.
_TEMP_DIRS: set[str] = set()


def _register_tmp(path: str) -> None:
    if not _TEMP_DIRS:
        import atexit

        atexit.register(cleanup_temp_dirs)
    _TEMP_DIRS.add(path)


def cleanup_temp_dirs() -> None:
    """Remove every temporary directory of an archive snapshot still open."""
    for d in list(_TEMP_DIRS):
        shutil.rmtree(d, ignore_errors=True)
        _TEMP_DIRS.discard(d)


class _DataFilter:
    """tarfile's ``data`` filter (:func:`tarfile.data_filter`) for one archive, with the answer
    for its common member worked out without the filter's two ``realpath`` calls (an ``lstat`` per
    path component, deep sysfs paths: a third of the unpacking time).

    While every member so far was a regular file or a folder, the tree being unpacked holds no
    link, so a relative name without a ``..`` component resolves inside the destination as it is
    written: such a regular file or folder is accepted unchanged (the filter's other changes are
    file modes and owners, which extraction with ``set_attrs=False`` does not apply). Any other
    member (a link, a device, an absolute or ``..`` name), and every member after a link, goes
    through :func:`tarfile.data_filter` itself."""

    def __init__(self) -> None:
        self.links_seen = False

    def __call__(self, member: tarfile.TarInfo, dest_path: str) -> tarfile.TarInfo | None:
        plain = member.isreg() or member.isdir()
        if plain and not self.links_seen and member.name and not member.name.startswith("/") \
                and ".." not in member.name.split("/"):
            return member
        if not plain:
            self.links_seen = True
        return tarfile.data_filter(member, dest_path)


def _extract_capped(path: str | os.PathLike[str], dest: str) -> None:
    """Unpack ``path`` into ``dest`` member by member with tarfile's ``data`` filter (no absolute
    paths, links out of the tree or device files) and the caps above (members, bytes of one
    member, bytes in all); raises :class:`SnapshotError` naming the cap that was hit."""
    data_filter = _DataFilter()
    with tarfile.open(path, "r:*") as tf:
        for m in check_members(path, tf):  # checked again: a plain .tar skips the pre-check
            try:
                tf.extract(m, dest, filter=data_filter, set_attrs=False)
            except tarfile.FilterError as e:
                raise SnapshotError(f"snapshot {path}: unsafe member {m.name[:100]!r} ({_filter_reason(e)}); "
                                    "not unpacked") from None
            except OSError as e:
                if e.errno in (28, 122):  # ENOSPC, EDQUOT
                    raise SnapshotError(f"snapshot {path}: disk full while unpacking into {tempfile.gettempdir()}") from None
                raise


def _not_tar_reason(path: str | os.PathLike[str], e: BaseException) -> str:
    """What a file that tarfile could not open is, in words: empty, gzip without a tar inside,
    or neither (tarfile's own 'file could not be opened successfully' names none of them)."""
    try:
        with open(path, "rb") as f:
            head = f.read(2)
    except OSError as oe:
        return oe.strerror or type(oe).__name__
    if not head:
        return "an empty file"
    if isinstance(e, tarfile.ReadError) and "opened successfully" in str(e):
        return "gzip-compressed, but no tar archive inside" if head == b"\x1f\x8b" else "neither gzip nor tar data"
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _filter_reason(e: Exception) -> str:
    """The reason tarfile's ``data`` filter refused a member, in words (the filter's own error
    class names it: cpython Lib/tarfile.py, 3.12)."""
    reasons = {
        "AbsolutePathError": "an absolute path",
        "OutsideDestinationError": "a path leading outside the snapshot",
        "SpecialFileError": "a device or special file",
        "AbsoluteLinkError": "a link to an absolute path",
        "LinkOutsideDestinationError": "a link leading outside the snapshot",
    }
    return reasons.get(type(e).__name__, "refused by tarfile's data filter")


def _run(argv: tuple[str, ...] | list[str], timeout_s: float, env: dict[str, str] | None = None) -> CmdResult:
    """Run argv with a timeout; never raises. The process group is killed on timeout."""
    name = argv[0]
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "LC_ALL": "C", **(env or {})},
        )
    except FileNotFoundError:
        return CmdResult(name=name, rc=127, error="command not found", stderr=f"{name}: command not found")
    except OSError as e:
        return CmdResult(name=name, rc=126, error=f"could not run: {e.strerror}")
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, 9)
        except OSError:
            pass
        out, err = proc.communicate()
        return CmdResult(
            name=name,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            rc=124,
            error=f"timed out after {timeout_s:g} s",
            duration_s=time.monotonic() - t0,
        )
    return CmdResult(
        name=name,
        stdout=out[:MAX_FILE_BYTES].decode("utf-8", "replace"),
        stderr=err[:MAX_FILE_BYTES].decode("utf-8", "replace"),
        rc=proc.returncode,
        duration_s=time.monotonic() - t0,
    )


def run_command(name: str, timeout_s: float | None = None) -> CmdResult:
    """Run the registered command ``name`` (see :data:`COMMANDS`) with its timeout.

    ``env`` is produced in-process (filtered environment), not by a subprocess.
    Raises KeyError for an unregistered name.
    """
    if name == "env":
        t0 = time.monotonic()
        text = "".join(f"{k}={v}\n" for k, v in sorted(filter_env(dict(os.environ)).items()))
        return CmdResult(name="env", stdout=text, rc=0, duration_s=time.monotonic() - t0)
    c = COMMANDS[name]
    res = _run(c.argv, timeout_s if timeout_s is not None else c.timeout_s, c.env)
    res.name = name
    return res


class LiveSnapshot(Snapshot):
    """The machine infergap runs on. Files are read directly; commands run once, on first use or
    when :meth:`prefetch` starts them in parallel; probes are in-process functions with timeouts.

    ``root`` lets tests point the file side at a fake root; commands always run on this host.
    """

    kind = "live"

    def __init__(self, root: str = "/", workers: int = 16, live_only: bool = True, active: bool = False) -> None:
        self.root = root
        self.label = "live host"
        self.live_only = live_only
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="infergap-src")
        self._lock = threading.Lock()
        self._cmds: dict[str, Future[CmdResult]] = {}
        self._probes: dict[str, Future[Any]] = {}
        self.timings: dict[str, float] = {}
        self.probe_functions: dict[str, tuple[Callable[[], Any], float]] = {}
        from infergap.snapshot.probes import PROBES

        self.probe_functions.update(PROBES)
        if active:
            from infergap.snapshot.active import ACTIVE_TIMEOUT_S, active_probe

            self.probe_functions["active"] = (active_probe, ACTIVE_TIMEOUT_S + 10)

    def _real(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/")) if self.root != "/" else path

    def _read_bytes(self, path: str) -> bytes | None:
        if path.endswith(".link"):
            real = self._real(path[: -len(".link")])
            if os.path.islink(real):
                return os.readlink(real).encode()
            return None
        if path.endswith("/config.hex"):
            real = self._real(path[: -len(".hex")])
            if os.path.basename(os.path.dirname(real)) and os.path.isfile(real):
                with open(real, "rb") as f:
                    return od_hex(f.read(4096)).encode()
            return None
        real = self._real(path)
        if not os.path.isfile(real):
            return None
        return read_limited(real)

    def _listdir(self, path: str) -> list[str] | None:
        real = self._real(path)
        if not os.path.isdir(real):
            return None
        names = os.listdir(real)
        extra = []
        for n in names:
            full = os.path.join(real, n)
            if os.path.islink(full):
                extra.append(n + ".link")
            if n == "config" and "/sys/bus/pci/devices/" in real + "/":
                extra.append("config.hex")
        return sorted(names + extra)

    def prefetch(self, names: list[str] | None = None) -> None:
        """Start the named commands (default: every live command) and probes in the background."""
        for n in names if names is not None else [c.name for c in COMMANDS.values() if c.live or not self.live_only]:
            self._start_cmd(n)
        for p in self.probe_functions:
            self._start_probe(p)

    def _start_cmd(self, name: str) -> Future[CmdResult]:
        with self._lock:
            fut = self._cmds.get(name)
            if fut is None:
                fut = self._pool.submit(run_command, name)
                self._cmds[name] = fut
            return fut

    def _cmd(self, name: str) -> CmdResult | None:
        if name != "env" and name not in COMMANDS:
            return None
        if self.live_only and name in COMMANDS and not COMMANDS[name].live and name not in self._cmds:
            return None
        return self._start_cmd(name).result()

    def _start_probe(self, name: str) -> Future[Any]:
        with self._lock:
            fut = self._probes.get(name)
            if fut is None:
                fn, _timeout = self.probe_functions[name]
                fut = self._pool.submit(fn)
                self._probes[name] = fut
            return fut

    def _probe(self, name: str) -> Any | None:
        if name not in self.probe_functions:
            return None
        timeout = self.probe_functions[name][1]
        try:
            return self._start_probe(name).result(timeout=timeout)
        except TimeoutError:
            return {"error": f"probe {name} timed out after {timeout:g} s"}
        except Exception as e:  # a probe is third-party code (NVML): its failure is evidence
            return {"error": f"probe {name} failed: {type(e).__name__}: {e}"}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
