"""The serving process behind a URL, read from /proc: real processes started here, found from the
URL alone (the listening socket's owner), their command line scrubbed, their GPU environment,
threads, affinity and cgroup read, and the facts and levers the plan draws from them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infergap.parsers.engine_args import parse_argv
from infergap.plan.build import build_plan
from infergap.plan.signals import gather
from infergap.snapshot.process import cpu_since, find_listener, serving_process

#: A listener with threads that burn CPU on demand: argv after the script is ignored by it, so the
#: test can give it any command line (a llama-server's, secrets included).
LISTENER = r"""
import socket, sys, threading, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
def spin():
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
        f.write("spin")  # the name /proc shows for the thread, as an engine names its threads
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        pass
    time.sleep(60)
threading.Thread(target=spin, name="spin", daemon=True).start()
time.sleep(60)
"""


@pytest.fixture
def listener(tmp_path):
    started = []

    def start(spin_s: float, *argv: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
        script = tmp_path / "llama-server"  # the program name a llama-server process shows
        script.write_text(LISTENER)
        p = subprocess.Popen([sys.executable, str(script), str(spin_s), *argv], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, **(env or {})})
        started.append(p)
        port = int(p.stdout.readline())
        time.sleep(0.2)  # the thread has named itself
        return p, f"http://127.0.0.1:{port}"

    yield start
    for p in started:
        p.kill()
        p.wait(timeout=10)


def test_found_from_the_url_alone_with_its_flags_environment_and_threads(listener):
    p, url = listener(0.0, "-m", "m.gguf", "--no-kv-offload", "--api-key", "s3cr3t-value", "-ub", "8",
                      env={"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "3", "HF_TOKEN": "hf_secret", "NCCL_API_KEY": "x"})
    ev, why = serving_process(url, nvml=False)
    assert why == "found" and ev is not None and ev.pid == p.pid
    assert "s3cr3t-value" not in ev.model_dump_json() and "hf_secret" not in ev.model_dump_json()
    assert ev.argv[ev.argv.index("--api-key") + 1] == "<scrubbed>"
    assert ev.env["CUDA_VISIBLE_DEVICES"] == "" and ev.env["OMP_NUM_THREADS"] == "3"
    assert "HF_TOKEN" not in ev.env and "NCCL_API_KEY" not in ev.env  # not kept, or a secret
    assert ev.threads == 2 and ev.thread_names.get("spin") == 1
    assert ev.cpus_allowed and ev.cpus_allowed_count == len(os.sched_getaffinity(p.pid))
    assert ev.cgroup, "a cgroup limit file is readable on Linux"


def test_a_port_nobody_listens_on_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pid, _, why = find_listener(f"http://127.0.0.1:{port}")
    assert pid is None and f"port {port}" in why


def test_its_flags_are_facts_and_levers(listener):
    """The command line as llama.cpp's own table reads it: --no-kv-offload and an empty
    CUDA_VISIBLE_DEVICES each select their P0 lever, with the flag or variable as evidence; the
    GPU one, which explains everything else, comes first."""
    _, url = listener(0.0, "-m", "m.gguf", "--no-kv-offload", env={"CUDA_VISIBLE_DEVICES": ""})
    ev, _ = serving_process(url, nvml=False)
    plan = build_plan(process=ev, facts=None)
    assert plan.facts["server.gpu_visible"].value is False
    assert "CUDA_VISIBLE_DEVICES=''" in plan.facts["server.gpu_visible"].source
    assert plan.facts["server.kv_offload"].value is False and "--no-kv-offload" in plan.facts["server.kv_offload"].source
    ids = [x.id for x in plan.levers if x.priority == "P0"]
    assert ids[:2] == ["engine.gpu_not_visible", "llamacpp.kv_offload"]
    assert plan.top_actions[0].startswith("[P0 flag flip] The server runs without its GPU")


def test_defaults_come_from_the_source_when_a_flag_is_not_given(listener):
    _, url = listener(0.0, "-m", "m.gguf", "-ngl", "99")
    ev, _ = serving_process(url, nvml=False)
    facts = gather(process=ev, roofline={"model": {"name": "llama-3.1-8b", "layers": 32}})
    assert facts["server.kv_offload"].value is True and "default" in facts["server.kv_offload"].source
    assert facts["server.cont_batching"].value is True
    assert facts["server.ubatch"].value == 512 and facts["server.batch"].value == 2048
    assert facts["server.ngl_all"].value is True  # 99 ≥ 32 blocks + the output layer: -ngl 999 is never proposed
    assert "server.gpu_visible" not in facts


def test_cpu_use_during_a_load_names_the_busy_thread(listener):
    p, url = listener(1.5, "-m", "m.gguf")
    ev, _ = serving_process(url, nvml=False)
    time.sleep(1.0)
    cpu = cpu_since(ev)
    assert cpu is not None and cpu["busiest_name"] == "spin"  # the one thread that ran (its share depends on the machine's load)
    assert 0.05 < cpu["busiest_share"] <= cpu["process_cores"] + 0.05
    facts = gather(process=ev, process_cpu=cpu)
    assert facts["proc.busiest_thread_share"].value == cpu["busiest_share"]


def test_an_unknown_engine_has_no_flag_facts():
    assert parse_argv(["/usr/bin/python3", "-m", "http.server"], {}) is None


def test_a_log_that_says_the_gpu_is_not_there_is_the_first_fact_and_action():
    """The first lines llama-server printed on the H200 with CUDA_VISIBLE_DEVICES= (ggml_cuda_init
    and -ngl's handler in common/arg.cpp): not ok, the plan's first fact and its first action."""
    from infergap.parsers.llamacpp_log import parse_llamacpp_log

    log = parse_llamacpp_log(["ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected",
                              "warning: no usable GPU found, --gpu-layers option will be ignored",
                              "warning: one possible reason is that llama.cpp was compiled without GPU support"])
    plan = build_plan(engine_logs=[("evidence/server.log", log)])
    assert next(iter(plan.facts)) == "server.gpu_visible" and plan.facts["server.gpu_visible"].value is False
    assert "no CUDA-capable device" in plan.facts["server.gpu_visible"].source
    assert plan.levers[0].id == "engine.gpu_not_visible"


def test_plan_with_a_url_reads_the_process_too(listener, tmp_path):
    _, url = listener(0.0, "-m", "m.gguf", "--no-cont-batching")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"), "INFERGAP_DB": str(tmp_path / "l.db")}
    r = subprocess.run([sys.executable, "-m", "infergap", "plan", "--url", url, "--format", "json"], capture_output=True,
                       text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    # The listener answers no HTTP: the plan is printed from the process alone, then exit 2 (its
    # --url could not be used as a server), as for any --url nothing answers.
    assert r.returncode == 2 and "the server could not be reached" in r.stderr.splitlines()[-1], r.stderr
    import json

    plan = json.loads(r.stdout)
    assert plan["levers"][0]["id"] == "llamacpp.cont_batching"
    assert any(s["name"] == "process" and s["status"] == "ran" for s in plan["stages"])
