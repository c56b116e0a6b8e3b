"""The serving process behind a URL, read from ``/proc`` (and NVML) on the machine it runs on.

:func:`find_listener` finds the process that owns the listening socket of the URL's port: the
socket's inode from ``/proc/net/tcp`` and ``/proc/net/tcp6`` (state ``0A``, LISTEN), then the
process whose ``/proc/<pid>/fd/*`` links to ``socket:[inode]``. A server in another network
namespace (a container with its own network, seen from the host) is found through the
``/proc/<pid>/net/tcp*`` of a process in that namespace. Inside a container the PIDs are the
container's PID namespace's, which is what ``/proc`` shows there.

:func:`read_process` then reads its command line, the environment variables that steer the GPU
and threads (:data:`ENV_PREFIXES`: ``CUDA_VISIBLE_DEVICES`` first), thread count and names,
CPU affinity, CPU time per thread, cgroup limits and — with NVML — the GPU memory the process
holds. Secrets in arguments and environment are never kept (the snapshot rules:
``snapshot.sources.ENV_SECRET_WORDS``). Every read is bounded: files are read up to
:data:`MAX_READ` bytes, the scan of ``/proc`` stops after :data:`MAX_PIDS` processes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from infergap.guard import secret_name
from infergap.parsers.engine_args import engine_of
from infergap.parsers.process import ProcessEvidence
from infergap.snapshot.sources import ENV_PREFIXES as SNAPSHOT_ENV_PREFIXES
from infergap.snapshot.sources import ENV_SECRET_WORDS

#: Environment variables of the serving process that are kept: the snapshot's GPU/CUDA/NCCL set,
#: the thread pools (OMP, MKL, OpenBLAS) and the engines' own settings variables.
ENV_PREFIXES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", *SNAPSHOT_ENV_PREFIXES,
                "OMP_", "MKL_", "OPENBLAS_", "GOMP_", "KMP_", "LLAMA_ARG_", "GGML_", "VLLM_", "SGLANG_", "PYTORCH_CUDA")
MAX_READ = 1 << 20
MAX_PIDS = 65536
LISTEN = "0A"
SCRUBBED = "<scrubbed>"


def _read(path: Path, limit: int = MAX_READ) -> bytes:
    with open(path, "rb") as f:
        return f.read(limit)


def listening_inodes(tcp_text: str, port: int) -> list[str]:
    """Inodes of the LISTEN sockets on ``port`` in a ``/proc/net/tcp`` or ``tcp6`` table.

    >>> t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\\n"
    >>> t += "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0  0 123456 1 0 100 0 0 10 0\\n"
    >>> listening_inodes(t, 8080)
    ['123456']
    """
    out = []
    for line in tcp_text.splitlines()[1:]:
        f = line.split()
        if len(f) < 10 or f[3] != LISTEN or ":" not in f[1]:
            continue
        try:
            if int(f[1].rsplit(":", 1)[1], 16) == port and f[9] != "0":
                out.append(f[9])
        except ValueError:
            continue
    return out


def _pids(proc: Path) -> list[str]:
    try:
        return sorted((p.name for p in proc.iterdir() if p.name.isdigit()), key=int)[:MAX_PIDS]
    except OSError:
        return []


def _owner(proc: Path, inodes: set[str], pids: list[str]) -> str | None:
    want = {f"socket:[{i}]" for i in inodes}
    for pid in pids:
        try:
            fds = list((proc / pid / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in want:
                    return pid
            except OSError:
                continue
    return None


def _namespace_tables(proc: Path, pids: list[str]) -> list[tuple[str, str]]:
    """(netns, one pid in it) for every network namespace the scan can see."""
    seen: dict[str, str] = {}
    for pid in pids:
        try:
            ns = os.readlink(proc / pid / "ns" / "net")
        except OSError:
            continue
        seen.setdefault(ns, pid)
    return list(seen.items())


def find_listener(url: str, proc: Path = Path("/proc"), deadline_s: float = 10.0) -> tuple[int | None, str | None, str]:
    """``(pid, netns, why)``: the process listening on ``url``'s port, or None with the reason.
    Raises ValueError for a URL without a port it can tell (``http`` → 80, ``https`` → 443)."""
    u = urlsplit(url)
    port = u.port or {"http": 80, "https": 443}.get(u.scheme)
    if port is None:
        raise ValueError(f"{url}: no port")
    t0 = time.monotonic()
    pids = _pids(proc)
    tables = [(None, proc / "net")] + [(ns, proc / pid / "net") for ns, pid in _namespace_tables(proc, pids)]
    tried = set()
    for ns, net in tables:
        if time.monotonic() - t0 > deadline_s:
            return None, None, f"the scan of {proc} took longer than {deadline_s:.0f} s"
        inodes: set[str] = set()
        for name in ("tcp", "tcp6"):
            try:
                inodes.update(listening_inodes(_read(net / name).decode("ascii", "replace"), port))
            except OSError:
                continue
        if not inodes or frozenset(inodes) in tried:
            continue
        tried.add(frozenset(inodes))
        pid = _owner(proc, inodes, pids)
        if pid is not None:
            return int(pid), ns, "found"
        return None, ns, (f"a socket listens on port {port} but no process visible here owns it "
                          "(another user's process without the rights to read its fds, or another PID namespace)")
    return None, None, f"no socket listens on port {port} in any network namespace visible here"


def scrub_argv(argv: list[str]) -> list[str]:
    """``argv`` with the value of every option naming a secret (:func:`infergap.guard.secret_name`)
    replaced by ``<scrubbed>`` (``--api-key K``, ``--api-key=K``, ``--hf-token K``; not
    ``--max-num-batched-tokens``) and credentials in URLs removed.

    >>> scrub_argv(["llama-server", "--api-key", "s3cr3t", "--hf-token=abc", "-m", "https://u:p@h/x"])
    ['llama-server', '--api-key', '<scrubbed>', '--hf-token=<scrubbed>', '-m', 'https://<scrubbed>@h/x']
    """
    out, hide = [], False
    for a in argv:
        if hide and not a.startswith("--"):
            out.append(SCRUBBED)
            hide = False
            continue
        hide = False
        name, eq, _ = a.partition("=")
        if a.startswith("-") and secret_name(name):
            if eq:
                out.append(f"{name}={SCRUBBED}")
            else:
                out.append(a)
                hide = True
            continue
        if "://" in a and "@" in a.split("://", 1)[1].split("/", 1)[0]:
            scheme, rest = a.split("://", 1)
            a = f"{scheme}://{SCRUBBED}@{rest.split('@', 1)[1]}"
        out.append(a)
    return out


def keep_env(environ: bytes) -> dict[str, str]:
    """The kept variables (:data:`ENV_PREFIXES`, none naming a secret) of a ``/proc/<pid>/environ``."""
    out = {}
    for item in environ.split(b"\0"):
        k, eq, v = item.decode("utf-8", "replace").partition("=")
        if eq and k.startswith(ENV_PREFIXES) and not any(w in k.upper() for w in ENV_SECRET_WORDS):
            out[k] = v[:4096]
    return out


def _status(text: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines()) if k}


def cpu_list_count(s: str) -> int:
    """Number of CPUs in a list such as ``0-3,8,10-11``.

    >>> cpu_list_count("0-3,8,10-11")
    7
    """
    n = 0
    for part in s.split(","):
        a, dash, b = part.strip().partition("-")
        if a.isdigit():
            n += int(b) - int(a) + 1 if dash and b.isdigit() else 1
    return n


def _stat_cpu_s(text: str) -> float | None:
    """utime + stime (fields 14 and 15 of ``/proc/<pid>/stat``) in seconds."""
    rest = text.rsplit(")", 1)[-1].split()
    try:
        return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError):
        return None


def _threads(ev: ProcessEvidence, base: Path) -> None:
    try:
        tids = sorted((p.name for p in (base / "task").iterdir() if p.name.isdigit()), key=int)[:4096]
    except OSError as e:
        ev.problems.append(f"{base}/task: {e.strerror or e}")
        return
    for tid in tids:
        try:
            comm = _read(base / "task" / tid / "comm", 256).decode("utf-8", "replace").strip()
            cpu = _stat_cpu_s(_read(base / "task" / tid / "stat", 4096).decode("utf-8", "replace"))
        except OSError:
            continue
        ev.thread_names[comm] = ev.thread_names.get(comm, 0) + 1
        if cpu is not None:
            ev.thread_cpu_s[tid] = cpu
    ev.sources["thread_cpu_s"] = f"{base}/task/*/stat"


def _cgroup(ev: ProcessEvidence, base: Path, root: Path) -> None:
    try:
        lines = _read(base / "cgroup", 65536).decode("utf-8", "replace").splitlines()
    except OSError as e:
        ev.problems.append(f"{base}/cgroup: {e.strerror or e}")
        return
    for line in lines:
        hid, _, rest = line.partition(":")
        ctrl, _, path = rest.partition(":")
        if hid == "0" and not ctrl:  # cgroup v2: one hierarchy
            d = root / path.lstrip("/")
            files = ("cpu.max", "memory.max", "cpuset.cpus.effective", "pids.max")
        elif "cpu" in ctrl.split(",") or "memory" in ctrl.split(","):
            d = root / ctrl / path.lstrip("/")
            files = ("cpu.cfs_quota_us", "cpu.cfs_period_us", "memory.limit_in_bytes")
        else:
            continue
        for name in files:
            try:
                ev.cgroup[name] = _read(d / name, 4096).decode("utf-8", "replace").strip()
                ev.sources[f"cgroup.{name}"] = str(d / name)
            except OSError:
                continue


def _nvml_memory(ev: ProcessEvidence) -> None:
    """GPU memory NVML attributes to the pid (summed over GPUs). NVML lists host PIDs: inside a
    container with its own PID namespace the process is not found under its own PID."""
    try:
        import pynvml
    except ImportError:
        ev.gpu_note = "NVML not available (package nvidia-ml-py not installed)"
        return
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        ev.gpu_note = f"NVML could not start ({e}): no NVIDIA driver here"
        return
    try:
        total, seen = 0, False
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            for fn in (pynvml.nvmlDeviceGetComputeRunningProcesses, pynvml.nvmlDeviceGetGraphicsRunningProcesses):
                for p in fn(h) or []:
                    if p.pid == ev.pid:
                        seen = True
                        total += p.usedGpuMemory or 0
        if seen:
            ev.gpu_memory_B = total
            ev.sources["gpu_memory_B"] = "NVML nvmlDeviceGetComputeRunningProcesses (usedGpuMemory)"
        else:
            ev.gpu_memory_B = 0
            ev.gpu_note = (f"NVML lists no GPU memory for pid {ev.pid} on any of the GPUs (the process holds no CUDA context, "
                           "or it runs in another PID namespace than this one)")
            ev.sources["gpu_memory_B"] = "NVML nvmlDeviceGetComputeRunningProcesses (pid not listed)"
    except pynvml.NVMLError as e:
        ev.gpu_note = f"NVML process list failed: {e}"
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _basics(ev: ProcessEvidence, base: Path) -> None:
    try:
        raw = _read(base / "cmdline")
        ev.argv = scrub_argv([a.decode("utf-8", "replace") for a in raw.split(b"\0") if a][:4096])
        ev.sources["argv"] = f"{base}/cmdline"
    except OSError as e:
        ev.problems.append(f"{base}/cmdline: {e.strerror or e}")
    try:
        ev.exe = os.readlink(base / "exe")
    except OSError:
        pass
    try:
        ev.env = keep_env(_read(base / "environ"))
        ev.sources["env"] = f"{base}/environ"
    except OSError as e:
        ev.problems.append(f"{base}/environ: {e.strerror or e} (read as the server's user or root)")
    try:
        st = _status(_read(base / "status", 65536).decode("utf-8", "replace"))
        ev.threads = int(st["Threads"]) if st.get("Threads", "").isdigit() else None
        ev.cpus_allowed = st.get("Cpus_allowed_list")
        ev.cpus_allowed_count = cpu_list_count(ev.cpus_allowed) if ev.cpus_allowed else None
        ev.sources["threads"] = ev.sources["cpus_allowed"] = f"{base}/status"
        ev.cpu_time_s = _stat_cpu_s(_read(base / "stat", 4096).decode("utf-8", "replace"))
        ev.read_at = time.monotonic()
    except OSError as e:
        ev.problems.append(f"{base}/status: {e.strerror or e}")


def read_process(url: str, pid: int, port: int, proc: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup"),
                 netns: str | None = None, nvml: bool = True) -> ProcessEvidence:
    """Everything :class:`ProcessEvidence` holds for ``pid``; what cannot be read goes to
    ``problems`` (one line each), never an exception."""
    base = proc / str(pid)
    ev = ProcessEvidence(url=url, pid=pid, port=port, netns=netns, host_cpus=os.cpu_count())
    _basics(ev, base)
    _threads(ev, base)
    _cgroup(ev, base, cgroup_root)
    if nvml:
        _nvml_memory(ev)
    return ev


def serving_process(url: str, nvml: bool = True) -> tuple[ProcessEvidence | None, str]:
    """The process serving ``url`` on this machine, read, or None with the reason (a URL of another
    machine is not looked for: ``this machine`` means a loopback address or one of its own)."""
    try:
        pid, ns, why = find_listener(url)
        port = urlsplit(url).port or {"http": 80, "https": 443}.get(urlsplit(url).scheme) or 0
    except ValueError as e:
        return None, str(e)
    if pid is None:
        return None, why
    return read_process(url, pid, port, netns=ns, nvml=nvml), why


def cpu_since(before: ProcessEvidence, proc: Path = Path("/proc")) -> dict[str, Any] | None:
    """CPU the process used since ``before`` was read: ``{"wall_s", "process_cores", "busiest_thread",
    "busiest_share", "busiest_name"}`` (cores: CPU seconds per wall second; a share of 1.0 is a thread
    that ran all the time). None when the process is gone or was not read."""
    if before.read_at is None:
        return None
    after = read_process(before.url, before.pid, before.port, proc=proc, nvml=False)
    if after.read_at is None or after.cpu_time_s is None or before.cpu_time_s is None:
        return None
    wall = max(after.read_at - before.read_at, 1e-6)
    deltas = {t: after.thread_cpu_s[t] - before.thread_cpu_s.get(t, 0.0) for t in after.thread_cpu_s}
    tid, d = max(deltas.items(), key=lambda kv: kv[1], default=(None, 0.0))
    name = None
    if tid is not None:
        try:
            name = _read(proc / str(before.pid) / "task" / tid / "comm", 256).decode("utf-8", "replace").strip()
        except OSError:
            pass
    return {"wall_s": round(wall, 3), "process_cores": round((after.cpu_time_s - before.cpu_time_s) / wall, 3),
            "busiest_thread": tid, "busiest_share": round(d / wall, 3), "busiest_name": name,
            "threads": after.threads}


#: At most this many serving processes are kept in a snapshot (the listeners a known engine owns).
MAX_SERVERS = 8


def _listeners(proc: Path) -> dict[str, int]:
    """inode → port of every LISTEN TCP socket in this network namespace."""
    out: dict[str, int] = {}
    for name in ("tcp", "tcp6"):
        try:
            text = _read(proc / "net" / name).decode("ascii", "replace")
        except OSError:
            continue
        for line in text.splitlines()[1:]:
            f = line.split()
            if len(f) >= 10 and f[3] == LISTEN and ":" in f[1] and f[9] != "0":
                try:
                    out[f[9]] = int(f[1].rsplit(":", 1)[1], 16)
                except ValueError:
                    continue
    return out


def known_servers(proc: Path = Path("/proc"), nvml: bool = True, deadline_s: float = 10.0) -> list[ProcessEvidence]:
    """The processes of a known engine (llama.cpp's ``llama-server``, vLLM, SGLang:
    :func:`infergap.parsers.engine_args.engine_of`) that listen on a TCP port here, read
    (at most :data:`MAX_SERVERS`, the lowest port of each; the scan stops after ``deadline_s``)."""
    socks = _listeners(proc)
    t0, found = time.monotonic(), {}
    for pid in _pids(proc):
        if time.monotonic() - t0 > deadline_s or len(found) >= MAX_SERVERS:
            break
        try:
            ports = [socks[os.readlink(fd)[8:-1]] for fd in (proc / pid / "fd").iterdir()
                     if os.readlink(fd).startswith("socket:[") and os.readlink(fd)[8:-1] in socks]
        except OSError:
            continue
        if not ports:
            continue
        try:
            argv = [a.decode("utf-8", "replace") for a in _read(proc / pid / "cmdline").split(b"\0") if a]
        except OSError:
            continue
        if engine_of(argv):
            found[int(pid)] = min(ports)
    return [read_process(f"http://127.0.0.1:{port}", pid, port, proc=proc, nvml=nvml) for pid, port in sorted(found.items())]


def process_probe(url: str | None = None) -> dict[str, Any]:
    """The snapshot's ``probes/process.json``: the process serving ``url`` when given, else every
    known engine listening here. ``{"looked_for", "processes": [ProcessEvidence as JSON], "note"}``;
    secrets in arguments and environment were never read into it (:func:`scrub_argv`, :func:`keep_env`)."""
    if url:
        ev, why = serving_process(url)
        return {"looked_for": url, "processes": [ev.model_dump(mode="json")] if ev else [], "note": why}
    evs = known_servers()
    return {"looked_for": "known engines (llama-server, vLLM, SGLang) listening on this host",
            "processes": [e.model_dump(mode="json") for e in evs],
            "note": f"{len(evs)} found" if evs else "no process of a known engine listens on a TCP port here"}
