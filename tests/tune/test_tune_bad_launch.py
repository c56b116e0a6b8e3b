"""``infergap tune`` given a launch command that cannot serve: a program the exec refuses, one not
on the command's own PATH, a port or host no server can listen on, a program that forks and exits,
one that never answers and is interrupted. Each is one line and a non-zero exit, nothing is left
running, and a command that never started a server is not started a second time."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STUB = ROOT / "benchmarks" / "stub_server.py"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cmd(tmp_path: Path, launch: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "infergap", "tune", "--launch", launch, "--try", "--slots 4", "--log-dir",
            str(tmp_path / "logs"), "--db", str(tmp_path / "l.db"), *args]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT / "src"))


def _tune(tmp_path: Path, launch: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(_cmd(tmp_path, launch, *args), capture_output=True, text=True, timeout=120, env=_env(), cwd=tmp_path)


def _one_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    return r.stderr.strip().splitlines()[0]


def test_a_program_the_exec_refuses_is_one_line(tmp_path):
    bad = tmp_path / "server"
    bad.write_bytes(b"\x7fELF not a program")
    bad.chmod(0o755)
    line = _one_line(_tune(tmp_path, f"{bad} --port {_port()}", "--start-timeout", "5"))
    assert "could not be started (Exec format error)" in line, line


def test_a_program_missing_from_the_commands_own_path_is_one_line(tmp_path):
    line = _one_line(_tune(tmp_path, f"PATH={tmp_path} python3 {STUB} --port {_port()}", "--start-timeout", "5"))
    assert "'python3' could not be started (No such file or directory)" in line, line


@pytest.mark.parametrize("words,want", [("--port 99999", "--port 99999 is not a port number"),
                                        ("--port -5", "--port -5 is not a port number"),
                                        ("--host 'a b' --port 8123", "--host 'a b' is not a host name")])
def test_an_address_no_server_can_listen_on_is_one_line(tmp_path, words, want):
    line = _one_line(_tune(tmp_path, f"{sys.executable} {STUB} {words}"))
    assert line.startswith("infergap: error: --launch: ") and want in line, line


def _sleepers(tag: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and tag.encode() in (d / "cmdline").read_bytes():
                out.append(int(d.name))
        except OSError:
            pass
    return out


def test_a_program_that_forks_and_exits_leaves_nothing_running(tmp_path):
    tag = f"{300 + os.getpid() % 97}.25"
    line = _one_line(_tune(tmp_path, f"sh -c 'sleep {tag} & exit 0' --port {_port()}", "--start-timeout", "5"))
    assert "exited with status 0 before answering" in line, line
    time.sleep(0.5)
    assert _sleepers(f"sleep\0{tag}") == []


def test_an_interrupt_while_a_server_never_answers_stops_it_and_starts_nothing_again(tmp_path):
    tag = f"{400 + os.getpid() % 97}.5"
    p = subprocess.Popen(_cmd(tmp_path, f"sleep {tag}", "--url", f"http://127.0.0.1:{_port()}", "--start-timeout", "100"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not _sleepers(f"sleep\0{tag}") and time.monotonic() < deadline:
        time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err[-2000:]
    assert "interrupted" in out and _sleepers(f"sleep\0{tag}") == []
    assert sorted(x.name for x in (tmp_path / "logs").iterdir()) == ["server-00-baseline.log"]


def test_a_command_that_never_answers_is_started_once(tmp_path):
    r = _tune(tmp_path, "sleep 30.75", "--url", f"http://127.0.0.1:{_port()}", "--start-timeout", "2")
    assert "did not answer" in _one_line(r)
    assert sorted(x.name for x in (tmp_path / "logs").iterdir()) == ["server-00-baseline.log"]
    assert _sleepers("sleep\x0030.75") == []
