"""``infergap collect``: write a snapshot of this host (directory or ``.tar.gz``).

Every source of :mod:`infergap.snapshot.sources` is read in parallel, each command with its
timeout; a missing command or unreadable file is recorded in ``meta.json`` (rc, error), never
fatal. Output is scrubbed of serial numbers, UUIDs, the hostname and non-GPU environment.
"""

from __future__ import annotations

import json
import os
import re
import socket
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from infergap import __version__
from infergap.snapshot.core import LiveSnapshot, Snapshot, filter_env, run_command
from infergap.snapshot.probes import PROBES
from infergap.snapshot.sources import COMMANDS, FILE_GLOBS

SCHEMA = "infergap.snapshot/1"

_UUID = re.compile(r"\b(GPU-|MIG-)?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_SERIAL_XML = re.compile(r"(<(?:serial|uuid|chassis_serial_number|board_serial)>)[^<]*(</)")
_SERIAL_TEXT = re.compile(r"(?im)^(\s*(?:Serial Number|Serial|GPU UUID|UUID|Chassis Serial Number)\s*:\s*)(\S.*)$")
_MAC = re.compile(r"\b([0-9a-f]{2}:){5}[0-9a-f]{2}\b", re.I)


def scrub(text: str, hostnames: tuple[str, ...] = ()) -> str:
    """Replace serial numbers, UUIDs, MAC addresses and the given host names in ``text``.

    UUIDs become ``00000000-0000-0000-0000-000000000000`` (keeping a ``GPU-`` prefix), serial fields
    ``REDACTED``, host names ``redacted-host``. Idempotent.
    """
    text = _SERIAL_XML.sub(r"\1REDACTED\2", text)
    text = _SERIAL_TEXT.sub(lambda m: m.group(1) + "REDACTED", text)
    text = _UUID.sub(lambda m: (m.group(1) or "") + "00000000-0000-0000-0000-000000000000", text)
    text = _MAC.sub("00:00:00:00:00:00", text)
    for h in hostnames:
        # NCCL prefixes each log line with "<host>:<pid>:<tid>": redact there whatever the length.
        text = re.sub(rf"(?m)^(\s*){re.escape(h)}(:\d+:\d+ \[)", r"\1redacted-host\2", text)
        if len(h) < 4 or h.lower() in _COMMON_WORDS:
            # a short or common host name ("vm", "gpu") also occurs in ordinary text
            # ("vm.swappiness"): redacting it would corrupt the evidence.
            continue
        text = re.sub(rf"(?<![\w.-]){re.escape(h)}(?![\w-]|\.\w)", "redacted-host", text)
    return text


_IPV4 = re.compile(r"(?<![\d.])(?!127\.)(?!0\.0\.0\.0)(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})(?![\d.])")


def scrub_ips(text: str) -> str:
    """Replace IPv4 addresses other than loopback and 0.0.0.0 with 192.0.2.1 (RFC 5737 TEST-NET-1);
    used on logs (NCCL prints its bootstrap interface address)."""
    return _IPV4.sub("192.0.2.1", text)


_COMMON_WORDS = {"localhost", "host", "server", "node", "linux", "ubuntu", "debian", "worker", "master", "cuda", "nvidia", "kernel", "root", "none", "default"}


def _hostnames() -> tuple[str, ...]:
    names = {socket.gethostname()}
    try:
        names.add(socket.getfqdn())
    except OSError:
        pass
    short = {n.split(".")[0] for n in names}
    return tuple(sorted(names | short, key=len, reverse=True))


def _scrub_environ(data: bytes) -> bytes:
    """/proc/1/environ: keep ``container=`` (container detection) and GPU/CUDA/NCCL variables."""
    keep = []
    for item in data.split(b"\0"):
        k, _, v = item.decode("utf-8", "replace").partition("=")
        if k == "container" or filter_env({k: v}):
            keep.append(item)
    return b"\0".join(keep)


def prepare_output(out: Path, force: bool = False) -> None:
    """Make sure a snapshot directory ``out`` starts empty: stale files from another host or an
    earlier run would be audited as this host's. A missing directory is fine; a non-empty one is
    refused unless ``force``, which empties it, and only when it holds a snapshot (``meta.json``),
    so that a mistyped path never deletes unrelated files. Raises UserError (one line)."""
    from infergap.errors import UserError

    if not os.path.lexists(out):
        return
    if not out.is_dir() or out.is_symlink():
        raise UserError(f"--output {out}: exists and is not a directory")
    entries = os.listdir(out)
    if not entries:
        return
    if not force:
        raise UserError(f"--output {out}: directory is not empty ({len(entries)} entries); "
                        "use a new directory, or --force to empty a previous snapshot")
    if not (out / "meta.json").is_file():
        raise UserError(f"--output {out}: --force empties only a previous snapshot directory (one with meta.json)")
    import shutil

    for name in entries:
        p = out / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def _check_archive_output(out: Path, force: bool) -> None:
    """A ``.tar.gz`` output that exists already is kept unless ``force`` (it was silently
    overwritten: last week's snapshot of another host lost to a repeated command); a directory
    of that name, or anything but a regular file, is never replaced. Raises UserError (one line)."""
    from infergap.errors import UserError

    if not os.path.lexists(out):
        return
    if out.is_symlink() or not out.is_file():
        raise UserError(f"--output {out}: exists and is not a regular file; name a new .tar.gz")
    if not force:
        raise UserError(f"--output {out}: the file exists; name a new one, or --force to replace it")


def collect(output: str | os.PathLike[str], root: str = "/", active: bool = False, source: Snapshot | None = None,
            force: bool = False, url: str | None = None) -> dict[str, Any]:
    """Collect this host into ``output`` (a directory, or a ``.tar.gz`` when the name ends so).
    ``active`` adds the GPU measurements (probes/active.json; they use the GPUs for a minute).
    A directory must be new or empty (``force`` empties a previous snapshot, see
    :func:`prepare_output`); an archive must be new (``force`` replaces it); it is written to a
    temporary name and renamed.

    Returns the meta dict written to ``meta.json``. Raises OSError only when ``output`` itself
    cannot be written, UserError for a non-empty directory or an existing archive. ``root`` redirects file reads (tests);
    commands always run on this host. ``source`` re-collects an existing snapshot instead of this
    host: its files, command outputs and probes are read, scrubbed and written in the same layout
    (nothing is run). The serving process (``probes/process.json``) is the one behind ``url``, or
    every known engine listening here (:func:`infergap.snapshot.process.process_probe`).
    """
    out = Path(output)
    archive = out.name.endswith((".tar.gz", ".tgz"))
    if not archive:
        prepare_output(out, force)
    else:
        _check_archive_output(out, force)
    workdir = Path(tempfile.mkdtemp(prefix="infergap-collect-")) if archive else out
    workdir.mkdir(parents=True, exist_ok=True)
    live: Snapshot = LiveSnapshot(root=root) if source is None else source
    started = time.monotonic()
    c = _Collector(workdir, _hostnames(), source)
    probes = _probes(source, active)
    if source is None:
        from infergap.snapshot.process import process_probe

        probes["process"] = ((lambda: process_probe(url)), 30.0)
    with ThreadPoolExecutor(max_workers=16, thread_name_prefix="infergap-collect") as pool:
        futs = [pool.submit(c.cmd, n) for n in [*COMMANDS, "env"]]
        futs += [pool.submit(c.probe, n, probes[n][0]) for n in probes]
        futs.append(pool.submit(c.files, live))
        for f in futs:
            f.result()
    if source is None:
        live.close()
    sources = c.sources
    meta = {
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "infergap_version": __version__,
        "duration_s": round(time.monotonic() - started, 3),
        "root": root if source is None else f"snapshot {source.label}",
        "uid": os.geteuid() if hasattr(os, "geteuid") else None,
        "sources": dict(sorted(sources.items())),
        "failed": sorted(k for k, v in sources.items() if v.get("error") or (v.get("rc") not in (None, 0))),
    }
    (workdir / "meta.json").write_text(json.dumps(meta, indent=1))
    if archive:
        _archive(workdir, out)
    return meta


def _probes(source: Snapshot | None, active: bool) -> dict[str, tuple[Callable[[], Any], float]]:
    """The probes to run, name → (function, timeout s): the shipped ones plus ``active`` when
    asked, or, re-collecting ``source``, those it holds (read back, nothing run)."""
    probes = dict(PROBES)
    if source is not None:
        return {n: ((lambda n=n: source.probe(n)), 0.0) for n in [*probes, "active", "process"] if source.probe(n) is not None}
    if active:
        from infergap.snapshot.active import ACTIVE_TIMEOUT_S, active_probe

        probes["active"] = (active_probe, ACTIVE_TIMEOUT_S)
    return probes


def _archive(workdir: Path, out: Path) -> None:
    """Pack ``workdir`` into the archive ``out`` through a temporary file created exclusively
    beside it (``mkstemp``: ``O_CREAT | O_EXCL`` under a random name, so a symlink planted at a
    predictable name redirects nothing) and a rename, then remove ``workdir``."""
    import shutil
    import tempfile

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tf:
            tf.add(workdir, arcname=out.name.removesuffix(".tar.gz").removesuffix(".tgz"))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # what a plain open() would have given
        os.replace(tmp, out)
        tmp = None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)


class _Collector:
    """Writes what one collection reads into ``workdir`` (the snapshot layout), scrubbed of
    ``hosts`` names, and keeps each source's timing and failure in :attr:`sources`. With
    ``source`` the commands' outputs are read from that snapshot instead of run."""

    def __init__(self, workdir: Path, hosts: tuple[str, ...], source: Snapshot | None) -> None:
        self.workdir = workdir
        self.hosts = hosts
        self.source = source
        self.sources: dict[str, dict[str, Any]] = {}

    def write(self, rel: str, data: bytes) -> None:
        """Write ``data`` at ``rel`` inside the snapshot."""
        p = self.workdir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

    def cmd(self, name: str) -> None:
        """Run (or read back) one named command: ``cmds/<name>.out``, ``.err``, ``.rc``."""
        hosts = self.hosts
        if self.source is None:
            res = run_command(name)
        else:
            got = self.source.cmd(name)
            if got is None:
                return
            res = got
        text_out = scrub(res.stdout, hosts)
        if name == "uname":  # "Linux <hostname> <release> …": the second field, whatever its length
            text_out = re.sub(r"^(\S+\s+)\S+", r"\1redacted-host", text_out, count=1)
        elif name == "sysctl_all":
            text_out = re.sub(r"(?m)^(kernel\.hostname|kernel\.domainname)\s*=.*$", r"\1 = redacted-host", text_out)
        self.write(f"cmds/{name}.out", text_out.encode())
        self.write(f"cmds/{name}.err", scrub(res.stderr, hosts).encode())
        self.write(f"cmds/{name}.rc", f"{res.rc if res.rc is not None else ''}\n".encode())
        self.sources[f"cmds/{name}"] = {"duration_s": round(res.duration_s, 4), "rc": res.rc, "error": res.error}

    def probe(self, name: str, fn: Callable[[], Any]) -> None:
        """Run one probe: ``probes/<name>.json``; an exception is recorded, never raised."""
        t0 = time.monotonic()
        try:
            data = fn()
            err = data.get("error") if isinstance(data, dict) else None
        except Exception as e:  # third-party library: record, do not crash collection
            data, err = {"available": False, "error": f"{type(e).__name__}: {e}"}, f"{type(e).__name__}: {e}"
        if isinstance(data, dict) and isinstance(data.get("nccl_log"), str):
            data["nccl_log"] = scrub_ips(scrub(data["nccl_log"], self.hosts))
        from infergap.guard import dumps  # NVML may answer NaN: JSON has no such number

        self.write(f"probes/{name}.json", scrub(dumps(data, indent=1, default=str), self.hosts).encode())
        self.sources[f"probes/{name}"] = {"duration_s": round(time.monotonic() - t0, 4), "error": err}

    def files(self, live: Snapshot) -> None:
        """Copy every file of :data:`FILE_GLOBS` from ``live`` under ``files/``, scrubbed (PCI
        config space kept as is, the environment of PID 1 reduced to GPU/CUDA/NCCL variables)."""
        t0 = time.monotonic()
        n = 0
        for pattern in FILE_GLOBS:
            for path in live.glob(pattern):
                data = live.read_bytes(path)
                if data is None:
                    self.sources["files" + path] = {"error": "unreadable"}
                    continue
                if path == "/proc/1/environ":
                    data = _scrub_environ(data)
                elif not path.endswith("config.hex"):
                    data = scrub(data.decode("utf-8", "replace"), self.hosts).encode()
                self.write("files" + path, data)
                n += 1
        self.sources["files"] = {"duration_s": round(time.monotonic() - t0, 4), "count": n}
