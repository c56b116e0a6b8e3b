"""``infergap tune`` on the paced stub server (``benchmarks/stub_server.py``), whose levers have an
effect known exactly: ``--slots 1`` → ``4`` at four requests in flight serves four streams at once
instead of one (throughput ×4); ``--itl-ms 10`` given again changes nothing; ``--itl-ms 20`` doubles
every inter-token gap (TPOT ×2). And a tune stopped by SIGTERM keeps the lever it measured.

The lever that changes nothing is judged in three rounds of 16 requests a run: with two rounds the
verdict rule (each median outside the other range by more than both ranges, and 2 %) calls pure
noise of a few per cent a change about one time in ten (two values a side rarely span their own
noise); with three, about one in a hundred, and the longer runs keep the noise below the 2 % floor."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STUB = ROOT / "benchmarks" / "stub_server.py"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tune(tmp_path: Path, port: int, *args: str, db: Path, timeout: float = 300, rounds: int = 2,
          prompts: int = 8) -> subprocess.CompletedProcess:
    launch = f"{sys.executable} {STUB} --port {port} --tokens 16 --itl-ms 10 --slots 1"
    cmd = [sys.executable, "-m", "infergap", "tune", "--launch", launch, "--rounds", str(rounds), "--concurrency", "4", "--num-prompts", str(prompts),
           "--output-len", "16", "--input-len", "16", "--log-dir", str(tmp_path / "logs"), "--db", str(db), *args]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp_path)


def _free(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except OSError:
        return True


def test_known_effects_are_judged_right_recorded_and_the_best_left_running(tmp_path):
    from infergap.ledger import Ledger

    port, db = _port(), tmp_path / "l.db"
    r = _tune(tmp_path, port, "--try", "--slots 4", "--try", "--itl-ms 10", "--try", "tpot: --itl-ms 20",
              "--keep-best", "-f", "json", "-o", str(tmp_path / "tune.json"), db=db, rounds=3, prompts=16, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "tune.json").read_text())
    pid = doc["left_running"]["pid"]
    try:
        got = {t["setting"]: t for t in doc["trials"]}
        slots, same, slow = got["--slots 4"], got["--itl-ms 10"], got["--itl-ms 20"]
        assert slots["verdict"] == "helps" and 200 < slots["judgement"]["change_pct"] < 400, slots["judgement"]
        assert same["verdict"] == "no effect within noise", same["judgement"]
        assert slow["verdict"] == "hurts" and slow["judgement"]["metric"] == "tpot_p50_ms", slow["judgement"]
        # +10 ms on each gap: +100 % of the paced 10 ms, less of what the loaded machine adds to it
        assert 50 < slow["judgement"]["change_pct"] < 120, slow["judgement"]
        # interleaved: A B A B, each run a bench run of the ledger under the tune run
        assert [x["config"] for x in slots["runs"]] == ["A", "B", "A", "B", "A", "B"]
        # the best configuration is the user's command with the one lever that helped, left running
        assert doc["best_levers"] == [slots["lever"]] and doc["best"].endswith("--itl-ms 10 --slots 4")
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert cmdline[-3:-1] == [b"--slots", b"4"]
    finally:
        os.kill(pid, signal.SIGTERM)
    with Ledger(db, readonly=True) as led:
        rows = led.experiments()
        assert sorted(x["verdict"] for x in rows) == ["helps", "hurts", "no effect within noise"]
        tune_run = led.get(rows[0]["run_id"])
        assert tune_run.kind == "tune" and tune_run.status == "done"
        benches = [b for b in led.runs(kind="bench") if b.parent_id == tune_run.id]
        assert len(benches) == 1 + 3 * 6  # the "before" run, then A B A B A B per lever
        ids = {x["bench_run"] for t in doc["trials"] for x in t["runs"]}
        assert ids <= {b.id for b in benches}
    h = subprocess.run([sys.executable, "-m", "infergap", "history", "--experiments", "--db", str(db)], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    # two header lines, two lines a lever (fitted to 100 columns)
    assert h.returncode == 0 and h.stdout.count("\n") == 2 + 3 * 2 and "--slots 4" in h.stdout and "hurts" in h.stdout, h.stdout


def test_sigterm_mid_tune_keeps_the_measured_lever_and_stops_the_server(tmp_path):
    from infergap.ledger import Ledger

    port, db = _port(), tmp_path / "l.db"
    launch = f"{sys.executable} {STUB} --port {port} --tokens 16 --itl-ms 10 --slots 1"
    cmd = [sys.executable, "-m", "infergap", "tune", "--launch", launch, "--rounds", "2", "--concurrency", "4", "--num-prompts", "8",
           "--output-len", "16", "--input-len", "16", "--log-dir", str(tmp_path / "logs"), "--db", str(db),
           "--try", "--slots 4", "--try", "--slots 2", "--try", "--itl-ms 5", "--leave-stopped",
           "-f", "json", "-o", str(tmp_path / "tune.json")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                         env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if db.exists():
            with Ledger(db, readonly=True) as led:  # a ledger the tune is creating reads as empty
                if led.experiments():
                    break
        assert p.poll() is None, p.communicate()[1][-3000:]
        time.sleep(0.5)
    time.sleep(1.0)  # into the second lever's first run
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-3000:]
    doc = json.loads((tmp_path / "tune.json").read_text())
    first = doc["trials"][0]
    assert first["setting"] == "--slots 4" and first["verdict"] == "helps", first
    assert doc["stopped"].startswith("interrupted") and [t["verdict"] for t in doc["trials"][2:]] == ["not measured"]
    with Ledger(db, readonly=True) as led:
        assert [x["setting"] for x in led.experiments()][-1] == "--slots 4"
        assert led.latest(kind="tune").status == "interrupted"
    assert _free(port)  # no server left behind


def test_a_spent_budget_leaves_the_remaining_levers_not_measured(tmp_path):
    from infergap.cli.tune import parse_budget
    from infergap.errors import UserError

    assert (parse_budget("20m"), parse_budget("90s"), parse_budget("1.5h"), parse_budget("45")) == (1200, 90, 5400, 45)
    for bad in ("0", "-5m", "10 days", "1e9"):
        try:
            parse_budget(bad)
        except UserError as e:
            assert "--budget" in str(e)
        else:
            raise AssertionError(f"--budget {bad} accepted")
    port, db = _port(), tmp_path / "l.db"
    r = _tune(tmp_path, port, "--try", "--slots 4", "--try", "--slots 2", "--budget", "4s", "--leave-stopped",
              "-f", "json", "-o", str(tmp_path / "tune.json"), db=db)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "tune.json").read_text())
    assert doc["stopped"] == "budget: 4 s spent", doc["stopped"]
    assert doc["trials"][-1]["verdict"] == "not measured" and "budget" in doc["trials"][-1]["judgement"]["reason"]
    assert _free(port)


def _pids_with(*words: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                argv = (d / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if all(w in argv for w in words):
                out.append(int(d.name))
    return out


def test_a_variant_server_that_dies_mid_run_is_shown_not_dropped(tmp_path):
    port, db = _port(), tmp_path / "l.db"
    launch = f"{sys.executable} {STUB} --port {port} --tokens 16 --itl-ms 10 --slots 1"
    cmd = [sys.executable, "-m", "infergap", "tune", "--launch", launch, "--rounds", "2", "--concurrency", "4", "--num-prompts", "48",
           "--output-len", "16", "--input-len", "16", "--log-dir", str(tmp_path / "logs"), "--db", str(db),
           "--try", "--itl-ms 11", "--leave-stopped", "-f", "json", "-o", str(tmp_path / "tune.json")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                         env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    deadline, killed = time.monotonic() + 240, None
    while killed is None and time.monotonic() < deadline and p.poll() is None:
        pids = _pids_with(str(STUB), "11", str(port))
        if pids and not _free(port):
            time.sleep(1.5)  # into the variant's bench run
            os.kill(pids[0], signal.SIGKILL)
            killed = pids[0]
        time.sleep(0.1)
    _, err = p.communicate(timeout=240)
    assert killed is not None and p.returncode == 0, err[-3000:]
    trial = json.loads((tmp_path / "tune.json").read_text())["trials"][0]
    assert [r[:2] for r in trial["failed_runs"]] == ["B:"], trial
    assert "1 run(s) gave no value and are not in the verdict" in trial["judgement"]["reason"], trial["judgement"]
    assert "1 run(s) failed" in err, err[-3000:]
    assert _free(port)
