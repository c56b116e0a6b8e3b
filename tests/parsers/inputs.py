"""Real inputs of the parser tests: the captured hosts and the public pastes in tests/fixtures."""

from __future__ import annotations

import tarfile
from functools import cache

from tests.conftest import HOSTS

EVIDENCE = HOSTS.parent / "evidence"
H200 = HOSTS / "h200-1gpu"


def lines(name: str) -> list[str]:
    """The lines of one public paste in tests/fixtures/evidence."""
    return (EVIDENCE / name).read_text(encoding="utf-8").splitlines()


def h200(path: str) -> str:
    """A file of the one-H200 capture (``cmds/nvsmi_topo.out``, ``files/proc/meminfo``)."""
    return (H200 / path).read_text(encoding="utf-8")


@cache
def h200x2(path: str) -> str:
    """A file of the two-H200 capture (``h200-2gpu-collect.tar.gz``), read from the archive."""
    with tarfile.open(HOSTS / "h200-2gpu-collect.tar.gz") as tf:
        member = tf.extractfile(f"h200-2gpu/{path}")
        assert member is not None, path
        return member.read().decode("utf-8")
