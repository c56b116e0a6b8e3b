"""`infergap fleet audit --address auto` against a real Ray cluster of several nodes on this machine.

Every node runs the real node task (collect, compressed, returned through Ray's object store); the
test hook makes each node collect a different host snapshot, so the nodes' host states differ by
exactly the faults injected here. One cluster serves the module (starting one costs 5-20 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.fleet.fleet_support import FAULTS, drift_keys, env_for, load, write_dir

ray = pytest.importorskip("ray", reason="Ray is the optional extra infergap[fleet]")

pytestmark = pytest.mark.slow

#: node label -> fault injected into its snapshot (None: the clean baseline)
LAYOUT = {"head": None, "clean": None, "x8": "link_x8", "driver": "driver_behind"}
SLOW_DELAY_S = 300  # the slow node's task waits this long: it hangs unless the node is killed


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from ray.cluster_utils import Cluster

    tmp = tmp_path_factory.mktemp("fleet-ray")
    base = load("h200-2gpu-collect.tar.gz")
    expected: dict[str, set[str]] = {}
    paths = {}
    for label, fault in LAYOUT.items():
        files = dict(base)
        expected[label] = FAULTS[fault](files) if fault else set()
        paths[label] = write_dir(files, tmp / label)
    started = tmp / "started"
    started.mkdir()
    saved = dict(os.environ)
    # The nodes' workers import infergap from this checkout (not whatever is installed).
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    nodes = {}
    try:
        os.environ.update(env_for(paths["head"]))
        # Each node declares one GPU (Ray only counts it): an --active task asks for it.
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "num_gpus": 1, "include_dashboard": False})
        nodes["head"] = c.head_node
        for label in ("clean", "x8", "driver"):
            os.environ.update(env_for(paths[label]))
            nodes[label] = c.add_node(num_cpus=1, num_gpus=1)
        os.environ.update(env_for(paths["clean"], delay_s=SLOW_DELAY_S))
        os.environ["INFERGAP_FLEET_TEST_STARTED"] = str(started)
        nodes["slow"] = c.add_node(num_cpus=1, num_gpus=1)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    c.wait_for_nodes()
    try:
        yield {"cluster": c, "nodes": nodes, "expected": expected, "started": started, "tmp": tmp}
    finally:
        c.shutdown()


def _fleet(address: str, *args: str, timeout: float = 240) -> subprocess.Popen:
    env = {**os.environ, "RAY_ADDRESS": address, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.Popen([sys.executable, "-m", "infergap", "fleet", "audit", "--address", "auto", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _by_node_id(report: dict) -> dict[str, dict]:
    return {n["node"]["node_id"]: n for n in report["nodes"]}


def test_injected_faults_are_exactly_the_drift_and_a_hung_node_is_reported(cluster, tmp_path):
    c, nodes = cluster["cluster"], cluster["nodes"]
    out = tmp_path / "fleet.json"
    t0 = time.monotonic()
    p = _fleet(c.address, "-f", "json", "-o", str(out), "--timeout", "45")
    _, err = p.communicate(timeout=240)
    assert p.returncode == 0, err
    assert time.monotonic() - t0 < 200
    report = json.loads(out.read_text())
    assert report["schema"] == "infergap.fleet/1"
    by_id = _by_node_id(report)
    assert set(by_id) == {n.node_id for n in nodes.values()}
    slow = by_id[nodes["slow"].node_id]
    assert slow["state"] == "hung" and "45 s" in slow["error"], slow
    name = {label: by_id[n.node_id]["node"]["name"] for label, n in nodes.items()}
    got = drift_keys(report)
    want = {name[label]: keys for label, keys in cluster["expected"].items() if keys}
    assert got == want  # exactly the injected faults, on exactly their nodes; the identical nodes have none
    assert report["summary"]["audited"] == 4 and report["summary"]["failed_by_state"] == {"hung": 1}
    assert report["summary"]["classes"] == 1
    x8 = next(d for d in report["drift"] if d["key"] == "pcie.link@GPU0")
    assert x8["majority"]["count"] == 3 and "x16" in x8["majority"]["value"] and x8["severity"] == "P0"
    assert "Reseat" in json.dumps(x8["fix"])
    assert "infergap: node" in err and "hung" in err


def test_a_node_killed_mid_run_is_reported_and_the_others_complete(cluster, tmp_path):
    c, nodes, started = cluster["cluster"], cluster["nodes"], cluster["started"]
    before = set(started.iterdir())
    p = _fleet(c.address, "-f", "json", "-o", str(tmp_path / "fleet.json"), "--timeout", "120")
    deadline = time.monotonic() + 120
    while set(started.iterdir()) == before:  # the slow node's task is running
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline, "the slow node's task never started"
        time.sleep(0.5)
    c.remove_node(nodes["slow"], allow_graceful=False)
    _, err = p.communicate(timeout=180)
    assert p.returncode == 0, err
    report = json.loads((tmp_path / "fleet.json").read_text())
    by_id = _by_node_id(report)
    slow = by_id[nodes["slow"].node_id]
    assert slow["state"] == "dead", slow
    assert report["summary"]["audited"] == 4
    assert {n["state"] for nid, n in by_id.items() if nid != nodes["slow"].node_id} == {"audited"}
    assert len(report["drift"]) == 2


def test_active_waits_for_a_busy_gpu_instead_of_sharing_it(cluster, tmp_path):
    """With --active the node task asks for the node's GPUs: on a node where another job holds the
    GPU it does not start, and the node is reported with the reason; the other nodes complete."""
    c, nodes = cluster["cluster"], cluster["nodes"]
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address=c.address, logging_level="WARNING", log_to_driver=False)
    try:
        @ray.remote(num_gpus=1, num_cpus=0)
        def users_job() -> None:
            time.sleep(600)

        free = ray.available_resources().get("GPU", 0)
        job = users_job.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nodes["x8"].node_id, soft=False)).remote()
        deadline = time.monotonic() + 60
        while ray.available_resources().get("GPU", 0) > free - 0.5:
            assert time.monotonic() < deadline, "the user's job never took its GPU"
            time.sleep(0.5)
        p = _fleet(c.address, "--active", "-f", "json", "-o", str(tmp_path / "fleet.json"), "--timeout", "45")
        _, err = p.communicate(timeout=240)
        ray.cancel(job, force=True)
    finally:
        ray.shutdown()
    assert p.returncode == 0, err
    report = json.loads((tmp_path / "fleet.json").read_text())
    by_id = _by_node_id(report)
    busy = by_id[nodes["x8"].node_id]
    assert busy["state"] == "hung" and "waits for all 1 GPUs" in busy["error"], busy
    audited = {nid for nid, n in by_id.items() if n["state"] == "audited"}
    assert audited == {nodes[k].node_id for k in ("head", "clean", "driver")}
    name = {label: by_id[n.node_id]["node"]["name"] for label, n in nodes.items() if n.node_id in by_id}
    assert drift_keys(report) == {name["driver"]: cluster["expected"]["driver"]}


def test_node_without_infergap_says_so():
    """The node task, run by a Python without infergap (the system's), answers no_infergap with the
    fix instead of failing (Ray ships it by value, so a node needs nothing but Python)."""
    src = (ROOT / "src" / "infergap" / "fleet" / "node_task.py").read_text()
    code = src + "\nimport json\nr = collect_here()\nprint(json.dumps({k: r[k] for k in ('state', 'error')}))\n"
    python = "/usr/bin/python3"
    if not Path(python).exists():
        pytest.skip("no system Python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    r = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, timeout=60, env=env)
    if r.returncode == 0 and '"ok"' in r.stdout:
        pytest.skip("the system Python has infergap installed")
    d = json.loads(r.stdout)
    assert d["state"] == "no_infergap" and "runtime_env" in d["error"] and "pip" in d["error"]
