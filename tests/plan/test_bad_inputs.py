"""``infergap plan`` given files that are not what they claim: one line, exit 2."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REAL_AUDIT = ROOT / "tests" / "fixtures" / "real-gpu" / "h200-transformers" / "audit.json"


def infergap(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("INFERGAP_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "infergap", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def one_line_error(r, *words):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("infergap: error: "), r.stderr
    for w in words:
        assert w in lines[0], lines[0]


@pytest.fixture
def random_bytes(tmp_path):
    p = tmp_path / "bin.dat"
    rng = random.Random(7)
    p.write_bytes(b"\xff\xfe\x80" + bytes(rng.randrange(256) for _ in range(4000)))
    return p


def test_audit_finding_without_fields(tmp_path):
    p = tmp_path / "b.json"
    p.write_text('{"schema":"infergap.audit/1","findings":[{"id":1}]}')
    one_line_error(infergap("plan", "--audit", str(p)), "b.json")


def test_audit_finding_cut(tmp_path):
    import json

    d = json.loads(REAL_AUDIT.read_text())
    del d["findings"][0]["status"]
    p = tmp_path / "cut.json"
    p.write_text(json.dumps(d))
    one_line_error(infergap("plan", "--audit", str(p)), "cut.json", "status")


def test_real_audit_still_accepted():
    r = infergap("plan", "--audit", str(REAL_AUDIT), "--format", "json")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("opt", ["--catalog", "--bench", "--audit", "--roofline"])
def test_plan_binary_input(random_bytes, opt):
    one_line_error(infergap("plan", opt, str(random_bytes)), "bin.dat")



def test_a_gpu_bound_against_a_host_without_gpus_says_so():
    """The audit found no NVIDIA GPU (a CPU llama-server on this machine), the roofline is for the
    GPU named with --gpu: the efficiency is not this server's, and the summary says so."""
    from plan_support import constructed_bench

    from infergap.plan import build_plan
    from infergap.roofline import Parallel, Workload, bounds, load_hardware, load_model

    from infergap.checks import not_applicable
    from infergap.findings import Evidence
    from infergap.synthesis import synthesize

    none = not_applicable("gpu.present", "No NVIDIA GPU", "no GPU",
                          evidence_=[Evidence(source="files/sys/bus/pci/devices", value="no NVIDIA display-class function")])
    audit = synthesize([none], [], host={"gpus": []}).to_json()
    rl = bounds(load_model("llama-3.1-8b"), load_hardware("h200", 1), Parallel(tp=1), Workload(batches=[1, 8]))
    bench = constructed_bench([(1, 20.0, None), (8, 100.0, None)], gpus=0)
    summary = build_plan(audit=audit, roofline=rl, bench=bench).gap.summary
    assert summary.startswith("batch 1: 20.00 tok/s is 6.3% of the aggregate bound")
    assert "the audit found no NVIDIA GPU" in summary and "NVIDIA H200" in summary


@pytest.mark.parametrize("option", ["--audit", "--roofline"])
def test_a_report_file_over_the_cap_is_refused_by_its_size(tmp_path, option):
    """A 160 MB file given as --audit was parsed whole (1.37 GB of memory) before being refused;
    the size is checked first, against a cap 160x the largest real audit."""
    from infergap.plan.inputs import MAX_REPORT_BYTES

    p = tmp_path / "huge.json"
    with open(p, "wb") as f:
        f.truncate(MAX_REPORT_BYTES + 1)  # sparse: costs no disk
    one_line_error(infergap("plan", option, str(p)), f"{option} {p}", f"{MAX_REPORT_BYTES + 1} bytes, more than the {MAX_REPORT_BYTES} accepted")
