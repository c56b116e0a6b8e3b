"""The server the plan's verify commands name: the one the evidence describes. Evidence of another
host (a paste, a snapshot) never sends them to a server on this machine."""

from __future__ import annotations

from plan_support import ROOT, SEED, SEED_LOG, SEED_POINTS, constructed_bench
from infergap.plan import build_plan
from infergap.plan.build import URL_PLACEHOLDER, is_local_url

ELSEWHERE = "the evidence describes 8 GPU(s) (NVIDIA RTX PRO 6000 Blackwell Server Edition); this machine has no NVIDIA GPU"
PASTE_5070 = ROOT / "tests" / "fixtures" / "evidence" / "nvsmi-libc6shim14-rtx5070.txt"


def _verifies(plan) -> list[str]:
    return [x.verify for x in plan.levers if x.verify]


def test_evidence_of_this_host_keeps_the_measured_url(seed_inputs):
    audit, logs, rl, bench = seed_inputs
    plan = build_plan(audit=audit, roofline=rl, bench=bench, engine_logs=logs)
    assert _verifies(plan) and all("--url http://127.0.0.1:30000 " in v for v in _verifies(plan))
    assert plan.url_note is None


def test_evidence_of_another_host_never_names_a_server_here(seed_inputs):
    audit, logs, rl, bench = seed_inputs
    plan = build_plan(audit=audit, roofline=rl, bench=bench, engine_logs=logs, elsewhere=ELSEWHERE)
    texts = _verifies(plan) + plan.top_actions + [a for x in plan.levers for a in x.actions]
    assert _verifies(plan) and all(f"--url {URL_PLACEHOLDER} " in v for v in _verifies(plan))
    assert not [t for t in texts if "127.0.0.1" in t], texts
    assert "http://127.0.0.1:30000" in plan.url_note and ELSEWHERE in plan.url_note
    from infergap.guard import md_escape
    from infergap.render.plan import render_markdown, render_text

    assert plan.url_note in render_text(plan) and md_escape(plan.url_note) in render_markdown(plan)


def test_a_remote_url_may_be_the_evidence_host(seed_inputs):
    """From a laptop, ``--url http://gpu-node:30000`` with that node's paste: the URL names the
    evidence's server, not this machine, and stays."""
    audit, logs, rl, _ = seed_inputs
    bench = constructed_bench(SEED_POINTS, url="http://gpu-node-7:30000")
    plan = build_plan(audit=audit, roofline=rl, bench=bench, engine_logs=logs, elsewhere=ELSEWHERE)
    assert all("--url http://gpu-node-7:30000 " in v for v in _verifies(plan)) and plan.url_note is None


def test_local_urls():
    import socket

    for url in ("http://127.0.0.1:8000", "http://localhost:8080/v1", "http://[::1]:30000", "http://0.0.0.0:8000",
                f"http://{socket.gethostname()}:8000", "http://127.0.1.1:8000"):
        assert is_local_url(url), url
    for url in ("http://10.0.0.5:8000", "http://gpu-node-7:30000", "https://api.example.com/v1", "http://[::1"):
        assert not is_local_url(url), url


def test_the_doctor_knows_pasted_or_snapshot_evidence_of_another_host():
    """Which evidence is of another host than this (GPU-less) machine: a pasted nvidia-smi of an
    RTX 5070, the 8-GPU seed snapshot; the live host alone is this machine."""
    from infergap.doctor import evidence_elsewhere
    from infergap.evidence.overlay import open_with_evidence

    with open_with_evidence(None, [str(PASTE_5070)], host=True) as snap:
        why = evidence_elsewhere(snap, None)
    assert why and "RTX 5070" in why
    with open_with_evidence(str(SEED), [], host=True) as snap:
        why = evidence_elsewhere(snap, str(SEED))
    assert why and why.startswith(f"--snapshot {SEED}: ") and "RTX PRO 6000" in why
    with open_with_evidence(None, [], host=True) as snap:
        assert evidence_elsewhere(snap, None) is None


def test_plan_command_with_another_hosts_audit_and_a_loopback_bench_url(seed_inputs, tmp_path):
    """``infergap plan`` on files of the seed host (8 GPUs; this machine has none): the bench
    file's http://127.0.0.1:30000 would reach this machine, not the seed's server."""
    import json
    import os
    import subprocess
    import sys

    audit, _logs, rl, bench = seed_inputs
    (tmp_path / "audit.json").write_text(json.dumps(audit.to_json()))
    (tmp_path / "roofline.json").write_text(json.dumps(rl.to_json_dict()))
    (tmp_path / "bench.json").write_text(bench.to_json())
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    r = subprocess.run([sys.executable, "-m", "infergap", "plan", "--audit", tmp_path / "audit.json", "--roofline", tmp_path / "roofline.json",
                        "--bench", tmp_path / "bench.json", "--evidence", SEED_LOG, "--format", "json"],
                       capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    verifies = [x["verify"] for x in plan["levers"] if x["verify"]]
    assert verifies and all(f"--url {URL_PLACEHOLDER} " in v for v in verifies), verifies
    assert not [t for t in verifies + plan["top_actions"] if "127.0.0.1" in t]
    assert "http://127.0.0.1:30000" in plan["url_note"] and "the audit given is of another machine" in plan["url_note"]


def test_engine_logs_say_where_they_were_written(seed_inputs):
    """``plan --url <this machine> --evidence <log>``: a vLLM log whose Ray prefix names its worker's
    address (vLLM#4770, 192.0.2.191: never this machine's) is another server's, and the verify
    commands do not name the server here; a log that names no host (the seed SGLang log) is read
    as the server's, and the plan says that this is not known."""
    from infergap.plan.inputs import engine_logs_from_files
    from infergap.render.plan import render_markdown, render_text

    audit, logs, rl, bench = seed_inputs
    other = engine_logs_from_files([ROOT / "tests" / "fixtures" / "evidence" / "vllm-4770-custom-ar-no-p2p.log"])
    assert other[0][1].hosts == ["192.0.2.191"]
    plan = build_plan(audit=audit, roofline=rl, bench=bench, engine_logs=other)
    assert "written on 192.0.2.191" in plan.log_note and "another host than this machine" in plan.log_note
    assert "192.0.2.191" in plan.url_note and all(f"--url {URL_PLACEHOLDER} " in v for v in _verifies(plan))
    assert plan.log_note in render_text(plan) and plan.log_note in render_markdown(plan)

    plan = build_plan(audit=audit, roofline=rl, bench=bench, engine_logs=logs)
    assert "do not name the host they were written on" in plan.log_note and logs[0][0] in plan.log_note
    assert plan.url_note is None and all("--url http://127.0.0.1:30000 " in v for v in _verifies(plan))
    # The same log with a remote URL that is its host: nothing to say.
    remote = constructed_bench(SEED_POINTS, url="http://192.0.2.191:8000")
    assert build_plan(audit=audit, roofline=rl, bench=remote, engine_logs=other).log_note is None


def test_nccl_and_ray_prefixes_name_the_logs_hosts():
    from infergap.parsers.engine_log import parse_engine_log

    # NCCL's prefix as printed in NCCL#1232 (tests/fixtures/evidence/nccl-1232-two-nodes.log), inside a Ray worker's line.
    lines = (ROOT / "tests" / "fixtures" / "evidence" / "nccl-1232-two-nodes.log").read_text().splitlines()
    f = parse_engine_log(["(RayWorkerWrapper pid=4152, ip=10.1.2.3) " + x for x in lines])
    assert f.hosts[0] == "10.1.2.3" and "host-a" in f.hosts and "host-b" in f.hosts
    assert parse_engine_log(["INFO 05-13 08:48:35 llm_engine.py:100] Initializing an LLM engine"]).hosts == []


def test_a_hostile_url_in_a_bench_file_never_reaches_a_verify_command(seed_inputs):
    """A bench file is input: a URL holding shell syntax gives the placeholder and a note, and
    every verify command splits into words where the URL is one of them."""
    import shlex

    audit, logs, rl, _ = seed_inputs
    for url in ("http://h:1/$(touch /tmp/owned)", "http://h:1/';id;'", "http://h:1/`id`", "http://h:1\n; id", "-http://h"):
        plan = build_plan(audit=audit, roofline=rl, bench=constructed_bench(SEED_POINTS, url=url), engine_logs=logs)
        assert _verifies(plan)
        for v in _verifies(plan):
            words = shlex.split(v)
            assert words[words.index("--url") + 1] == URL_PLACEHOLDER and "owned" not in v and "id;" not in v, v
        assert "not a valid url" in plan.url_note, plan.url_note
