"""procfs, sysfs and small command outputs: limits, modules, cmdline, swaps, cgroups, mounts,
``ulimit -a``, ``sysctl -a``, ``df``, ``pip list``, cpulists and kernel versions.

Formats are the kernel's (Documentation/filesystems/proc.rst, ``fs/proc/base.c`` for limits) and
the tools' own (bash ``ulimit -a``, procps ``sysctl -a``, coreutils ``df -h``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass


def parse_limits(text: str) -> dict[str, tuple[str, str, str]]:
    """``/proc/<pid>/limits`` -> {"Max locked memory": (soft, hard, units)}.

    >>> parse_limits("Limit  Soft Limit  Hard Limit  Units\\nMax locked memory         8388608              8388608              bytes     ")
    {'Max locked memory': ('8388608', '8388608', 'bytes')}
    """
    out = {}
    for line in text.splitlines()[1:]:
        m = re.match(r"^(Max [a-z ]+?)\s{2,}(\S+)\s+(\S+)\s*(\S*)", line)
        if m:
            out[m.group(1).strip()] = (m.group(2), m.group(3), m.group(4))
    return out


def parse_ulimit(text: str) -> dict[str, str]:
    """bash ``ulimit -a`` -> {flag: value}, e.g. {"-l": "unlimited", "-n": "20000"}; values in the
    unit the line names (kbytes for -l)."""
    out = {}
    for line in text.splitlines():
        m = re.search(r"\((?:[^),]{0,64},\s{0,8})?(-\w)\)\s{1,64}(\S{1,64})\s*$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def parse_modules(text: str) -> set[str]:
    """``/proc/modules`` -> loaded module names."""
    return {line.split()[0] for line in text.splitlines() if line.strip()}


def parse_cmdline(text: str) -> dict[str, str | None]:
    """``/proc/cmdline`` -> {param: value or None}; repeated params keep the last value.

    The H200 capture's command line (``tests/fixtures/hosts/h200-1gpu``), shortened:

    >>> parse_cmdline("BOOT_IMAGE=/boot/vmlinuz-6.18.44 root=/dev/vda quiet pci=realloc=off")
    {'BOOT_IMAGE': '/boot/vmlinuz-6.18.44', 'root': '/dev/vda', 'quiet': None, 'pci': 'realloc=off'}
    """
    out: dict[str, str | None] = {}
    for tok in text.split():
        k, sep, v = tok.partition("=")
        out[k] = v if sep else None
    return out


def parse_swaps(text: str) -> list[dict[str, str]]:
    """``/proc/swaps`` -> entries with Filename, Type, Size (KiB), Used (KiB), Priority."""
    lines = [l for l in text.splitlines() if l.strip()]
    if not lines:
        return []
    keys = lines[0].split()
    return [dict(zip(keys, l.split())) for l in lines[1:]]


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` -> {key: value in bytes} (kB values multiplied by 1024).

    >>> parse_meminfo("MemTotal:       131981020 kB\\nHugePages_Total:       0")  # the H200 capture
    {'MemTotal': 135148564480, 'HugePages_Total': 0}
    """
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(?:Node \d+ )?(\S+):\s+(\d+)(?:\s+kB)?", line)
        if m:
            out[m.group(1)] = int(m.group(2)) * (1024 if "kB" in line else 1)
    return out


def parse_sysctl_all(text: str) -> dict[str, str]:
    """procps ``sysctl -a`` -> {key: value} (``key = value`` lines; whitespace in values collapsed
    to single tabs as /proc/sys prints them)."""
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition(" = ")
        if sep and k.strip() and " " not in k.strip():
            out[k.strip()] = v.strip()
    return out


def parse_cpulist(text: str) -> list[int]:
    """Kernel cpulist format (``0-15,32-47``) -> sorted CPU numbers. Raises ValueError on garbage.

    >>> parse_cpulist("0-3,8")
    [0, 1, 2, 3, 8]
    """
    cpus: set[int] = set()
    text = text.strip()
    if not text:
        return []
    for part in text.split(","):
        a, _, b = part.partition("-")
        lo, hi = int(a), int(b) if b else int(a)
        if hi < lo or hi - lo > 65536:
            raise ValueError(f"bad cpulist range {part!r}")
        cpus.update(range(lo, hi + 1))
    return sorted(cpus)


def parse_numactl(text: str) -> dict[int, list[int]]:
    """NUMA node -> CPU numbers from ``numactl -H`` (its ``node N cpus: …`` lines; a node without
    CPUs maps to an empty list).

    >>> parse_numactl("available: 2 nodes (0-1)\\nnode 0 cpus: 0 1 2 3\\nnode 0 size: 1031717 MB\\nnode 1 cpus:\\n")
    {0: [0, 1, 2, 3], 1: []}
    """
    return {int(m.group(1)): [int(x) for x in m.group(2).split()] for m in re.finditer(r"^node (\d+) cpus:([\d ]*)$", text, flags=re.M)}


def parse_uname(text: str) -> str | None:
    """The kernel release of ``uname -a`` (its third word), or None.

    >>> parse_uname("Linux gpu-host 6.8.0-51-generic #52-Ubuntu SMP PREEMPT_DYNAMIC Thu Dec  5 13:09:44 UTC 2024 x86_64 x86_64 x86_64 GNU/Linux")
    '6.8.0-51-generic'
    """
    t = text.split()
    return t[2] if len(t) >= 3 else None


def parse_environ(data: str) -> dict[str, str]:
    """``/proc/<pid>/environ`` (NUL separated) -> dict."""
    out = {}
    for item in data.split("\0"):
        k, sep, v = item.partition("=")
        if sep and k:
            out[k] = v
    return out


def parse_df_h(text: str) -> dict[str, dict[str, str]]:
    """coreutils ``df -h`` -> {mount point: {"size": "64M", "used": …, "avail": …, "fs": …}}."""
    out = {}
    for line in text.splitlines()[1:]:
        t = line.split()
        if len(t) >= 6:
            out[t[5]] = {"fs": t[0], "size": t[1], "used": t[2], "avail": t[3]}
    return out


_SIZE = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


def human_size_B(s: str) -> int | None:
    """``df -h`` style size (``64M``, ``128G``, ``1.5T``) -> bytes; None when unreadable."""
    m = re.fullmatch(r"([\d.]+)([KMGTP]?)i?B?", s.strip(), flags=re.I)
    if not m:
        return None
    return int(float(m.group(1)) * _SIZE[m.group(2).upper()])


_FREEZE = re.compile(r"^\s*(?:\[(?:pip3?|conda)\]\s+)?([A-Za-z0-9][A-Za-z0-9_.\-]*)(?:\[[^\]]*\])?\s*(?:==\s*([\w.+!\-]+)|\s+@\s+\S+)\s*$")
_PIP_TEXT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9_.\-]*)\s+(\d[\w.+!\-]*)(?:\s+\S.*)?$")
_CONDA_ENV = re.compile(r"^\s*\[conda\]\s+([A-Za-z0-9][A-Za-z0-9_.\-]*)\s+(\d[\w.+!\-]*)\s")
#: ``name: version`` package lines of ``python -m sglang.check_env`` (``PyTorch: 2.4.0+cu121``).
_CHECK_ENV_PKG = re.compile(r"^\s*(PyTorch|[a-z][a-z0-9_\-]*): v?(\d+\.\d+[\w.+!\-]*)\s*$")


def parse_pip_lines(kind: str, text: str) -> list[tuple[str, str]]:
    """(name, version) of each package line of a listing: ``pip_freeze`` (``name==1.0``; ``name @
    url`` has version ""), ``pip_text`` (plain ``pip list``), ``collect_env`` (PyTorch's report:
    its ``[pip3]`` and ``[conda]`` lines) or ``check_env`` (``python -m sglang.check_env``:
    ``name: version`` lines, ``PyTorch`` read as torch). The first line of a name wins (names
    compared case-insensitively, kept as written).

    >>> parse_pip_lines("pip_freeze", "torch==2.5.1\\nsglang[all]==0.4.1\\n")
    [('torch', '2.5.1'), ('sglang', '0.4.1')]
    """
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for line in text.splitlines():
        m = None
        if kind == "check_env":
            m = _CHECK_ENV_PKG.match(line)
            if m and m.group(1).lower() not in seen:
                name = "torch" if m.group(1) == "PyTorch" else m.group(1)
                seen.add(name.lower())
                out.append((name, m.group(2)))
            continue
        if kind == "pip_text":
            if line.startswith(("Package", "---")):
                continue
            m = _PIP_TEXT.match(line)
        else:
            if kind == "collect_env" and not line.lstrip().startswith(("[pip", "[conda")):
                continue
            m = _FREEZE.match(line) or (_CONDA_ENV.match(line) if kind == "collect_env" else None)
        if m and m.group(1).lower() not in seen:
            seen.add(m.group(1).lower())
            out.append((m.group(1), m.group(2) or ""))
    return out


def parse_pip_list(text: str) -> dict[str, str]:
    """``pip list --format=json`` (or plain ``pip list`` / ``pip freeze``, read by
    :func:`parse_pip_lines`) -> {normalized name: version}.

    Names are normalized per PEP 503 (lower case, runs of ``-_.`` -> ``-``).

    >>> parse_pip_list('[{"name": "Flash_Attn", "version": "2.7.4"}]')
    {'flash-attn': '2.7.4'}
    """
    def norm(n: str) -> str:
        return re.sub(r"[-_.]+", "-", n).lower()

    text = text.strip()
    if text.startswith("["):
        try:
            return {norm(d["name"]): str(d["version"]) for d in json.loads(text) if isinstance(d, dict) and "name" in d}
        except (json.JSONDecodeError, TypeError, KeyError, RecursionError):
            pass
    return {norm(n): v for n, v in parse_pip_lines("pip_freeze" if "==" in text else "pip_text", text) if v}


@dataclass(frozen=True, order=True)
class KernelVersion:
    """A kernel release string split for comparison: ``6.8.12-4-pve`` -> (6, 8, 12, 4) + flavour."""

    major: int
    minor: int
    patch: int
    abi: int
    flavour: str
    release: str

    @classmethod
    def parse(cls, release: str) -> "KernelVersion | None":
        """Parse ``uname -r``-style text; None when it does not start with ``X.Y``."""
        m = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?(?:-(\d+))?(?:[-.+_~]?(.*))?$", release.strip())
        if not m:
            return None
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), int(m.group(4) or 0), m.group(5) or "", release.strip())

    def at_least(self, major: int, minor: int) -> bool:
        """Whether this kernel is major.minor or newer."""
        return (self.major, self.minor) >= (major, minor)


def kernel_releases_from_listing(text: str) -> list[str]:
    """Kernel releases from ``ls -1 /lib/modules`` or ``ls -1 /boot`` (``vmlinuz-<release>``)."""
    rels = set()
    for line in text.split():
        line = line.strip()
        if line.startswith("vmlinuz-"):
            rels.add(line[len("vmlinuz-") :])
        elif re.match(r"^\d+\.\d+", line):
            rels.add(line)
    return sorted(rels)


def parse_ibstat(text: str) -> list[dict[str, str]]:
    """One dict per HCA port of ``ibstat`` (rdma-core's ``infiniband-diags``): ``ca``, ``port``,
    ``state`` (Active, Down, Initializing), ``physical`` (LinkUp, Polling, Disabled), ``rate``
    (Gb/s as printed), ``link`` (InfiniBand or Ethernet, i.e. RoCE), ``firmware``.

    >>> parse_ibstat("CA 'mlx5_0'\\n\\tFirmware version: 28.36.1010\\n\\tPort 1:\\n\\t\\tState: Active\\n"
    ...              "\\t\\tPhysical state: LinkUp\\n\\t\\tRate: 400\\n\\t\\tLink layer: InfiniBand\\n")
    [{'ca': 'mlx5_0', 'firmware': '28.36.1010', 'port': '1', 'state': 'Active', 'physical': 'LinkUp', 'rate': '400', 'link': 'InfiniBand'}]
    """
    out: list[dict[str, str]] = []
    ca: dict[str, str] = {}
    keys = {"State": "state", "Physical state": "physical", "Rate": "rate", "Link layer": "link"}
    for line in text.splitlines():
        s = line.strip()
        m = re.match(r"^CA '([\w.\-]{1,64})'$", s)
        if m:
            ca = {"ca": m.group(1)}
            continue
        if not ca:
            continue
        p = re.match(r"^Port (\d{1,3}):$", s)
        if p and len(out) < 256:
            out.append({**ca, "port": p.group(1)})
            continue
        k, sep, v = s.partition(": ")
        if sep and k == "Firmware version":
            ca["firmware"] = v.strip()
        elif sep and k in keys and out and out[-1]["ca"] == ca["ca"]:
            out[-1][keys[k]] = v.strip()
    return out


_IBV_STATE = {"PORT_ACTIVE": "Active", "PORT_DOWN": "Down", "PORT_INIT": "Initializing", "PORT_ARMED": "Armed", "PORT_ACTIVE_DEFER": "Active"}
_IBV_PHYS = {"LINK_UP": "LinkUp", "POLLING": "Polling", "DISABLED": "Disabled", "SLEEP": "Sleep", "LINK_ERROR_RECOVERY": "LinkErrorRecovery"}


def parse_ibv_devinfo(text: str) -> list[dict[str, str]]:
    """One dict per HCA port of ``ibv_devinfo`` (rdma-core's ``libibverbs-utils``), in the shape of
    :func:`parse_ibstat`: ``ca`` (``hca_id``), ``firmware`` (``fw_ver``), ``port``, ``state``
    (``PORT_ACTIVE`` is Active, ``PORT_DOWN`` Down, ``PORT_INIT`` Initializing), ``link``
    (``link_layer``); with ``-v`` also ``physical`` (``phys_state``) and ``rate`` in Gb/s (the
    lanes of ``active_width`` × ``active_speed``, as ibstat computes it).

    >>> parse_ibv_devinfo("hca_id:\\tmlx5_12\\n\\tfw_ver:\\t\\t22.38.1900\\n\\t\\tport:\\t1\\n"
    ...                   "\\t\\t\\tstate:\\t\\t\\tPORT_DOWN (1)\\n\\t\\t\\tlink_layer:\\t\\tEthernet\\n")
    [{'ca': 'mlx5_12', 'firmware': '22.38.1900', 'port': '1', 'state': 'Down', 'link': 'Ethernet'}]
    """
    out: list[dict[str, str]] = []
    ca: dict[str, str] = {}
    lanes = None
    for line in text.splitlines():
        k, sep, v = line.strip().partition(":")
        v = v.strip()
        if not sep:
            continue
        if k == "hca_id" and re.fullmatch(r"[\w.\-]{1,64}", v):
            ca = {"ca": v}
        elif not ca:
            continue
        elif k == "fw_ver":
            ca["firmware"] = v
        elif k == "port" and v.isdigit() and len(out) < 256:
            out.append({**ca, "port": v})
        elif out and out[-1]["ca"] == ca["ca"]:
            word = v.split(" ")[0]
            if k == "state":
                out[-1]["state"] = _IBV_STATE.get(word, word)
            elif k == "phys_state":
                out[-1]["physical"] = _IBV_PHYS.get(word, word)
            elif k == "link_layer":
                out[-1]["link"] = v
            elif k == "active_width" and re.fullmatch(r"\d{1,2}X", word):
                lanes = int(word[:-1])
            elif k == "active_speed" and lanes and re.fullmatch(r"\d{1,4}(?:\.\d{1,3})?", word):
                out[-1]["rate"] = f"{lanes * float(word):g}"
    return out


_GID_ROW = re.compile(r"^([\w.\-]{1,64})\s{1,16}(\d{1,3})\s{1,16}(\d{1,5})\s{1,16}([0-9a-f]{4}(?::[0-9a-f]{4}){7})\s{1,40}"
                      r"(?:(\d{1,3}(?:\.\d{1,3}){3})\s{1,40})?(v[12])\s{1,16}(\S{1,64})\s*$")


def parse_show_gids(text: str) -> list[dict[str, str]]:
    """One dict per GID of Mellanox OFED's ``show_gids`` (``DEV PORT INDEX GID IPv4 VER DEV``
    columns): ``ca``, ``port``, ``index``, ``gid``, ``ipv4`` (empty for a GID without one, such
    as the link-local ``fe80:…``), ``ver`` (``v1``/``v2``: RoCE v1 or v2), ``netdev``.

    NVIDIA/nccl#1573 (``tests/fixtures/evidence/nccl-1573-show-gids-pod.txt``):

    >>> parse_show_gids("mlx5_0\\t1\\t7\\t0000:0000:0000:0000:0000:ffff:0a98:000c\\t10.152.0.12  \\tv2\\tnet1")
    [{'ca': 'mlx5_0', 'port': '1', 'index': '7', 'gid': '0000:0000:0000:0000:0000:ffff:0a98:000c', 'ipv4': '10.152.0.12', 'ver': 'v2', 'netdev': 'net1'}]
    """
    out = []
    for raw in text.splitlines():
        m = _GID_ROW.match(raw.strip())
        if m and len(out) < 4096:
            ca, port, index, gid, ipv4, ver, netdev = m.groups()
            out.append({"ca": ca, "port": port, "index": index, "gid": gid, "ipv4": ipv4 or "", "ver": ver, "netdev": netdev})
    return out
