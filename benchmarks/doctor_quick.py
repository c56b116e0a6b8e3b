"""Time ``infergap doctor --quick`` end to end against a real llama-cpp-python server on 127.0.0.1
serving the tests' tiny random GGUF (target: under two minutes on a small model).

Usage: python benchmarks/doctor_quick.py [--runs N]. Prints the wall time of each run and of each
stage as the doctor reports them; exits 1 when a run fails (its time is not a doctor's time).
The server runs with ``--interrupt_requests False`` (its default cuts a stream short whenever
another request waits, and the doctor would rightly fail). Runs record into a throw-away ledger,
never the user's. Needs llama-cpp-python[server] and gguf (as the tests do).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "bench"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from bench_tiny_models import write_llama_gguf

    with tempfile.TemporaryDirectory() as d:
        model = write_llama_gguf(Path(d) / "tiny.gguf")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        log = open(Path(d) / "server.log", "w")
        srv = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
                                "--verbose", "False", "--n_ctx", "4096", "--interrupt_requests", "False"],
                               stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(600):
                try:
                    urllib.request.urlopen(url + "/v1/models", timeout=2)
                    break
                except OSError:
                    time.sleep(0.2)
            else:
                raise SystemExit(f"FAILED: llama_cpp.server did not answer: {(Path(d) / 'server.log').read_text()[-1000:]}")
            env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), INFERGAP_DB=str(Path(d) / "ledger.sqlite3"))
            failed = []
            for i in range(args.runs):
                out = Path(d) / f"run{i}"
                t0 = time.monotonic()
                r = subprocess.run([sys.executable, "-m", "infergap", "doctor", "--url", url, "--quick", "--model", "llama-3.1-8b",
                                    "--gpu", "h200", "--output-dir", str(out)], capture_output=True, text=True, env=env, timeout=600)
                dt = time.monotonic() - t0
                print(f"run {i + 1}: {dt:.1f} s wall (exit {r.returncode}); stages: " + "; ".join(r.stderr.strip().splitlines()))
                if r.returncode != 0:
                    failed.append(i + 1)
            if failed:
                print(f"FAILED: run(s) {', '.join(map(str, failed))} exited non-zero: the times above are not valid",
                      file=sys.stderr)
                raise SystemExit(1)
        finally:
            srv.terminate()
            srv.wait(10)


if __name__ == "__main__":
    main()
