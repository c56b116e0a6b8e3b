"""``infergap tune`` on llama.cpp's own ``llama-server`` (CPU build, ``.ci/run`` makes it) started
by the tests on small random GGUFs, with levers whose effect is known: ``--parallel 1`` → ``8``
serves eight requests in flight at once instead of queueing seven (their TTFT falls many times
over: on two shared cores the throughput gain of batching so small a model is within the noise); ``-ub 8`` splits a long prompt into
8-token micro-batches (TTFT up); a flag the build does not have is refused with its log line; and
a lever ruled out is listed by the next plan of the same server under "tried — won't help", while
a server of another model is proposed it again."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from bench_helpers import llama_server_bin  # noqa: E402

pytestmark = pytest.mark.slow
ENV = dict(os.environ, PYTHONPATH=str(ROOT / "src"))


@pytest.fixture(scope="module")
def llama():
    exe = llama_server_bin()
    if exe is None:
        pytest.skip("no llama-server binary (.ci/run builds it; or set INFERGAP_LLAMA_SERVER)")
    return exe


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    pytest.importorskip("gguf")
    from bench_tiny_models import write_llama_gguf

    d = tmp_path_factory.mktemp("gguf")
    return {"tiny": write_llama_gguf(d / "tiny.gguf"), "tiny2": write_llama_gguf(d / "tiny2.gguf", seed=1)}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp_path: Path, *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infergap", *args], capture_output=True, text=True, timeout=timeout,
                          env=ENV, cwd=tmp_path)


def _tune(tmp_path: Path, launch: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / f"tune-{len(list(tmp_path.glob('tune-*.json')))}.json"
    r = _run(tmp_path, "tune", "--launch", launch, "--log-dir", str(tmp_path / "logs"), "--db", str(tmp_path / "l.db"),
             "-f", "json", "-o", str(out), *args)
    assert r.returncode == 0, r.stderr[-3000:]
    return r, json.loads(out.read_text())


def _server(llama: Path, model: Path, port: int, *extra: str) -> str:
    return f"{llama} -m {model} --host 127.0.0.1 --port {port} -t 1 --no-warmup {' '.join(extra)}"


def test_parallel_helps_a_concurrent_load_and_an_unknown_flag_is_refused(llama, models, tmp_path):
    launch = _server(llama, models["tiny"], _port(), "--parallel 1 -c 4096")
    r, doc = _tune(tmp_path, launch, "--try", "ttft: --parallel 8", "--try", "--no-such-flag", "--concurrency", "8",
                   "--num-prompts", "24", "--input-len", "8", "--output-len", "96", "--leave-stopped", "--html",
                   str(tmp_path / "tune.html"))
    par, bad = doc["trials"]
    assert doc["engine"] == "llama.cpp" and doc["engine_version"] and doc["model"].endswith("tiny.gguf")
    assert par["lever"] == "llamacpp.parallel" and par["verdict"] == "helps", par["judgement"]
    assert par["judgement"]["level"] == "c=8" and par["judgement"]["change_pct"] < -50, par["judgement"]
    assert bad["verdict"] == "refused" and any("--no-such-flag" in x for x in bad["log_tail"]), bad
    assert doc["best"].endswith("-c 4096 --parallel 8") and doc["left_running"] is None
    html = (tmp_path / "tune.html").read_text()
    assert "<svg" in html and "llamacpp.parallel" in html and "invalid argument: --no-such-flag" in html


def test_a_tiny_micro_batch_hurts_the_ttft_of_long_prompts(llama, models, tmp_path):
    launch = _server(llama, models["tiny"], _port(), "-c 4096")
    _, doc = _tune(tmp_path, launch, "--try", "ttft: -ub 8", "--concurrency", "1", "--num-prompts", "4",
                   "--input-len", "480", "--output-len", "4", "--leave-stopped")
    (ub,) = doc["trials"]
    assert ub["lever"] == "try:-ub 8" and ub["judgement"]["metric"] == "ttft_p50_ms", ub
    assert ub["verdict"] == "hurts" and ub["judgement"]["change_pct"] > 20, ub["judgement"]


def test_the_next_plan_lists_the_ruled_out_lever_and_another_model_does_not_inherit_it(llama, models, tmp_path):
    port = _port()
    launch = _server(llama, models["tiny"], port, "--no-cont-batching -c 2048")
    _, doc = _tune(tmp_path, launch, "--concurrency", "1", "--num-prompts", "4", "--input-len", "8", "--output-len", "8")
    pid = doc["left_running"]["pid"]  # the user's own configuration, left running
    try:
        tried = {t["lever"]: t for t in doc["trials"]}
        cb = tried["llamacpp.cont_batching"]  # the plan's lever for --no-cont-batching: nothing to batch at c=1
        assert cb["setting"] == "without --no-cont-batching" and cb["verdict"] == "no effect within noise", cb["judgement"]
        assert b"--no-cont-batching" in Path(f"/proc/{pid}/cmdline").read_bytes()
        p = _run(tmp_path, "plan", "--url", f"http://127.0.0.1:{port}", "--db", str(tmp_path / "l.db"), "-f", "json")
        plan = json.loads(p.stdout)
        assert "llamacpp.cont_batching" not in [x["id"] for x in plan["levers"]]
        (t,) = [x for x in plan["tried"] if x["id"] == "llamacpp.cont_batching"]
        assert t["verdict"] == "no effect within noise" and "output_throughput_tps at c=1" in t["measurement"], t
        text = _run(tmp_path, "plan", "--url", f"http://127.0.0.1:{port}", "--db", str(tmp_path / "l.db")).stdout
        assert "TRIED — WON'T HELP" in text and "without --no-cont-batching" in text
    finally:
        os.kill(pid, signal.SIGTERM)
    # another model on the same host and engine: the verdict is not inherited
    other = subprocess.Popen(_server(llama, models["tiny2"], port, "--no-cont-batching -c 2048").split(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        from infergap.tune.launch import _ready
        import time

        deadline = time.monotonic() + 60
        while not _ready(f"http://127.0.0.1:{port}") and time.monotonic() < deadline:
            time.sleep(0.2)
        p = _run(tmp_path, "plan", "--url", f"http://127.0.0.1:{port}", "--db", str(tmp_path / "l.db"), "-f", "json")
        plan = json.loads(p.stdout)
        assert "llamacpp.cont_batching" in [x["id"] for x in plan["levers"]] and not plan["tried"]
    finally:
        other.terminate()
        other.wait(timeout=20)


def test_an_interrupt_during_the_baseline_says_so_and_keeps_what_it_measured(llama, models, tmp_path):
    import time

    from infergap.ledger import Ledger

    port, db, out = _port(), tmp_path / "l.db", tmp_path / "tune.json"
    launch = _server(llama, models["tiny"], port, "--parallel 1 -c 2048")
    p = subprocess.Popen([sys.executable, "-m", "infergap", "tune", "--launch", launch, "--try", "ttft: --parallel 4",
                          "--concurrency", "1,4", "--num-prompts", "6", "--input-len", "8", "--output-len", "48",
                          "--log-dir", str(tmp_path / "logs"), "--db", str(db), "--leave-stopped", "-o", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, cwd=tmp_path)
    log = tmp_path / "logs" / "server-00-baseline.log"
    deadline = time.monotonic() + 300
    # the c=1 level (2 warm-up requests and 6 measured) done, into c=4: a timing line per request
    while time.monotonic() < deadline and (not log.exists() or log.read_text(errors="replace").count("prompt eval time") < 10):
        assert p.poll() is None, p.communicate()[1][-3000:]
        time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-3000:]
    text = out.read_text()
    assert "(no lever tried" not in text and "baseline interrupted during its first run (measured so far: c=1" in text, text
    assert "  c=1: " in text and "not measured" in text, text
    assert "stopped early: interrupted" in text, text
    with Ledger(db, readonly=True) as led:
        (before,) = [r for r in led.runs(kind="bench") if r.parent_id == led.latest(kind="tune").id]
        assert before.payload["interrupted"] and led.latest(kind="tune").status == "interrupted"
        assert f"bench run {before.id} of the ledger" in re.sub(r"\n +", " ", text)  # the line may be wrapped at 100 columns
        assert led.experiments() == []  # nothing was tried, nothing is remembered as tried
    assert sorted(x.name for x in (tmp_path / "logs").iterdir()) == ["server-00-baseline.log"]
