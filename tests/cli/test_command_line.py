"""One command line: old spellings still work with one warning line, counts match what is
listed, text written to a file or pipe keeps its commands whole, a model always has a name, history
says what each run was about, compare warns across hosts, and the plan never asks for an input
it was given."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infergap.cli.options import rewrite_deprecated
from infergap.plan.signals import how_to_find
from infergap.roofline.model import config_display_name
from tests.conftest import HOSTS, ROOT, run_cli

SEED = HOSTS / "seed-8x-rtxpro6000"
H200 = HOSTS / "h200-1gpu"


@pytest.fixture
def db(tmp_path) -> str:
    return str(tmp_path / "ledger.sqlite3")


@pytest.fixture
def seed_audit(tmp_path, db) -> Path:
    out = tmp_path / "seed-audit.json"
    r = run_cli("audit", "-s", str(SEED), "-f", "json", "-o", str(out), "--db", db)
    assert r.returncode == 0, r.stderr
    return out


def test_rewrite_keeps_values_and_stops_at_double_dash():
    warned: list[str] = []
    out = rewrite_deprecated("fix", ["--verify-url=http://h:1", "--report", "a.json", "--report", "b", "--", "--report"], warned.append)
    assert out == ["--url=http://h:1", "--audit", "a.json", "--audit", "b", "--", "--report"]
    assert len(warned) == 2 and all(w.startswith("infergap: warning: fix --") for w in warned)
    assert rewrite_deprecated("roofline", ["--model", "x"], warned.append) == ["--model", "x"]  # current there
    assert rewrite_deprecated("history", ["--json"], lambda _: None) == ["--format", "json"]


def test_old_spellings_work_with_one_warning_line(db, seed_audit):
    r = run_cli("history", "--json", "--db", db)
    assert r.returncode == 0, r.stderr
    assert isinstance(json.loads(r.stdout), list)
    assert r.stderr.strip() == ("infergap: warning: history --json is deprecated and will be removed in the next "
                                "release; use --format json")
    old = run_cli("fix", "--report", str(seed_audit), "--kind", "all", "--db", db)
    new = run_cli("fix", "--audit", str(seed_audit), "--fix-kind", "all", "--db", db)
    assert old.returncode == new.returncode == 0, old.stderr
    assert old.stdout == new.stdout and "pcie.max_read_request" in new.stdout
    assert new.stderr == "" and old.stderr.count("infergap: warning:") == 2


@pytest.mark.parametrize("level,rc", [("p1", 0), ("p2", 1), ("P2", 1)])
def test_fail_on_any_case(level, rc, db):
    """The one-GPU H200 capture has only P2 actionable findings."""
    r = run_cli("audit", "-s", str(H200), "-f", "json", "--fail-on", level, "--db", db)
    assert r.returncode == rc, r.stderr
    assert r.stderr == ""


def test_audit_counts_match_the_list(db):
    text = run_cli("audit", "-s", str(SEED), "--db", db).stdout
    doc = json.loads(run_cli("audit", "-s", str(SEED), "-f", "json", "--db", db).stdout)
    n_act = sum(1 for f in doc["findings"] if f["status"] == "actionable")
    section = text.split("ACTIONABLE", 1)[1].split("\nEXPECTED", 1)[0]
    listed = len(re.findall(r"^\s*\d+\. ", section, re.M))
    assert 0 < listed < n_act
    sev = {k: 0 for k in ("P0", "P1", "P2")}
    for m in re.findall(r"^\s*\d+\. (P\d)", section, re.M):
        sev[m] += 1
    header = next(ln for ln in text.splitlines() if ln.startswith("items listed:"))
    header += " " + " ".join(text.split(header, 1)[1].split("\n\n", 1)[0].split())  # its continuation lines
    # one unit, stated once: the header counted '10 items (17 findings) … P1 15' beside a list of 10
    assert header.startswith(f"items listed: {listed} actionable (P0 {sev['P0']}, P1 {sev['P1']}, P2 {sev['P2']})"), header
    assert f"({sum(doc['summary']['counts'].values())} findings grouped" in header and "items (" not in header
    assert f"ACTIONABLE: {listed} (ranked" in text


def test_text_written_to_a_pipe_keeps_commands_whole(db, seed_audit):
    """Every command of the plan and of the audit stays whole on one line, while the prose around
    it is fitted to 100 columns (tests/cli/test_text_width.py checks every command's output)."""
    plan_txt = run_cli("plan", "--audit", str(seed_audit), "--db", db).stdout
    plan = json.loads(run_cli("plan", "--audit", str(seed_audit), "-f", "json", "--db", db).stdout)
    lines = plan_txt.splitlines()
    cmds = [c for h in plan["host_fixes"] for c in h["commands"][:2]] + [u["command"] for u in plan["unknowns"]]
    assert cmds and max(map(len, cmds)) > 60
    for c in cmds:
        assert any(c in ln for ln in lines), c
    assert max(map(len, lines)) > 100  # the seed host's cpuidle command is longer than a line: kept whole
    audit_txt = run_cli("audit", "-s", str(SEED), "--db", db).stdout.splitlines()
    audit = json.loads(seed_audit.read_text())
    for f in audit["findings"]:
        for c in (f.get("remedy") or {}).get("commands") or []:
            assert any(ln.strip() == f"fix: {c}" for ln in audit_txt), c


def test_html_commands_never_break_mid_word():
    from infergap.render.report import _env

    css = (ROOT / "src/infergap/data/templates/report.html.j2").read_text()
    assert "anywhere" not in css and "break-all" not in css and "break-word" not in css
    assert re.search(r"code\.cmd \{[^}]*white-space: pre", css)
    tmpl = css.split("</style>", 1)[1]
    for field in ("f.remedy.commands[0]", "u.command", "x.verify", "h.revert[0]"):
        assert f'<code class="cmd">{{{{ {field} }}}}</code>' in tmpl, field
    assert _env() is not None


def test_a_model_always_has_a_name(tmp_path, db):
    cfg = json.loads((ROOT / "src/infergap/data/models/llama-3.1-8b.json").read_text())
    d = tmp_path / "my-llama"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}  # run from the config's directory
    r = subprocess.run([sys.executable, "-m", "infergap", "roofline", "-m", "./config.json", "--gpu", "h200", "-f", "json",
                        "--db", db], cwd=d, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["model"]["name"] == "my-llama"
    (d / "config.json").write_text(json.dumps({**cfg, "_name_or_path": "meta-llama/Llama-3.1-8B-Instruct"}))
    r = run_cli("roofline", "-m", str(d), "--gpu", "h200", "--db", db)
    assert r.returncode == 0 and r.stdout.startswith("Llama-3.1-8B-Instruct on 1 × "), r.stdout[:200]
    assert config_display_name({"architectures": ["LlamaForCausalLM"]}, Path("/config.json")) == "LlamaForCausalLM"
    assert config_display_name({"model_type": "qwen3"}, Path("/config.json")) == "qwen3"


def test_history_says_what_each_run_was_about(db, seed_audit):
    assert run_cli("roofline", "-m", "llama-3.1-8b", "--gpu", "h200", "--db", db).returncode == 0
    rows = json.loads(run_cli("history", "-f", "json", "--db", db).stdout)
    about = {r["kind"]: r["about"] for r in rows}
    assert str(SEED) in about["audit"] and "RTX PRO 6000" in about["audit"]
    assert about["roofline"] == "llama-3.1-8b on 1 × NVIDIA H200 SXM 141GB"
    text = run_cli("history", "--db", db).stdout
    assert "llama-3.1-8b on 1 × NVIDIA H200" in text and str(SEED) in text


def test_compare_warns_when_audits_are_of_different_hosts(db, seed_audit):
    assert run_cli("audit", "-s", str(H200), "--db", db).returncode == 0
    r = run_cli("compare", "1", "2", "--db", db)
    assert r.returncode == 0, r.stderr
    assert "different hosts" in r.stderr and r.stderr.count("\n") == 1
    j = json.loads(run_cli("compare", "1", "2", "-f", "json", "--db", db).stdout)
    assert j["same_host"] is False and j["appeared"] and j["disappeared"]
    assert run_cli("audit", "-s", str(H200), "--db", db).returncode == 0
    same = run_cli("compare", "2", "3", "--db", db)
    assert same.returncode == 0 and same.stderr == ""


def test_plan_never_asks_for_what_it_was_given(db, seed_audit):
    assert "plan --url" in how_to_find("server.n_slots")
    assert "plan --url" not in how_to_find("server.n_slots", {"server"})
    assert "--evidence" in how_to_find("server.n_slots", {"server"})
    assert "infergap audit" not in how_to_find("gpu.count", {"audit"}) or "serving host itself" in how_to_find("gpu.count", {"audit"})
    r = run_cli("plan", "--url", "http://127.0.0.1:9", "--audit", str(seed_audit), "-f", "json", "--db", db)
    assert r.returncode == 2, r.stderr  # nothing answers at the URL: the plan is printed, then exit 2
    commands = [u["command"] for u in json.loads(r.stdout)["unknowns"]]
    assert commands and not any("infergap plan --url" in c for c in commands)
    assert not any(c.startswith("infergap audit") for c in commands)


@pytest.mark.parametrize("command", ["roofline", "doctor"])
def test_model_help_names_every_kind_of_model_it_takes(command):
    """--model takes a GGUF file too (its header gives each tensor's type): the help says so."""
    import typer

    from infergap.cli import app

    cmd = typer.main.get_command(app).commands[command]
    (opt,) = [p for p in cmd.params if "--model" in p.opts]
    assert all(w in opt.help for w in ("config.json", "GGUF", "built-in")), opt.help


def test_help_shows_no_value_placeholder_on_flags():
    """``--apply <bool>`` reads as if the flag took true/false; flags show no placeholder, and
    evidence options name what they take."""
    import typer

    from infergap.cli import app

    group = typer.main.get_command(app)
    names = [[]] + [[n] for n in group.commands if n != "fleet"] + [["fleet", "audit"]]
    for name in names:
        r = run_cli(*name, "--help", env={"COLUMNS": "200"})
        assert r.returncode == 0, (name, r.stderr)
        assert "<bool>" not in r.stdout and "list[Path]" not in r.stdout and "more_evidence" not in r.stdout, (name, r.stdout)
    assert "-e, --evidence FILE" in run_cli("plan", "--help", env={"COLUMNS": "200"}).stdout


def test_compare_of_two_rooflines_says_what_compare_does(db):
    """It answered with a Python module's name ('compared by infergap.fleet.compare')."""
    for _ in range(2):
        assert run_cli("roofline", "-m", "llama-3.1-8b", "--gpu", "h200", "--db", db).returncode == 0
    r = run_cli("compare", "1", "2", "--db", db)
    assert r.returncode == 2 and r.stderr.startswith("infergap: error: compare: roofline runs cannot be compared"), r.stderr
    assert "infergap." not in r.stderr and "audits finding by finding" in r.stderr
