"""Helpers for the bench tests: start/stop servers on 127.0.0.1, run ``infergap bench``.

The fixtures (conftest.py) use them to start real OpenAI-compatible servers once per session:

- ``llama_server``: llama-cpp-python's server on a tiny random GGUF (one request at a time, no
  usage while streaming, honours ``min_tokens``, sends ``[DONE]``), started with
  ``--interrupt_requests False``; ``llama_server_default``: the same in its default configuration,
  which cuts a stream short (``[DONE]``, no ``finish_reason``) whenever another request waits.
- ``tf_server``: ``transformers serve`` on a tiny random Llama with a locally trained tokenizer
  (usage on the last chunk, no ``[DONE]``, HTTP 422 for unknown fields).
- ``llama_server_bin()``: llama.cpp's own ``llama-server`` (built by ``.ci/run``), for the tests
  of slots, context and prompt-cache counters that only a production server shows;
- ``stub_server``: factory for ``benchmarks/stub_server.py`` subprocesses (killed in fault tests;
  ``--close-after-stream`` closes each connection after a streamed response, as llama-server does).

Each server's access log is kept so that tests can count the requests the server itself saw.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    log: Path
    model_path: Path | None = None

    def posts(self, path: str) -> int:
        """Requests to ``path`` the server's own access log shows (any status)."""
        pat = re.compile(rf'"POST {re.escape(path)} HTTP/1\.1" \d{{3}}')
        return len(pat.findall(self.log.read_text(errors="replace")))


def _start(cmd: list[str], port: int, log: Path, env=None) -> Server:
    fh = open(log, "w")
    proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=log.parent)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as r:
                if r.status == 200:
                    return Server(url, proc, log)
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"server did not answer within {START_TIMEOUT_S} s: {log.read_text()[-2000:]}")


def _stop(s: Server) -> None:
    s.proc.terminate()
    try:
        s.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        s.proc.kill()
        s.proc.wait(timeout=10)


def server_factory(tmp_path: Path, name: str, command):
    """A generator for a fixture: yields ``start(*args) -> Server``, where ``command(port, args)``
    is the server's command line; every server started is stopped at teardown if still alive."""
    started: list[Server] = []

    def start(*args: str) -> Server:
        port = free_port()
        s = _start(command(port, args), port, tmp_path / f"{name}{port}.log")
        started.append(s)
        return s

    yield start
    for s in started:
        if s.proc.poll() is None:
            _stop(s)


def llama_server_bin() -> Path | None:
    """llama.cpp's ``llama-server``: ``$INFERGAP_LLAMA_SERVER``, else the build ``.ci/run`` makes
    (``build/llama.cpp/bin/llama-server``), else one on ``PATH``; ``None`` when there is none."""
    import shutil

    for cand in (os.environ.get("INFERGAP_LLAMA_SERVER"), ROOT / "build" / "llama.cpp" / "bin" / "llama-server",
                 shutil.which("llama-server")):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return Path(cand)
    return None


def bench_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "infergap", "bench", *map(str, args)]


def bench_env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYTHONUNBUFFERED="1")


def run_bench(*args, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run ``infergap bench`` in a subprocess (bounded by ``timeout``)."""
    return subprocess.run(bench_cmd(*args), capture_output=True, text=True, timeout=timeout, env=bench_env(),
                          stdin=subprocess.DEVNULL)
