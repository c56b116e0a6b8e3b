"""Fixtures of the audit tests."""

from __future__ import annotations

import tarfile

import pytest

from tests.conftest import HOSTS


@pytest.fixture(scope="module")
def h200x2(tmp_path_factory):
    """The two-H200 capture (``h200-2gpu-collect.tar.gz``) unpacked: its snapshot directory."""
    d = tmp_path_factory.mktemp("h200x2")
    with tarfile.open(HOSTS / "h200-2gpu-collect.tar.gz") as tf:
        tf.extractall(d, filter="data")
    return next(d.iterdir())
