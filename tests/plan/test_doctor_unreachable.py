"""infergap doctor against a port where nothing listens: one line naming the URL and why, exit 2
(an input that cannot be used, as ``bench`` says it), before any stage runs — nothing is written,
and no Python class names are shown."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from plan_support import ROOT, free_port


def test_doctor_nothing_listening(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    out = tmp_path / "d"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="300")
    env.pop("INFERGAP_API_KEY", None)
    r = subprocess.run([sys.executable, "-m", "infergap", "doctor", "--url", url, "--quick", "-o", str(out)],
                       capture_output=True, text=True, timeout=240, env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 2, (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"infergap: error: --url {url}: the server could not be reached (") and line.endswith("); nothing was run")
    assert "Traceback" not in r.stderr and not re.search(r"\b[A-Z]\w*(?:Error|Exception)\b", line), line
    assert not out.exists() or not any(out.iterdir())  # no stage ran


def test_plan_and_audit_say_the_same(tmp_path):
    """The same unreachable --url is exit 2 for audit and plan too, after what they could do."""
    url = f"http://127.0.0.1:{free_port()}"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    for cmd in (["audit", "--snapshot", str(ROOT / "tests/fixtures/hosts/h200-1gpu"), "--url", url], ["plan", "--url", url]):
        r = subprocess.run([sys.executable, "-m", "infergap", *cmd], capture_output=True, text=True, timeout=240, env=env,
                           stdin=subprocess.DEVNULL)
        assert r.returncode == 2, (cmd, r.stderr)
        assert r.stderr.strip().splitlines()[-1].startswith(f"infergap: error: --url {url}: the server could not be reached"), r.stderr
        assert r.stdout.strip(), cmd  # the report of what could be done is still printed


def test_plan_without_input_is_bad_input(tmp_path):
    r = subprocess.run([sys.executable, "-m", "infergap", "plan"], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and r.stderr.strip() == ("infergap: error: nothing to plan from: give --audit, --roofline, --bench "
                                                      "(their --format json files), --url or --evidence")
