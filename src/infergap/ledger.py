"""The run ledger: an SQLite history of every audit, bench, roofline, plan and fix run.

Each run is one row of ``runs``: its kind, the time (UTC, ISO 8601), the host fingerprint and the
run's JSON document as written by its command. ``infergap fix`` also journals every change it makes
in ``fix_steps`` (value before, command, value after, and the files it wrote with their previous
content), which is what ``infergap fix --revert`` replays in reverse.

Location: ``--db PATH``, else ``$INFERGAP_DB``, else ``infergap/ledger.sqlite3`` under the user's
data directory (:func:`platformdirs.user_data_dir`).

Concurrency: the database runs in WAL mode with a busy timeout (:data:`BUSY_TIMEOUT_MS`), and every
write is one ``BEGIN IMMEDIATE`` transaction, so several processes can record runs at once (SQLite's
documentation, "Write-Ahead Logging", https://www.sqlite.org/wal.html).

Schema versions: ``PRAGMA user_version`` counts the steps of :data:`MIGRATIONS` already applied;
opening a database applies the missing steps in one transaction. A database whose version is newer
than this code knows, or a file that is not an infergap ledger, raises :class:`LedgerError`
(a :class:`~infergap.errors.UserError`: one line, exit status 2).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import logging
import math
import os
import random
import socket
import sqlite3
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import quote

from infergap.errors import UserError
from infergap.guard import map_leaves

log = logging.getLogger(__name__)

#: Kinds of run the ledger holds.
KINDS = ("audit", "bench", "roofline", "plan", "fix", "fleet", "tune")

#: ``PRAGMA application_id`` of an infergap ledger ("IGAP" in ASCII), so another SQLite file is
#: recognised as foreign instead of being migrated (https://www.sqlite.org/pragma.html#pragma_application_id).
APPLICATION_ID = 0x49474150

#: How long a writer waits for another writer's lock before giving up, in milliseconds.
BUSY_TIMEOUT_MS = 30_000

#: Ordered schema steps; ``PRAGMA user_version`` = number of steps applied. Append, never edit.
#: A step is SQL statements separated by ";" (none inside a statement), run in one transaction.
MIGRATIONS: list[str] = [
    # 1: runs and the fix journal.
    """
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL,
        created_at TEXT NOT NULL,
        host TEXT NOT NULL DEFAULT '',
        host_name TEXT NOT NULL DEFAULT '',
        host_json TEXT,
        status TEXT,
        parent_id INTEGER REFERENCES runs(id),
        payload TEXT NOT NULL
    );
    CREATE INDEX runs_kind_time ON runs(kind, id);
    CREATE INDEX runs_host ON runs(host);
    CREATE TABLE fix_steps (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        seq INTEGER NOT NULL,
        check_id TEXT NOT NULL,
        subject TEXT,
        step_kind TEXT NOT NULL,
        action_json TEXT,
        target TEXT NOT NULL,
        command TEXT NOT NULL,
        before TEXT,
        intended TEXT,
        after TEXT,
        file_existed INTEGER,
        file_previous BLOB,
        file_mode INTEGER,
        status TEXT NOT NULL,
        error TEXT,
        started_at TEXT NOT NULL,
        finished_at TEXT,
        revert_status TEXT,
        revert_value TEXT,
        revert_error TEXT,
        reverted_at TEXT,
        UNIQUE(run_id, seq)
    );
    """,
    # 2: the experiments of ``infergap tune``: one row per lever tried, keyed by what it was tried on.
    """
    CREATE TABLE experiments (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        created_at TEXT NOT NULL,
        host TEXT NOT NULL,
        engine TEXT NOT NULL,
        engine_version TEXT NOT NULL,
        model TEXT NOT NULL,
        workload TEXT NOT NULL,
        lever TEXT NOT NULL,
        setting TEXT NOT NULL,
        metric TEXT NOT NULL,
        verdict TEXT NOT NULL,
        change_pct REAL,
        payload TEXT NOT NULL
    );
    CREATE INDEX experiments_key ON experiments(host, engine, engine_version, model)
    """,
]


class LedgerError(UserError):
    """The ledger database cannot be used (corrupt, foreign, newer schema, unwritable). One line."""


def _no_space(path: Path | None) -> bool:
    """Whether the file system holding ``path`` has no block left for an unprivileged writer."""
    if path is None:
        return False
    try:
        st = os.statvfs(path.parent if not path.is_dir() else path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 64 * 1024


def db_reason(e: BaseException, path: Path | None = None) -> str:
    """What an SQLite failure means, in words: a full disk (SQLITE_FULL, ENOSPC, or an I/O error
    while the file system of ``path`` has no space left: SQLite reports a failed write of its
    WAL index as SQLITE_IOERR) and a damaged file (SQLITE_CORRUPT: "database
    disk image is malformed") are named as such (https://www.sqlite.org/rescode.html)."""
    msg = str(e) or type(e).__name__
    low = msg.lower()
    if "disk is full" in low or "no space left" in low or getattr(e, "errno", None) == errno.ENOSPC \
            or ("i/o error" in low and _no_space(path)):
        return "disk full (no space left on device)"
    if "malformed" in low or "corrupt" in low:
        return f"damaged ({msg}); move the file aside or name another --db"
    if "readonly" in low or "read-only" in low:
        return f"read-only ({msg})"
    return msg


def _guarded(method: Any) -> Any:
    """A Ledger method whose SQLite and OS failures become one :class:`LedgerError` line naming
    the file and :func:`db_reason` (a damaged page is met by whichever query reads it)."""
    @functools.wraps(method)
    def run(self: "Ledger", *a: Any, **kw: Any) -> Any:
        try:
            return method(self, *a, **kw)
        except (sqlite3.Error, OSError) as e:
            raise LedgerError(f"ledger {self.path}: {db_reason(e, self.path)}") from None
    return run


def utc_now() -> str:
    """Current UTC time, ISO 8601 with microseconds and ``+00:00``."""
    return datetime.now(timezone.utc).isoformat()


def default_db_path() -> Path:
    """``$INFERGAP_DB`` if set, else ``<user data dir>/ledger.sqlite3`` (platformdirs)."""
    env = os.environ.get("INFERGAP_DB")
    if env:
        return Path(env)
    from platformdirs import user_data_dir

    return Path(user_data_dir("infergap", appauthor=False)) / "ledger.sqlite3"


@dataclass(frozen=True)
class HostId:
    """Identity of a host in the ledger: ``fingerprint`` (12 hex digits, stable across runs) and a
    display ``name`` (may be empty when the source was scrubbed)."""

    fingerprint: str
    name: str = ""


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


#: Keys of an audit report's ``host`` object that identify the machine: the hardware, not what an
#: upgrade or a reboot changes (kernel, driver, snapshot path, time), so that two audits of one
#: machine share a fingerprint.
_STABLE_HOST_KEYS = ("machine_id", "hostname", "name", "product_name", "sys_vendor", "cpu", "cpu_model",
                     "cpu_vendor", "cpus", "numa_nodes", "gpus", "memory_bytes", "virtualization")


def host_fingerprint(host: Mapping[str, Any]) -> HostId:
    """Fingerprint of a host described by a report's ``host`` object.

    Uses ``host["fingerprint"]`` when present, else a hash of the stable identifying keys
    (:data:`_STABLE_HOST_KEYS`) that are present, else of the whole object.
    """
    name = str(host.get("hostname") or host.get("name") or "")
    if host.get("fingerprint"):
        return HostId(str(host["fingerprint"]), name)
    stable = {k: host[k] for k in _STABLE_HOST_KEYS if k in host}
    basis = stable or dict(host)
    return HostId(_hash(json.dumps(basis, sort_keys=True, default=str)), name)


def local_host() -> HostId:
    """Identity of the machine this process runs on: a hash of ``/etc/machine-id`` (the hostname
    when there is none) and the hostname as display name. The machine id itself is never stored."""
    name = socket.gethostname()
    try:
        basis = Path("/etc/machine-id").read_text().strip()
    except OSError:
        basis = ""
    return HostId(_hash(basis or f"hostname:{name}"), name)


def _as_host(host: HostId | Mapping[str, Any] | str | None) -> HostId:
    if host is None:
        return local_host()
    if isinstance(host, HostId):
        return host
    if isinstance(host, str):
        return HostId(host)
    return host_fingerprint(host)


@dataclass
class Run:
    """One ledger row: ``payload`` is the run's JSON document, parsed."""

    id: int
    kind: str
    created_at: str
    host: str
    host_name: str
    status: str | None
    parent_id: int | None
    payload: Any

    def summary(self) -> dict[str, Any]:
        """A one-line description for ``infergap history``: id, kind, time, host, status, what the
        run was about (``about``: snapshot or live host, server URL, model) and what it found (``what``)."""
        return {"id": self.id, "kind": self.kind, "created_at": self.created_at, "host": self.host,
                "host_name": self.host_name, "status": self.status or "", "about": describe_subject(self.kind, self.payload),
                "what": describe_payload(self.kind, self.payload)}


def _s(x: Any) -> str:
    return x.strip() if isinstance(x, str) else ""


def describe_subject(kind: str, payload: Any) -> str:
    """What a run was about, from its payload: the audited host or snapshot (and GPUs), the
    benched server URL and model, the bounded model and GPUs, the inputs of a plan, the source of
    a fix, the cluster address or snapshots of a fleet run. Empty when the payload does not say."""
    if not isinstance(payload, dict):
        return ""
    parts: list[str] = []
    if kind == "audit":
        host = payload.get("host") if isinstance(payload.get("host"), dict) else {}
        snap = host.get("snapshot") if isinstance(host.get("snapshot"), dict) else {}
        label = _s(snap.get("label"))
        parts += [label if snap.get("kind") != "live" else "this machine",
                  _s(host.get("gpu_summary"))]
    elif kind == "bench":
        env = payload.get("environment") if isinstance(payload.get("environment"), dict) else {}
        parts += [_s(env.get("url")), _s(env.get("model"))]
    elif kind == "roofline":
        model = payload.get("model") if isinstance(payload.get("model"), dict) else {}
        hw = payload.get("hardware") if isinstance(payload.get("hardware"), dict) else {}
        gpus = f"{hw.get('count')} × {_s(hw.get('label')) or _s(hw.get('gpu'))}" if hw.get("count") else _s(hw.get("label"))
        parts += [_s(model.get("name")) or _s(model.get("source")), f"on {gpus}" if gpus else ""]
        return " ".join(p for p in parts if p)
    elif kind == "plan":
        for st in payload.get("stages") or []:
            if isinstance(st, dict) and _s(st.get("detail")) and st.get("status") not in ("missing", None):
                parts.append(f"{st.get('name')} {_s(st.get('detail'))}")
    elif kind == "fleet":
        src = payload.get("source") if isinstance(payload.get("source"), dict) else {}
        where = _s(src.get("address")) or _s(src.get("snapshots"))
        parts.append(f"{_s(src.get('kind')) or 'fleet'} {where}".strip())
    elif kind == "fix":
        src = payload.get("source") if isinstance(payload.get("source"), dict) else {}
        parts += [f"{k} {v}" if v != "live" else "this machine" for k, v in src.items() if isinstance(v, str)]
    elif kind == "tune":
        parts += [_s(payload.get("url")), _s(payload.get("model"))]
    return " · ".join(p for p in parts if p)


def describe_payload(kind: str, payload: Any) -> str:
    """Short human description of a run's payload (counts of findings, points, changes)."""
    if not isinstance(payload, dict):
        return ""
    if kind == "audit":
        findings = payload.get("findings") or []
        act = sum(1 for f in findings if isinstance(f, dict) and f.get("status") == "actionable")
        return f"{len(findings)} findings, {act} actionable"
    if kind == "bench":
        pts = [p for p in payload.get("points") or [] if isinstance(p, dict)]
        model = (payload.get("environment") or {}).get("model", "")
        invalid = sum(1 for p in pts if p.get("valid") is False)
        failed = sum(p["failed"] for p in pts if type(p.get("failed")) is int)
        sent = sum(p["requests"] for p in pts if type(p.get("requests")) is int)
        what = f"{len(pts)} points" + (f", {invalid} INVALID" if invalid else "") \
            + (f", {failed} of {sent} requests failed" if failed else "")
        return what + (f" · {model}" if model else "")
    if kind == "fleet":
        s = payload.get("summary") or {}
        return (f"{s.get('nodes', 0)} nodes, {s.get('failed', 0)} not audited, {s.get('drift_items', 0)} drift items"
                if s else str(payload.get("state") or ""))
    if kind == "tune":
        counts: dict[str, int] = {}
        for t in payload.get("trials") or []:
            v = t.get("verdict", "?") if isinstance(t, dict) else "?"
            counts[str(v)] = counts.get(str(v), 0) + 1
        return ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "no lever tried"
    if kind == "fix":
        if payload.get("mode") == "revert":
            return f"revert of run {payload.get('reverts')}"
        counts: dict[str, int] = {}
        for c in payload.get("changes") or []:
            state = c.get("state", "?") if isinstance(c, dict) else "?"
            counts[state] = counts.get(state, 0) + 1
        what = ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "no changes"
        return what + (" (persist)" if payload.get("persist") else "")
    return ""


#: Characters of one string value stored in the ledger; longer values (a pasted 16 MB log line
#: quoted as evidence) are cut with a note, so that a run costs the ledger kilobytes, not megabytes.
MAX_VALUE_CHARS = 8192


def cap_values(obj: Any) -> Any:
    """A copy of a JSON-like tree with strings cut to :data:`MAX_VALUE_CHARS` and NaN/±Infinity
    as null (JSON has no such numbers)."""
    def cut(v: Any) -> Any:
        if isinstance(v, str):
            return v if len(v) <= MAX_VALUE_CHARS else v[:MAX_VALUE_CHARS] + f"… [{len(v) - MAX_VALUE_CHARS} characters cut]"
        return None if isinstance(v, float) and not math.isfinite(v) else v

    return map_leaves(obj, cut)  # one walk: strings cut, non-finite numbers null (as guard.finite)


class Ledger:
    """The SQLite ledger. Open with ``Ledger(path)`` (``None``: :func:`default_db_path`); use as a
    context manager or call :meth:`close`.

    Raises :class:`LedgerError` when the file is not an SQLite database, belongs to another
    application, has a schema newer than :data:`MIGRATIONS`, or cannot be created.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, readonly: bool = False) -> None:
        named = path is not None or bool(os.environ.get("INFERGAP_DB"))
        self.path = Path(path) if path is not None else default_db_path()
        if readonly:
            self._open_readonly()
            return
        if named:  # a path the user typed: a missing folder is a typo, not something to create
            if not self.path.parent.is_dir():
                by = "--db" if path is not None else "$INFERGAP_DB"
                raise LedgerError(f"ledger {self.path} (named by {by}): the directory {self.path.parent} does not exist; "
                                  "create it or name another path")
        else:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise LedgerError(f"ledger {self.path}: cannot create its directory ({e.strerror or e})") from None
        try:
            self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        except sqlite3.Error as e:
            raise LedgerError(f"ledger {self.path}: cannot open ({db_reason(e, self.path)})") from None
        try:
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._setup_retrying()
        except (sqlite3.DatabaseError, OSError) as e:
            self._db.close()
            reason = db_reason(e, self.path)
            raise LedgerError(f"ledger {self.path}: " + (reason if reason != str(e) else f"not a usable infergap ledger ({e})")) from None
        except LedgerError:
            self._db.close()
            raise

    def _open_readonly(self) -> None:
        """Open for reading only (``history``, ``compare``): nothing is created or migrated, so a
        read-only directory or file works. A ledger that does not exist yet reads as empty."""
        if not self.path.exists():
            self._db = sqlite3.connect(":memory:", isolation_level=None)
            self._setup()
            return
        last: Exception | None = None
        # immutable=1: a WAL database in a read-only directory cannot create its -shm file
        for extra in ("", "&immutable=1"):
            try:
                self._db = sqlite3.connect(f"file:{quote(str(self.path.resolve()))}?mode=ro{extra}", uri=True,
                                           timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
                version, app_id, tables = self._state()
                self._check(version, app_id, tables)
                if version == 0:
                    # Another process has created the file and not yet committed its schema (one
                    # transaction): read it as the empty ledger it is, not as tables that are missing.
                    self._db.close()
                    self._db = sqlite3.connect(":memory:", isolation_level=None)
                    self._setup()
                return
            except sqlite3.DatabaseError as e:
                last = e
                try:
                    self._db.close()
                except (sqlite3.Error, AttributeError):
                    pass
                if not isinstance(e, sqlite3.OperationalError):  # the file is there but is no database
                    reason = db_reason(e, self.path)
                    raise LedgerError(f"ledger {self.path}: " + (reason if reason != str(e) else f"not a usable infergap ledger ({e})")) from None
            except LedgerError:
                self._db.close()
                raise
        raise LedgerError(f"ledger {self.path}: cannot open for reading ({last})")

    # -- schema ---------------------------------------------------------------------------------

    def _setup_retrying(self) -> None:
        """:meth:`_setup`, retried while another process holds a lock it cannot wait for.

        Switching a new database to WAL and migrating it both need an exclusive lock; when two
        processes open a new database at once SQLite may answer one of them ``database is locked``
        at once instead of waiting (its deadlock avoidance), so retry until the busy timeout."""
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                self._setup()
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() > deadline:
                    raise
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                time.sleep(random.uniform(0.01, 0.1))

    def _state(self) -> tuple[int, int, bool]:
        """(user_version, application_id, has tables), read in one transaction so that another
        process's migration is seen either entirely or not at all."""
        db = self._db
        own = not db.in_transaction
        if own:
            db.execute("BEGIN")
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            app_id = db.execute("PRAGMA application_id").fetchone()[0]
            tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0
        except sqlite3.Error:
            if own and db.in_transaction:
                db.execute("ROLLBACK")
            raise
        if own and db.in_transaction:  # SQLite ends the transaction itself after SQLITE_FULL
            db.execute("COMMIT")
        return version, app_id, tables

    def _check(self, version: int, app_id: int, tables: bool) -> None:
        if version > len(MIGRATIONS):
            raise LedgerError(
                f"ledger {self.path}: schema version {version} is newer than this infergap supports "
                f"({len(MIGRATIONS)}); upgrade infergap or use another --db")
        if app_id not in (0, APPLICATION_ID) or (app_id == 0 and tables):
            raise LedgerError(f"ledger {self.path}: not an infergap ledger (another application's SQLite database)")

    def _setup(self) -> None:
        db = self._db
        version, app_id, tables = self._state()
        self._check(version, app_id, tables)
        if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA foreign_keys = ON")
        # Journal first means the journal is on disk before the change: sync every commit.
        db.execute("PRAGMA synchronous = FULL")
        if version == len(MIGRATIONS):
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            # Re-read under the write lock: another process may have migrated meanwhile.
            version, app_id, tables = self._state()
            self._check(version, app_id, tables)
            for step in MIGRATIONS[version:]:
                for stmt in [s for s in step.split(";") if s.strip()]:
                    db.execute(stmt)
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:  # SQLite has already rolled back after SQLITE_FULL / SQLITE_CORRUPT
                db.execute("ROLLBACK")
            raise

    @property
    def schema_version(self) -> int:
        """``PRAGMA user_version`` of the open database."""
        return self._db.execute("PRAGMA user_version").fetchone()[0]

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, sql: str, params: tuple[Any, ...] | Mapping[str, Any] = ()) -> sqlite3.Cursor:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                cur = self._db.execute(sql, params)
                self._db.execute("COMMIT")
            except BaseException:
                # After SQLITE_FULL or SQLITE_CORRUPT SQLite has rolled back already; a second
                # ROLLBACK would replace the cause with "no transaction is active".
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        except (sqlite3.Error, OSError) as e:
            reason = db_reason(e, self.path)
            raise LedgerError(f"ledger {self.path}: " + (reason if reason != str(e) else f"write failed ({e})")) from None
        return cur

    # -- runs -----------------------------------------------------------------------------------

    @_guarded
    def record(self, kind: str, payload_json: str | Mapping[str, Any] | list[Any],
               host: HostId | Mapping[str, Any] | str | None = None, *, status: str | None = None,
               parent_id: int | None = None) -> int:
        """Store one run and return its id (an integer, increasing).

        ``kind``: one of :data:`KINDS`. ``payload_json``: the run's JSON document, as text or as a
        parsed object (stored as compact JSON). ``host``: a :class:`HostId`, a report's ``host``
        object (fingerprinted by :func:`host_fingerprint`), a fingerprint string, or ``None`` for
        the machine this process runs on. ``status``: given, or for a bench run
        :func:`bench_status` of its payload. Raises :class:`LedgerError` for an unknown kind or
        payload text that is not JSON.
        """
        if kind not in KINDS:
            raise LedgerError(f"ledger: unknown run kind {kind!r} (one of {', '.join(KINDS)})")
        if isinstance(payload_json, str):
            try:
                doc = json.loads(payload_json)
            except ValueError as e:
                raise LedgerError(f"ledger: {kind} payload is not JSON ({e})") from None
            text = payload_json
        else:
            doc = payload_json
            text = json.dumps(cap_values(payload_json), separators=(",", ":"), default=str, allow_nan=False)
        if status is None and kind == "bench":
            status = bench_status(doc)
        hid = _as_host(host)
        host_json = json.dumps(dict(host), default=str) if isinstance(host, Mapping) else None
        cur = self._write(
            "INSERT INTO runs(kind, created_at, host, host_name, host_json, status, parent_id, payload) VALUES (?,?,?,?,?,?,?,?)",
            (kind, utc_now(), hid.fingerprint, hid.name, host_json, status, parent_id, text))
        return int(cur.lastrowid)

    @_guarded
    def update_run(self, run_id: int, *, payload: Mapping[str, Any] | None = None, status: str | None = None) -> None:
        """Replace a run's payload and/or status (used by ``fix`` as its changes complete)."""
        if payload is not None:
            self._write("UPDATE runs SET payload = ? WHERE id = ?",
                        (json.dumps(cap_values(payload), separators=(",", ":"), default=str, allow_nan=False), run_id))
        if status is not None:
            self._write("UPDATE runs SET status = ? WHERE id = ?", (status, run_id))

    def _row_to_run(self, row: tuple[Any, ...]) -> Run:
        rid, kind, created, host, name, status, parent, payload = row
        try:
            data = json.loads(payload)
        except (ValueError, RecursionError):  # a row damaged or written by something else
            data = None
        return Run(rid, kind, created, host, name, status, parent, data)

    _COLS = "id, kind, created_at, host, host_name, status, parent_id, payload"

    @_guarded
    def get(self, run_id: int | str) -> Run:
        """The run with this id; ``"last"`` is the newest run. Raises :class:`LedgerError` when absent."""
        if str(run_id) == "last":
            row = self._db.execute(f"SELECT {self._COLS} FROM runs ORDER BY id DESC LIMIT 1").fetchone()
        else:
            try:
                rid = int(run_id)
            except ValueError:
                raise LedgerError(f"run id {run_id!r}: not a number or 'last'") from None
            if not 0 < rid < 1 << 63:  # SQLite's INTEGER range: a larger id can name no run
                raise LedgerError(f"ledger {self.path}: no run {run_id}")
            row = self._db.execute(f"SELECT {self._COLS} FROM runs WHERE id = ?", (rid,)).fetchone()
        if row is None:
            raise LedgerError(f"ledger {self.path}: no run {run_id}")
        return self._row_to_run(row)

    def latest(self, kind: str | None = None, host: str | None = None, status: str | None = None) -> Run | None:
        """The newest run of this kind (and host fingerprint/name prefix, and status), or ``None``.
        ``infergap bench --baseline last`` uses ``latest(kind="bench")``."""
        runs = self.runs(kind=kind, host=host, status=status, limit=1)
        return runs[0] if runs else None

    @_guarded
    def runs(self, kind: str | None = None, host: str | None = None, status: str | None = None,
             limit: int | None = None) -> list[Run]:
        """Runs newest first, filtered by kind, host (fingerprint prefix or exact name) and status."""
        where, params = [], []
        if kind:
            where.append("kind = ?")
            params.append(kind)
        if host:
            where.append("(host LIKE ? OR host_name = ?)")
            params += [host.replace("%", "") + "%", host]
        if status:
            where.append("status = ?")
            params.append(status)
        sql = f"SELECT {self._COLS} FROM runs" + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [self._row_to_run(r) for r in self._db.execute(sql, params)]

    # -- fix journal ----------------------------------------------------------------------------

    @_guarded
    def journal_begin(self, run_id: int, seq: int, *, check_id: str, subject: str | None, step_kind: str,
                      target: str, command: str, action_json: str | None = None, before: str | None = None,
                      intended: str | None = None, file_existed: bool | None = None,
                      file_previous: bytes | None = None, file_mode: int | None = None) -> int:
        """Journal a change *before* it is made (status ``pending``); returns the step id.

        ``step_kind`` is ``value`` (a setting: ``before`` is the value read back from the system) or
        ``file`` (a file written by ``--persist``: ``file_existed``, ``file_previous`` bytes and mode).
        """
        cur = self._write(
            "INSERT INTO fix_steps(run_id, seq, check_id, subject, step_kind, action_json, target, command, before,"
            " intended, file_existed, file_previous, file_mode, status, started_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (run_id, seq, check_id, subject, step_kind, action_json, target, command, before, intended,
             None if file_existed is None else int(file_existed), file_previous, file_mode, "pending", utc_now()))
        return int(cur.lastrowid)

    @_guarded
    def journal_end(self, step_id: int, *, status: str, after: str | None = None, error: str | None = None) -> None:
        """Journal the outcome of a change: ``applied`` or ``failed``, the value re-read, the error."""
        self._write("UPDATE fix_steps SET status = ?, after = ?, error = ?, finished_at = ? WHERE id = ?",
                    (status, after, error, utc_now(), step_id))

    @_guarded
    def journal_revert(self, step_id: int, *, status: str, value: str | None = None, error: str | None = None) -> None:
        """Journal the revert of one step: ``reverted`` or ``revert_failed``, the value re-read."""
        self._write("UPDATE fix_steps SET revert_status = ?, revert_value = ?, revert_error = ?, reverted_at = ? WHERE id = ?",
                    (status, value, error, utc_now(), step_id))

    @_guarded
    def steps(self, run_id: int) -> list[dict[str, Any]]:
        """The journal of one fix run, in the order the changes were made."""
        cur = self._db.execute("SELECT * FROM fix_steps WHERE run_id = ? ORDER BY seq", (run_id,))
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, row)) for row in cur]

    # -- experiments (infergap tune) -------------------------------------------------------------

    @_guarded
    def record_experiment(self, run_id: int, key: "ExperimentKey", *, lever: str, setting: str, metric: str,
                          verdict: str, change_pct: float | None, payload: Mapping[str, Any]) -> int:
        """Store one trial of ``infergap tune``: the lever and its setting (the change as argv
        words), the metric judged, the verdict (``helps``, ``hurts``, ``no effect``, ``refused``,
        ``not measured``), the median change in per cent and the measurement (``payload``: the
        baseline and variant values of every interleaved run, their spread, the bench run ids).
        ``key`` is what the trial was made on; returns the row id."""
        text = json.dumps(cap_values(dict(payload)), separators=(",", ":"), default=str, allow_nan=False)
        cur = self._write(
            "INSERT INTO experiments(run_id, created_at, host, engine, engine_version, model, workload, lever, setting,"
            " metric, verdict, change_pct, payload) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (run_id, utc_now(), key.host, key.engine, key.engine_version, key.model, key.workload, lever, setting,
             metric, verdict, change_pct, text))
        return int(cur.lastrowid)

    @_guarded
    def experiments(self, host: str | None = None, engine: str | None = None, engine_version: str | None = None,
                    model: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Recorded trials newest first, each a dict of the row with ``payload`` parsed; filtered by
        exact host fingerprint, engine, engine version and model when given. A ledger opened
        read-only before its schema had experiments (version 1) has none: empty."""
        if self.schema_version < 2:
            return []
        where, params = [], []
        for col, val in (("host", host), ("engine", engine), ("engine_version", engine_version), ("model", model)):
            if val is not None:
                where.append(f"{col} = ?")
                params.append(val)
        sql = "SELECT * FROM experiments" + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        cur = self._db.execute(sql, params)
        cols = [c[0] for c in cur.description]
        out = []
        for row in cur:
            d = dict(zip(cols, row))
            try:
                d["payload"] = json.loads(d["payload"])
            except (ValueError, RecursionError):
                d["payload"] = None
            out.append(d)
        return out

    @_guarded
    def integrity_ok(self) -> bool:
        """True when ``PRAGMA integrity_check`` reports ``ok``."""
        return self._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"



@dataclass(frozen=True)
class ExperimentKey:
    """What a tune trial was made on: the host fingerprint (:func:`local_host`), the engine and
    its version and the model as the server reports them (:func:`infergap.server.introspect`),
    and the workload (a short text: API, concurrency levels, prompt and output lengths). A
    verdict holds for its key only: another host, engine version or model does not inherit it."""

    host: str
    engine: str
    engine_version: str
    model: str
    workload: str


def bench_status(payload: Any) -> str | None:
    """The ledger status of a bench run (its parsed JSON): ``failed`` when it stopped on an error
    (the server stopped answering) or a point is invalid (failures above the budget),
    ``interrupted`` when stopped by the user, ``None`` otherwise — so ``history`` never lists a
    failed benchmark as a plain one. :meth:`Ledger.record` sets it for every bench run."""
    if not isinstance(payload, Mapping):
        return None
    pts = [p for p in payload.get("points") or [] if isinstance(p, Mapping)]
    if payload.get("error") or any(p.get("valid") is False for p in pts):
        return "failed"
    return "interrupted" if payload.get("interrupted") else None


def try_record(kind: str, payload: str | Mapping[str, Any], host: HostId | Mapping[str, Any] | str | None = None,
               db: str | os.PathLike[str] | None = None) -> int | None:
    """Record a run after its output was written, never failing the command: returns the run id,
    or ``None`` (with a warning logged) when the ledger cannot be used. For ``audit``, ``bench``,
    ``roofline`` and ``plan``: ``host=None`` for a run measured on this machine, the report's
    ``host`` object for one computed from a snapshot."""
    try:
        with Ledger(db) as led:
            return led.record(kind, payload, host)
    except LedgerError as e:
        log.warning("run not recorded in the ledger: %s", e)
        return None


# -- comparing runs ---------------------------------------------------------------------------------

def finding_key(f: Mapping[str, Any]) -> tuple[str, str]:
    """Identity of a finding across runs: (check id, subject or "")."""
    return (str(f.get("id", "")), str(f.get("subject") or ""))


@dataclass
class AuditDiff:
    """Findings of audit B relative to audit A, keyed by (id, subject): ``appeared`` and
    ``disappeared`` findings, and ``changed`` ones as (key, A's status/severity, B's)."""

    appeared: list[dict[str, Any]]
    disappeared: list[dict[str, Any]]
    changed: list[tuple[tuple[str, str], str, str]]


def _status_text(f: Mapping[str, Any]) -> str:
    sev = f.get("severity")
    return f"{f.get('status')}{(' ' + sev) if sev else ''}"


def compare_audits(a: Mapping[str, Any], b: Mapping[str, Any]) -> AuditDiff:
    """Compare two ``infergap.audit/1`` reports finding by finding (see :class:`AuditDiff`)."""
    fa = {finding_key(f): f for f in a.get("findings") or [] if isinstance(f, dict)}
    fb = {finding_key(f): f for f in b.get("findings") or [] if isinstance(f, dict)}
    appeared = [fb[k] for k in fb if k not in fa]
    disappeared = [fa[k] for k in fa if k not in fb]
    changed = [(k, _status_text(fa[k]), _status_text(fb[k])) for k in fa if k in fb and _status_text(fa[k]) != _status_text(fb[k])]
    return AuditDiff(appeared, disappeared, changed)


def compare_runs(a: Run, b: Run) -> Any:
    """Compare two runs of the same kind: audits finding by finding (:class:`AuditDiff`), benches
    point by point with :func:`infergap.bench.compare_bench` (a :class:`~infergap.bench.BenchComparison`;
    a change is significant only outside both runs' spread over their trials).

    Raises :class:`LedgerError` for runs of different kinds, of a kind with no comparison, or
    whose payload is not the expected document.
    """
    if a.kind != b.kind:
        def article(kind: str) -> str:
            return "an" if kind[:1] in "aeiou" else "a"
        raise LedgerError(f"compare: run {a.id} is {article(a.kind)} {a.kind} run and run {b.id} {article(b.kind)} {b.kind} run; "
                          "compare runs of one kind")
    if not isinstance(a.payload, dict) or not isinstance(b.payload, dict):
        raise LedgerError(f"compare: run {a.id if not isinstance(a.payload, dict) else b.id} has no JSON object payload")
    if a.kind == "audit":
        return compare_audits(a.payload, b.payload)
    if a.kind == "bench":
        from pydantic import ValidationError

        from infergap.bench import BenchResult, compare_bench

        results = []
        for run in (a, b):
            try:
                results.append(BenchResult.model_validate(run.payload))
            except ValidationError as e:
                raise LedgerError(f"compare: run {run.id} is not an infergap.bench/1 result "
                                  f"({e.error_count()} problem(s), first: {e.errors()[0]['msg']})") from None
        return compare_bench(results[0], results[1])
    raise LedgerError(f"compare: {a.kind} runs cannot be compared (infergap compare compares audits finding by "
                      "finding, benches point by point and fleet runs node by node)")
