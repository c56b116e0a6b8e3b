"""Shared pieces of the hostile-input tests: a writable copy of a real captured host, and the
checks every hostile run must pass (one line on stderr, no traceback, a known exit status)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.conftest import HOSTS, run_cli

SNAPSHOT = HOSTS / "h200-1gpu"


def snapshot_copy(tmp_path: Path, name: str = "snap") -> Path:
    """A writable copy of the captured H200 host (files/, cmds/)."""
    dest = tmp_path / name
    shutil.copytree(SNAPSHOT, dest)
    return dest


def no_traceback(p: subprocess.CompletedProcess) -> None:
    """The run ended by the program's own choice: no Python traceback, no status of a crash."""
    assert "Traceback (most recent call last)" not in p.stderr, p.stderr[-3000:]
    assert p.returncode in (0, 1, 2), (p.returncode, p.stderr[-2000:])


def one_line_error(p: subprocess.CompletedProcess, *words: str) -> str:
    """The run failed with exit status 2 and one ``infergap: error:`` line holding ``words``."""
    no_traceback(p)
    lines = [x for x in p.stderr.strip().splitlines() if x.strip()]
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("infergap: error: "), p.stderr[-2000:]
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    """``python -m infergap ARGS`` (see :func:`tests.conftest.run_cli`)."""
    return run_cli(*args, **kw)
