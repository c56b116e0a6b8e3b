"""Against llama.cpp's own ``llama-server`` (a CPU build; ``.ci/run`` builds it from the source
llama-cpp-python vendors, ``INFERGAP_LLAMA_SERVER`` or ``build/llama.cpp/bin/llama-server``):
introspection of /props, /slots, /metrics, /v1/models; its log as evidence; the doctor end to end,
and a slot context too small for the load named as the plan's first action."""

from __future__ import annotations

import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from infergap.plan.build import URL_PLACEHOLDER
from tests.bench.bench_helpers import llama_server_bin
from tests.evidence.evidence_data import free_port

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "tests" / "fixtures" / "real-gpu" / "h200-llama-server"
PASTE_5070 = ROOT / "tests" / "fixtures" / "evidence" / "nvsmi-libc6shim14-rtx5070.txt"
BIN = llama_server_bin()

pytestmark = [pytest.mark.slow, pytest.mark.skipif(BIN is None, reason="no llama-server (.ci/run builds it at build/llama.cpp/bin)")]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    from tests.bench.bench_tiny_models import write_llama_gguf

    return write_llama_gguf(tmp_path_factory.mktemp("llama") / "tiny-llama.gguf", n_ctx=4096)


class Server:
    def __init__(self, model: Path, log: Path, *args: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.proc = subprocess.Popen([str(BIN), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port), "-t", "2", *args],
                                     stdout=open(log, "wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError("llama-server did not come up in 90 s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def server(model, tmp_path):
    started = []

    def start(*args: str) -> Server:
        s = Server(model, tmp_path / f"server-{len(started)}.log", *args)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def test_introspection_of_a_real_llama_server(server, model):
    from infergap.server import introspect

    cfg = introspect(server("--parallel", "2", "-c", "1024", "--metrics").url, timeout_s=10)
    assert cfg.engine == "llama.cpp" and cfg.errors == []
    assert (cfg.n_slots, cfg.slot_context, cfg.total_context) == (2, 512, 1024)
    assert cfg.model == str(model) and cfg.n_params and cfg.model_bytes and cfg.train_context == 4096
    assert cfg.model_type and cfg.metrics_enabled is True and cfg.speculative is False and cfg.slots_processing == 0
    off = introspect(server("--parallel", "1", "-c", "512").url, timeout_s=10)
    assert off.metrics_enabled is False and off.errors == []  # not an error: the doctor says so in its server stage


def test_its_log_is_recognised_evidence(server):
    from infergap.parsers.llamacpp_log import parse_llamacpp_log
    from infergap.evidence.recognize import scan_file

    s = server("--parallel", "2", "-c", "1024")
    parts, unknown = scan_file(s.log)
    assert parts and parts[0].kind == "llamacpp_log"
    f = parse_llamacpp_log(s.log.read_text(errors="replace").splitlines())
    assert (f.args["n_slots"], f.args["n_ctx_slot"]) == (2, 512)


def _doctor(url: str, out: Path, log: Path, **sweep):
    from infergap.doctor import run_doctor

    return run_doctor(url, out, quick=True, evidence=[str(log)], snapshot=str(GPU / "snapshot.tar.gz"), sweep=sweep)


def test_doctor_against_a_real_llama_server(server, tmp_path):
    s = server("--parallel", "2", "-c", "2048", "--metrics")
    res = _doctor(s.url, tmp_path / "out", s.log, concurrency=[1, 4], input_len=32, output_len=8, num_prompts=8)
    stages = {st.name: st.status for st in res.stages}
    assert stages["server"] == "ran" and stages["roofline"] == "ran" and stages["bench"] in ("ran", "partial"), res.stages
    assert next(st for st in res.stages if st.name == "server").detail.startswith("answered: llama.cpp ")
    assert res.points == 2 and (tmp_path / "out" / "report.html").is_file()
    plan = res.plan
    assert plan.facts["engine.name"].value == "llama.cpp" and plan.facts["server.n_slots"].value == 2
    assert plan.facts["model.weight_bytes"].value > 0  # the served GGUF, read from the path the server reports
    assert "GGUF" in (tmp_path / "out" / "roofline.json").read_text()
    named = [x.id for x in plan.levers + plan.wont_help] + [u.fact for u in plan.unknowns]
    assert not [n for n in named if any(w in n for w in ("cuda_graph", "moe", "sglang", "vllm", "mtp", "transformers"))], named


def test_another_hosts_paste_is_not_verified_against_the_server_here(server, tmp_path):
    """The doctor on this machine with another host's nvidia-smi paste (an RTX 5070): the paste is
    audited as its own host, so no verify command sends the reader to the llama-server here as if
    it were the server the paste describes; a note says which URL was left out and why."""
    from infergap.doctor import run_doctor

    s = server("--parallel", "2", "-c", "1024", "--metrics")
    out = tmp_path / "out"
    res = run_doctor(s.url, out, quick=True, evidence=[str(PASTE_5070)], sweep=dict(concurrency=[1, 4], input_len=32, output_len=8, num_prompts=8))
    plan = res.plan
    assert res.points == 2 and "RTX 5070" in next(st for st in res.stages if st.name == "audit").detail
    verifies = [x.verify for x in plan.levers + plan.wont_help if x.verify]
    assert verifies and all(f"--url {URL_PLACEHOLDER} " in v for v in verifies), verifies
    assert not [t for t in verifies + plan.top_actions if s.url in t]
    assert s.url in res.plan.url_note and "RTX 5070" in res.plan.url_note
    for name in ("plan.md", "report.html"):
        text = (out / name).read_text()
        assert "Note: the verify commands name http://&lt;server&gt;:&lt;port&gt;" in text or f"Note: the verify commands name {URL_PLACEHOLDER}" in text, name
        assert not re.search(rf"verify: [^\n]*{re.escape(s.url)}", text), name


def test_a_slot_context_too_small_is_the_first_action(server, tmp_path):
    s = server("--parallel", "2", "-c", "512", "--metrics")  # 256 tokens per slot
    res = _doctor(s.url, tmp_path / "out", s.log, concurrency=[1, 2], input_len=300, output_len=8, num_prompts=4)
    plan = res.plan
    assert plan.facts["load.context_refused"].value > 0
    assert plan.levers[0].id == "llamacpp.context_size" and plan.top_actions[0].startswith("[P0")
    assert "--parallel 2" in plan.top_actions[0]
