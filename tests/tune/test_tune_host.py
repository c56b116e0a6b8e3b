"""Host levers of ``infergap tune``: a runtime fix of the audit applied through the fix journal for
each variant run and reverted after it, on a real sysctl of a private network namespace.

The tunes run in a new user and network namespace (``unshare --user --map-root-user --net``): the
tune is root there, as ``infergap fix`` requires, and the sysctl it writes, ``net.core.somaxconn``,
belongs to that namespace, so nothing of the machine's own changes (checked after each test). The
lever has a real, large effect: the paced stub (``benchmarks/stub_server.py --close-after-stream``,
a new connection per request as llama-server does) listens with a backlog the kernel caps at
somaxconn; at 0 one connection waits in the accept queue and the others' SYNs are dropped and
sent again a second later, so raising it to 4096 multiplies the throughput at 8 in flight."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STUB = ROOT / "benchmarks" / "stub_server.py"
pytestmark = pytest.mark.slow

#: Runs inside the namespaces: brings the loopback up (SIOCGIFFLAGS / SIOCSIFFLAGS with IFF_UP),
#: sets somaxconn, then runs each step's infergap command and reads somaxconn after it.
_INSIDE = r"""
import fcntl, json, os, socket, struct, subprocess, sys
from pathlib import Path
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, struct.pack("16sH", b"lo", 0))[:18])[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", flags | 1))
key = Path("/proc/sys/net/core/somaxconn")
out = []
for step in json.loads(Path(sys.argv[1]).read_text()):
    if "somaxconn" in step:
        key.write_text(step["somaxconn"])
    p = subprocess.Popen([sys.executable, "-m", "infergap", *step["args"]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if step.get("term_when_applied"):  # SIGTERM while a variant run has the host change applied
        import signal, time
        from infergap.ledger import Ledger
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and p.poll() is None:
            if Path(step["db"]).exists():
                with Ledger(step["db"], readonly=True) as led:
                    if any(r.status == "applied" for r in led.runs(kind="fix")):
                        break
            time.sleep(0.1)
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
    o, e = p.communicate(timeout=600)
    out.append({"rc": p.returncode, "stdout": o, "stderr": e[-4000:], "somaxconn": key.read_text().strip()})
Path(sys.argv[2]).write_text(json.dumps(out))
"""


def _machine() -> dict[str, str]:
    keys = ("net/core/somaxconn", "vm/swappiness", "net/core/rmem_max", "net/ipv4/tcp_rmem")
    return {k: Path("/proc/sys", k).read_text() for k in keys if Path("/proc/sys", k).exists()}


def _in_namespaces(tmp_path: Path, steps: list[dict]) -> list[dict]:
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux unshare")
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--net", "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"user and network namespaces unavailable: {probe.stderr.strip()}")
    (tmp_path / "steps.json").write_text(json.dumps(steps))
    before = _machine()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYTHONWARNINGS="ignore")
    r = subprocess.run(["unshare", "--user", "--map-root-user", "--net", sys.executable, "-c", _INSIDE,
                        str(tmp_path / "steps.json"), str(tmp_path / "out.json")],
                       capture_output=True, text=True, timeout=1500, env=env, cwd=tmp_path)
    assert _machine() == before, "the machine's own settings changed"
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((tmp_path / "out.json").read_text())


def _report(path: Path, now: str, value: str) -> Path:
    cmd = f"sysctl -w net.core.somaxconn={value}"
    finding = {"id": "net.socket_buffers", "investigator": "kernel_runtime", "status": "actionable", "severity": "P2",
               "fix_kind": "runtime", "title": "Listen backlog capped", "evidence": [{"source": "files/proc/sys/net/core/somaxconn", "value": now}],
               "remedy": {"commands": [cmd], "revert": [f"sysctl -w net.core.somaxconn={now}"],
                          "actions": [{"type": "sysctl", "target": "net.core.somaxconn", "value": value, "previous": now}]}}
    path.write_text(json.dumps({"schema": "infergap.audit/1", "host": {"hostname": "sandbox"}, "investigators": [],
                                "findings": [finding], "summary": {}}))
    return path


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tune(tmp_path: Path, name: str, report: Path, *extra: str) -> list[str]:
    launch = f"{sys.executable} {STUB} --port {_port()} --tokens 16 --itl-ms 5 --slots 8 --close-after-stream"
    return ["tune", "--launch", launch, "--fix", "net.socket_buffers", "--audit", str(report), "--concurrency", "8",
            "--num-prompts", "32", "--input-len", "16", "--output-len", "16", "--leave-stopped", "--db", str(tmp_path / "l.db"),
            "--log-dir", str(tmp_path / name), "-f", "json", "-o", str(tmp_path / f"{name}.json"), *extra]


def test_a_host_fix_that_helps_is_measured_reverted_and_kept_only_with_keep_best(tmp_path):
    from infergap.ledger import Ledger

    raise_it = _report(tmp_path / "audit.json", "0", "4096")
    steps = [{"somaxconn": "0", "args": _tune(tmp_path, "plain", raise_it, "--rounds", "2")},
             {"args": _tune(tmp_path, "keep", raise_it, "--rounds", "2", "--keep-best")},
             {"args": ["fix", "--revert", "--db", str(tmp_path / "l.db")]}]
    plain, keep, undo = _in_namespaces(tmp_path, steps)
    assert plain["rc"] == 0 and keep["rc"] == 0, plain["stderr"] + keep["stderr"]
    doc = json.loads((tmp_path / "plain.json").read_text())
    (tr,) = doc["trials"]
    assert tr["lever"] == "fix:net.socket_buffers" and tr["setting"] == "sysctl -w net.core.somaxconn=4096"
    assert tr["verdict"] == "helps" and tr["judgement"]["change_pct"] > 100, tr["judgement"]
    assert [x["config"] for x in tr["runs"]] == ["A", "B", "A", "B"]
    assert plain["somaxconn"] == "0" and doc["best_host"] == [tr["lever"]] and doc["host_kept"] == []
    kept = json.loads((tmp_path / "keep.json").read_text())
    assert kept["trials"][0]["verdict"] == "helps", kept["trials"][0]["judgement"]
    (k,) = kept["host_kept"]
    assert keep["somaxconn"] == "4096"  # left applied, as its fix run
    assert undo["rc"] == 0 and f"reverting fix run {k['fix_run']}" in undo["stdout"] and undo["somaxconn"] == "0", undo
    with Ledger(tmp_path / "l.db", readonly=True) as led:
        fixes = {r.id: r for r in led.runs(kind="fix")}
        for t in (tr, kept["trials"][0]):
            assert len(t["fix_runs"]) == 2  # one apply per variant run, each reverted by its own fix run
            for f in t["fix_runs"]:
                assert fixes[f["apply"]].status == "reverted" and fixes[f["revert"]].payload["reverts"] == f["apply"]
                assert led.get(fixes[f["apply"]].parent_id).kind == "tune"
        assert fixes[k["fix_run"]].status == "reverted"  # by the fix --revert step
        rows = led.experiments()
        assert [(x["lever"], x["verdict"]) for x in rows] == [("fix:net.socket_buffers", "helps")] * 2
        assert rows[0]["payload"]["fix_runs"] == kept["trials"][0]["fix_runs"]


def test_a_host_fix_without_effect_is_reverted_even_with_keep_best(tmp_path):
    same = _report(tmp_path / "audit.json", "4096", "8192")
    (out,) = _in_namespaces(tmp_path, [{"somaxconn": "4096", "args": _tune(tmp_path, "same", same, "--rounds", "3", "--keep-best")}])
    assert out["rc"] == 0, out["stderr"]
    doc = json.loads((tmp_path / "same.json").read_text())
    (tr,) = doc["trials"]
    assert tr["verdict"] == "no effect within noise", tr["judgement"]
    assert out["somaxconn"] == "4096" and doc["host_kept"] == [] and doc["best_host"] == []
    assert len(tr["fix_runs"]) == 3 and all(f["revert"] for f in tr["fix_runs"])


def test_host_levers_need_root_and_a_known_check(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    report = _report(tmp_path / "audit.json", "0", "4096")
    r = subprocess.run([sys.executable, "-m", "infergap", *_tune(tmp_path, "x", report), "--fix", "no.such_check"],
                       capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    if os.geteuid() == 0:
        assert "--fix no.such_check: no actionable finding" in r.stderr and "net.socket_buffers" in r.stderr, r.stderr
    else:
        assert "must run as root" in r.stderr, r.stderr


def test_sigterm_while_a_host_fix_is_applied_reverts_it(tmp_path):
    from infergap.ledger import Ledger

    raise_it = _report(tmp_path / "audit.json", "0", "4096")
    step = {"somaxconn": "0", "term_when_applied": True, "db": str(tmp_path / "l.db"),
            "args": _tune(tmp_path, "term", raise_it, "--rounds", "3", "--num-prompts", "64")}
    (out,) = _in_namespaces(tmp_path, [step])
    assert out["rc"] == 130, out["stderr"]
    assert out["somaxconn"] == "0"  # the host as the audit found it
    doc = json.loads((tmp_path / "term.json").read_text())
    assert doc["stopped"].startswith("interrupted") and doc["host_kept"] == []
    (tr,) = doc["trials"]
    assert tr["fix_runs"] and all(f["revert"] for f in tr["fix_runs"]), tr["fix_runs"]
    with Ledger(tmp_path / "l.db", readonly=True) as led:
        assert {r.status for r in led.runs(kind="fix") if r.payload.get("mode") == "apply"} == {"reverted"}
