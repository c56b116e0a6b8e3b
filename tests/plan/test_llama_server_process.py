"""llama.cpp's own ``llama-server`` started here in each misconfiguration the doctor must name from
the serving process: found from ``--url`` alone, its flags read with llama.cpp's argument table,
its environment read; the doctor's first lever names the flag or variable, and a server with the
defaults gets no P0/P1 lever. (``INFERGAP_LLAMA_SERVER`` or ``build/llama.cpp/bin/llama-server``;
a CPU build is enough: the process says what it was started with, whatever the hardware.)"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.bench.bench_helpers import free_port, llama_server_bin

BIN = llama_server_bin()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(BIN is None, reason="no llama-server (.ci/run builds it at build/llama.cpp/bin)")]
SWEEP = dict(concurrency=[1, 4], input_len=32, output_len=8, num_prompts=8)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    from tests.bench.bench_tiny_models import write_llama_gguf

    return write_llama_gguf(tmp_path_factory.mktemp("llama") / "tiny-llama.gguf", n_ctx=4096)


@pytest.fixture
def serve(model, tmp_path):
    started: list[subprocess.Popen] = []

    def start(*args: str, env: dict[str, str] | None = None) -> str:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = tmp_path / f"server-{port}.log"
        p = subprocess.Popen([str(BIN), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-t", "2", *args],
                             stdout=open(log, "wb"), stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        started.append(p)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert p.poll() is None, log.read_text()[-2000:]
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return url
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("llama-server did not come up in 90 s")

    yield start
    for p in started:
        p.terminate()
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)


def _doctor(url: str, out: Path):
    from infergap.doctor import run_doctor

    return run_doctor(url, out, quick=True, sweep=SWEEP)


@pytest.mark.parametrize("args, env, lever, evidence", [
    (("--no-kv-offload",), {}, "llamacpp.kv_offload", "--no-kv-offload"),
    (("--no-cont-batching",), {}, "llamacpp.cont_batching", "--no-cont-batching"),
    (("-ub", "8"), {}, "llamacpp.ubatch", "-ub 8"),
    (("--parallel", "1"), {}, "llamacpp.parallel", "server.n_slots = 1"),
    ((), {"CUDA_VISIBLE_DEVICES": ""}, "engine.gpu_not_visible", "CUDA_VISIBLE_DEVICES=''"),
])
def test_the_first_action_names_the_misconfiguration(serve, tmp_path, args, env, lever, evidence):
    url = serve(*args, env=env)
    res = _doctor(url, tmp_path / "out")
    plan = res.plan
    proc = next(st for st in res.stages if st.name == "process")
    assert proc.status == "ran", proc
    assert (tmp_path / "out" / "process.json").is_file()
    assert plan.levers[0].id == lever, [(x.id, x.selected_by) for x in plan.levers]
    assert any(evidence in s for s in plan.levers[0].selected_by), plan.levers[0].selected_by
    first_lever = next(t for t in plan.top_actions if not t.startswith("[host"))
    assert plan.levers[0].title in first_lever


def test_the_defaults_get_no_p0_p1_lever(serve, tmp_path):
    url = serve("--parallel", "4")
    plan = _doctor(url, tmp_path / "out").plan
    assert not [x.id for x in plan.levers if x.priority in ("P0", "P1")], [(x.id, x.selected_by) for x in plan.levers]
    assert plan.facts["server.kv_offload"].value is True and "default" in plan.facts["server.kv_offload"].source
    assert not {"llamacpp.host_bound", "engine.host_overhead", "llamacpp.offload_all"} & {x.id for x in plan.levers}
