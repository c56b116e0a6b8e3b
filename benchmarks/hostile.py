"""Time and peak memory of infergap on adversarial inputs, one fresh process each.

Every input below once cost minutes or gigabytes (a crafted line for a quadratic pattern, an
archive that unpacks to gigabytes, an endless device, a flood of NUL bytes, deep nesting). Each
is run through the real command line; the figures are the wall time and the peak resident
memory of that process (``wait4``'s ``ru_maxrss``). The run also fails when a Python traceback
reaches stderr or the exit status is not one the program chose (0, 1, 2).

    python benchmarks/hostile.py              # all inputs
    python benchmarks/hostile.py nccl aer     # inputs whose name contains a word

Exit status 1 when any input takes more than 5 s or 200 MB, or crashes.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
HOST = ROOT / "tests" / "fixtures" / "hosts" / "h200-1gpu"
MAX_S = 5.0
MAX_MB = 200.0


class Zeros(io.RawIOBase):
    """``n`` zero bytes, read without holding them (the content of an archive bomb's member)."""

    def __init__(self, n: int) -> None:
        self.left = n

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        k = min(len(b), self.left)
        b[:k] = bytes(k)
        self.left -= k
        return k


def gzip_bomb(mib: int) -> bytes:
    """A gzip stream that inflates to ``mib`` MiB of zero bytes in about 1/1000 of that: one
    MiB of zeros compressed after a full flush encodes the same way every time, so the body is
    that encoding repeated, an empty final block and the true CRC-32 and length (RFC 1952)."""
    import struct
    import zlib

    z = bytes(1 << 20)
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    first = c.compress(z) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(z) + c.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(z, crc)
    return first + again * (mib - 1) + b"\x03\x00" + struct.pack("<II", crc, (mib << 20) & 0xFFFFFFFF)


def _file(d: Path, name: str, data: str | bytes) -> Path:
    p = d / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return p


def _evidence(name: str, data: str | bytes) -> Callable[[Path], list[str]]:
    return lambda d: ["audit", "--no-host", "--evidence", str(_file(d, name, data)), "--format", "json"]


def _snapshot_with(edit: Callable[[Path], None]) -> Callable[[Path], list[str]]:
    def make(d: Path) -> list[str]:
        snap = d / "snap"
        shutil.copytree(HOST, snap)
        edit(snap)
        return ["audit", "--snapshot", str(snap), "--format", "json"]
    return make


def _archive_many(d: Path) -> list[str]:
    arch = d / "many.tar.gz"
    with tarfile.open(arch, "w:gz", compresslevel=1) as tf:
        for i in range(60_000):
            tf.addfile(tarfile.TarInfo(f"snap/files/x/{i}"), io.BytesIO(b""))
    return ["audit", "--snapshot", str(arch)]


def _archive_bomb(d: Path) -> list[str]:
    arch = d / "bomb.tar.gz"
    size = 2 << 30
    with tarfile.open(arch, "w:gz", compresslevel=1) as tf:
        info = tarfile.TarInfo("snap/files/proc/cpuinfo")
        info.size = size
        tf.addfile(info, io.BufferedReader(Zeros(size), 1 << 20))
    return ["audit", "--snapshot", str(arch)]


def _config(cfg: dict | str) -> Callable[[Path], list[str]]:
    def make(d: Path) -> list[str]:
        p = _file(d, "config.json", cfg if isinstance(cfg, str) else json.dumps(cfg))
        return ["roofline", "--model", str(p), "--gpu", "h200", "--gpus", "1"]
    return make


def _plan_doc(text: str) -> Callable[[Path], list[str]]:
    return lambda d: ["plan", "--audit", str(_file(d, "audit.json", text))]


def _cpu_name(value: str) -> Callable[[Path], None]:
    def edit(snap: Path) -> None:
        p = snap / "files" / "proc" / "cpuinfo"
        p.write_text(p.read_text().replace("Intel(R) Xeon(R) Processor", value))
    return edit


#: Servers started for one input (killed when it ends): ``python -c _SERVER MODE PORT``.
_SERVERS: list[subprocess.Popen] = []
_SERVER = r"""
import asyncio, socket, sys, time
from aiohttp import web
mode, port = sys.argv[1], int(sys.argv[2])
if mode == "drip":  # an HTTP header, one byte a second, on every connection
    import threading
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", port)); s.listen(16)
    def drip(c):
        try:
            for b in b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 10000:
                c.sendall(bytes([b])); time.sleep(1)
        except OSError:
            pass
    while True:
        threading.Thread(target=drip, args=(s.accept()[0],), daemon=True).start()
body = open(sys.argv[3], "rb").read() if mode == "gzip" else b""
async def models(req):
    if mode == "gzip":
        return web.Response(body=body, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
    if mode == "redirect":
        return web.Response(status=307, headers={"Location": "http://127.0.0.1:9/v1/models"})
    return web.json_response({"data": [{"id": sys.argv[3]}]})
async def chat(req):
    if mode == "redirect":
        return web.Response(status=307, headers={"Location": "http://127.0.0.1:9/v1/chat/completions"})
    r = web.StreamResponse(headers={"Content-Type": "text/event-stream"}); await r.prepare(req)
    if mode == "usage":  # usage far above max_tokens, no content
        await r.write(b'data: {"choices": [{"delta": {}, "finish_reason": "length"}], "usage": {"prompt_tokens": 3, "completion_tokens": 99999999}}\n\n')
    else:
        await r.write(b'data: {"choices": [{"delta": {"content": "x"}, "finish_reason": "length"}]}\n\n')
    await r.write(b"data: [DONE]\n\n")
    return r
app = web.Application(); app.router.add_get("/v1/models", models); app.router.add_post("/v1/chat/completions", chat)
web.run_app(app, host="127.0.0.1", port=port, print=None)
"""


def _serve(d: Path, mode: str, arg: str = "m") -> str:
    """Start a misbehaving server (:data:`_SERVER`) for one input; its URL."""
    import socket
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    if mode == "gzip":
        arg = str(_file(d, "bomb.gz", gzip_bomb(1024)))
    _SERVERS.append(subprocess.Popen([sys.executable, "-c", _SERVER, mode, str(port), arg], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL))
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    return f"http://127.0.0.1:{port}"


def _bench(mode: str, arg: str = "m", *extra: str) -> Callable[[Path], list[str]]:
    return lambda d: ["bench", "--url", _serve(d, mode, arg), "--concurrency", "1", "--num-prompts", "2", "--trials", "1",
                      "--warmup", "0", "--output-len", "4", "--timeout", "3", *extra]


def _fleet(make: Callable[[Path], None]) -> Callable[[Path], list[str]]:
    def build(d: Path) -> list[str]:
        nodes = d / "nodes"
        nodes.mkdir()
        shutil.copytree(HOST, nodes / "good")
        make(nodes)
        return ["fleet", "audit", "--snapshots", str(nodes), "--workers", "0", "--no-record", "--format", "json"]
    return build


def _sparse_node(nodes: Path) -> None:
    info = tarfile.TarInfo("snap/files/proc/cpuinfo")
    info.size = 8 << 30
    with open(nodes / "sparse.tar", "wb") as f:
        f.write(info.tobuf(format=tarfile.GNU_FORMAT))  # GNU base-256 size: above ustar's 8 GiB - 1
        f.truncate(512 + info.size + 1024)


def _many_node(nodes: Path) -> None:
    with tarfile.open(nodes / "many.tar.gz", "w:gz", compresslevel=1) as tf:
        for i in range(25_000):
            tf.addfile(tarfile.TarInfo(f"snap/files/x/{i}"), io.BytesIO(b""))


#: A value that is HTML, a Markdown link, code-span breakers and rich markup at once.
MARKUP = "<img src=x onerror=alert(1)>``x`<script>alert(2)</script>```|[c](javascript:alert(3)) [/] [link=https://e.example]hidden[/link]"


def _damaged_ledger(d: Path) -> list[str]:
    sys.path.insert(0, str(ROOT / "src"))
    from infergap.ledger import Ledger

    db = d / "damaged.sqlite3"
    with Ledger(db) as led:
        for i in range(50):
            led.record("audit", {"schema": "infergap.audit/1", "findings": [], "pad": "x" * 20_000, "i": i})
    data = bytearray(db.read_bytes())
    for off in range(8192, len(data), 4096):
        data[off:off + 64] = b"\xff" * 64
    db.write_bytes(bytes(data))
    return ["audit", "--snapshot", str(HOST), "--format", "json", "--db", str(db)]


def _symlinked_tmp(d: Path) -> list[str]:
    victim = _file(d, "victim.txt", "precious\n")
    os.symlink(victim, d / "r.json.tmp")
    return ["audit", "--snapshot", str(HOST), "--format", "json", "--output", str(d / "r.json")]


LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "torch_dtype": "bfloat16"}
DEEP = "[" * 500_000 + "]" * 500_000

#: name -> builder (a scratch directory -> command-line arguments). The input bytes are built
#: before the clock starts.
SHELL = "1';touch /tmp/infergap-hostile-owned;echo '$(id)`id`"


def _write(rel: str, value: str, host: Path = HOST) -> Callable[[Path], list[str]]:
    """An audit of a copy of ``host`` whose file ``rel`` (a glob) holds ``value``: shell syntax
    that must never reach a printed command (docs/security.md, class 1)."""
    def make(d: Path) -> list[str]:
        snap = d / "snap"
        shutil.copytree(host, snap)
        for p in snap.glob(rel):
            p.write_text(value + "\n")
        return ["audit", "--snapshot", str(snap), "--format", "json"]
    return make


def _env_value(d: Path) -> list[str]:
    snap = d / "snap"
    shutil.copytree(HOST, snap)
    env = snap / "cmds" / "env.out"
    env.write_text(env.read_text() + "NCCL_SOCKET_IFNAME=lo" + SHELL + "\n")
    return ["audit", "--snapshot", str(snap), "--format", "json"]


def _fix_report(value: str, commands: list[str]) -> Callable[[Path], list[str]]:
    """``fix --audit`` (a dry run) of a report whose action or commands were edited (class 2)."""
    def make(d: Path) -> list[str]:
        f = {"id": "vm.swappiness", "investigator": "kernel_runtime", "status": "actionable", "severity": "P1",
             "fix_kind": "runtime", "title": "vm.swappiness",
             "remedy": {"commands": commands, "actions": [{"type": "sysctl", "target": "vm.swappiness", "value": value, "previous": "60"}]}}
        doc = {"schema": "infergap.audit/1", "host": {}, "findings": [f], "summary": {}}
        return ["fix", "--audit", str(_file(d, "audit.json", json.dumps(doc)))]
    return make


INPUTS: dict[str, Callable[[Path], list[str]]] = {
    "evidence: NCCL prefix, 300 KB host name": _evidence("nccl.log", "NCCL INFO x\n" + "h" * 300_000 + ":1:1 [0] NCCL INFO x\n"),
    "evidence: NCCL prefix, 40k anchors": _evidence("nccl2.log", "h:1:1 [0] NCCL INFO " + "] NCCL " * 40_000 + "\n"),
    "evidence: pasted prompt, 1.3 MB": _evidence("prompt.txt", "a@a:" * 330_000 + "\n"),
    "evidence: pasted prompt lines": _evidence("prompts.txt", ("user@host:~$ " + "a@a:" * 60 + "\n") * 5000),
    "evidence: kernel AER lines": _evidence("dmesg.txt", "[ 1.000000] " + "0000:00:00.0 " * 30_000 + "PCIe Bus Error: severity=\n"),
    "evidence: 16 MB of NUL bytes": _evidence("nul.log", b"NCCL INFO " + b"\0" * (16 << 20)),
    "evidence: 16 MB line of text": _evidence("line.log", "NCCL INFO " + "x" * (16 << 20) + "\n"),
    "evidence: nested argument dump": _evidence("vllm.log", "INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.8.0\n"
                                                "INFO 01-01 00:00:00 [utils.py:1] non-default args: " + "{'a': " * 50_000 + "1" + "}" * 50_000 + "\n"),
    "evidence: /dev/zero": lambda d: ["audit", "--no-host", "--evidence", "/dev/zero", "--format", "json"],
    "snapshot: deep meta.json": _snapshot_with(lambda s: _file(s, "meta.json", DEEP)),
    "snapshot: escape sequences in values": _snapshot_with(_cpu_name("\x1b]0;owned\x07\x1b[2J" * 1000)),
    "snapshot: 16 MB /proc/cpuinfo of NULs": _snapshot_with(lambda s: _file(s / "files" / "proc", "cpuinfo", b"\0" * (16 << 20))),
    "archive: 60,000 members": _archive_many,
    "archive: 2 GB zero member": _archive_bomb,
    "config: deep config.json": _config(DEEP),
    "config: GPTQ bits 0": _config({**LLAMA, "quantization_config": {"quant_method": "gptq", "bits": 0}}),
    "config: 5000-digit number": _config('{"hidden_size": ' + "9" * 5000 + "}"),
    "document: deep audit for plan": _plan_doc(DEEP),
    "document: NaN audit for plan": _plan_doc('{"schema": "infergap.audit/1", "x": NaN}'),
    "server: gzip bomb /v1/models (1 GiB)": _bench("gzip"),
    "server: redirect to another address": _bench("redirect"),
    "server: header dripped 1 byte/s": _bench("drip"),
    "server: usage above max_tokens": _bench("usage"),
    "server: markup in the model id": _bench("ok", MARKUP, "--format", "md"),
    "fleet: sparse 8 GiB tar node": _fleet(_sparse_node),
    "fleet: 25,000-member node": _fleet(_many_node),
    "markup: hostile CPU name, md report": lambda d: _snapshot_with(_cpu_name(MARKUP))(d)[:-1] + ["md"],
    "ledger: damaged pages": _damaged_ledger,
    "output: NAME.tmp planted as a symlink": _symlinked_tmp,
    "command: shell syntax in a sysctl value": _write("files/proc/sys/kernel/nmi_watchdog", SHELL),
    "command: shell syntax in the cpufreq governor": _write("files/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor", "powersave$(id)",
                                                            ROOT / "tests" / "fixtures" / "hosts" / "seed-8x-rtxpro6000"),
    "command: shell syntax in an NCCL variable": _env_value,
    "fix: report commands disagree with actions": _fix_report("100", ["sysctl -w vm.swappiness=10"]),
    "fix: non-ASCII digits in an action value": _fix_report("١٠", ["sysctl -w vm.swappiness=١٠"]),
    "fix: trailing newline in an action value": _fix_report("10\n", ["sysctl -w vm.swappiness=10"]),
}


#: Runs the command in a child of a small process and prints that child's peak RSS (kB), exit
#: status and wall time. A child forked straight from this script would start its peak at this
#: script's size (the inputs it built), so the figure would not be infergap's.
_MEASURE = """
import os, subprocess, sys, time
t0 = time.perf_counter()
p = subprocess.Popen([sys.executable, "-m", "infergap", *sys.argv[1:]], stdout=subprocess.DEVNULL, stderr=sys.stderr)
_pid, status, usage = os.wait4(p.pid, 0)
print(usage.ru_maxrss, os.waitstatus_to_exitcode(status), time.perf_counter() - t0)
"""


def run_one(name: str, build: Callable[[Path], list[str]]) -> tuple[float, float, int, str]:
    """(seconds, peak MB, exit status, last stderr line) of one input in a fresh process."""
    with tempfile.TemporaryDirectory(prefix="infergap-hostile-bench-") as tmp:
        d = Path(tmp)
        args = build(d)
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "INFERGAP_DB": str(d / "ledger.sqlite3"), "TMPDIR": tmp}
        try:
            p = subprocess.run([sys.executable, "-c", _MEASURE, *args], capture_output=True, text=True, env=env)
        finally:
            while _SERVERS:
                srv = _SERVERS.pop()
                srv.kill()
                srv.wait()
        kb, rc, seconds = p.stdout.split()
        peak_mb, rc_i, secs = int(kb) / 1024, int(rc), float(seconds)
        if "Traceback (most recent call last)" in p.stderr:
            return secs, peak_mb, -1, "TRACEBACK: " + p.stderr.strip().splitlines()[-1]
        lines = [x for x in p.stderr.strip().splitlines() if x.strip()]
        return secs, peak_mb, rc_i, lines[-1] if lines else ""


def main(argv: list[str]) -> int:
    words = [w.lower() for w in argv]
    chosen = {k: v for k, v in INPUTS.items() if not words or any(w in k.lower() for w in words)}
    failed = 0
    print(f"{'input':42} {'time s':>7} {'peak MB':>8} {'exit':>4}  result")
    for name, build in chosen.items():
        s, mb, rc, line = run_one(name, build)
        bad = s > MAX_S or mb > MAX_MB or rc not in (0, 1, 2)
        failed += bad
        print(f"{name:42} {s:7.2f} {mb:8.0f} {rc:4}  {'OVER ' if bad else ''}{line[:110]}")
    print(f"{len(chosen)} inputs, {failed} over {MAX_S:g} s / {MAX_MB:g} MB or crashed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
