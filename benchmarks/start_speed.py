"""Start speed: CPU and wall time of short commands as a user runs them, as ratios to the floor
measured in the same run (``python -c "import typer, rich.console, pydantic, yaml"``: what any
Typer + pydantic + YAML tool pays before doing anything).

Commands: ``--help``, ``checks``, ``audit --snapshot`` of the seed fixture and of the two H200
captures (``tests/fixtures/hosts/h200-{1,2}gpu-collect.tar.gz``), and a live ``audit``. The
runs are interleaved (floor, then each command, repeated), so load from other work on a shared
machine falls on all of them alike; compare the ratios, not the seconds. CPU time is the
child's user + system time (``os.wait4``).

Targets (median of the runs, CPU ratio to the floor): ``--help`` <= 1.5x, ``audit --snapshot``
of the seed fixture (and of each H200 capture) <= 2x, live ``audit`` <= 3x (the fast-start
issue). Exit status 1 when a target is missed or a run fails (a crash is not a start time).

Each command is also run once with ``-X importtime``; its ten slowest imports (self time, with
the cumulative time of the module and what imported it) are printed.

Runs record into a throw-away ledger, never the user's, and use a throw-away data cache and
bytecode cache that one untimed run of each command fills first (the steady state of an installed
package: sources compiled once, packaged catalogs parsed once per change, :mod:`infergap.datafile`);
the first run of the seed audit with both caches empty is printed too.

Run: python benchmarks/start_speed.py [--runs 7] [--no-importtime]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOSTS = ROOT / "tests" / "fixtures" / "hosts"
FLOOR = [sys.executable, "-c", "import typer, rich.console, pydantic, yaml"]
INFERGAP = [sys.executable, "-m", "infergap"]

#: name -> (arguments after ``python -m infergap``, exit statuses that mean success, target ratio or None)
COMMANDS: dict[str, tuple[list[str], tuple[int, ...], float | None]] = {
    "--help": (["--help"], (0,), 1.5),
    "checks": (["checks"], (0,), None),
    "audit --snapshot seed": (["audit", "--snapshot", str(HOSTS / "seed-8x-rtxpro6000")], (0, 1), 2.0),
    "audit --snapshot h200-1gpu": (["audit", "--snapshot", str(HOSTS / "h200-1gpu-collect.tar.gz")], (0, 1), 2.0),
    "audit --snapshot h200-2gpu": (["audit", "--snapshot", str(HOSTS / "h200-2gpu-collect.tar.gz")], (0, 1), 2.0),
    "audit (live)": (["audit"], (0, 1), 3.0),
}


def run_once(cmd: list[str], env: dict[str, str], ok: tuple[int, ...], what: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of ``cmd``; SystemExit(1) when it fails."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode not in ok:
            err.seek(0)
            tail = err.read()[-800:].decode(errors="replace")
            print(f"FAILED: {what}: exit status {p.returncode}: {tail}", file=sys.stderr)
            raise SystemExit(1)
    return ru.ru_utime + ru.ru_stime, wall


def importtime(cmd: list[str], env: dict[str, str], top: int = 10) -> list[str]:
    """The ``top`` slowest imports of one run of ``cmd`` under ``-X importtime`` by self time:
    lines ``self ms, cumulative ms, module (<- the module that imported it)``."""
    p = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], capture_output=True, text=True, env=env,
                       timeout=300, stdin=subprocess.DEVNULL)
    recs = []  # (depth, name, self us, cumulative us) in the order printed: children before parents
    for line in p.stderr.splitlines():
        if not line.startswith("import time:") or line.count("|") != 2 or "self [us]" in line:
            continue
        head, cum, raw = line.split("|")
        name = raw.strip()
        recs.append(((len(raw) - len(raw.lstrip(" ")) - 1) // 2, name, int(head.split(":")[1]), int(cum)))
    out = []
    for i in sorted(range(len(recs)), key=lambda i: -recs[i][2])[:top]:
        d, name, self_us, cum_us = recs[i]
        parent = next((r[1] for r in recs[i + 1:] if r[0] < d), None)
        out.append(f"{self_us / 1000:7.1f} ms self {cum_us / 1000:7.1f} ms cumulative  {name}"
                   + (f"  <- {parent}" if parent else ""))
    return out


def _env(tmp: Path) -> dict[str, str]:
    """The runs' environment: a throw-away ledger and data cache, and compiled bytecode kept (in a
    throw-away ``PYTHONPYCACHEPREFIX``, for the floor's modules and infergap's alike), as an
    installed package has it: with ``PYTHONDONTWRITEBYTECODE`` set, every run would compile
    infergap's own sources again (about 1 s of CPU here) while the floor's come precompiled."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "INFERGAP_DB": str(tmp / "ledger.sqlite3"), "INFERGAP_CACHE_DIR": str(tmp / "cache"),
           "PYTHONPYCACHEPREFIX": str(tmp / "pycache"), "COLUMNS": "100"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def measure(runs: int, env: dict[str, str]) -> dict[str, list[tuple[float, float]]]:
    """``runs`` interleaved rounds of the floor and every command: name -> [(cpu, wall), ...]."""
    out: dict[str, list[tuple[float, float]]] = {"floor": [], **{n: [] for n in COMMANDS}}
    for i in range(runs):
        out["floor"].append(run_once(FLOOR, env, (0,), "floor"))
        for name, (args, ok, _) in COMMANDS.items():
            out[name].append(run_once([*INFERGAP, *args], env, ok, name))
        print(f"  round {i + 1}/{runs} done", file=sys.stderr)
    return out


def report(times: dict[str, list[tuple[float, float]]]) -> bool:
    """Print the table of medians and ratios; True when every target is met."""
    med = {n: (statistics.median(c for c, _ in xs), statistics.median(w for _, w in xs)) for n, xs in times.items()}
    fc, fw = med["floor"]
    print(f"{'command':30} {'CPU s':>7} {'wall s':>7} {'CPU x':>7} {'wall x':>7}  target (CPU x)")
    print(f"{'floor (import typer, rich.console, pydantic, yaml)':30}\n{'':30} {fc:7.3f} {fw:7.3f} {1:7.2f} {1:7.2f}")
    met = True
    for name, (_, _, target) in COMMANDS.items():
        c, w = med[name]
        verdict = "" if target is None else f"<= {target}: " + ("met" if c / fc <= target else "NOT met")
        met &= target is None or c / fc <= target
        print(f"{name:30} {c:7.3f} {w:7.3f} {c / fc:7.2f} {w / fw:7.2f}  {verdict}")
    return met


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="rounds (medians of this many runs; at least 5)")
    ap.add_argument("--no-importtime", action="store_true", help="skip the -X importtime listing")
    a = ap.parse_args()
    if a.runs < 5:
        ap.error("--runs: at least 5")
    with tempfile.TemporaryDirectory(prefix="infergap-start-speed-") as d:
        env = _env(Path(d))
        cold = run_once([*INFERGAP, *COMMANDS["audit --snapshot seed"][0]], {**env, "PYTHONDONTWRITEBYTECODE": "1"},
                        (0, 1), "cold-cache audit")
        run_once(FLOOR, env, (0,), "floor")  # compile the bytecode, fill the data cache, warm the file cache
        for name, (args, ok, _) in COMMANDS.items():
            run_once([*INFERGAP, *args], env, ok, name)
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {a.runs} interleaved rounds")
        times = measure(a.runs, env)
        met = report(times)
        print(f"load average after the rounds: {os.getloadavg()[0]:.1f} (ratios under load: compare with a quiet run)")
        print(f"(first run with the data and bytecode caches empty, audit --snapshot seed: CPU {cold[0]:.3f} s, wall {cold[1]:.3f} s)")
        if not a.no_importtime:
            for name, (args, _, _) in COMMANDS.items():
                print(f"\n-X importtime, {name}: ten slowest imports")
                print("\n".join(importtime([*INFERGAP, *args], env)))
    print("\nall targets met" if met else "\nsome targets NOT met")
    raise SystemExit(0 if met else 1)


if __name__ == "__main__":
    main()
