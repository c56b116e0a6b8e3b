"""Handlers on trees the tests own: cpuidle through the journal engine, setpci arithmetic and its
persistent udev rule, modprobe state, persistent sysctl.d content, selection filters."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infergap.findings import Action, Finding, Severity
from infergap.ledger import Ledger
from infergap.remedy import ChangeState, SystemPaths, apply_plan, plan_fix, revert_run
from infergap.remedy.actions import SetpciHandler, SysctlHandler


def _finding(fid: str, actions: list[dict], severity: str = "P1") -> Finding:
    return Finding.model_validate({"id": fid, "investigator": "t", "status": "actionable", "severity": severity,
                                   "fix_kind": "runtime", "title": fid, "remedy": {"actions": actions}})


def _cpuidle_tree(root: Path, disables: list[str]) -> Path:
    """The kernel's cpuidle sysfs layout (Documentation/admin-guide/pm/cpuidle.rst): per CPU,
    state0 POLL, state1 C1, state2 C6 with name/latency/disable files."""
    for cpu, dis in enumerate(disables):
        for i, (name, lat) in enumerate([("POLL", "0"), ("C1", "2"), ("C6", "170")]):
            d = root / f"devices/system/cpu/cpu{cpu}/cpuidle/state{i}"
            d.mkdir(parents=True)
            (d / "name").write_text(name + "\n")
            (d / "latency").write_text(lat + "\n")
            (d / "disable").write_text((dis if name == "C6" else "0") + "\n")
    return root


def test_cpuidle_apply_and_revert_restore_each_cpu(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("apply_plan refuses to run when not root")
    sysroot = _cpuidle_tree(tmp_path / "sys", ["0", "1", "0", "0"])
    paths = SystemPaths(proc_sys=tmp_path / "proc", etc=tmp_path / "etc", sys=sysroot)
    f = _finding("cpu.cstates", [{"type": "cpuidle", "target": "C6", "value": "1"}])
    plan = plan_fix([f], paths=paths, container=None)
    (ch,) = plan.changes
    assert ch.state == ChangeState.planned
    assert ch.now == "cpu0=0 cpu1=1 cpu2=0 cpu3=0" and ch.after == "cpu0=1 cpu1=1 cpu2=1 cpu3=1"
    disable = lambda c: (sysroot / f"devices/system/cpu/cpu{c}/cpuidle/state2/disable").read_text().strip()
    with Ledger(tmp_path / "db") as led:
        res = apply_plan(plan, led, paths=paths, persist=True)
        assert res.status == "applied" and [disable(c) for c in range(4)] == ["1"] * 4
        assert res.changes[0].reason == "no persistent file for this action type"
        (step,) = led.steps(res.run_id)
        assert step["before"] == "cpu0=0 cpu1=1 cpu2=0 cpu3=0" and step["after"] == "cpu0=1 cpu1=1 cpu2=1 cpu3=1"
        rev = revert_run(led, str(res.run_id), paths=paths)  # the trees it ran under (a journal never chooses them)
        assert rev.ok and [disable(c) for c in range(4)] == ["0", "1", "0", "0"]
        # C1 was never touched
        assert (sysroot / "devices/system/cpu/cpu0/cpuidle/state1/disable").read_text() == "0\n"


def test_cpuidle_value_changed_since_audit(tmp_path):
    sysroot = _cpuidle_tree(tmp_path / "sys", ["0", "1"])
    paths = SystemPaths(sys=sysroot)
    plan = plan_fix([_finding("cpu.cstates", [{"type": "cpuidle", "target": "C6", "value": "1", "previous": "0"}])],
                    paths=paths, container=None)
    assert plan.changes[0].state == ChangeState.refused and "changed since the audit" in plan.changes[0].reason


def test_setpci_mrrs_masked_value_and_udev_rule(tmp_path):
    # DevCtl 0x2930: MRRS code 2 (512 B), MPS code 1 (256 B); writing 0x5000 under mask 0x7000
    # sets MRRS code 5 (4096 B) and keeps every other bit (PCIe Base Spec, Device Control).
    h = SetpciHandler(SystemPaths(etc=tmp_path))
    # The audit records the masked bits it saw (MRRS code 2 → 0x2000), as the PCIe investigator does.
    a = Action(type="setpci", target="0000:18:00.0", pci_register="CAP_EXP+0x8.w", value="5000", mask="7000", previous="2000")
    h.validate(a)
    assert h.intended(a, "2930") == "5930"
    assert h.matches(a, "5930", "5930") and h.matches(a, "5931", "5930") and not h.matches(a, "2930", "5930")
    assert h.same_as_audit(a, "2930") and h.same_as_audit(a, "2910") and not h.same_as_audit(a, "5930")
    # ACS Control: the whole word under mask ffff
    acs = Action(type="setpci", target="0000:00:01.1", pci_register="ECAP_ACS+0x6.w", value="0000", mask="ffff", previous="001d")
    h.validate(acs)
    assert h.same_as_audit(acs, "001d") and not h.same_as_audit(acs, "001c")
    assert h.intended(acs, "001d") == "0000" and h.command(acs) == "setpci -s 0000:00:01.1 ECAP_ACS+6.w=0000:ffff"
    assert h.command(a) == "setpci -s 0000:18:00.0 CAP_EXP+8.w=5000:7000"
    assert h.revert_command(a, "2930") == "setpci -s 0000:18:00.0 CAP_EXP+8.w=2930:7000"
    (pf,) = h.persist_files(a)
    assert pf.path == tmp_path / "udev/rules.d/90-infergap-setpci.rules"
    line = pf.content.strip()
    assert line.startswith('ACTION=="add", SUBSYSTEM=="pci", KERNEL=="0000:18:00.0", RUN+="')
    assert line.endswith(' -s 0000:18:00.0 CAP_EXP+8.w=5000:7000"')
    # a second write of the same register replaces the rule instead of adding one
    pf.path.parent.mkdir(parents=True)
    pf.path.write_text(pf.content)
    (pf2,) = h.persist_files(a.model_copy(update={"value": "4000"}))
    assert pf2.content.count("\n") == 1 and "CAP_EXP+8.w=4000:7000" in pf2.content


def test_modprobe_state_from_sysfs(tmp_path):
    paths = SystemPaths(sys=tmp_path / "sys", etc=tmp_path / "etc")
    f = _finding("nvidia.peermem", [{"type": "modprobe", "target": "nvidia-peermem"}])
    plan = plan_fix([f], paths=paths, container=None)
    assert plan.changes[0].state == ChangeState.planned and plan.changes[0].now == "absent"
    assert plan.changes[0].command == "modprobe nvidia_peermem"
    assert plan.changes[0].revert_command == "modprobe -r nvidia_peermem"
    assert plan.changes[0].persist == [f"{tmp_path}/etc/modules-load.d/infergap.conf: nvidia_peermem"]
    (tmp_path / "sys/module/nvidia_peermem").mkdir(parents=True)
    plan = plan_fix([f], paths=paths, container=None)
    assert plan.changes[0].state == ChangeState.already


def test_sysctl_persist_keeps_other_lines_and_replaces_the_key(tmp_path):
    conf = tmp_path / "sysctl.d/90-infergap.conf"
    conf.parent.mkdir()
    conf.write_text("kernel.numa_balancing = 1\nvm.max_map_count=262144\n")
    h = SysctlHandler(SystemPaths(etc=tmp_path))
    (pf,) = h.persist_files(Action(type="sysctl", target="kernel.numa_balancing", value="0"))
    assert pf.content == "vm.max_map_count=262144\nkernel.numa_balancing = 0\n"


def test_selection_by_id_and_severity(tmp_path):
    paths = SystemPaths(proc_sys=tmp_path, sys=tmp_path, etc=tmp_path)
    fs = [_finding("a.p0", [], "P0"), _finding("b.p1", [], "P1"), _finding("c.p2", [], "P2")]
    assert [c.check_id for c in plan_fix(fs, paths=paths, container=None, severity=Severity.P1).changes] == ["a.p0", "b.p1"]
    plan = plan_fix(fs, paths=paths, container=None, only={"c.p2"})
    assert [c.check_id for c in plan.changes] == ["c.p2"]
