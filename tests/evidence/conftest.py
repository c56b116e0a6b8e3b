"""Fixtures of the evidence tests: a real llama-cpp-python server on 127.0.0.1 serving a tiny
random GGUF written at test time."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from tests.evidence.evidence_data import API_KEY, free_port, write_tiny_gguf


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """llama-cpp-python's OpenAI server on 127.0.0.1 with an admin API key; yields its URL."""
    pytest.importorskip("llama_cpp.server")
    pytest.importorskip("gguf")
    d = tmp_path_factory.mktemp("llama")
    model = write_tiny_gguf(d / "tiny.gguf")
    port = free_port()
    log = open(d / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
                             "--port", str(port), "--n_ctx", "256", "--api_key", API_KEY],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited: {(d / 'server.log').read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("llama_cpp.server did not start in 120 s")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
