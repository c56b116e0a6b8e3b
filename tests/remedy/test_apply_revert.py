"""Apply / revert cycles with real sysctl writes inside a private network namespace."""

from __future__ import annotations

from pathlib import Path

import pytest

from infergap.ledger import Ledger

from .conftest import sysctl_finding, write_report

pytestmark = pytest.mark.slow


def _bump(value: str, k: int = 2) -> str:
    """A different valid value for a 1- or 3-field sysctl (each field times k; ranges stay ordered)."""
    parts = [int(p) for p in value.split()]
    if len(parts) == 2:  # ip_local_port_range: shrink the range, staying valid
        return f"{parts[0] + 1000} {parts[1] - 1000}"
    return " ".join(str(p * k) for p in parts)


@pytest.fixture
def sandbox(tmp_path: Path):
    etc = tmp_path / "etc"
    (etc / "sysctl.d").mkdir(parents=True)
    return {"etc": etc, "db": tmp_path / "ledger.sqlite3", "env": {"INFERGAP_ETC": str(etc)}}


def test_dry_run_shows_commands_and_changes_nothing(netns, sandbox, tmp_path):
    som = netns.read("net.core.somaxconn")
    rep = write_report(tmp_path / "audit.json", [
        sysctl_finding("net.socket_buffers", [{"target": "net.core.somaxconn", "value": _bump(som), "previous": som}])])
    r = netns.infergap("fix", "--audit", str(rep), "--db", str(sandbox["db"]), "--persist", env=sandbox["env"])
    assert r.returncode == 0, r.stderr
    assert "dry run" in r.stdout
    assert f"command  sysctl -w net.core.somaxconn={_bump(som)}" in r.stdout
    assert f"now      {som}" in r.stdout and f"after    {_bump(som)}" in r.stdout
    assert f"revert   sysctl -w net.core.somaxconn={som}" in r.stdout
    assert "90-infergap.conf: net.core.somaxconn" in r.stdout
    assert netns.read("net.core.somaxconn") == som
    assert not list((sandbox["etc"] / "sysctl.d").iterdir())
    with Ledger(sandbox["db"]) as led:
        assert led.runs(kind="fix") == []


def test_apply_persist_then_revert_restores_values_and_files_exactly(netns, sandbox, tmp_path):
    som, rmem = netns.read("net.core.somaxconn"), netns.read("net.ipv4.tcp_rmem")
    new_som, new_rmem = _bump(som), _bump(rmem)
    # A pre-existing persistent file, with a line the fix replaces: revert must restore its bytes.
    conf = sandbox["etc"] / "sysctl.d" / "90-infergap.conf"
    original = b"# local tuning\nnet.core.somaxconn = 1024\nvm.max_map_count = 262144\n"
    conf.write_bytes(original)
    conf.chmod(0o600)
    rep = write_report(tmp_path / "audit.json", [
        sysctl_finding("net.socket_buffers", [{"target": "net.core.somaxconn", "value": new_som, "previous": som},
                                              {"target": "net.ipv4.tcp_rmem", "value": new_rmem, "previous": rmem}])])

    r = netns.infergap("fix", "--audit", str(rep), "--db", str(sandbox["db"]), "--apply", "--yes", "--persist",
                       env=sandbox["env"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert netns.read("net.core.somaxconn") == new_som
    assert netns.read("net.ipv4.tcp_rmem") == new_rmem
    text = conf.read_text()
    assert "vm.max_map_count = 262144" in text and f"net.core.somaxconn = {new_som}" in text
    assert "net.core.somaxconn = 1024" not in text and f"net.ipv4.tcp_rmem = {new_rmem}" in text
    assert conf.stat().st_mode & 0o777 == 0o600

    with Ledger(sandbox["db"]) as led:
        run = led.latest(kind="fix")
        assert run is not None and run.status == "applied"
        steps = led.steps(run.id)
    assert [(s["step_kind"], s["target"], s["status"]) for s in steps] == [
        ("value", "sysctl:net.core.somaxconn", "applied"), ("file", str(conf), "applied"),
        ("value", "sysctl:net.ipv4.tcp_rmem", "applied"), ("file", str(conf), "applied")]
    assert (steps[0]["before"], steps[0]["intended"], steps[0]["after"]) == (som, new_som, new_som)
    assert (steps[2]["before"], steps[2]["after"]) == (rmem, new_rmem)
    assert steps[0]["command"] == f"sysctl -w net.core.somaxconn={new_som}"
    assert steps[1]["file_existed"] == 1 and steps[1]["file_previous"] == original and steps[1]["file_mode"] == 0o600
    assert steps[3]["file_previous"] != original  # the content after the first persisted line
    assert all(s["started_at"] <= s["finished_at"] for s in steps)

    r = netns.infergap("fix", "--revert", "--db", str(sandbox["db"]), env=sandbox["env"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert netns.read("net.core.somaxconn") == som
    assert netns.read("net.ipv4.tcp_rmem") == rmem
    assert conf.read_bytes() == original and conf.stat().st_mode & 0o777 == 0o600
    with Ledger(sandbox["db"]) as led:
        assert led.get(run.id).status == "reverted"
        assert [s["revert_status"] for s in led.steps(run.id)] == ["reverted"] * 4
        n_runs = len(led.runs())

    # Reverting again is harmless: nothing written, nothing recorded, values verified.
    r = netns.infergap("fix", "--revert", str(run.id), "--db", str(sandbox["db"]), env=sandbox["env"])
    assert r.returncode == 0 and "already reverted" in r.stdout
    assert "verified" in r.stdout and "drifted" not in r.stdout
    assert netns.read("net.core.somaxconn") == som and conf.read_bytes() == original
    with Ledger(sandbox["db"]) as led:
        assert len(led.runs()) == n_runs


def test_failure_halfway_keeps_journal_consistent_and_revert_restores(netns, sandbox, tmp_path):
    som, ports, wmem = (netns.read(k) for k in ("net.core.somaxconn", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_wmem"))
    # The kernel rejects a port range above 65535 (EINVAL): the second write fails for real.
    rep = write_report(tmp_path / "audit.json", [
        sysctl_finding("net.socket_buffers", [
            {"target": "net.core.somaxconn", "value": _bump(som), "previous": som},
            {"target": "net.ipv4.ip_local_port_range", "value": "70000 80000", "previous": ports},
            {"target": "net.ipv4.tcp_wmem", "value": _bump(wmem), "previous": wmem}])])
    r = netns.infergap("fix", "--audit", str(rep), "--db", str(sandbox["db"]), "--apply", "--yes", "--persist",
                       env=sandbox["env"])
    assert r.returncode == 1, r.stdout + r.stderr
    assert "state    failed" in r.stdout and "not attempted" in r.stdout
    assert netns.read("net.core.somaxconn") == _bump(som)
    assert netns.read("net.ipv4.ip_local_port_range") == ports
    assert netns.read("net.ipv4.tcp_wmem") == wmem
    with Ledger(sandbox["db"]) as led:
        run = led.latest(kind="fix")
        assert run.status == "failed"
        steps = led.steps(run.id)
        states = [c["state"] for c in run.payload["changes"]]
    assert states == ["applied", "failed", "not_attempted"]
    assert [(s["target"], s["status"]) for s in steps] == [
        ("sysctl:net.core.somaxconn", "applied"), (str(sandbox["etc"] / "sysctl.d/90-infergap.conf"), "applied"),
        ("sysctl:net.ipv4.ip_local_port_range", "failed")]
    failed = steps[2]
    assert failed["before"] == ports and failed["after"] == ports and "Invalid argument" in failed["error"]
    assert failed["finished_at"] is not None

    r = netns.infergap("fix", "--revert", "last", "--db", str(sandbox["db"]), env=sandbox["env"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert netns.read("net.core.somaxconn") == som
    assert netns.read("net.ipv4.ip_local_port_range") == ports
    assert not (sandbox["etc"] / "sysctl.d/90-infergap.conf").exists()
    with Ledger(sandbox["db"]) as led:
        assert [s["revert_status"] for s in led.steps(run.id)] == ["reverted", "reverted", "unchanged"]


def test_value_changed_since_audit_is_refused(netns, sandbox, tmp_path):
    som = netns.read("net.core.somaxconn")
    stale = str(int(som) + 7)
    rep = write_report(tmp_path / "audit.json", [
        sysctl_finding("net.socket_buffers", [{"target": "net.core.somaxconn", "value": _bump(som), "previous": stale}])])
    r = netns.infergap("fix", "--audit", str(rep), "--db", str(sandbox["db"]), "--apply", "--yes", env=sandbox["env"])
    assert r.returncode == 0, r.stderr
    assert "value changed since the audit" in r.stdout and "re-audit first" in r.stdout
    assert netns.read("net.core.somaxconn") == som
    with Ledger(sandbox["db"]) as led:
        assert led.runs(kind="fix") == []


def test_host_controlled_finding_is_refused_with_the_host_command(netns, sandbox, tmp_path):
    som = netns.read("net.core.somaxconn")
    rep = write_report(tmp_path / "audit.json", [
        sysctl_finding("net.socket_buffers", [{"target": "net.core.somaxconn", "value": _bump(som), "previous": som}],
                       host_controlled=True, commands=[f"sysctl -w net.core.somaxconn={_bump(som)}"])])
    r = netns.infergap("fix", "--audit", str(rep), "--db", str(sandbox["db"]), "--apply", "--yes", env=sandbox["env"])
    assert r.returncode == 0, r.stderr
    assert f"run on the host instead: sysctl -w net.core.somaxconn={_bump(som)}" in " ".join(r.stdout.split())  # prose fitted to 100 columns
    assert netns.read("net.core.somaxconn") == som


def test_declined_at_the_prompt_changes_nothing(netns, sandbox, tmp_path):
    som, rmem = netns.read("net.core.somaxconn"), netns.read("net.ipv4.tcp_rmem")
    rep = write_report(tmp_path / "audit.json", [
        sysctl_finding("net.socket_buffers", [{"target": "net.core.somaxconn", "value": _bump(som), "previous": som},
                                              {"target": "net.ipv4.tcp_rmem", "value": _bump(rmem), "previous": rmem}])])
    r = netns.infergap("fix", "--audit", str(rep), "--db", str(sandbox["db"]), "--apply", env=sandbox["env"], input="n\ny\n")
    assert r.returncode == 0, r.stdout + r.stderr
    assert netns.read("net.core.somaxconn") == som
    assert netns.read("net.ipv4.tcp_rmem") == _bump(rmem)
    with Ledger(sandbox["db"]) as led:
        run = led.latest(kind="fix")
        assert [c["state"] for c in run.payload["changes"]] == ["declined", "applied"]
        assert [s["target"] for s in led.steps(run.id)] == ["sysctl:net.ipv4.tcp_rmem"]
    with Ledger(sandbox["db"]) as led:
        declined_only = led.record("fix", {"mode": "apply", "changes": []}, None, status="nothing")
    # "last" is the newest run with journalled changes, not the newer one that changed nothing.
    r = netns.infergap("fix", "--revert", "--db", str(sandbox["db"]), env=sandbox["env"])
    assert r.returncode == 0 and netns.read("net.ipv4.tcp_rmem") == rmem
    assert f"reverting fix run {run.id} " in r.stdout and declined_only > run.id


def test_report_commands_are_never_executed(netns, sandbox, tmp_path):
    som = netns.read("net.core.somaxconn")
    marker = tmp_path / "ran"
    rep = write_report(tmp_path / "audit.json", [
        sysctl_finding("net.socket_buffers", [{"target": "net.core.somaxconn", "value": _bump(som), "previous": som}],
                       commands=[f"touch {marker}"]),
        sysctl_finding("kernel.core_pattern", [{"target": "kernel.core_pattern", "value": "0", "previous": "0"}],
                       commands=[f"touch {marker}"])])
    r = netns.infergap("fix", "--audit", str(rep), "--db", str(sandbox["db"]), "--apply", "--yes", env=sandbox["env"])
    # The commands shown are not what the actions do: the whole report is refused, nothing runs.
    assert r.returncode == 2 and "is not among its commands" in r.stderr, r.stdout + r.stderr
    assert not marker.exists() and netns.read("net.core.somaxconn") == som
    rep = write_report(tmp_path / "audit.json", [
        sysctl_finding("net.socket_buffers", [{"target": "net.core.somaxconn", "value": _bump(som), "previous": som}]),
        sysctl_finding("kernel.core_pattern", [{"target": "kernel.core_pattern", "value": "0", "previous": "0"}])])
    r = netns.infergap("fix", "--audit", str(rep), "--db", str(sandbox["db"]), "--apply", "--yes", env=sandbox["env"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert not marker.exists()
    assert "not in the check catalog" in r.stdout and "kernel.core_pattern" in r.stdout
    assert netns.read("net.core.somaxconn") == _bump(som)
    r = netns.infergap("fix", "--revert", "--db", str(sandbox["db"]), env=sandbox["env"])
    assert netns.read("net.core.somaxconn") == som


def test_interrupted_at_a_prompt_leaves_a_revertable_journal(netns, sandbox, tmp_path):
    import os
    import select
    import signal
    import subprocess
    import sys
    import time

    from .conftest import SRC

    som, rmem = netns.read("net.core.somaxconn"), netns.read("net.ipv4.tcp_rmem")
    rep = write_report(tmp_path / "audit.json", [
        sysctl_finding("net.socket_buffers", [{"target": "net.core.somaxconn", "value": _bump(som), "previous": som},
                                              {"target": "net.ipv4.tcp_rmem", "value": _bump(rmem), "previous": rmem}])])
    env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONWARNINGS": "ignore", **sandbox["env"]}
    p = subprocess.Popen(["ip", "netns", "exec", netns.name, sys.executable, "-m", "infergap", "fix", "--audit", str(rep),
                          "--db", str(sandbox["db"]), "--apply"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env,
                         # Ctrl-C's default, whatever the suite inherited: a shell without job control starts
                         # background commands with SIGINT ignored, and an ignored SIGINT stays ignored in the child.
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen, deadline = b"", time.monotonic() + 60
    try:
        def wait_prompts(n: int) -> None:
            nonlocal seen
            while seen.count(b"apply this change?") < n:
                assert time.monotonic() < deadline, seen.decode()
                if select.select([p.stdout], [], [], 1)[0]:
                    seen += os.read(p.stdout.fileno(), 4096)
        wait_prompts(1)
        p.stdin.write(b"y\n")
        p.stdin.flush()
        wait_prompts(2)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert netns.read("net.core.somaxconn") == _bump(som) and netns.read("net.ipv4.tcp_rmem") == rmem
    with Ledger(sandbox["db"]) as led:
        run = led.latest(kind="fix")
        assert run.status == "interrupted"
        assert [(s["target"], s["status"]) for s in led.steps(run.id)] == [("sysctl:net.core.somaxconn", "applied")]
    r = netns.infergap("fix", "--revert", "--db", str(sandbox["db"]), env=sandbox["env"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert netns.read("net.core.somaxconn") == som
