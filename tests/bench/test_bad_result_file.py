"""A bench result file that is not text: one error line naming it, from the library and the CLI."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from infergap.bench import load_result
from infergap.errors import UserError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def random_bytes(tmp_path):
    p = tmp_path / "bin.dat"
    rng = random.Random(11)
    p.write_bytes(b"\xff\xfe\x80" + bytes(rng.randrange(256) for _ in range(4000)))
    return p


def test_load_result_binary(random_bytes):
    with pytest.raises(UserError, match="bin.dat: not text"):
        load_result(random_bytes)


def test_bench_binary_baseline(random_bytes):
    # the baseline is read before any request is sent, so no server is needed
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-m", "infergap", "bench", "--url", "http://127.0.0.1:9", "--baseline", str(random_bytes)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "bin.dat" in lines[0], r.stderr
