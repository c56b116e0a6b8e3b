"""A live audit run by root that still cannot read some files (inside a container, /proc/1/environ
of the host's init is denied to root too) does not tell the user to run it as root."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import run_cli


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root: the advice differs for other users")
def test_files_denied_to_root_get_no_run_as_root_advice(tmp_path):
    r = run_cli("audit", "--format", "json", "--db", str(tmp_path / "l.sqlite3"), timeout=300)
    assert r.returncode in (0, 1), r.stderr
    denied = [f for f in json.loads(r.stdout)["findings"] if f["id"] == "evidence.unreadable" and f.get("subject") == "files"]
    if not denied:
        pytest.skip("every file of this host was readable: nothing denied to root here")
    (f,) = denied
    assert "Run the audit as root" not in f["impact"] and "already runs as root" in f["impact"], f["impact"]
