"""``infergap doctor --url`` end to end against a real vLLM 0.32 (CPU build, ``--max-num-seqs 2``)
with its startup log: every stage, the knee and the first lever from the running limit, and the
report opened in headless Chromium."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from vllm_support import ROOT, VLLM_VERSION

from tests.plan import chromium

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def doctor_run(vllm_limited, tmp_path_factory):
    """The doctor from c=2, which the two running requests fill, to c=16: ×8 the load for about the
    same throughput, a knee that noise on a shared machine cannot hide (×1→×2 on one busy core
    could flatten by chance and would be a knee without a cause)."""
    out = tmp_path_factory.mktemp("vllm-doctor")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYTHONUNBUFFERED="1", COLUMNS="140")
    r = subprocess.run([sys.executable, "-m", "infergap", "doctor", "--url", vllm_limited.url, "--quick",
                        "--evidence", str(vllm_limited.log), "--concurrency", "2,16", "--input-len", "32",
                        "--output-len", "48", "--num-prompts", "16", "--output-dir", str(out)],
                       capture_output=True, text=True, timeout=900, env=env, stdin=subprocess.DEVNULL)
    return r, out


def test_doctor_against_vllm_names_the_running_limit_first(doctor_run):
    r, out = doctor_run
    assert r.returncode == 0, r.stderr[-3000:]
    server = json.loads((out / "server.json").read_text())
    assert (server["engine"], server["version"]) == ("vllm", VLLM_VERSION)
    plan = json.loads((out / "plan.json").read_text())
    stages = {s["name"]: s for s in plan["stages"]}
    assert stages["server"]["status"] == "ran" and stages["server"]["detail"].startswith(f"answered: vllm {VLLM_VERSION}")
    assert stages["bench"]["status"] == "ran" and stages["audit"]["status"] == "ran", stages
    bench = json.loads((out / "bench.json").read_text())
    by = {p["concurrency"]: p for p in bench["points"]}
    assert sorted(by) == [2, 16] and all(p["trials"][0]["failed"] == 0 for p in by.values())
    assert by[16]["engine"]["running_max"] == 2 and by[16]["explanation"]["cause"] == "running_limit", by[16]
    facts = plan["facts"]
    assert facts["engine.name"]["value"] == "vllm" and facts["server.max_running_requests"]["value"] == 2
    assert facts["load.knee_cause"]["value"] == "running_limit", facts.get("load.knee_cause")
    ids = [x["id"] for x in plan["levers"]]
    assert ids and ids[0] == "batch.max_running", ids
    assert any("--max-num-seqs" in a for a in plan["top_actions"]), plan["top_actions"]
    # the serving process, found from --url: the flag named with its evidence, nothing proposed that it already does
    assert stages["process"]["status"] == "ran", stages.get("process")
    cap = facts["server.max_running_requests"]["source"]
    assert "serving process" in cap and "--max-num-seqs 2" in cap, cap
    assert facts["load.running_capped"]["value"] is True
    first = plan["levers"][0]
    assert any("--max-num-seqs 2" in s for s in first["selected_by"]), first["selected_by"]
    assert facts["server.enforce_eager"]["value"] is True and "--enforce-eager" in facts["server.enforce_eager"]["source"]
    assert "cuda_graph.enable" not in ids  # the CPU build has no CUDA graphs to turn back on
    assert not [a for a in plan["top_actions"] if "--max-num-seqs 2 " in a or a.endswith("--max-num-seqs 2")]
    named = ids + [x["id"] for x in plan["wont_help"]]
    assert not [n for n in named if any(w in n for w in ("sglang", "llamacpp", "transformers"))], named


def test_the_vllm_report_in_headless_chromium(doctor_run, tmp_path):
    if chromium.chromium() is None:
        pytest.skip("chromium is not installed (CI installs it: apt-get install -y chromium)")
    _, out = doctor_run
    page = out / "report.html"
    r = chromium.load(page, tmp_path / "profile", queries={
        "svgs": "document.querySelectorAll('figure svg').length",
        "text": "document.body.innerText"})
    assert r.requests == [page.resolve().as_uri()], r.requests  # the page itself, nothing else
    assert not [c for c in r.console if c[0] in ("error", "assert", "warning")], r.console
    assert not r.exceptions and not r.log_errors, (r.exceptions, r.log_errors)
    assert r.values["svgs"] >= 2
    text = r.values["text"]
    assert f"vllm {VLLM_VERSION}" in text and "--max-num-seqs" in text and "2 running (the engine's limit)" in text
