"""``fix --audit`` input: bad files give one error line naming the file; any text is handled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infergap.errors import UserError
from infergap.remedy import load_report

from .conftest import SRC, sysctl_finding, write_report


@pytest.mark.parametrize("content,message", [
    ("{", "not JSON"),
    ('{"schema": "infergap.bench/1"}', "not an infergap audit report (schema 'infergap.bench/1'"),
    ('[1, 2]', "not an infergap audit report"),
    ('{"schema": "infergap.audit/1", "findings": [{"id": "x"}]}', "finding 0 is invalid"),
])
def test_bad_reports_are_one_line_errors(tmp_path, content, message):
    p = tmp_path / "audit.json"
    p.write_text(content)
    env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONWARNINGS": "ignore"}
    r = subprocess.run([sys.executable, "-m", "infergap", "fix", "--audit", str(p), "--db", str(tmp_path / "db")],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]
    assert r.stderr.startswith(f"infergap: error: --audit {p}: ") and message in r.stderr


def test_a_valid_report_round_trips(tmp_path):
    p = write_report(tmp_path / "a.json", [sysctl_finding("net.socket_buffers", [{"target": "net.core.somaxconn", "value": "8192"}])])
    findings, host = load_report(p)
    assert host == {"hostname": "sandbox"} and findings[0].remedy.actions[0].target == "net.core.somaxconn"


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                           lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3), max_leaves=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.text(max_size=200), json_values.map(json.dumps),
                 st.lists(json_values, max_size=3).map(lambda fs: json.dumps({"schema": "infergap.audit/1", "findings": fs}))))
def test_any_input_is_findings_or_a_user_error(tmp_path, text):
    p = tmp_path / "fuzz.json"
    p.write_text(text)
    try:
        findings, _ = load_report(p)
    except UserError as e:
        assert "\n" not in str(e) and str(p) in str(e)
    else:
        assert isinstance(findings, list)


FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "hosts" / "h200-1gpu"


@pytest.mark.skipif(not FIXTURE.is_dir(), reason="the shared H200 capture is not in this checkout")
def test_dry_run_from_the_real_h200_capture_lists_its_runtime_remedies(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONWARNINGS": "ignore", "INFERGAP_ETC": str(tmp_path / "etc")}
    r = subprocess.run([sys.executable, "-m", "infergap", "fix", "--snapshot", str(FIXTURE), "--persist",
                        "--db", str(tmp_path / "db")], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(("dry run", "note: running inside a container", "note: the audit describes another machine"))
    # The capture's actionable runtime sysctls, with the commands this code would run.
    assert "command  sysctl -w vm.swappiness=10" in r.stdout
    assert "command  sysctl -w net.core.rmem_max=16777216" in r.stdout
    assert f"persist  {tmp_path}/etc/sysctl.d/90-infergap.conf: vm.swappiness = 10" in r.stdout
    # A runtime finding without an executable action is shown for doing by hand.
    assert "limits.nofile" in r.stdout and "by hand" in r.stdout
    assert not (tmp_path / "etc").exists()


def test_apply_refuses_an_audit_of_another_machine(tmp_path):
    """The seed host's snapshot is not this machine: --apply stops before planning any change."""
    seed = FIXTURE.parent / "seed-8x-rtxpro6000"
    env = {**os.environ, "PYTHONPATH": str(SRC), "INFERGAP_ETC": str(tmp_path / "etc")}
    r = subprocess.run([sys.executable, "-m", "infergap", "fix", "--snapshot", str(seed), "--apply", "--yes",
                        "--db", str(tmp_path / "db")], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2
    assert "the audit describes another machine" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "etc").exists()


@pytest.mark.skipif(not FIXTURE.is_dir(), reason="the shared H200 capture is not in this checkout")
def test_dry_run_flag_is_the_default_made_explicit(tmp_path):
    """``--dry-run`` (what other tools call it) shows the same changes; with --apply it is refused."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONWARNINGS": "ignore", "INFERGAP_ETC": str(tmp_path / "etc")}
    base = [sys.executable, "-m", "infergap", "fix", "--snapshot", str(FIXTURE), "--db", str(tmp_path / "db")]
    plain = subprocess.run(base, capture_output=True, text=True, timeout=120, env=env)
    dry = subprocess.run(base + ["--dry-run"], capture_output=True, text=True, timeout=120, env=env)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout == plain.stdout and "command  sysctl -w vm.swappiness=10" in dry.stdout
    both = subprocess.run(base + ["--dry-run", "--apply", "--yes"], capture_output=True, text=True, timeout=120, env=env)
    assert both.returncode == 2 and both.stderr.strip() == "infergap: error: --dry-run and --apply: give one of them"
    assert not (tmp_path / "etc").exists()
