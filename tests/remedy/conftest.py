"""Sandbox for remedy tests: a private network namespace per test (real sysctl writes that cannot
reach the machine's own values), a temporary directory standing in for /etc, and a check that the
machine's values of every key the tests touch are the same after the test as before it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

#: Sysctls that belong to the network namespace: writable in a private one without touching the
#: machine's values. Every key a test writes must be one of these.
NETNS_KEYS = ("net.core.somaxconn", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.ip_local_port_range")


def _proc_path(key: str) -> Path:
    return Path("/proc/sys") / key.replace(".", "/")


def host_values() -> dict[str, str]:
    """The machine's (initial namespace's) values of the keys tests touch, plus global ones."""
    keys = [*NETNS_KEYS, "vm.swappiness", "kernel.numa_balancing", "net.core.rmem_max"]
    out = {}
    for k in keys:
        try:
            out[k] = " ".join(_proc_path(k).read_text().split())
        except OSError:
            out[k] = "<unreadable>"
    return out


class Netns:
    """A named network namespace (``ip netns``) kept alive across the steps of one test."""

    def __init__(self, name: str) -> None:
        self.name = name

    def read(self, key: str) -> str:
        """A sysctl's value as seen inside the namespace (whitespace collapsed)."""
        r = subprocess.run(["ip", "netns", "exec", self.name, "cat", str(_proc_path(key))],
                           capture_output=True, text=True, timeout=20, check=True)
        return " ".join(r.stdout.split())

    def infergap(self, *args: str, env: dict[str, str] | None = None, input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run the ``infergap`` CLI inside the namespace."""
        e = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONWARNINGS": "ignore", **(env or {})}
        return subprocess.run(["ip", "netns", "exec", self.name, sys.executable, "-m", "infergap", *args],
                              capture_output=True, text=True, timeout=120, env=e, input=input)


def _netns_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create a network namespace"
    if shutil.which("ip") is None:
        return "needs iproute2 (ip netns)"
    return None


@pytest.fixture
def netns():
    """A fresh network namespace, deleted afterwards; the machine's values are checked unchanged."""
    why = _netns_unavailable()
    if why:
        pytest.skip(why)
    name = f"infergap-test-{uuid.uuid4().hex[:8]}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, timeout=20)
    if r.returncode != 0:
        pytest.skip(f"network namespaces unavailable: {r.stderr.strip()}")
    before = host_values()
    try:
        yield Netns(name)
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=20)
        assert host_values() == before, "a test changed the machine's own settings"


def sysctl_finding(check_id: str, actions: list[dict], *, severity: str = "P2", host_controlled: bool = False,
                   commands: list[str] | None = None) -> dict:
    """One actionable runtime finding in the audit contract, with sysctl actions."""
    return {"id": check_id, "investigator": "kernel", "status": "actionable", "severity": severity,
            "fix_kind": "runtime", "title": f"{check_id} is not tuned for serving",
            "evidence": [{"source": f"files/proc/sys/{a['target'].replace('.', '/')}", "value": a.get("previous", "")}
                         for a in actions],
            "remedy": {"commands": commands or [f"sysctl -w {a['target']}='{a['value']}'" for a in actions],
                       "revert": [f"sysctl -w {a['target']}='{a.get('previous', '')}'" for a in actions],
                       "actions": [{"type": "sysctl", **a} for a in actions], "host_controlled": host_controlled}}


def write_report(path: Path, findings: list[dict]) -> Path:
    """An ``infergap.audit/1`` report with these findings."""
    path.write_text(json.dumps({"schema": "infergap.audit/1", "host": {"hostname": "sandbox"}, "investigators": [],
                                "findings": findings, "summary": {}}))
    return path
