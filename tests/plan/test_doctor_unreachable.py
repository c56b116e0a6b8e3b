"""infergap doctor against a port where nothing listens: it writes what it can, says in one line
that the server could not be reached, exits 1, and shows no Python class names."""

from __future__ import annotations

import json
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
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stderr.strip().splitlines()[-1] == f"infergap: error: the server at {url} could not be reached; nothing was measured"
    assert "Traceback" not in r.stderr
    for text in (r.stderr, (out / "plan.json").read_text()):
        assert not re.search(r"\b[A-Z]\w*(?:Error|Exception):", text), text
        assert "ssl:default" not in text
    for name in ("audit.json", "plan.json", "report.html"):
        assert (out / name).stat().st_size > 0, name
    stages = {s["name"]: s["status"] for s in json.loads((out / "plan.json").read_text())["stages"]}
    assert stages["server"] == "failed" and stages["bench"] == "failed"
