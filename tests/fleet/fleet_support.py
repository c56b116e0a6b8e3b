"""Fleet test support: node snapshots made from the real host captures with known faults injected.

A snapshot is handled as a dict (path inside the snapshot -> bytes). Each fault edits every place
a real host would show the change (the sysfs/procfs file and the command outputs that print it)
and names the drift keys the fleet audit must report for the node that carries it; nothing else
may drift. Used by the tests and by ``benchmarks/fleet.py``.
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ROOT / "tests" / "fixtures" / "hosts"

Files = dict[str, bytes]


def load(fixture: str) -> Files:
    """The files of a host fixture (``h200-2gpu-collect.tar.gz`` or a snapshot directory)."""
    p = HOSTS / fixture
    out: Files = {}
    if p.is_dir():
        for f in p.rglob("*"):
            if f.is_file():
                out[str(f.relative_to(p))] = f.read_bytes()
        return out
    with tarfile.open(p, "r:gz") as tf:
        for m in tf:
            if m.isfile():
                name = m.name.split("/", 1)[1] if "/" in m.name else m.name
                out[name] = tf.extractfile(m).read()  # type: ignore[union-attr]
    return out


def to_targz(files: Files, level: int = 1) -> bytes:
    """A ``.tar.gz`` of the snapshot (one top directory, like ``infergap collect`` writes)."""
    buf = io.BytesIO()
    import gzip

    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=level, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w") as tf:
            for name in sorted(files):
                data = files[name]
                ti = tarfile.TarInfo(f"snapshot/{name}")
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def write_dir(files: Files, path: Path) -> Path:
    """Write the snapshot as a directory (what a node's test hook collects from)."""
    for name, data in files.items():
        p = path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return path


def _sub(files: Files, name: str, pattern: str, repl: str, count: int = 0) -> None:
    text = files[name].decode()
    new, n = re.subn(pattern, repl, text, count=count, flags=re.M)
    assert n, f"{name}: {pattern!r} not found"
    files[name] = new.encode()


def _replace_everywhere(files: Files, old: str, new: str) -> None:
    hit = False
    for name, data in files.items():
        if old.encode() in data:
            files[name] = data.replace(old.encode(), new.encode())
            hit = True
    assert hit, old


def _sysctl(files: Files, key: str, value: str) -> None:
    files[f"files/proc/sys/{key.replace('.', '/')}"] = f"{value}\n".encode()
    _sub(files, "cmds/sysctl_all.out", rf"^{re.escape(key)} = .*$", f"{key} = {value}")


def autogroup_off(f: Files) -> set[str]:
    _sysctl(f, "kernel.sched_autogroup_enabled", "0")
    return {"check:kernel.sched_autogroup"}


def swappiness(f: Files) -> set[str]:
    _sysctl(f, "vm.swappiness", "10")
    return {"check:vm.swappiness"}


def numa_balancing_flip(f: Files) -> set[str]:
    """Automatic NUMA balancing switched (back on after a kernel update, or off on one node)."""
    cur = f["files/proc/sys/kernel/numa_balancing"].decode().strip()
    _sysctl(f, "kernel.numa_balancing", "0" if cur != "0" else "1")
    return {"check:kernel.numa_balancing"}


def nofile(f: Files) -> set[str]:
    _sub(f, "cmds/ulimit.out", r"^(open files\s+\(-n\)) \d+", r"\1 1024")
    _sub(f, "files/proc/self/limits", r"^(Max open files\s+)\d+(\s+)\d+", r"\g<1>1024\g<2>1024")
    return {"check:limits.nofile"}


def _driver_version(f: Files) -> str:
    if "files/sys/module/nvidia/version" in f:
        return f["files/sys/module/nvidia/version"].decode().strip()
    m = re.search(r"Driver Version:\s*([\d.]+)", f["cmds/nvsmi.out"].decode())
    assert m, "no driver version in the fixture"
    return m.group(1)


def driver_behind(f: Files) -> set[str]:
    """The driver one release behind: every file that prints its version."""
    old = _driver_version(f)
    parts = old.split(".")
    _replace_everywhere(f, old, ".".join([parts[0], str(int(parts[1]) - 7).zfill(len(parts[1])), *parts[2:]]))
    return {"version:driver"}


def kernel_update(f: Files) -> set[str]:
    """Another build of the kernel, everywhere its release is printed (uname, osrelease,
    /proc/version, sysctl, /boot): the ABI number after the patch level (``6.8.12-4-pve`` ->
    ``6.8.12-6-pve``), else the patch level, goes up by two."""
    old = f["cmds/uname.out"].decode().split()[2]
    m = re.match(r"(\d+\.\d+\.\d+-)(\d+)(.*)", old)
    if m:
        new = f"{m.group(1)}{int(m.group(2)) + 2}{m.group(3)}"
    else:
        m = re.match(r"(\d+\.\d+\.)(\d+)(.*)", old)
        assert m, old
        new = f"{m.group(1)}{int(m.group(2)) + 2}{m.group(3)}"
    _replace_everywhere(f, old, new)
    return {"version:kernel"}


def link_x8(f: Files) -> set[str]:
    """The first GPU's link trained at x8 (after a reseat): sysfs and lspci's LnkSta."""
    bdf = sorted(n.split("/")[5] for n in f if n.startswith("files/sys/bus/pci/devices/") and n.endswith("/current_link_width")
                 and f[n.replace("current_link_width", "class")].startswith(b"0x03"))[0]
    f[f"files/sys/bus/pci/devices/{bdf}/current_link_width"] = b"8\n"
    return {"check:pcie.link@GPU0"}


def ecc_errors(f: Files) -> set[str]:
    """Three volatile uncorrectable DRAM errors on the first GPU (nvidia-smi -q -x and NVML)."""
    _sub(f, "cmds/nvsmi_qx.out", r"<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>3</dram_uncorrectable>", count=1)
    if "probes/nvml.json" in f:
        d = json.loads(f["probes/nvml.json"])
        gpus = sorted(d.get("gpus") or [], key=lambda g: str(g.get("pci_bus_id", "")).lower())
        if gpus and "ecc_volatile_uncorrected" in gpus[0]:
            gpus[0]["ecc_volatile_uncorrected"] = 3
            f["probes/nvml.json"] = json.dumps(d, indent=1).encode()
    return {"check:gpu.ecc@GPU0"}


def slow_memcopy(f: Files) -> set[str]:
    """GPU 0's device memory copy 15 % slower than its peers (still above the single-host bar)."""
    assert "probes/active.json" in f, "no active measurements in the fixture"
    d = json.loads(f["probes/active.json"])
    d["copies"][0]["d2d_copy_GBps"] *= 0.85
    f["probes/active.json"] = json.dumps(d, indent=1).encode()
    return {"measurement:GPU0 memory copy GB/s"}


#: Faults by name; each edits the files in place and returns the drift keys it must cause.
FAULTS: dict[str, Callable[[Files], set[str]]] = {
    "autogroup_off": autogroup_off, "swappiness": swappiness, "numa_balancing_flip": numa_balancing_flip, "nofile": nofile,
    "driver_behind": driver_behind, "kernel_update": kernel_update, "link_x8": link_x8, "ecc_errors": ecc_errors,
    "slow_memcopy": slow_memcopy,
}

#: Faults that need the active measurements in the fixture.
ACTIVE_FAULTS = {"slow_memcopy"}


def drift_keys(report_json: dict) -> dict[str, set[str]]:
    """node -> {"kind:key"} of every drift item in an ``infergap.fleet/1`` document."""
    out: dict[str, set[str]] = {}
    for d in report_json["drift"]:
        for n in d["nodes"]:
            out.setdefault(n, set()).add(f"{d['kind']}:{d['key']}")
    return out


def env_for(path: Path | None, delay_s: float | None = None) -> dict[str, str]:
    """The test hook's environment for one node (see ``infergap.fleet.node_task``)."""
    e = {}
    if path is not None:
        e["INFERGAP_FLEET_TEST_SNAPSHOT"] = os.fspath(path)
    if delay_s is not None:
        e["INFERGAP_FLEET_TEST_DELAY_S"] = str(delay_s)
    return e
