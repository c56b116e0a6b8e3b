"""What runs on each node of a Ray cluster: ``infergap collect`` into a compressed snapshot.

This module imports only the standard library at the top, and the driver ships its function to
the nodes by value (``cloudpickle.register_pickle_by_value``), so that a node whose Python lacks
infergap still runs it and answers ``no_infergap`` with the reason, instead of failing to
unpickle a task. infergap itself is imported inside :func:`collect_here`, from the node's own
environment: infergap never installs anything on a node (the cluster's image, or a
``runtime_env={"pip": ["infergap"]}`` chosen by the user, provides it).

Test hooks (never set in production): ``INFERGAP_FLEET_TEST_SNAPSHOT`` names a snapshot directory
that this node collects instead of its own host (so several nodes on one machine can differ);
``INFERGAP_FLEET_TEST_DELAY_S`` waits that many seconds first (a node that is slow or is killed
while its task runs), after writing a file into ``INFERGAP_FLEET_TEST_STARTED`` when that names a
directory (so a test knows the task is running).
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import tempfile
import time
from typing import Any

TEST_SNAPSHOT_ENV = "INFERGAP_FLEET_TEST_SNAPSHOT"
TEST_DELAY_ENV = "INFERGAP_FLEET_TEST_DELAY_S"
TEST_STARTED_ENV = "INFERGAP_FLEET_TEST_STARTED"


def collect_here(active: bool = False) -> dict[str, Any]:
    """Collect the host this runs on and return a dict:

    ``state``: ``ok``, ``no_infergap`` (infergap is not importable in the node's Python) or
    ``error`` (collect itself failed); ``snapshot``: the ``.tar.gz`` bytes when ok; ``error``: one
    line otherwise; ``hostname``, ``python``, ``infergap_version``, ``duration_s``. Never raises.
    """
    t0 = time.monotonic()
    out: dict[str, Any] = {"hostname": socket.gethostname(), "python": platform.python_version(),
                           "executable": sys.executable, "state": "error", "error": None, "snapshot": None,
                           "infergap_version": None}
    delay = os.environ.get(TEST_DELAY_ENV)
    started = os.environ.get(TEST_STARTED_ENV)
    if started:
        with open(os.path.join(started, f"started-{os.getpid()}"), "w"):
            pass
    if delay:
        time.sleep(float(delay))
    try:
        import infergap
        from infergap.snapshot.collect import collect
    except ImportError as e:
        out["state"] = "no_infergap"
        out["error"] = (f"infergap is not importable by {sys.executable} on this node ({e}); install it in the "
                        "nodes' image or pass runtime_env={'pip': ['infergap']} (see docs/fleet.md)")
        out["duration_s"] = round(time.monotonic() - t0, 3)
        return out
    out["infergap_version"] = infergap.__version__
    try:
        source = None
        fixture = os.environ.get(TEST_SNAPSHOT_ENV)
        if fixture:
            from infergap.snapshot import open_snapshot

            source = open_snapshot(fixture)
        with tempfile.TemporaryDirectory(prefix="infergap-fleet-") as tmp:
            path = os.path.join(tmp, "snapshot.tar.gz")
            try:
                collect(path, active=active, source=source)
            finally:
                if source is not None:
                    source.close()
            with open(path, "rb") as f:
                out["snapshot"] = f.read()
        out["state"] = "ok"
    except Exception as e:  # reported per node; the fleet run goes on
        out["error"] = f"collect failed: {type(e).__name__}: {e}".splitlines()[0]
    out["duration_s"] = round(time.monotonic() - t0, 3)
    return out
