"""Text output fits 100 columns: every command's text report, as a pipe gets it, has no line over
100 columns but a command kept whole (a string its own JSON document names as a command, after
at most a short label such as ``fix:``) or one word that has no space to break at (a URL); and
every command of the document is still on one line, so that it can be copied."""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

import pytest

from tests.conftest import HOSTS, ROOT, run_cli

WIDTH = 100
EVIDENCE = ROOT / "tests" / "fixtures" / "evidence"
BENCHES = sorted((ROOT / "tests" / "fixtures" / "real-gpu").rglob("bench*.json"))
# keys whose strings are commands in the JSON documents of audit, plan, fix, tune
COMMAND_KEYS = {"commands", "command", "revert", "verify", "best_command", "launch", "cmd"}


def _cols(s: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)


def _commands(doc) -> set[str]:
    out: set[str] = set()

    def walk(o, key=None):
        if isinstance(o, dict):
            for k, v in o.items():
                walk(v, k)
        elif isinstance(o, list):
            for v in o:
                walk(v, key)
        elif isinstance(o, str) and key in COMMAND_KEYS:
            out.add(o.strip())

    walk(doc)
    return out


def _overlong(text: str, commands: set[str]) -> list[str]:
    """Lines over WIDTH columns that are neither a command after a short label nor one word."""
    bad = []
    for ln in text.splitlines():
        ln = ln.rstrip()
        if _cols(ln) <= WIDTH:
            continue
        body = ln.strip()
        if any(body.endswith(c) and _cols(ln) - _cols(c) <= 30 for c in commands):
            continue
        if " " not in re.sub(r"^\S+:\s+", "", body):  # a URL or a path: nothing to break at
            continue
        bad.append(ln)
    return bad


def _check(text: str, doc=None) -> None:
    cmds = _commands(doc) if doc is not None else set()
    bad = _overlong(text, cmds)
    assert not bad, "\n".join(bad[:5])
    lines = text.splitlines()
    for c in cmds:
        if c in text.replace("\n", " "):  # shown at all: then whole on one line
            assert any(c in ln for ln in lines), c


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("width") / "ledger.sqlite3")


@pytest.fixture(scope="module")
def audits(tmp_path_factory, db) -> dict[str, tuple[str, Path]]:
    """name → (text report, JSON report path) of every host capture."""
    out = {}
    d = tmp_path_factory.mktemp("audits")
    for h in sorted(p for p in HOSTS.iterdir() if p.is_dir() or p.name.endswith(".tar.gz")):
        js = d / f"{h.name}.json"
        t = run_cli("audit", "-s", str(h), "--db", db)
        assert t.returncode == 0, t.stderr
        assert run_cli("audit", "-s", str(h), "-f", "json", "-o", str(js), "--db", db).returncode == 0
        out[h.name] = (t.stdout, js)
    return out


def test_audits_of_every_capture(audits):
    assert len(audits) >= 4
    for name, (text, js) in audits.items():
        _check(text, json.loads(js.read_text()))


def test_audit_of_pastes_and_the_plan_of_each(tmp_path, db):
    for name in ("nccl-451-docker-ib.log", "vllm-19613-dmabuf-buffsize.log", "pytorch-68893-veth-socket.log"):
        js = tmp_path / f"{name}.json"
        t = run_cli("audit", "--no-host", "--evidence", str(EVIDENCE / name), "--db", db)
        assert t.returncode == 0, t.stderr
        assert run_cli("audit", "--no-host", "--evidence", str(EVIDENCE / name), "-f", "json", "-o", str(js),
                       "--db", db).returncode == 0
        _check(t.stdout, json.loads(js.read_text()))
        p = run_cli("plan", "--audit", str(js), "--db", db)
        pj = run_cli("plan", "--audit", str(js), "-f", "json", "--db", db)
        assert p.returncode == 0, p.stderr
        _check(p.stdout, json.loads(pj.stdout))


def test_plan_fix_compare_history_of_the_seed_host(audits, db):
    js = audits["seed-8x-rtxpro6000"][1]
    plan = run_cli("plan", "--audit", str(js), "--db", db).stdout
    doc = json.loads(run_cli("plan", "--audit", str(js), "-f", "json", "--db", db).stdout)
    _check(plan, doc)
    # the seed host's cpuidle command is longer than a line: it stands alone or after its label
    assert any(len(c) > WIDTH - 10 for c in _commands(doc))
    fix = run_cli("fix", "--audit", str(js), "--fix-kind", "all", "--db", db)
    assert fix.returncode == 0, fix.stderr
    _check(fix.stdout, json.loads(js.read_text()))
    for args in (("history",), ("history", "--kind", "audit"), ("compare", "1", "2")):
        r = run_cli(*args, "--db", db)
        assert r.returncode == 0, r.stderr
        _check(r.stdout)


def test_checks_roofline_and_fleet(db):
    for args in (("checks",), ("checks", "pcie.acs"), ("checks", "pcie"),
                 ("roofline", "--model", "llama-3.1-8b", "--gpu", "h200"),
                 ("roofline", "--model", "glm-5-nvfp4", "--gpu", "rtx-pro-6000-server", "--gpus", "8", "--tp", "8",
                  "--measured", "10.36"),
                 ("fleet", "audit", "--snapshots", str(HOSTS), "--no-record")):
        r = run_cli(*args, *(() if args[0] == "checks" else ("--db", db)))
        assert r.returncode == 0, (args, r.stderr)
        _check(r.stdout)


@pytest.mark.parametrize("path", BENCHES, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_bench_summaries(path):
    """A bench's text report as ``bench`` writes it to a pipe (render, then fit), from real runs."""
    from infergap.bench.results import load_result
    from infergap.cli.base import render_report
    from infergap.cli.options import Fmt
    from infergap.render.bench import to_text

    r = load_result(path)
    text = render_report(Fmt.text, Path("/nonexistent/out.txt"), json=r.to_json, md=None,
                         text=lambda width, color: to_text(r, width=width))
    assert "point" in text and "definitions:" in text
    _check(text, json.loads(r.to_json()))


def test_fitting_keeps_quoted_and_named_commands_whole():
    from infergap.render.fit import fit_text

    cmd = "setpci -s 0000:01:00.0 CAP_EXP+8.w=5000:7000"
    prose = "  ? the bridge above the GPU caps reads; " * 3 + f"run '{cmd}' as root, then " + "re-run the audit " * 3
    out = fit_text(prose).splitlines()
    assert len(out) > 1 and all(_cols(ln) <= WIDTH for ln in out)
    assert any(f"'{cmd}'" in ln for ln in out)
    assert " ".join(" ".join(out).split()) == " ".join(prose.split())  # nothing lost, nothing added
    long_cmd = "for s in /sys/devices/system/cpu/cpu*/cpuidle/state*; do [ \"$(cat $s/name)\" = C2 ] && echo 1 > $s/disable; done"
    fitted = fit_text(f"      fix: {long_cmd}", keep=[long_cmd]).splitlines()
    assert fitted == [f"      fix: {long_cmd}"]
    fitted = fit_text(f" 1. [host P1 runtime] Deep C-states enabled: C2 (100 µs): {long_cmd}", keep=[long_cmd]).splitlines()
    assert fitted == [" 1. [host P1 runtime] Deep C-states enabled: C2 (100 µs):", f"    {long_cmd}"]
