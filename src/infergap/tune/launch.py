"""The server's launch command: parsed into words (never given to a shell), its engine recognised,
its flags read with the engine's own table, one change applied, and the process started, waited
for and stopped.

A launch command is text the user gives (``--launch 'llama-server -m m.gguf -ngl 99'``). It is
split into words with :func:`shlex.split` (POSIX quoting only: no ``;``, ``|``, ``$( )``, globbing
or variable expansion — those characters stay inside the word they are written in), leading
``NAME=value`` words become the process's environment, and the rest is the argv list given to
:class:`subprocess.Popen` as is. The engine is recognised by
:func:`infergap.parsers.engine_args.engine_of`; with the engine's mined argument table
(``data/engine_args``: llama.cpp, vLLM, SGLang) every spelling of a flag (``-ub``,
``--ubatch-size``, ``--ubatch-size=8``) is one option and a switch takes no value; for another
program flags are matched as written and a flag followed by a word that does not start with
``-`` takes it as its value.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from infergap.errors import UserError
from infergap.parsers import engine_args

#: Default address of each engine's server when the command names none (llama.cpp
#: common/common.h: hostname 127.0.0.1, port 8080; vLLM's and SGLang's server arguments: 8000, 30000).
DEFAULT_PORTS = {"llama.cpp": 8080, "vllm": 8000, "sglang": 30000}
#: Seconds a server may take to answer its health endpoint after start (a large model loads for minutes).
START_TIMEOUT_S = 600.0
#: Seconds a server is given to exit on SIGTERM before SIGKILL.
STOP_TIMEOUT_S = 20.0
#: Lines and characters of a server's log kept when it fails to start.
LOG_TAIL_LINES = 20
LOG_TAIL_CHARS = 4000

_ENV_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}=")
_NUMBER = re.compile(r"^-\d+(?:\.\d+)?$")
#: A host name or an IPv4/IPv6 address as the server's --host can be written (RFC 1123 labels, or hex and colons).
_HOST = re.compile(r"^(?:[A-Za-z0-9_]([A-Za-z0-9_.-]{0,252})|\[?[0-9A-Fa-f:.]{2,45}\]?)$")


@dataclass
class Launch:
    """One way to start the server: ``env`` (variables added to the environment), ``argv`` (program
    first) and the ``engine`` recognised (None: an unknown program, flags edited as written)."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    engine: str | None = None

    def text(self) -> str:
        """The command line, each word quoted for a POSIX shell (to print; never run through one)."""
        return shlex.join([f"{k}={v}" for k, v in self.env.items()] + self.argv)

    def has_table(self) -> bool:
        """True when the engine has a mined argument table."""
        if self.engine is None:
            return False
        try:
            engine_args.table(self.engine)
        except KeyError:
            return False
        return True


def parse_launch(text: str) -> Launch:
    """Split ``text`` into a :class:`Launch`. Raises UserError (one line) for unbalanced quotes,
    an empty command or a program that is not found."""
    try:
        words = shlex.split(text, posix=True)
    except ValueError as e:
        raise UserError(f"--launch: cannot split the command into words ({e})") from None
    env: dict[str, str] = {}
    while words and _ENV_WORD.match(words[0]):
        k, _, v = words.pop(0).partition("=")
        env[k] = v
    if not words:
        raise UserError("--launch: no program to start")
    if shutil.which(words[0]) is None:
        raise UserError(f"--launch: program {words[0]!r} not found (not on PATH, or not executable)")
    return Launch(argv=words, env=env, engine=engine_args.engine_of(words))


def _key(launch: Launch, flag: str) -> str:
    return engine_args.canonical(launch.engine, flag) if launch.has_table() else flag


def _takes_value(launch: Launch, flag: str, nxt: str | None) -> int:
    """How many words after ``flag`` (as written, maybe ``--x=v``) are its value: 0 or 1 (2 for a pair)."""
    if "=" in flag and flag.startswith("-"):
        return 0
    if launch.has_table():
        hit = engine_args._index(launch.engine).get(flag)
        if hit is not None:
            kind = hit[0]["kind"]
            return 0 if kind in ("switch", "bool") else (2 if kind == "pair" else 1)
    return 1 if nxt is not None and (not nxt.startswith("-") or _NUMBER.match(nxt)) else 0


def _spans(launch: Launch) -> list[tuple[str, int, int]]:
    """(canonical flag, start, end) of every flag of ``argv`` after the program (end exclusive)."""
    out, argv, i = [], launch.argv, 1
    while i < len(argv):
        tok = argv[i]
        if tok.startswith("-") and len(tok) > 1:
            name = tok.partition("=")[0]
            n = _takes_value(launch, tok, argv[i + 1] if i + 1 < len(argv) else None)
            out.append((_key(launch, name), i, min(len(argv), i + 1 + n)))
            i += 1 + n
        else:
            i += 1
    return out


@dataclass(frozen=True)
class Change:
    """One lever's change to the command: ``set`` words (``("--parallel", "8")``: flags with their
    values, replacing the flag wherever and however it is spelled) and ``drop`` flags (removed with
    their values; for a negated spelling name it as written, ``--no-kv-offload``); ``env`` variables
    to set."""

    set: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def text(self) -> str:
        """The change in words: ``--parallel 8``, ``without --no-kv-offload``, ``VAR=1``."""
        parts = [f"{k}={v}" for k, v in self.env] + [shlex.join(self.set)] * bool(self.set) \
            + [f"without {d}" for d in self.drop]
        return " ".join(parts)


def parse_change(text: str) -> Change:
    """A change as the user writes it after ``--try``: flags with values (``--parallel 8``),
    ``without FLAG`` to remove one, ``NAME=value`` for the environment. Raises UserError.

    >>> parse_change("-ub 8 -b 8")
    Change(set=('-ub', '8', '-b', '8'), drop=(), env=())
    >>> parse_change("without --no-kv-offload").drop
    ('--no-kv-offload',)
    """
    try:
        words = shlex.split(text, posix=True)
    except ValueError as e:
        raise UserError(f"--try {text!r}: cannot split into words ({e})") from None
    sets, drops, env = [], [], []
    i = 0
    while i < len(words):
        w = words[i]
        if w == "without" and i + 1 < len(words):
            drops.append(words[i + 1])
            i += 2
            continue
        if not sets and _ENV_WORD.match(w):
            k, _, v = w.partition("=")
            env.append((k, v))
        else:
            sets.append(w)
        i += 1
    if sets and not sets[0].startswith("-"):
        raise UserError(f"--try {text!r}: a change starts with a flag (--name value), 'without FLAG' or NAME=value")
    if not (sets or drops or env):
        raise UserError(f"--try {text!r}: no change")
    return Change(tuple(sets), tuple(drops), tuple(env))


def apply_change(launch: Launch, change: Change) -> Launch:
    """A new :class:`Launch` with ``change`` made: every flag of ``change.set`` and ``change.drop``
    is removed wherever it occurs (any spelling), then the ``set`` words are appended."""
    setflags = {_key(launch, w.partition("=")[0]) for w in change.set if w.startswith("-")}
    drop = {(_key(launch, d), _negated(launch, d)) for d in change.drop}
    cut: set[int] = set()
    for name, a, b in _spans(launch):
        if name in setflags or (name, _negated(launch, launch.argv[a].partition("=")[0])) in drop:
            cut.update(range(a, b))
    argv = [w for i, w in enumerate(launch.argv) if i not in cut] + list(change.set)
    return Launch(argv=argv, env={**launch.env, **dict(change.env)}, engine=launch.engine)


def _negated(launch: Launch, flag: str) -> bool:
    hit = engine_args._index(launch.engine).get(flag) if launch.has_table() else None
    return bool(hit and hit[1])


def flag_value(launch: Launch, flag: str) -> str | None:
    """The value written for ``flag`` (any spelling) in the command, the flag itself for a switch, or None."""
    key = _key(launch, flag)
    for name, a, b in _spans(launch):
        if name == key:
            tok = launch.argv[a]
            return tok.partition("=")[2] if "=" in tok else (" ".join(launch.argv[a + 1:b]) or tok)
    return None


def address(launch: Launch) -> tuple[str, int]:
    """(host, port) the command makes the server listen on: its ``--host``/``--port``, else the
    engine's default (:data:`DEFAULT_PORTS`); a wildcard host is reached on 127.0.0.1."""
    host = flag_value(launch, "--host") or "127.0.0.1"
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    port = flag_value(launch, "--port")
    try:
        p = int(port) if port is not None else DEFAULT_PORTS.get(launch.engine or "", 8000)
    except ValueError:
        raise UserError(f"--launch: --port {port!r} is not a port number (1-65535)") from None
    if not 1 <= p <= 65535:
        raise UserError(f"--launch: --port {p} is not a port number (1-65535)")
    if not _HOST.match(host):
        raise UserError(f"--launch: --host {host!r} is not a host name or address")
    return host, p


def log_tail(path: Path, lines: int = LOG_TAIL_LINES, chars: int = LOG_TAIL_CHARS) -> list[str]:
    """The last ``lines`` lines of a log (at most ``chars`` characters in all, read from the last
    64 KiB), control characters shown escaped."""
    from infergap.guard import term_safe

    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    out = [term_safe(ln, one_line=True) for ln in data.splitlines()[-lines:]]
    while out and sum(len(x) for x in out) > chars:
        out.pop(0)
    return out


class Refused(Exception):
    """The server did not start with this command: ``why`` in words, ``tail`` its log's last lines."""

    def __init__(self, why: str, tail: list[str]):
        super().__init__(why)
        self.why, self.tail = why, tail


class Cancelled(Exception):
    """The wait for a starting server was given up (the tune is stopping)."""


@dataclass
class Server:
    """A server process started from a :class:`Launch`, its log file and its URL."""

    launch: Launch
    url: str
    log: Path
    proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = START_TIMEOUT_S, cancel: Callable[[], bool] = lambda: False) -> float:
        """Start the process (argv list, no shell, its own process group) and wait until its
        ``/v1/models`` answers 200. Returns the seconds it took. Raises :class:`Refused` when the
        process exits first or does not answer within ``timeout_s`` (the process is then stopped),
        :class:`Cancelled` (the process stopped) as soon as ``cancel()`` is true."""
        env = dict(os.environ, **self.launch.env)
        t0 = time.monotonic()
        with open(self.log, "ab") as fh:
            try:
                self.proc = subprocess.Popen(self.launch.argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env=env, start_new_session=True, close_fds=True)
            except OSError as e:
                raise Refused(f"{self.launch.argv[0]!r} could not be started ({e.strerror or e})", []) from None
        while time.monotonic() - t0 < timeout_s:
            rc = self.proc.poll()
            if rc is not None:
                self.stop()
                raise Refused(f"the server exited with status {rc} before answering", log_tail(self.log))
            if _ready(self.url):
                return time.monotonic() - t0
            if cancel():
                self.stop()
                raise Cancelled()
            time.sleep(0.2)
        self.stop()
        raise Refused(f"the server did not answer {self.url}/v1/models within {timeout_s:g} s", log_tail(self.log))

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL after :data:`STOP_TIMEOUT_S`; wait for it."""
        p = self.proc
        if p is None:
            return
        if p.poll() is not None:
            # The program exited; what it started in its session (a forked server) is stopped too.
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            return
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=STOP_TIMEOUT_S)


def _ready(url: str) -> bool:
    from http.client import HTTPException

    from infergap.httpsafe import get

    try:
        status, _ = get(url + "/v1/models", timeout_s=2.0, max_bytes=1 << 20)
    except (OSError, ValueError, HTTPException):
        return False
    return status == 200


def port_free(host: str, port: int) -> bool:
    """True when nothing accepts connections on ``host:port`` (a connect attempt, 1 s)."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=1.0):
            return False
    except OSError:
        return True
