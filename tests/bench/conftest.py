"""Fixtures: real OpenAI-compatible servers on 127.0.0.1, each started once per session
(see bench_helpers for what each server does differently on the wire)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from bench_helpers import ROOT, _start, _stop, free_port, llama_server_bin, server_factory


def _llama(tmp_path_factory, name: str, *options: str):
    pytest.importorskip("llama_cpp.server")
    pytest.importorskip("gguf")
    from bench_tiny_models import write_llama_gguf

    d = tmp_path_factory.mktemp(name)
    model = write_llama_gguf(d / "tiny.gguf")
    port = free_port()
    s = _start([sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
                "--port", str(port), *options], port, d / "server.log")
    s.model_path = model
    return s


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """llama-cpp-python's server serving requests one after another to their end."""
    s = _llama(tmp_path_factory, "llama", "--interrupt_requests", "False", "--verbose", "False", "--n_ctx", "4096")
    yield s
    _stop(s)


@pytest.fixture(scope="session")
def llama_server_default(tmp_path_factory):
    """llama-cpp-python's server as a user starts it: default settings, so --interrupt_requests
    is on and a streaming request is cut short whenever another one waits."""
    s = _llama(tmp_path_factory, "llama-default")
    yield s
    _stop(s)


@pytest.fixture(scope="session")
def tf_server(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("fastapi")
    from bench_tiny_models import write_hf_llama

    d = tmp_path_factory.mktemp("tf")
    model = write_hf_llama(d / "model")
    exe = shutil.which("transformers", path=str(Path(sys.executable).parent)) or shutil.which("transformers")
    if exe is None:
        pytest.skip("transformers CLI not installed")
    port = free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    s = _start([exe, "serve", str(model), "--host", "127.0.0.1", "--port", str(port)], port, d / "server.log", env)
    s.model_path = model
    yield s
    _stop(s)


@pytest.fixture(scope="module")
def llama_bin():
    """llama.cpp's ``llama-server`` (see :func:`bench_helpers.llama_server_bin`); skips without one."""
    exe = llama_server_bin()
    if exe is None:
        pytest.skip("no llama-server binary (.ci/run builds it; or set INFERGAP_LLAMA_SERVER)")
    return exe


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    pytest.importorskip("gguf")
    from bench_tiny_models import write_llama_gguf

    return write_llama_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture
def llama_cpp(llama_bin, tiny_gguf, tmp_path):
    """Start llama-server on the tiny GGUF with ``--metrics`` and extra args."""
    yield from server_factory(tmp_path, "llama", lambda port, args: [
        str(llama_bin), "-m", str(tiny_gguf), "--host", "127.0.0.1", "--port", str(port), "--metrics", "-t", "1",
        "--no-warmup", *args])


@pytest.fixture
def stub_server(tmp_path):
    """Start ``benchmarks/stub_server.py`` with extra args; killed at teardown if still alive."""
    yield from server_factory(tmp_path, "stub", lambda port, args: [
        sys.executable, str(ROOT / "benchmarks" / "stub_server.py"), "--port", str(port), *args])


