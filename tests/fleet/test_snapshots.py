"""`infergap fleet audit --snapshots`: drift over node snapshots made from the real host captures,
the report formats (the HTML page checked in headless Chromium), --fail-on, the ledger and
`infergap compare` of two fleet runs."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tests.fleet.fleet_support import ACTIVE_FAULTS, FAULTS, drift_keys, load, to_targz

sys.path.insert(0, str(ROOT / "tests" / "plan"))
import chromium  # noqa: E402


def _fleet_dir(tmp: Path, fixture: str, faults: list[str | None]) -> dict[str, set[str]]:
    base = load(fixture)
    expected = {}
    for i, fault in enumerate(faults):
        files = dict(base)
        name = f"node{i:02d}"
        expected[name] = FAULTS[fault](files) if fault else set()
        (tmp / f"{name}.tar.gz").write_bytes(to_targz(files))
    return {k: v for k, v in expected.items() if v}


@pytest.mark.parametrize("fixture", ["h200-2gpu-collect.tar.gz", "h200-1gpu-collect.tar.gz", "seed-8x-rtxpro6000"])
def test_each_injected_fault_is_found_and_nothing_else(tmp_path, fixture):
    from infergap.fleet import build_report
    from infergap.fleet.runner import audit_stream, expand_snapshots, snapshot_stream

    active = "probes/active.json" in load(fixture)
    faults = [f for f in FAULTS if active or f not in ACTIVE_FAULTS]
    expected = _fleet_dir(tmp_path, fixture, [None, None, None, *faults])
    report = build_report(audit_stream(snapshot_stream(expand_snapshots(str(tmp_path))), workers=0), source={"kind": "test"})
    assert report.summary()["audited"] == 3 + len(faults) and len(report.classes) == 1
    assert drift_keys(report.to_json()) == expected
    for d in report.drift:  # every item names its nodes, their value, the majority and a fix
        assert d.nodes and d.majority and d.majority["count"] == len(faults) + 2 and d.fix, d


def test_identical_nodes_have_no_drift(tmp_path):
    _fleet_dir(tmp_path, "h200-2gpu-collect.tar.gz", [None] * 4)
    r = run_cli("fleet", "audit", "--snapshots", str(tmp_path), "-f", "json", "--fail-on", "drift")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["drift"] == [] and d["summary"]["audited"] == 4 and d["summary"]["classes"] == 1


def test_classes_split_by_hardware_and_a_lone_node_is_not_compared(tmp_path):
    _fleet_dir(tmp_path, "h200-2gpu-collect.tar.gz", [None, None])
    (tmp_path / "one-gpu.tar.gz").write_bytes(to_targz(load("h200-1gpu-collect.tar.gz")))
    r = run_cli("fleet", "audit", "--snapshots", str(tmp_path / "*.tar.gz"))
    assert r.returncode == 0, r.stderr
    flat = " ".join(r.stdout.split())  # lines fitted to 100 columns
    assert "2 hardware classes" in flat and "one node: no peers to compare" in flat
    assert "none: within every class of two or more nodes, every node matches the others; 1 node(s) alone in their class not compared" in flat


def test_a_single_node_is_not_called_matching(tmp_path):
    """One snapshot: nothing was compared, so the report does not say every node matches."""
    (tmp_path / "one-gpu.tar.gz").write_bytes(to_targz(load("h200-1gpu-collect.tar.gz")))
    for fmt in ("text", "md", "html"):
        r = run_cli("fleet", "audit", "--snapshots", str(tmp_path / "*.tar.gz"), "-f", fmt)
        assert r.returncode == 0, r.stderr
        assert "nothing was compared" in r.stdout and "every node matches the others" not in r.stdout, (fmt, r.stdout)


def test_formats_fail_on_ledger_and_compare(tmp_path):
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    _fleet_dir(snaps, "h200-2gpu-collect.tar.gz", [None, None, None, "autogroup_off"])
    (snaps / "broken.tar.gz").write_bytes(b"not an archive")
    db = tmp_path / "ledger.sqlite3"
    r = run_cli("fleet", "audit", "--snapshots", str(snaps), "--db", str(db), "-f", "md")
    assert r.returncode == 0, r.stderr
    assert "| P2 | check | `kernel.sched_autogroup` | node03 |" in r.stdout and "## Node × check matrix" in r.stdout
    assert "broken" in r.stdout and "not a readable .tar.gz archive" in r.stderr
    r = run_cli("fleet", "audit", "--snapshots", str(snaps), "--db", str(db), "--fail-on", "P0")
    assert r.returncode == 1  # a node could not be audited: never a pass
    (snaps / "broken.tar.gz").unlink()
    files = load("h200-2gpu-collect.tar.gz")
    FAULTS["link_x8"](files)
    (snaps / "node01.tar.gz").write_bytes(to_targz(files))  # a link degraded since the last run
    r = run_cli("fleet", "audit", "--snapshots", str(snaps), "--db", str(db), "-f", "html", "-o", str(tmp_path / "fleet.html"), "--fail-on", "P0")
    assert r.returncode == 1 and r.stdout == ""
    r = run_cli("history", "--db", str(db), "--kind", "fleet", "--json")
    runs = json.loads(r.stdout)
    assert [x["status"] for x in runs] == ["done"] * 3 and "5 nodes, 1 not audited" in runs[2]["what"]
    audits = json.loads(run_cli("history", "--db", str(db), "--kind", "audit", "--json", "--limit", "100").stdout)
    # every node's audit, under the host identity the snapshot itself gives: copies of one capture are one host
    assert len(audits) == 4 * 3 and len({a["host"] for a in audits}) == 1
    r = run_cli("compare", str(runs[1]["id"]), str(runs[0]["id"]), "--db", str(db))
    assert r.returncode == 0, r.stderr
    assert "+ drift P0 check pcie.link@GPU0: node01" in r.stdout
    assert "node01 pcie.link@GPU0: ok → actionable P0" in r.stdout and "- node broken" in r.stdout
    assert "no node, drift item or check changed" in run_cli("compare", str(runs[2]["id"]), str(runs[1]["id"]), "--db", str(db)).stdout


def test_html_heat_map_in_headless_chromium(tmp_path):
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    _fleet_dir(snaps, "h200-2gpu-collect.tar.gz", [None, None, None, "link_x8", "swappiness", "driver_behind", "slow_memcopy"])
    page = tmp_path / "fleet.html"
    r = run_cli("fleet", "audit", "--snapshots", str(snaps), "-f", "html", "-o", str(page))
    assert r.returncode == 0, r.stderr
    html = page.read_text()
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", html, re.I) and "<script" not in html and "<link" not in html
    if chromium.chromium() is None:
        pytest.skip("chromium is not installed (CI installs it: apt-get install -y chromium)")
    from PIL import Image

    res = chromium.load(page, tmp_path / "profile", queries={
        "rows": "document.querySelectorAll('#heatmap tbody tr').length",
        "drift": "document.querySelectorAll('#heatmap td.drift').length",
        "p0": "document.querySelectorAll('#heatmap td.c-P0').length",
        "h2": "Array.from(document.querySelectorAll('h2')).map(h => h.textContent)",
        "p0bg": "getComputedStyle(document.querySelector('#heatmap td.c-P0')).backgroundColor",
        "legend": "Array.from(document.querySelectorAll('.legend span')).map(s => [s.className, getComputedStyle(s).backgroundColor])"},
        shots={"heat": (1200, 900, "#heatmap")})
    assert res.requests == [page.resolve().as_uri()], res.requests
    assert not [c for c in res.console if c[0] in ("error", "assert", "warning")] and not res.exceptions, (res.console, res.exceptions)
    assert res.values["rows"] == 7 and res.values["drift"] == 4 and res.values["p0"] >= 1
    assert res.values["p0bg"] == "rgb(180, 35, 24)"
    legend = dict(res.values["legend"])  # the legend shows the colours the cells use
    assert legend and all(bg not in ("rgba(0, 0, 0, 0)", "transparent") for bg in legend.values()), legend
    assert legend.get("c-P0") == "rgb(180, 35, 24)", legend
    assert res.values["h2"][:3] == ["Summary", "Drift", "Node × check matrix"]
    img = Image.open(io.BytesIO(res.shots["heat"])).convert("RGB")
    colors = dict((c, n) for n, c in img.getcolors(maxcolors=1 << 20))
    assert (180, 35, 24) in colors and (166, 244, 197) in colors  # a P0 cell and ok cells are drawn


def test_bad_input_is_one_line(tmp_path):
    r = run_cli("fleet", "audit", "--snapshots", str(tmp_path / "nothing-here*"))
    assert r.returncode == 2 and r.stderr.strip() == f"infergap: error: --snapshots {tmp_path / 'nothing-here*'}: no snapshot matches"
    r = run_cli("fleet", "audit")
    assert r.returncode == 2 and "either --address" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("fleet", "audit", "--snapshots", str(tmp_path), "--active")
    assert r.returncode == 2 and "--active" in r.stderr
    r = run_cli("fleet", "audit", "--address", "auto", "--runtime-env", "{pip")
    assert r.returncode == 2 and "--runtime-env: not JSON" in r.stderr
    pytest.importorskip("ray", reason="Ray is the optional extra infergap[fleet]")
    db = tmp_path / "ledger.sqlite3"
    r = run_cli("fleet", "audit", "--address", "auto", "--db", str(db), env={"RAY_ADDRESS": "127.0.0.1:1"})
    assert r.returncode == 2 and r.stderr.strip().startswith(
        "infergap: error: --address auto (RAY_ADDRESS=127.0.0.1:1): nothing answers at 127.0.0.1:1"), r.stderr
    (run,) = json.loads(run_cli("history", "--db", str(db), "--json").stdout)
    assert (run["kind"], run["status"]) == ("fleet", "failed")  # the attempt is recorded as failed, not left running


def test_without_ray_address_says_how_to_install(tmp_path):
    """Ray is optional: with it hidden, --address answers with the one-line install command."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "ray.py").write_text("raise ImportError('No module named ray')\n")
    r = run_cli("fleet", "audit", "--address", "auto", env={"PYTHONPATH": f"{hide}:{ROOT / 'src'}"})
    assert r.returncode == 2 and r.stderr.strip() == "infergap: error: Ray is not installed: pip install 'infergap[fleet]' (or pip install 'ray>=2.9')"


def test_tolerance_and_a_split_class(tmp_path):
    """A copy 15 % below the median is drift at the default 10 % tolerance and not at 20 %; two
    nodes that disagree have no majority, so both are named."""
    from infergap.fleet import build_report
    from infergap.fleet.runner import audit_stream, expand_snapshots, snapshot_stream

    _fleet_dir(tmp_path, "h200-2gpu-collect.tar.gz", [None, None, "slow_memcopy"])
    digests = audit_stream(snapshot_stream(expand_snapshots(str(tmp_path))), workers=0)
    assert [d.key for d in build_report(digests, source={}).drift] == ["GPU0 memory copy GB/s"]
    assert build_report(digests, source={}, tolerance=0.2).drift == []
    split = tmp_path / "split"
    split.mkdir()
    _fleet_dir(split, "h200-2gpu-collect.tar.gz", [None, "swappiness"])
    r = build_report(audit_stream(snapshot_stream(expand_snapshots(str(split))), workers=0), source={})
    (d,) = r.drift
    assert d.key == "vm.swappiness" and d.majority is None and d.nodes == ["node00", "node01"]
    from infergap.fleet.render import render_text

    assert "no majority: the 2 nodes are split" in render_text(r)


def test_a_node_that_lost_a_gpu_is_not_left_without_peers(tmp_path):
    """A node with one H200 among nodes with two lands in a class of its own; it is reported as
    hardware drift against the larger class of the same GPU model and CPU, not passed over."""
    from infergap.fleet import build_report
    from infergap.fleet.runner import audit_stream, expand_snapshots, snapshot_stream

    _fleet_dir(tmp_path, "h200-2gpu-collect.tar.gz", [None] * 5)
    (tmp_path / "node99.tar.gz").write_bytes(to_targz(load("h200-1gpu-collect.tar.gz")))
    r = build_report(audit_stream(snapshot_stream(expand_snapshots(str(tmp_path))), workers=0), source={})
    assert len(r.classes) == 2
    (d,) = r.drift
    assert (d.kind, d.key, d.nodes, d.severity) == ("hardware", "GPU count", ["node99"], "P1")
    assert d.majority == {"value": "2", "count": 5} and d.values[0] == {"value": "1", "count": 1, "nodes": ["node99"]}


def test_drift_only_where_values_differ_and_values_as_reported(tmp_path):
    """Two captures of one VM (tests/fixtures/hosts): a check ok on both sides whose judged value is
    the same (container markers, the versions compared on their own, iommu tokens) is no drift,
    and no value is printed as a ``<placeholder>``."""
    r = run_cli("fleet", "audit", "--snapshots", str(ROOT / "tests" / "fixtures" / "hosts"), "-f", "json")
    assert r.returncode == 0, r.stderr
    drift = json.loads(r.stdout)["drift"]
    keys = {d["key"] for d in drift}
    assert not keys & {"container.detect", "runtime.versions", "iommu.mode"}, keys
    for d in drift:
        assert len({g["value"] for g in d["values"]}) == len(d["values"]), d  # the groups differ as printed
        for g in d["values"]:
            assert not re.search(r"<[a-z_ -]{2,40}>", g["value"]), g
    cmd = next(d for d in drift if d["key"] == "kernel.cmdline")  # ok on both, but the command lines differ
    assert all(g["value"].startswith("ok: ") for g in cmd["values"])


def test_audit_and_fleet_give_one_snapshot_one_host(tmp_path):
    """`audit --snapshot X` and `fleet audit --snapshots` over X record one host: `compare` of the two
    runs warns of no different hosts."""
    db = tmp_path / "ledger.sqlite3"
    snap = ROOT / "tests" / "fixtures" / "hosts" / "h200-1gpu"
    assert run_cli("audit", "--snapshot", str(snap), "--db", str(db), "-f", "json").returncode == 0
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    (snaps / "node00.tar.gz").write_bytes(to_targz(load("h200-1gpu")))
    assert run_cli("fleet", "audit", "--snapshots", str(snaps), "--db", str(db)).returncode == 0
    audits = json.loads(run_cli("history", "--db", str(db), "--kind", "audit", "--json").stdout)
    assert len(audits) == 2 and len({a["host"] for a in audits}) == 1, audits
    r = run_cli("compare", str(audits[1]["id"]), str(audits[0]["id"]), "--db", str(db))
    assert r.returncode == 0 and "different hosts" not in r.stderr, r.stderr
