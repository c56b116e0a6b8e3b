"""``infergap collect`` keeps the serving process of a real ``llama-server`` started here (found
from ``--url``, or as a known engine listening), secrets never kept, and the snapshot's audit
reads it as one source record."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.bench.bench_helpers import free_port, llama_server_bin

BIN = llama_server_bin()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(BIN is None, reason="no llama-server (.ci/run builds it at build/llama.cpp/bin)")]
SECRET = "sk-collect-7f3a9"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.bench.bench_tiny_models import write_llama_gguf

    d = tmp_path_factory.mktemp("collect-proc")
    model = write_llama_gguf(d / "tiny.gguf", n_ctx=1024)
    port = free_port()
    env = {**os.environ, "HF_TOKEN": SECRET, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "2"}
    p = subprocess.Popen([str(BIN), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-t", "2", "-ub", "8",
                          "--api-key", SECRET], stdout=open(d / "log", "wb"), stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and p.poll() is None:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                break
        except OSError:
            time.sleep(0.3)
    yield url, p
    p.terminate()
    p.wait(timeout=20)


@pytest.mark.parametrize("by_url", [True, False])
def test_collect_keeps_the_serving_process_scrubbed_and_the_audit_reads_it(server, tmp_path, by_url):
    from infergap.audit import run_audit
    from infergap.snapshot.collect import collect
    from infergap.snapshot.core import DirSnapshot

    url, proc = server
    out = tmp_path / "snap"
    collect(out, url=url if by_url else None)
    raw = (out / "probes" / "process.json").read_text()
    assert SECRET not in raw and SECRET not in "".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())
    data = json.loads(raw)
    mine = [x for x in data["processes"] if x["pid"] == proc.pid]
    assert mine, data
    ev = mine[0]
    assert "-ub" in ev["argv"] and "<scrubbed>" in ev["argv"] and ev["env"]["CUDA_VISIBLE_DEVICES"] == "" and "HF_TOKEN" not in ev["env"]
    report = run_audit(DirSnapshot(out))
    f = [x for x in report.findings if x.id == "server.process" and str(proc.pid) in (x.subject or "")]
    assert f and f[0].status.value == "ok", [(x.id, x.status) for x in report.findings if x.id.startswith("server")]
    text = " ".join(e.value for e in f[0].evidence if isinstance(e.value, str))
    assert "--ubatch-size = 8 (-ub)" in text and "CUDA_VISIBLE_DEVICES=''" in text and SECRET not in text
