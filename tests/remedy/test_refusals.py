"""Refusals: not root, host-owned settings inside a container, targets outside the catalog."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from infergap.findings import Finding, FixKind
from infergap.ledger import Ledger
from infergap.remedy import ChangeState, SystemPaths, plan_fix

from .conftest import SRC, sysctl_finding, write_report


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(SRC), "PYTHONWARNINGS": "ignore", **extra}


def test_not_root_is_refused_in_one_line(tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to run a process whose effective uid is not 0")
    rep = write_report(tmp_path / "audit.json", [
        sysctl_finding("net.socket_buffers", [{"target": "net.core.somaxconn", "value": "8192"}])])
    db = tmp_path / "ledger.sqlite3"
    # A new user namespace without a uid map: the process runs with effective uid 65534.
    base = ["unshare", "--user", sys.executable, "-m", "infergap", "fix", "--db", str(db)]
    probe = subprocess.run(["unshare", "--user", "true"], capture_output=True, timeout=20)
    if probe.returncode != 0:
        pytest.skip("user namespaces unavailable")
    r = subprocess.run([*base, "--audit", str(rep), "--apply", "--yes"], capture_output=True, text=True, timeout=60, env=_env())
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0
    assert r.stderr.startswith("infergap: error: fix --apply must run as root (effective uid 65534)")
    r = subprocess.run([*base, "--revert"], capture_output=True, text=True, timeout=60, env=_env())
    assert r.returncode == 2 and "infergap: error:" in r.stderr
    # The dry run needs no privilege.
    r = subprocess.run([*base, "--audit", str(rep)], capture_output=True, text=True, timeout=60, env=_env())
    assert r.returncode == 0 and "sysctl -w net.core.somaxconn=8192" in r.stdout


def test_inside_a_container_host_owned_settings_are_refused(tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for private mount and network namespaces")
    # A stand-in /proc/sys for the host-owned key: even a wrong decision could only write here.
    proc = tmp_path / "proc_sys"
    (proc / "kernel").mkdir(parents=True)
    (proc / "kernel/numa_balancing").write_text("1\n")
    (proc / "net/core").mkdir(parents=True)
    (proc / "net/core/somaxconn").write_text("4096\n")
    rep = write_report(tmp_path / "audit.json", [
        sysctl_finding("kernel.numa_balancing", [{"target": "kernel.numa_balancing", "value": "0", "previous": "1"}],
                       severity="P1"),
        sysctl_finding("net.socket_buffers", [{"target": "net.core.somaxconn", "value": "8192", "previous": "4096"}])])
    db = tmp_path / "ledger.sqlite3"
    # Podman's marker, created on a private tmpfs over /run in a private mount namespace.
    script = 'mount -t tmpfs tmpfs /run && touch /run/.containerenv && exec "$@"'
    r = subprocess.run(["unshare", "--net", "--mount", "sh", "-c", script, "sh", sys.executable, "-m", "infergap", "fix",
                        "--audit", str(rep), "--db", str(db), "--apply", "--yes"],
                       capture_output=True, text=True, timeout=60,
                       env=_env(INFERGAP_PROC_SYS=str(proc), INFERGAP_ETC=str(tmp_path / "etc")))
    if "mount" in r.stderr and r.returncode != 0 and "infergap" not in r.stderr:
        pytest.skip(f"cannot mount in a private namespace: {r.stderr.strip()}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "running inside a container" in r.stdout
    flat = " ".join(r.stdout.split())  # prose fitted to 100 columns
    assert "host-controlled setting" in flat and "run on the host instead: sysctl -w kernel.numa_balancing='0'" in flat
    assert (proc / "kernel/numa_balancing").read_text() == "1\n"
    # The network namespace's own key is the container's to change.
    assert (proc / "net/core/somaxconn").read_text() == "8192\n"
    with Ledger(db) as led:
        run = led.latest(kind="fix")
        assert [c["state"] for c in run.payload["changes"]] == ["refused", "applied"]


def _finding(action: dict, **kw) -> Finding:
    return Finding.model_validate({"id": kw.get("id", "x.check"), "investigator": "t", "status": "actionable",
                                   "severity": "P1", "fix_kind": kw.get("fix_kind", "runtime"), "title": "t",
                                   "remedy": {"actions": [action] if action else [], "commands": ["echo by hand"]}})


@pytest.mark.parametrize("action,why", [
    ({"type": "sysctl", "target": "kernel.core_pattern", "value": "|/tmp/x"}, "not a key the check catalog knows"),
    ({"type": "sysctl", "target": "../../etc/passwd", "value": "1"}, "not a key the check catalog knows"),
    ({"type": "sysctl", "target": "vm.swappiness", "value": "10; reboot"}, "not one to four integers"),
    ({"type": "modprobe", "target": "evil_module"}, "not one the check catalog loads"),
    ({"type": "setpci", "target": "01:00.0", "pci_register": "CAP_EXP+8.w", "value": "5000", "mask": "7000"}, "not a PCI address"),
    ({"type": "setpci", "target": "0000:01:00.0", "pci_register": "0x04.w", "value": "0", "mask": "ffff"}, "not one the check catalog writes"),
    ({"type": "setpci", "target": "0000:01:00.0", "pci_register": "CAP_EXP+8.w", "value": "5000", "mask": None}, "not a 16-bit hex word"),
    ({"type": "nvidia_persistence", "target": "GPU-1234"}, "not a PCI address"),
    ({"type": "cpuidle", "target": "C6; rm", "value": "1"}, "not valid"),
])
def test_targets_outside_the_catalog_are_refused(tmp_path, action, why):
    plan = plan_fix([_finding(action)], paths=SystemPaths(proc_sys=tmp_path, etc=tmp_path, sys=tmp_path), container=None)
    (ch,) = plan.changes
    assert ch.state == ChangeState.refused
    assert "not in the check catalog" in ch.reason and why in ch.reason


def test_non_runtime_and_manual_findings_are_explained_not_attempted(tmp_path):
    paths = SystemPaths(proc_sys=tmp_path, etc=tmp_path, sys=tmp_path)
    findings = [_finding({}, id="iommu.mode", fix_kind="reboot"), _finding({}, id="pcie.bar1", fix_kind="bios"),
                _finding({}, id="limits.memlock")]
    plan = plan_fix(findings, paths=paths, container=None)
    assert [c.check_id for c in plan.changes] == ["limits.memlock"] and plan.filtered_out == 2
    assert plan.changes[0].state == ChangeState.manual and plan.changes[0].commands == ["echo by hand"]
    plan = plan_fix(findings, paths=paths, container=None, kinds=set(FixKind))
    states = {c.check_id: (c.state, c.reason) for c in plan.changes}
    assert states["iommu.mode"][0] == ChangeState.not_runtime and "reboot" in states["iommu.mode"][1]
    assert states["pcie.bar1"][0] == ChangeState.not_runtime and "BIOS" in states["pcie.bar1"][1]
