"""``EvidenceSnapshot``: a snapshot overlay that answers from evidence files people already have.

The overlay wraps a base snapshot (a live host, a captured archive, or None) and a list of
evidence files. ``cmd(name)`` returns the base's result when the base ran that command
successfully, else the recognised pasted output of the same kind (``nvidia-smi topo -m`` pasted
into a bug report answers ``cmd("nvsmi_topo")``). ``read("/proc/cmdline")`` and
``read("/proc/sys/...")`` are answered from a pasted ``/proc/cmdline`` and ``sysctl -a`` the same
way. Logs (NCCL, SGLang, vLLM, kernel) are read with :meth:`EvidenceSnapshot.evidence_parts`,
streamed line by line. The evidence source of every answer is the evidence file's name.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from infergap.errors import UserError
from infergap.evidence.recognize import CHUNK_BYTES, KINDS, EvidencePart, Unrecognized, scan_file
from infergap.guard import os_reason
from infergap.parsers.host import parse_pip_lines
from infergap.snapshot import open_snapshot
from infergap.snapshot.core import CmdResult, Snapshot
from infergap.snapshot.sources import ENGINE_LOG_KINDS

log = logging.getLogger(__name__)


#: Bytes read at most from a pipe or device given as evidence (a pasted log is megabytes).
MAX_SPOOL_BYTES = 256 * 1024 * 1024
#: The evidence path that means standard input (``--evidence -``).
STDIN = "-"
#: A folder given as evidence is read up to this many files and this many bytes of regular files
#: (an ``nvidia-bug-report`` or ``sosreport`` bundle holds hundreds to a few thousand files and
#: well under a gigabyte; ``--evidence /`` would otherwise read the whole disk without a word).
MAX_FOLDER_FILES = 5000
MAX_FOLDER_BYTES = 2 * 1024**3
#: Folders never walked into: kernel pseudo-filesystems, whose files are endless or block on read.
PSEUDO_FS = frozenset({"/proc", "/sys", "/dev", "/run"})


class EvidenceCmdResult(CmdResult):
    """A command result taken from an evidence file; ``source`` names that file (and line)."""

    evidence_label: str = ""

    @property
    def source(self) -> str:  # type: ignore[override]
        return self.evidence_label or super().source


def _cmd_result(name: str, text: str, label: str) -> EvidenceCmdResult:
    res = EvidenceCmdResult(name=name, stdout=text, rc=0)
    res.evidence_label = label
    return res


def normalise_pip(kind: str, text: str) -> str:
    """Any of ``pip list --format=json``, ``pip freeze``, plain ``pip list``, the ``[pip3]`` lines of
    ``collect_env`` or the ``name: version`` lines of ``sglang.check_env`` as the JSON of
    ``pip list --format=json``: ``[{"name": ..., "version": ...}]`` (the lines are read by
    :func:`infergap.parsers.host.parse_pip_lines`).

    >>> normalise_pip("pip_freeze", "torch==2.5.1\\nsglang[all]==0.4.1\\n")
    '[{"name": "torch", "version": "2.5.1"}, {"name": "sglang", "version": "0.4.1"}]'
    """
    if kind == "pip_list":
        return text.strip()
    return json.dumps([{"name": n, "version": v} for n, v in parse_pip_lines(kind, text)])


class EvidenceSnapshot(Snapshot):
    """A snapshot that answers from ``base`` first and from evidence files second.

    ``base`` may be None (only pasted evidence). ``paths`` are files; when ``base`` has an
    ``evidence_files()`` method (a snapshot directory with an ``evidence/`` folder) those files are
    added. Scanning is done once, here, streaming each file; a folder is walked as
    :meth:`_walk` says. ``on_file(path, k)`` is called before the ``k``-th file is read (progress).
    Bad files never raise: they are listed by :meth:`unrecognized`.
    """

    kind = "evidence"
    #: Why these files were taken for another host than the one they were given with (or None).
    other_host: str | None = None

    def __init__(self, base: Snapshot | None, paths: list[str | os.PathLike[str]] | tuple = (),
                 on_file: Callable[[Path, int], None] | None = None) -> None:
        self.base = base
        files: list[Path] = [Path(p) for p in paths]
        if base is not None and hasattr(base, "evidence_files"):
            files += [p for p in base.evidence_files() if p not in files]
        self.files = files
        self.parts: list[EvidencePart] = []
        self._unrecognized: list[Unrecognized] = []
        self._spool_dir: tempfile.TemporaryDirectory[str] | None = None
        if base is not None and hasattr(base, "refused_evidence"):
            self._unrecognized += [Unrecognized(p, why) for p, why in base.refused_evidence()]
        #: files read per path given (a folder counts as the files in it), for the label
        self._n_read: dict[Path, int] = {}
        self._on_file = on_file
        self._n_scanned = 0
        for f in files:
            if f.is_dir():
                n = 0
                for sub in self._walk(f):
                    self._scan(sub)
                    n += 1
                if not n:
                    self._unrecognized.append(Unrecognized(f, "directory holds no files"))
                self._n_read[f] = n
            else:
                self._scan(f)
                self._n_read[f] = 1
        label = f"{sum(self._n_read.values())} evidence file(s)"
        self.label = " + ".join(x for x in [base.label if base else "", label] if x)
        self._text_cache: dict[int, str] = {}

    def _walk(self, folder: Path) -> Iterator[Path]:
        """The regular files under ``folder`` in name order (a link to a file read once, however
        many links lead to it), without following links to folders, without entering
        :data:`PSEUDO_FS`, and up to :data:`MAX_FOLDER_FILES` files and
        :data:`MAX_FOLDER_BYTES` bytes; where the walk stops or skips, an :class:`Unrecognized`
        entry says so (never a silent cut)."""
        n = size = 0
        seen: set[tuple[int, int]] = set()
        for root, dirs, names in os.walk(folder, onerror=lambda e: self._unrecognized.append(
                Unrecognized(Path(e.filename or folder), f"cannot list ({os_reason(e)})"))):
            skipped = sorted(d for d in dirs if os.path.join(root, d) in PSEUDO_FS)
            for d in skipped:
                self._unrecognized.append(Unrecognized(Path(root, d), "kernel pseudo-filesystem: not read"))
            dirs[:] = sorted(d for d in dirs if d not in skipped)
            for name in sorted(names):
                q = Path(root, name)
                try:
                    st = q.stat()
                except OSError:  # a dangling link, or gone since listed
                    continue
                if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
                    continue  # sockets, FIFOs (a FIFO blocks the reader), devices; a file already read
                seen.add((st.st_dev, st.st_ino))
                if n >= MAX_FOLDER_FILES or size + st.st_size > MAX_FOLDER_BYTES:
                    self._unrecognized.append(Unrecognized(folder, (
                        f"folder read only in part: stopped at {n} files / {size / 1e6:.0f} MB "
                        f"(limits {MAX_FOLDER_FILES} files, {MAX_FOLDER_BYTES / 1e9:.0f} GB); "
                        "name the files or a smaller folder")))
                    return
                n += 1
                size += st.st_size
                yield q

    def _scan(self, path: Path) -> None:
        self._n_scanned += 1
        if self._on_file is not None:
            self._on_file(path, self._n_scanned)
        stdin = str(path) == STDIN
        if stdin:  # "-": standard input, read once and spooled like any pipe (same cap)
            path = Path("/dev/stdin")
        elif not path.exists():
            self._unrecognized.append(Unrecognized(path, "no such file"))
            return
        try:
            seekable = not stdin and stat.S_ISREG(os.stat(path).st_mode)
        except OSError as e:
            self._unrecognized.append(Unrecognized(path, f"cannot read ({e.strerror or e})"))
            return
        if seekable:
            parts, unknown = scan_file(path)
        else:
            copy = self._spool(path)
            if isinstance(copy, Unrecognized):
                self._unrecognized.append(copy)
                return
            parts, unknown = scan_file(copy)
            for part in parts:
                part.name = path.name
            for u in unknown:
                u.path = path
        self.parts.extend(parts)
        self._unrecognized.extend(unknown)
        log.debug("evidence %s: %s", path, [p.kind for p in parts])

    def _spool(self, path: Path) -> Path | Unrecognized:
        """Copy a pipe or other non-seekable input (``/dev/stdin``, a shell's ``<(cmd)``) to a
        temporary file, :data:`~infergap.evidence.recognize.CHUNK_BYTES` at a time so memory stays
        bounded, because parts are read again by byte offset. The copy is deleted by :meth:`close`."""
        if self._spool_dir is None:
            self._spool_dir = tempfile.TemporaryDirectory(prefix="infergap-evidence-")
        dest = Path(self._spool_dir.name) / f"{len(os.listdir(self._spool_dir.name))}-{path.name or 'stdin'}"
        try:
            with open(path, "rb") as src, open(dest, "wb") as out:
                total = 0
                while True:
                    b = src.read(CHUNK_BYTES)
                    if not b:
                        break
                    total += len(b)
                    if total > MAX_SPOOL_BYTES:  # /dev/zero, `yes`: an input without end
                        out.close()
                        dest.unlink()
                        return Unrecognized(path, f"more than {MAX_SPOOL_BYTES // (1 << 20)} MiB from a pipe or device; not read")
                    out.write(b)
        except OSError as e:
            return Unrecognized(path, f"cannot read ({os_reason(e)})")
        return dest

    # -- what was found ----------------------------------------------------------------------
    def unrecognized(self) -> list[Unrecognized]:
        """Files (or stretches of them) that are not a known output or log, with the reason."""
        return list(self._unrecognized)

    def evidence_parts(self, kind: str) -> list[EvidencePart]:
        """Recognised parts serving ``kind`` (``nccl_log``, ``sglang_log``, ``vllm_log``, ``dmesg``,
        ``collect_env``, or any key of :data:`infergap.evidence.recognize.KINDS`); ``engine_log``
        means every engine's log (the records of family ``engine``). Base snapshot parts come first."""
        base_parts = list(self.base.evidence_parts(kind)) if self.base is not None and hasattr(self.base, "evidence_parts") else []
        want = ENGINE_LOG_KINDS if kind == "engine_log" else {kind}
        return base_parts + [p for p in self.parts if p.kinds & want]

    def _part_text(self, part: EvidencePart) -> str:
        key = id(part)
        if key not in self._text_cache:
            self._text_cache[key] = part.text()
        return self._text_cache[key]

    def _evidence_cmd(self, name: str) -> CmdResult | None:
        target = f"cmd:{name}"
        for part in self.parts:
            if KINDS[part.kind][1] == target:
                text = self._part_text(part)
                if name == "pip_list":
                    text = normalise_pip(part.kind, text)
                return _cmd_result(name, text, part.label)
        if name == "pip_list":
            for part in self.parts:
                if part.kind in ("collect_env", "check_env"):
                    text = normalise_pip(part.kind, self._part_text(part))
                    if text != "[]":
                        return _cmd_result(name, text, part.label)
        return None

    # -- Snapshot API ------------------------------------------------------------------------
    def _cmd(self, name: str) -> CmdResult | None:
        res = self.base.cmd(name) if self.base is not None else None
        if res is not None and res.ok and res.stdout.strip():
            return res
        ev = self._evidence_cmd(name)
        return ev if ev is not None else res

    def _file_from_evidence(self, path: str) -> bytes | None:
        if path == "/proc/cmdline":
            for part in self.parts:
                if part.kind == "cmdline":
                    return self._part_text(part).encode()
        if path.startswith("/proc/sys/"):
            key = path[len("/proc/sys/"):].replace("/", ".")
            for part in self.parts:
                if part.kind == "sysctl_all":
                    for line in self._part_text(part).splitlines():
                        k, sep, v = line.partition(" = ")
                        if sep and k.strip() == key:
                            return (v.strip() + "\n").encode()
        return None

    def _read_bytes(self, path: str) -> bytes | None:
        data = self.base.read_bytes(path) if self.base is not None else None
        if data is not None:
            return data
        return self._file_from_evidence(path)

    def source_of(self, path: str) -> str:
        if self.base is not None and self.base.read_bytes(path) is not None:
            return self.base.source_of(path)
        kind = "cmdline" if path == "/proc/cmdline" else "sysctl_all" if path.startswith("/proc/sys/") else None
        for part in self.parts:
            if part.kind == kind:
                return part.label
        return super().source_of(path)

    def _listdir(self, path: str) -> list[str] | None:
        return self.base.listdir(path) if self.base is not None else None

    def _probe(self, name: str) -> Any | None:
        return self.base.probe(name) if self.base is not None else None

    def meta(self) -> dict[str, Any]:
        return self.base.meta() if self.base is not None else {}

    def without_base(self, paths: list[Path]) -> "EvidenceSnapshot":
        """The same scan of ``paths`` (no second pass over the files) as a snapshot of its own,
        without the base and without the base's evidence folder; it shares the spooled copies."""
        view = EvidenceSnapshot.__new__(EvidenceSnapshot)
        view.__dict__.update(self.__dict__)
        keep = {Path(p) for p in paths}
        if Path(STDIN) in keep:  # standard input was read from /dev/stdin into a spooled copy
            keep.add(Path("/dev/stdin"))
        view.base = None
        view.files = [f for f in self.files if f in keep]
        view.parts = [p for p in self.parts if Path(p.path) in keep or any(k in Path(p.path).parents for k in keep) or p.name in {k.name for k in keep}]
        view._unrecognized = [u for u in self._unrecognized if Path(u.path) in keep or any(k in Path(u.path).parents for k in keep)]
        view._text_cache = {}
        view.label = f"{sum(self._n_read.get(f, 1) for f in view.files)} evidence file(s)"
        return view

    def evidence_files(self) -> list[Path]:
        """The evidence files this overlay read."""
        return list(self.files)

    def close(self) -> None:
        """Close the base snapshot and delete the spooled copies of piped evidence."""
        if self._spool_dir is not None:
            self._spool_dir.cleanup()
            self._spool_dir = None
        if self.base is not None:
            self.base.close()


def open_with_evidence(snapshot: str | os.PathLike[str] | None, evidence: list[str | os.PathLike[str]] | None = None,
                       host: bool = True, active: bool = False,
                       on_file: Callable[[Path, int], None] | None = None) -> Snapshot:
    """The snapshot an audit reads: ``snapshot`` (a directory or ``.tar.gz``; the live host when
    None and ``host`` is True; nothing when ``host`` is False) overlaid with the ``evidence``
    files and a snapshot directory's ``evidence/`` folder; ``-`` is standard input (read once,
    spooled under the same cap as a pipe). Without any evidence the base snapshot is returned as
    it is. ``on_file`` is told of each evidence file before it is read (see :class:`EvidenceSnapshot`).
    The snapshot returned carries ``read_s``: the seconds spent opening and reading all of it
    (left None for the live host without evidence, which is read while the audit runs).

    Raises :class:`infergap.errors.UserError` for an evidence path that does not exist (one line
    naming it), :class:`infergap.snapshot.SnapshotError` for a bad snapshot.
    """
    t0 = time.perf_counter()

    def read(snap: Snapshot) -> Snapshot:
        snap.read_s = time.perf_counter() - t0
        return snap

    paths = [Path(p) for p in evidence or []]
    for p in paths:
        if str(p) != STDIN and not p.exists():
            if p.is_symlink():
                raise UserError(f"--evidence {p}: a symbolic link that leads nowhere (dangling, or a loop of links)")
            raise UserError(f"--evidence {p}: no such file or directory")
    base = open_snapshot(snapshot, active=active) if (snapshot is not None or host) else None
    extra = base.evidence_files() if base is not None and hasattr(base, "evidence_files") else []
    if not extra and base is not None and hasattr(base, "refused_evidence"):
        extra = base.refused_evidence()  # say what was not followed
    if not paths and not extra:
        if base is None:
            raise UserError("nothing to audit: --no-host needs --snapshot or --evidence")
        return base if snapshot is None else read(base)
    merged = EvidenceSnapshot(base, paths, on_file=on_file)
    if base is not None and paths:
        from infergap.facts import other_host

        pasted = merged.without_base(paths)
        why = other_host(base, pasted)
        if why is not None:  # a paste of another host: audited on its own, never merged into this one
            pasted.label += f" — audited as its own host, not merged with {base.label or 'this machine'}: {why}"
            pasted.other_host = why
            base.close()
            return read(pasted)
    return read(merged)
