"""Limits of the machine: the open-files limit before a large sweep."""

from __future__ import annotations

import resource

import pytest
from hostile_helpers import one_line_error

from infergap.guard import FD_RESERVE, ensure_open_files


def test_concurrency_above_the_hard_open_files_limit_is_refused_up_front():
    def low():
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    p = subprocess.run([sys.executable, "-m", "infergap", "bench", "--url", "http://127.0.0.1:9/v1", "--concurrency", "1,5000"],
                       capture_output=True, text=True, timeout=60, preexec_fn=low, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    one_line_error(p, "--concurrency 5000", "1024", "ulimit -n")


def test_soft_limit_is_raised_when_the_hard_limit_allows():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2000
    if hard != resource.RLIM_INFINITY and hard < want + FD_RESERVE:
        pytest.skip(f"hard limit {hard} too low here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        assert ensure_open_files(want, "--concurrency 2000") >= want
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= want
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
