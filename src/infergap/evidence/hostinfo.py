"""The few host facts the log investigators compare against: GPU-to-GPU links, P2P support,
GPU names and compute capability, RDMA NICs. Read from whatever the snapshot has (nvidia-smi
text, the NVML probe, sysfs, lspci), each optional.
"""

from __future__ import annotations

import json
import re
from typing import Any

from infergap.evidence.text import clean_line

_ROW = re.compile(r"^GPU(\d+)\s+(.*)$")


def _matrix(text: str) -> dict[tuple[int, int], str]:
    """Cells of an ``nvidia-smi topo -m`` or ``topo -p2p r`` matrix: (gpu i, gpu j) -> cell."""
    header: list[str] | None = None
    out: dict[tuple[int, int], str] = {}
    for raw in text.splitlines():
        line = clean_line(raw).strip()  # nvidia-smi underlines the header row with ANSI codes
        if header is None:
            if line.startswith("GPU0"):
                header = re.split(r"\t+|\s{2,}|\s(?=GPU\d)", line)
                header = [h.strip() for h in header if h.strip()]
            continue
        m = _ROW.match(line)
        if not m:
            if line.startswith("Legend"):
                break
            continue
        i = int(m.group(1))
        cells = m.group(2).split()
        for col, cell in zip(header, cells):
            cm = re.fullmatch(r"GPU(\d+)", col)
            if cm:
                out[(i, int(cm.group(1)))] = cell
    return out


def gpu_links(snap: Any) -> dict[tuple[int, int], str]:
    """``nvidia-smi topo -m`` cells between GPUs (``NV12``, ``PIX``, ``SYS`` …), empty if unknown."""
    res = snap.cmd("nvsmi_topo")
    return _matrix(res.stdout) if res is not None and res.stdout else {}


def p2p_matrix(snap: Any) -> dict[tuple[int, int], str]:
    """``nvidia-smi topo -p2p r`` cells (``OK``, ``CNS``, ``GNS``, ``TNS``, ``NS``, ``DR``)."""
    res = snap.cmd("nvsmi_p2p")
    cells = _matrix(res.stdout) if res is not None and res.stdout else {}
    probe = snap.probe("nvml")
    if not cells and isinstance(probe, dict) and isinstance(probe.get("p2p"), dict):
        names = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "NS", 5: "DR", 6: "NS"}
        for k, v in probe["p2p"].items():
            if v is None:
                continue
            a, b = (int(x) for x in k.split(","))
            cells[(a, b)] = cells[(b, a)] = names.get(int(v), "U")
    return cells


def gpu_names(snap: Any) -> list[str]:
    """GPU product names, from the NVML probe, ``nvidia-smi --query-gpu`` CSV or ``-q``."""
    probe = snap.probe("nvml")
    if isinstance(probe, dict) and probe.get("gpus"):
        names = [g.get("name") for g in probe["gpus"] if g.get("name")]
        if names:
            return names
    res = snap.cmd("nvsmi_csv")
    if res is not None and res.stdout:
        lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
        if lines and lines[0].startswith(("name", "index")):
            col = [c.strip() for c in lines[0].split(",")].index("name") if "name" in lines[0] else 0
            return [ln.split(",")[col].strip() for ln in lines[1:]]
    res = snap.cmd("nvsmi_q")
    if res is not None and res.stdout:
        names = re.findall(r"^\s*Product Name\s*:\s*(.+?)\s*$", res.stdout, re.M)
        if names:
            return names
    res = snap.cmd("nvsmi")
    if res is not None and res.stdout:
        # the plain table: "|   0  NVIDIA GeForce RTX 5070        Off |" (long names end in "...")
        return re.findall(r"^\|\s+\d+\s+(\S.*?)\s{2,}(?:On|Off)\s+\|", res.stdout, re.M)
    return []


def compute_capabilities(snap: Any) -> list[str]:
    """CUDA compute capabilities (``"12.0"``), from the NVML probe or the torch probe."""
    probe = snap.probe("nvml")
    if isinstance(probe, dict) and probe.get("gpus"):
        caps = [g.get("cuda_capability") for g in probe["gpus"] if g.get("cuda_capability")]
        if caps:
            return caps
    res = snap.cmd("torch")
    if res is not None and res.stdout.strip().startswith("{"):
        try:
            d = json.loads(res.stdout.strip().splitlines()[0])
            return [f"{a}.{b}" for a, b in d.get("capability") or []]
        except (ValueError, TypeError, AttributeError, RecursionError):
            pass
    return []


def is_sm120(snap: Any) -> bool | None:
    """True when the GPUs are compute capability 12.x; None when unknown."""
    caps = compute_capabilities(snap)
    if caps:
        return any(c.startswith("12.") for c in caps)
    names = gpu_names(snap)
    if names:
        from infergap.gpudata import sm_of

        return any(sm_of(n) == 120 for n in names)
    return None


def nvlink_between_gpus(snap: Any) -> bool | None:
    """True if any GPU pair has an NVLink (``NV#`` cell), False if the matrix shows none, None if unknown."""
    links = gpu_links(snap)
    if not links:
        return None
    return any(c.startswith("NV") for (i, j), c in links.items() if i != j)


def has_rdma_nic(snap: Any) -> bool | None:
    """True when an RDMA device is visible (``/sys/class/infiniband`` or a Mellanox PCI function)."""
    ib = snap.listdir("/sys/class/infiniband")
    if ib:
        return True
    res = snap.cmd("lspci")
    if res is not None and res.ok and res.stdout:
        return "[15b3:" in res.stdout or "Mellanox" in res.stdout
    return None if ib is None else False
