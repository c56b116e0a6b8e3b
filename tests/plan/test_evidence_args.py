"""``plan`` and ``doctor`` take several files after one ``--evidence``, as ``audit`` does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from plan_support import ROOT, free_port, silent_listener

FIX = ROOT / "tests" / "fixtures" / "evidence"
LOGS = ("sglang-1362-server-args.log", "vllm-24162-nondefault.log")


def _run(*args, cwd=FIX):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="300")
    env.pop("INFERGAP_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "infergap", *map(str, args)], capture_output=True, text=True, timeout=240,
                          env=env, cwd=cwd, stdin=subprocess.DEVNULL)


def test_plan_several_files_after_one_evidence():
    r = _run("plan", "--format", "json", "--evidence", *LOGS)
    assert r.returncode == 0, r.stderr
    server = [s for s in json.loads(r.stdout)["stages"] if s["name"] == "server"][0]
    assert server["detail"] == ", ".join(f"evidence/{n}" for n in LOGS)


def test_plan_stray_argument_without_evidence():
    r = _run("plan", LOGS[0])
    assert r.returncode == 2
    assert r.stderr.strip() == f"infergap: error: unexpected argument {LOGS[0]} (evidence files go after --evidence)"


def test_doctor_several_files_after_one_evidence(tmp_path):
    out = tmp_path / "d"
    with silent_listener() as port:  # accepts and closes: the doctor runs its stages without a server
        r = _run("doctor", "--url", f"http://127.0.0.1:{port}", "--quick", "-o", out, "--evidence", "nccl-1232-two-nodes.log",
                 "sglang-13023-decode-no-graph.log")
    assert "unexpected extra argument" not in r.stderr.lower(), r.stderr
    subjects = {f.get("subject") for f in json.loads((out / "audit.json").read_text())["findings"]}
    assert {"evidence/nccl-1232-two-nodes.log", "evidence/sglang-13023-decode-no-graph.log"} <= subjects


def test_plan_reads_cuda_graph_use_from_decode_lines():
    """A log whose decode lines show ``cuda graph: True`` up to a batch and ``False`` above it
    (sglang#13023) settles that graphs are on, so the plan proposes raising the captured size
    instead of listing the CUDA-graph setting as unknown."""
    r = _run("plan", "--format", "json", "--evidence", "sglang-13023-decode-no-graph.log")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert "cuda_graph.raise_max_bs" in [lv["id"] for lv in plan["levers"]]
    assert "server.cuda_graph" not in [u["fact"] for u in plan["unknowns"]]


def test_plan_reads_stdin_and_says_why_there_is_no_top_action():
    """``--evidence -`` reads standard input; a plan without any action says so and why, never an
    empty heading that reads as "nothing to do"."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="300")
    env.pop("INFERGAP_API_KEY", None)
    r = subprocess.run([sys.executable, "-m", "infergap", "plan", "--evidence", "-"], capture_output=True, text=True, timeout=240,
                       env=env, input=(FIX / LOGS[1]).read_text())
    assert r.returncode == 0, r.stderr
    assert "server: from log (evidence/stdin)" in r.stdout
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("TOP ACTIONS"))
    assert line.startswith("TOP ACTIONS: none selected by the facts at hand;") and "unknown fact(s) below" in line
    md = subprocess.run([sys.executable, "-m", "infergap", "plan", "--format", "md", "--evidence", "-"], capture_output=True, text=True,
                        timeout=240, env=env, input=(FIX / LOGS[1]).read_text())
    after = md.stdout.split("## Top actions", 1)[1].lstrip().splitlines()[0]
    assert after.startswith("None selected by the facts at hand"), after
