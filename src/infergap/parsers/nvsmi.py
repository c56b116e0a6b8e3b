"""nvidia-smi outputs: ``-q -x`` XML, ``topo -m``, ``topo -p2p r`` and ``--query-gpu`` CSV.

The XML follows the DTD nvidia-smi ships (``nvsmi_device_v13.dtd`` for driver 580); element
names used here are taken from a real capture (tests/fixtures/hosts/h200-1gpu/cmds/nvsmi_qx.out).
``topo -m`` text is documented by its own legend (X, SYS, NODE, PHB, PXB, PIX, NV#).
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from infergap.guard import strip_ansi



class NvsmiParseError(ValueError):
    """nvidia-smi output that cannot be read at all (one-line message)."""


def _num(text: str | None) -> float | None:
    """First number in an nvidia-smi value (``"700.00 W"`` -> 700.0); None for N/A or absent."""
    if text is None:
        return None
    m = re.search(r"-?\d+(?:\.\d+)?", text)
    return float(m.group(0)) if m else None


def normalize_bdf(bus_id: str) -> str:
    """nvidia-smi's ``00000000:00:06.0`` -> Linux ``0000:00:06.0`` (lower case)."""
    bus_id = bus_id.strip().lower()
    m = re.match(r"^(?:([0-9a-f]+):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$", bus_id)
    if not m:
        return bus_id
    dom = int(m.group(1) or "0", 16)
    return f"{dom:04x}:{m.group(2)}:{m.group(3)}.{m.group(4)}"


@dataclass
class NvsmiGpu:
    """One GPU from ``nvidia-smi -q -x``. Units in names; None when N/A or absent."""

    bdf: str
    name: str | None = None
    architecture: str | None = None
    persistence_mode: bool | None = None
    mig_current: str | None = None
    compute_mode: str | None = None
    ecc_current: bool | None = None
    ecc_pending: bool | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    retired_pending: bool | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    memory_total_B: int | None = None
    bar1_total_B: int | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    sm_clock_MHz: float | None = None
    sm_clock_max_MHz: float | None = None
    power_W: float | None = None
    power_limit_W: float | None = None
    power_default_limit_W: float | None = None
    power_max_limit_W: float | None = None
    temperature_C: float | None = None
    temp_slowdown_C: float | None = None
    temp_shutdown_C: float | None = None
    throttle_active: list[str] = field(default_factory=list)
    throttle_captured: bool | None = None
    throttle_counters_us: dict[str, float] = field(default_factory=dict)
    pstate: str | None = None
    fabric_state: str | None = None
    #: ``GPU Virtualization Mode`` / ``Virtualization Mode`` (``None``, ``Pass-Through``, ``VGPU``,
    #: ``Host VGPU``); ``vGPU Software Licensed Product``'s product name and ``License Status``
    #: (``Licensed (Expiry: …)``, ``Unlicensed (Restricted)``; nvidia-smi(1), the vGPU licensing guide).
    virtualization_mode: str | None = None
    vgpu_product: str | None = None
    vgpu_license: str | None = None
    utilization_pct: float | None = None


@dataclass
class NvsmiLog:
    """Top of ``nvidia-smi -q -x``: driver, CUDA version and GPUs. ``truncated`` when the XML was
    incomplete and only whole ``<gpu>`` elements were recovered."""

    driver_version: str | None
    cuda_version: str | None
    gpus: list[NvsmiGpu]
    truncated: bool = False


def _t(el: ET.Element, path: str) -> str | None:
    x = el.find(path)
    if x is None or x.text is None:
        return None
    s = x.text.strip()
    return None if s in ("N/A", "", "Not Supported", "[N/A]") else s


def _yes(v: str | None, yes: tuple[str, ...] = ("Enabled", "Yes", "Active")) -> bool | None:
    if v is None:
        return None
    return v in yes


def _mib(v: str | None) -> int | None:
    n = _num(v)
    return int(n * 1024 * 1024) if n is not None else None


def _gpu(el: ET.Element) -> NvsmiGpu:
    g = NvsmiGpu(bdf=normalize_bdf(el.get("id", "") or (_t(el, "pci/pci_bus_id") or "")))
    g.name = _t(el, "product_name")
    g.architecture = _t(el, "product_architecture")
    g.persistence_mode = _yes(_t(el, "persistence_mode"))
    g.mig_current = _t(el, "mig_mode/current_mig")
    g.compute_mode = _t(el, "compute_mode")
    g.ecc_current = _yes(_t(el, "ecc_mode/current_ecc"))
    g.ecc_pending = _yes(_t(el, "ecc_mode/pending_ecc"))
    vol = [_num(_t(el, f"ecc_errors/volatile/{k}")) for k in ("dram_uncorrectable", "sram_uncorrectable_parity", "sram_uncorrectable_secded", "sram_uncorrectable", "double_bit/total")]
    agg = [_num(_t(el, f"ecc_errors/aggregate/{k}")) for k in ("dram_uncorrectable", "sram_uncorrectable_parity", "sram_uncorrectable_secded", "sram_uncorrectable", "double_bit/total")]
    g.ecc_volatile_uncorrected = int(sum(v for v in vol if v is not None)) if any(v is not None for v in vol) else None
    g.ecc_aggregate_uncorrected = int(sum(v for v in agg if v is not None)) if any(v is not None for v in agg) else None
    g.retired_pending = _yes(_t(el, "retired_pages/pending_retirement"))
    g.remap_pending = _yes(_t(el, "remapped_rows/remapped_row_pending"))
    g.remap_failure = _yes(_t(el, "remapped_rows/remapped_row_failure"))
    g.memory_total_B = _mib(_t(el, "fb_memory_usage/total"))
    g.bar1_total_B = _mib(_t(el, "bar1_memory_usage/total"))
    link = "pci/pci_gpu_link_info"
    g.pcie_gen = _int(_t(el, f"{link}/pcie_gen/current_link_gen"))
    g.pcie_gen_max = _int(_t(el, f"{link}/pcie_gen/max_link_gen"))
    g.pcie_width = _int(_t(el, f"{link}/link_widths/current_link_width"))
    g.pcie_width_max = _int(_t(el, f"{link}/link_widths/max_link_width"))
    g.sm_clock_MHz = _num(_t(el, "clocks/sm_clock"))
    g.sm_clock_max_MHz = _num(_t(el, "max_clocks/sm_clock"))
    pr = "gpu_power_readings" if el.find("gpu_power_readings") is not None else "power_readings"
    g.power_W = _num(_t(el, f"{pr}/instant_power_draw")) or _num(_t(el, f"{pr}/power_draw")) or _num(_t(el, f"{pr}/average_power_draw"))
    g.power_limit_W = _num(_t(el, f"{pr}/current_power_limit")) or _num(_t(el, f"{pr}/power_limit"))
    g.power_default_limit_W = _num(_t(el, f"{pr}/default_power_limit"))
    g.power_max_limit_W = _num(_t(el, f"{pr}/max_power_limit"))
    g.temperature_C = _num(_t(el, "temperature/gpu_temp"))
    # Absolute thresholds (older drivers); newer drivers give T.Limit-relative values instead.
    g.temp_slowdown_C = _num(_t(el, "temperature/gpu_temp_slow_threshold"))
    g.temp_shutdown_C = _num(_t(el, "temperature/gpu_temp_max_threshold"))
    if g.temp_slowdown_C is None and g.temperature_C is not None:
        tlimit = _num(_t(el, "temperature/gpu_temp_tlimit"))  # degrees of headroom to T.Limit
        slow = _num(_t(el, "temperature/gpu_temp_slow_tlimit_threshold"))
        if tlimit is not None and slow is not None:
            # headroom to slowdown = headroom to T.Limit - |slowdown offset below T.Limit|
            g.temp_slowdown_C = g.temperature_C + tlimit + slow
    reasons = el.find("clocks_event_reasons")
    if reasons is None:
        reasons = el.find("clocks_throttle_reasons")
    if reasons is not None and len(reasons):
        g.throttle_captured = True
        for child in reasons:
            if (child.text or "").strip() == "Active":
                g.throttle_active.append(re.sub(r"^clocks_(event|throttle)_reason_", "", child.tag))
    counters = el.find("clocks_event_reasons_counters")
    if counters is not None:
        for child in counters:
            n = _num(_t(counters, child.tag))
            name = COUNTER_NAMES.get(re.sub(r"^clocks_event_reasons_counters_", "", child.tag))
            if n is not None and name:
                g.throttle_counters_us[name] = n
    g.pstate = _t(el, "performance_state")
    g.fabric_state = _t(el, "fabric/state")
    g.virtualization_mode = _t(el, "gpu_virtualization_mode/virtualization_mode")
    g.vgpu_product = _t(el, "vgpu_software_licensed_product/licensed_product_name")
    g.vgpu_license = _t(el, "vgpu_software_licensed_product/license_status")
    g.utilization_pct = _num(_t(el, "utilization/gpu_util"))
    return g


#: Accumulated clocks-event counters (``nvidia-smi -q`` "Clocks Event Reasons Counters", XML
#: ``clocks_event_reasons_counters``; microseconds since the driver loaded) -> reason names.
COUNTER_NAMES = {"sw_power_cap": "sw_power_cap", "SW Power Capping": "sw_power_cap", "sync_boost": "sync_boost", "Sync Boost": "sync_boost",
                 "sw_therm_slowdown": "sw_thermal_slowdown", "SW Thermal Slowdown": "sw_thermal_slowdown",
                 "hw_therm_slowdown": "hw_thermal_slowdown", "HW Thermal Slowdown": "hw_thermal_slowdown",
                 "hw_power_brake": "hw_power_brake_slowdown", "HW Power Braking": "hw_power_brake_slowdown"}


def _int(v: str | None) -> int | None:
    n = _num(v)
    return int(n) if n is not None else None


def parse_nvsmi_xml(text: str) -> NvsmiLog:
    """Parse ``nvidia-smi -q -x``. A truncated document yields the complete ``<gpu>`` elements it
    holds (``truncated=True``). Raises NvsmiParseError when no GPU element can be recovered."""
    text = text.strip()
    if "<nvidia_smi_log" not in text and '<gpu id="' not in text:
        return NvsmiLog(None, None, parse_nvsmi_xml_fragment(text), truncated=True)
    try:
        root = ET.fromstring(re.sub(r"<!DOCTYPE[^>]*>", "", text))
        return NvsmiLog(
            driver_version=_t(root, "driver_version"),
            cuda_version=_t(root, "cuda_version"),
            gpus=[_gpu(g) for g in root.findall("gpu")],
        )
    except ET.ParseError as e:
        # Whole <gpu> elements, found by splitting at each opening tag (linear: a lazy ".*?</gpu>"
        # search from every opening tag is quadratic on a cut file with many of them).
        blocks = []
        for piece in text.split('<gpu id="')[1:]:
            end = piece.find("</gpu>")
            if end >= 0:
                blocks.append('<gpu id="' + piece[: end + len("</gpu>")])
        gpus = []
        for b in blocks:
            try:
                gpus.append(_gpu(ET.fromstring(b)))
            except ET.ParseError:
                continue
        if not gpus:
            raise NvsmiParseError(f"nvidia-smi XML is not well-formed ({e}) and holds no complete <gpu> element") from None
        drv = re.search(r"<driver_version>([^<]*)</driver_version>", text)
        cuda = re.search(r"<cuda_version>([^<]*)</cuda_version>", text)
        return NvsmiLog(drv.group(1) if drv else None, cuda.group(1) if cuda else None, gpus, truncated=True)


_XML_OPEN = re.compile(r"^<([a-z][a-z0-9_]{0,80})>$")
_XML_LEAF = re.compile(r"^<([a-z][a-z0-9_]{0,80})>[^<]{0,400}</\1>$")


def _xml_elements(text: str) -> list[tuple[str, str]]:
    """(tag, text) of each complete top-level element of a piece of XML; an element the paste
    cut before its closing tag is left out."""
    out: list[tuple[str, str]] = []
    tag, depth, buf = None, 0, []
    for raw in text.splitlines():
        s = raw.strip()
        if tag is None:
            if (m := _XML_LEAF.match(s)) is not None:
                out.append((m.group(1), s))
            elif (m := _XML_OPEN.match(s)) is not None:
                tag, depth, buf = m.group(1), 1, [s]
            continue
        buf.append(s)
        if _XML_OPEN.match(s):
            depth += 1
        elif s.startswith("</") and not _XML_LEAF.match(s):
            depth -= 1
            if depth == 0:
                out.append((tag, "\n".join(buf)))
                tag = None
    return out


def parse_nvsmi_xml_fragment(text: str) -> list[NvsmiGpu]:
    """GPUs from sections of ``nvidia-smi -q -x`` pasted without ``<nvidia_smi_log>`` and
    ``<gpu id=…>`` around them (``<clocks_event_reasons>`` … copied alone). Each complete
    top-level element is read as a child of one ``<gpu>``; a section that comes back starts the
    next GPU, named ``GPU0``, ``GPU1`` … in order (as :func:`parse_nvsmi_q_fragment` names them).

    >>> g = parse_nvsmi_xml_fragment("<clocks_event_reasons>\\n<clocks_event_reason_gpu_idle>Active</clocks_event_reason_gpu_idle>\\n"
    ...     "<clocks_event_reason_hw_slowdown>Not Active</clocks_event_reason_hw_slowdown>\\n</clocks_event_reasons>\\n<clocks_event_reasons_counters>")
    >>> [(x.bdf, x.throttle_active, x.throttle_captured) for x in g]
    [('GPU0', ['gpu_idle'], True)]
    """
    groups: list[list[str]] = [[]]
    seen: set[str] = set()
    for tag, body in _xml_elements(strip_ansi(text)):
        if tag in seen:
            groups.append([])
            seen = set()
        seen.add(tag)
        groups[-1].append(body)
    out = []
    for i, parts in enumerate(p for p in groups if p):
        try:
            el = ET.fromstring('<gpu id="">' + "\n".join(parts) + "</gpu>")
        except ET.ParseError:
            continue
        g = _gpu(el)
        g.bdf = f"GPU{i}"
        out.append(g)
    return out


@dataclass
class Topology:
    """``nvidia-smi topo -m``: the device names (GPU0…, NIC0…), the link matrix, CPU/NUMA affinity
    per GPU, and the NIC legend (NIC0 -> mlx5_0)."""

    devices: list[str]
    matrix: dict[tuple[str, str], str]
    cpu_affinity: dict[str, str]
    numa_affinity: dict[str, str]
    nic_names: dict[str, str]

    @property
    def gpus(self) -> list[str]:
        """GPU device names in order (``GPU0``…)."""
        return [d for d in self.devices if d.startswith("GPU")]

    def link(self, a: str, b: str) -> str | None:
        """The connection type between two devices (``NV18``, ``SYS``…), None if unknown."""
        return self.matrix.get((a, b))

    def nvlink_count(self, a: str, b: str) -> int:
        """Number of bonded NVLinks between a and b (0 when the cell is not ``NV#``)."""
        m = re.fullmatch(r"NV(\d+)", self.link(a, b) or "")
        return int(m.group(1)) if m else 0


#: The named columns after the device columns of ``nvidia-smi topo -m`` (each name holds spaces).
TOPO_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


def _topo_header(line: str) -> tuple[list[str], list[str]]:
    """(device columns, named columns) of a ``topo -m`` header, whatever whitespace separates them:
    tabs as printed, runs of spaces, or the single spaces a web form leaves of a tab.

    >>> _topo_header("          GPU0 GPU1    CPU Affinity    NUMA Affinity   GPU NUMA ID")  # club-3090#1125
    (['GPU0', 'GPU1'], ['CPU Affinity', 'NUMA Affinity', 'GPU NUMA ID'])
    >>> _topo_header("\tGPU0\tNIC7\tNIC8NIC9\tNIC10\tCPU Affinity")[0]  # vllm#13855: two names without the tab between
    ['GPU0', 'NIC7', 'NIC8', 'NIC9', 'NIC10']
    """
    toks = line.split()
    devs: list[str] = []
    used = 0
    for t in toks:
        if re.fullmatch(r"(?:(?:GPU|NIC)\d+)+", t):  # "NIC8NIC9": nvidia-smi left out the tab (vllm#13855)
            devs += re.findall(r"(?:GPU|NIC)\d+", t)
        elif re.fullmatch(r"mlx\w+", t):
            devs.append(t)
        else:
            break
        used += 1
    rest = " ".join(toks[used:])
    return devs, sorted((c for c in TOPO_COLUMNS if c in rest), key=rest.index)


#: One cell of the ``topo -m`` matrix (its legend: X, SYS, NODE, PHB, PXB, PIX, NV#).
_TOPO_CELL = r"X|SYS|NODE|PHB|PXB|PIX|NV\d+"


def _unglue_cells(vals: list[str], n_devs: int) -> list[str]:
    """The row's cells with two matrix cells printed without the tab between them split again
    (``NODENODE``, ``NODEPXB``: nvidia-smi drops a tab in wide matrices, vllm#13855); only the first
    ``n_devs`` cells are matrix cells, the affinity columns after them are kept as they are.

    >>> _unglue_cells(["PXB", "NODENODE", "NODE", "56-111,168-223", "1"], 4)
    ['PXB', 'NODE', 'NODE', 'NODE', '56-111,168-223', '1']
    """
    out: list[str] = []
    for i, v in enumerate(vals):
        if len(out) < n_devs and len(v) > 3 and re.fullmatch(f"(?:{_TOPO_CELL})+", v) and not re.fullmatch(_TOPO_CELL, v):
            out += re.findall(_TOPO_CELL, v)
        else:
            out.append(v)
        if len(out) >= n_devs:
            return out + vals[i + 1:]
    return out


def parse_topo(text: str) -> Topology:
    """Parse ``nvidia-smi topo -m``. Raises NvsmiParseError when no GPU header line is found.

    Two H200 joined by 18 NVLinks (the ``h200-2gpu`` capture in ``tests/fixtures/hosts``):

    >>> topo = parse_topo("\\tGPU0\\tGPU1\\tCPU Affinity\\tNUMA Affinity\\tGPU NUMA ID\\n"
    ...                   "GPU0\\t X \\tNV18\\t0-31\\t0\\t\\tN/A\\n"
    ...                   "GPU1\\tNV18\\t X \\t0-31\\t0\\t\\tN/A\\n")
    >>> topo.gpus, topo.link("GPU0", "GPU1"), topo.nvlink_count("GPU0", "GPU1"), topo.cpu_affinity["GPU1"]
    (['GPU0', 'GPU1'], 'NV18', 18, '0-31')
    """
    lines = [strip_ansi(l).rstrip("\r") for l in text.splitlines()]
    header_idx = None
    for i, l in enumerate(lines):
        if re.match(r"^\s*GPU0\b", l.strip()) and not re.match(r"^\s*GPU0\s+X\b", l.strip()):
            header_idx = i
            break
    if header_idx is None:
        raise NvsmiParseError("no 'GPU0 …' header line in nvidia-smi topo -m output")
    devs, extra = _topo_header(lines[header_idx])
    topo = Topology(devices=devs, matrix={}, cpu_affinity={}, numa_affinity={}, nic_names={})
    for l in lines[header_idx + 1 :]:
        s = l.strip()
        if not s:
            continue
        if s.startswith("Legend"):
            break
        cells = re.split(r"\t", l.strip()) if "\t" in l else s.split()
        cells = [c.strip() for c in cells]
        row = cells[0]
        if row not in devs:
            continue
        vals = _unglue_cells(cells[1:], len(devs))
        for d, v in zip(devs, vals):
            topo.matrix[(row, d)] = v
        rest = vals[len(devs) :]
        if "CPU Affinity" in extra and rest:
            topo.cpu_affinity[row] = rest[0]
        if "NUMA Affinity" in extra and len(rest) > 1:
            topo.numa_affinity[row] = rest[1]
    for m in re.finditer(r"^\s*(NIC\d+):\s*(\S+)", "\n".join(lines), flags=re.M):
        topo.nic_names[m.group(1)] = m.group(2)
    return topo


#: ``nvidia-smi topo -p2p`` legend.
P2P_LEGEND = {
    "OK": "supported",
    "CNS": "chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "topology not supported",
    "NS": "not supported",
    "DR": "disabled by regkey",
    "U": "unknown",
}


def parse_p2p(text: str) -> dict[tuple[str, str], str]:
    """Parse ``nvidia-smi topo -p2p r`` into {(GPUi, GPUj): status} for i != j."""
    lines = [strip_ansi(l) for l in text.splitlines()]
    out: dict[tuple[str, str], str] = {}
    hdr: list[str] = []
    for l in lines:
        toks = l.split()
        if toks and toks[0] == "GPU0" and all(t.startswith("GPU") for t in toks):
            hdr = toks
            continue
        if hdr and toks and toks[0].startswith("GPU") and len(toks) >= len(hdr) + 1:
            for d, v in zip(hdr, toks[1:]):
                if d != toks[0]:
                    out[(toks[0], d)] = v
        if l.strip().startswith("Legend"):
            break
    return out


def parse_query_csv(text: str) -> list[dict[str, str]]:
    """Parse ``nvidia-smi --query-gpu=… --format=csv`` into rows keyed by the header's field names
    (units in brackets dropped: ``clocks.current.sm [MHz]`` -> ``clocks.current.sm``)."""
    text = strip_ansi(text).strip()
    if not text:
        return []
    try:
        rows = list(csv.reader(io.StringIO(text), skipinitialspace=True))
    except csv.Error:  # NUL bytes or similar: not a CSV nvidia-smi wrote
        return []
    if not rows:
        return []
    keys = [re.sub(r"\[[^\[\]]{0,64}\]$", "", k.strip()).rstrip() for k in rows[0]]
    return [dict(zip(keys, (v.strip() for v in r))) for r in rows[1:] if len(r) == len(keys)]


def csv_to_gpus(rows: list[dict[str, str]]) -> list[NvsmiGpu]:
    """GPUs from ``--query-gpu`` CSV rows (the columns of :data:`NVSMI_CSV_FIELDS`)."""
    out = []
    for r in rows:
        if "pci.bus_id" not in r:
            continue
        g = NvsmiGpu(bdf=normalize_bdf(r["pci.bus_id"]))
        g.name = r.get("name")
        g.pstate = r.get("pstate")
        g.pcie_gen, g.pcie_gen_max = _int(r.get("pcie.link.gen.current")), _int(r.get("pcie.link.gen.max"))
        g.pcie_width, g.pcie_width_max = _int(r.get("pcie.link.width.current")), _int(r.get("pcie.link.width.max"))
        g.sm_clock_MHz, g.sm_clock_max_MHz = _num(r.get("clocks.current.sm")), _num(r.get("clocks.max.sm"))
        g.power_W = _num(r.get("power.draw"))
        g.power_limit_W = _num(r.get("enforced.power.limit")) or _num(r.get("power.limit"))
        g.power_max_limit_W = _num(r.get("power.max_limit"))
        g.temperature_C = _num(r.get("temperature.gpu"))
        g.ecc_current = _yes(r.get("ecc.mode.current"))
        g.persistence_mode = _yes(r.get("persistence_mode"))
        g.compute_mode = r.get("compute_mode")
        g.mig_current = r.get("mig.mode.current")
        mask = r.get("clocks_event_reasons.active") or r.get("clocks_throttle_reasons.active")
        if mask and re.fullmatch(r"0x[0-9a-fA-F]+", mask.strip()):
            g.throttle_active = throttle_names(int(mask, 16))
            g.throttle_captured = True
        out.append(g)
    return out


def throttle_names(mask: int) -> list[str]:
    """Names of NVML clocks-event reason bits (nvml.h ``nvmlClocksEventReason*``)."""
    names = {
        0x1: "gpu_idle",
        0x2: "applications_clocks_setting",
        0x4: "sw_power_cap",
        0x8: "hw_slowdown",
        0x10: "sync_boost",
        0x20: "sw_thermal_slowdown",
        0x40: "hw_thermal_slowdown",
        0x80: "hw_power_brake_slowdown",
        0x100: "display_clocks_setting",
    }
    return [n for bit, n in names.items() if mask & bit]


def nvml_to_gpus(probe: dict[str, Any]) -> list[NvsmiGpu]:
    """GPUs from the NVML probe JSON (``probes/nvml.json``)."""
    out = []
    for d in probe.get("gpus", []) or []:
        g = NvsmiGpu(bdf=normalize_bdf(d.get("pci_bus_id") or ""))
        g.name = d.get("name")
        g.persistence_mode = None if d.get("persistence_mode") is None else bool(d["persistence_mode"])
        g.compute_mode = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}.get(d.get("compute_mode"))
        g.mig_current = None if d.get("mig_current") is None else ("Enabled" if d["mig_current"] else "Disabled")
        g.ecc_current = None if d.get("ecc_current") is None else bool(d["ecc_current"])
        g.ecc_pending = None if d.get("ecc_pending") is None else bool(d["ecc_pending"])
        g.ecc_volatile_uncorrected = d.get("ecc_volatile_uncorrected")
        g.retired_pending = None if d.get("retired_pages_pending") is None else bool(d["retired_pages_pending"])
        g.remap_pending = d.get("remap_pending")
        g.remap_failure = d.get("remap_failed")
        g.memory_total_B = d.get("memory_total_B")
        g.bar1_total_B = d.get("bar1_total_B")
        g.pcie_gen, g.pcie_gen_max = d.get("pcie_gen"), d.get("pcie_gen_max")
        g.pcie_width, g.pcie_width_max = d.get("pcie_width"), d.get("pcie_width_max")
        g.sm_clock_MHz, g.sm_clock_max_MHz = d.get("sm_clock_MHz"), d.get("sm_clock_max_MHz")
        g.power_W, g.power_limit_W = d.get("power_W"), d.get("power_limit_W")
        g.power_default_limit_W, g.power_max_limit_W = d.get("power_default_limit_W"), d.get("power_max_limit_W")
        g.temperature_C = d.get("temperature_C")
        g.temp_slowdown_C, g.temp_shutdown_C = d.get("temp_slowdown_C"), d.get("temp_shutdown_C")
        if d.get("throttle_reasons") is not None:
            g.throttle_active = throttle_names(int(d["throttle_reasons"]))
            g.throttle_captured = True
        out.append(g)
    return out


def parse_nvlink_status(text: str) -> dict[int, dict[int, float | None]]:
    """``nvidia-smi nvlink -s`` -> {GPU index: {link: GB/s, or None when the link is inactive}}.

    Lines look like ``GPU 0: NVIDIA H200 (UUID: …)`` then ``\t Link 0: 26.562 GB/s`` (or
    ``Link 3: <inactive>``). A GPU without NVLink prints nothing.
    """
    out: dict[int, dict[int, float | None]] = {}
    cur: int | None = None
    for line in strip_ansi(text).splitlines():
        m = re.match(r"^GPU (\d+):", line.strip())
        if m:
            cur = int(m.group(1))
            out.setdefault(cur, {})
            continue
        m = re.match(r"^Link (\d+):\s*(.*)$", line.strip())
        if m and cur is not None:
            v = re.match(r"([\d.]+)\s*GB/s", m.group(2))
            out[cur][int(m.group(1))] = float(v.group(1)) if v else None
    return out


_TABLE_HEADER = re.compile(r"NVIDIA-SMI\s+\S+\s+Driver Version:\s*(\d+\.\d+(?:\.\d+)*)(?:\s+CUDA Version:\s*(\d+\.\d+))?")


def parse_nvsmi_q_versions(text: str) -> tuple[str | None, str | None]:
    """(driver version, CUDA version) from the header of ``nvidia-smi -q`` text, the unindented
    ``Driver Version : 535.104.05`` and ``CUDA Version : 12.2`` lines above the first GPU, or from
    the header row of the plain ``nvidia-smi`` table (``| NVIDIA-SMI 550.54.15  Driver Version:
    550.54.15  CUDA Version: 12.4 |``); None for a version that is absent or ``N/A``.

    >>> parse_nvsmi_q_versions("==============NVSMI LOG==============\\nDriver Version    : 580.159.04\\nCUDA Version      : 13.0\\n")
    ('580.159.04', '13.0')
    >>> parse_nvsmi_q_versions("| NVIDIA-SMI 575.64.03     Driver Version: 575.64.03      CUDA Version: N/A      |")
    ('575.64.03', None)
    """
    found: dict[str, str] = {}
    for line in strip_ansi(text).splitlines():
        if re.match(r"^\s*GPU [0-9A-Fa-f]{4,8}:", line) or re.match(r"^\|\s+\d+\s+\S", line):
            break
        t = _TABLE_HEADER.search(line)
        if t:
            found.setdefault("Driver", t.group(1))
            if t.group(2):
                found.setdefault("CUDA", t.group(2))
            continue
        m = re.match(r"^\s*(Driver|CUDA) Version\s*:\s*(\d+\.\d+(?:\.\d+)*)\s*$", line)
        if m:
            found.setdefault(m.group(1), m.group(2))
    return found.get("Driver"), found.get("CUDA")


def csv_driver_version(rows: list[dict[str, str]]) -> str | None:
    """The ``driver_version`` column of ``--query-gpu`` CSV rows (the same on every GPU of a host),
    None without that column or with ``[N/A]``."""
    for r in rows:
        v = (r.get("driver_version") or "").strip()
        if re.fullmatch(r"\d+\.\d+(?:\.\d+)*", v):
            return v
    return None


def parse_nvsmi_q_text(text: str) -> list[NvsmiGpu]:
    """GPUs from ``nvidia-smi -q`` text: a ``GPU 00000000:00:06.0`` header per GPU, then indented
    ``Key : Value`` lines in nested sections (``MIG Mode`` / ``Current``, ``Clocks`` / ``SM`` …).
    Section paths are joined with ``/`` and read like the XML (same units and N/A handling).
    Text without any GPU header is a fragment (:func:`parse_nvsmi_q_fragment`)."""
    if not _GPU_HEADER.search(text):
        return parse_nvsmi_q_fragment(text)
    gpus: list[NvsmiGpu] = []
    fields: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    bdf = None

    def flush() -> None:
        if bdf is not None:
            gpus.append(_gpu_from_q(bdf, fields))

    for raw in strip_ansi(text).splitlines():
        line = raw.rstrip()
        m = _GPU_LINE.match(line) if line.startswith("GPU ") else None  # a header is unindented
        if m:
            flush()
            bdf, fields, stack = normalize_bdf(m.group(1)), {}, []
            continue
        if bdf is None or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        key, sep, val = line.strip().partition(":")
        key = key.strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join([k for _, k in stack] + [key])
        if sep and val.strip():
            fields[path] = val.strip()
        else:
            stack.append((indent, key))
    flush()
    return gpus


_GPU_HEADER = re.compile(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\s*$", re.M)
_GPU_LINE = re.compile(r"GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$")


def _fragment_fields(lines: list[str]) -> list[dict[str, str]]:
    """The ``Key : Value`` fields of each GPU of a headerless block, by section path. A heading
    at the block's own indentation that the current GPU already has (``nvidia-smi -q | grep -A8
    'Clocks Throttle'`` prints one block per GPU), or grep's ``--`` separator, starts the next GPU."""
    body = [ln.rstrip() for ln in lines if ln.strip()]
    base = min((len(ln) - len(ln.lstrip()) for ln in body), default=0)
    gpus: list[dict[str, str]] = [{}]
    heads: set[str] = set()
    stack: list[tuple[int, str]] = []
    for line in body:
        if line.strip() == "--":
            gpus, heads, stack = gpus + [{}], set(), []
            continue
        indent = len(line) - len(line.lstrip()) - base
        key, sep, val = line.strip().partition(":")
        key = key.strip()
        if indent == 0 and key in heads and gpus[-1]:
            gpus, heads, stack = gpus + [{}], set(), []
        if indent == 0:
            heads.add(key)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join([k for _, k in stack] + [key])
        if sep and val.strip():
            gpus[-1][path] = val.strip()
        else:
            stack.append((indent, key))
    return [f for f in gpus if f]


def parse_nvsmi_q_fragment(text: str) -> list[NvsmiGpu]:
    """GPUs from sections of ``nvidia-smi -q`` pasted without the ``GPU <address>`` header
    (``nvidia-smi -q -d PERFORMANCE | grep -A9 'Clocks Event Reasons'``, a ``GPU Link Info`` or
    ``Max Customer Boost Clocks`` block copied alone). The paths are those of the whole output:
    a block whose first heading is one of :data:`NESTED_SECTIONS` (printed under ``PCI``) gets
    that parent back. nvidia-smi prints GPUs in index order, so the n-th block is ``GPUn``
    (``bdf`` is that device name, as for a GPU known only from ``topo -m``).

    kubeflow/kubeflow#68 (``tests/fixtures/evidence/nvsmiq-kubeflow68-throttle-idle.txt``):

    >>> g = parse_nvsmi_q_fragment("    Clocks Throttle Reasons\\n        Idle                        : Active\\n"
    ...                            "        HW Slowdown                 : Not Active\\n")
    >>> [(x.bdf, x.throttle_active, x.throttle_captured) for x in g]
    [('GPU0', ['gpu_idle'], True)]

    NVIDIA/gpu-operator#220 (``nvsmiq-gpuoperator220-vgpu-unlicensed.txt``), a vGPU's licence:

    >>> g = parse_nvsmi_q_fragment("    vGPU Software Licensed Product\\n        Product Name : NVIDIA Virtual Compute Server\\n"
    ...                            "        License Status : Unlicensed\\n")[0]
    >>> (g.vgpu_product, g.vgpu_license)
    ('NVIDIA Virtual Compute Server', 'Unlicensed')
    """
    out = []
    for i, f in enumerate(_fragment_fields(strip_ansi(text).splitlines())):
        top = next(iter(f)).split("/")[0]
        if top in NESTED_SECTIONS:
            f = {f"{NESTED_SECTIONS[top]}/{k}": v for k, v in f.items()}
        out.append(_gpu_from_q(f"GPU{i}", f))
    return out


#: Sections of ``nvidia-smi -q`` that sit inside another one: pasted alone, they get it back.
NESTED_SECTIONS = {"GPU Link Info": "PCI", "PCIe Generation": "PCI/GPU Link Info", "Link Width": "PCI/GPU Link Info"}


def _gpu_from_q(bdf: str, f: dict[str, str]) -> NvsmiGpu:
    def v(*keys: str) -> str | None:
        for k in keys:
            x = f.get(k)
            if x is not None and x not in ("N/A", "[N/A]", "Not Supported"):
                return x
        return None

    g = NvsmiGpu(bdf=bdf)
    g.name = v("Product Name")
    g.architecture = v("Product Architecture")
    g.persistence_mode = _yes(v("Persistence Mode"))
    g.mig_current = v("MIG Mode/Current")
    g.compute_mode = v("Compute Mode")
    g.ecc_current = _yes(v("ECC Mode/Current"))
    g.ecc_pending = _yes(v("ECC Mode/Pending"))
    vol = [_num(v(f"ECC Errors/Volatile/{k}")) for k in ("DRAM Uncorrectable", "SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED", "SRAM Uncorrectable")]
    g.ecc_volatile_uncorrected = int(sum(x for x in vol if x is not None)) if any(x is not None for x in vol) else None
    g.remap_pending = _yes(v("Remapped Rows/Pending"))
    g.remap_failure = _yes(v("Remapped Rows/Remapping Failure Occurred"))
    g.memory_total_B = _mib(v("FB Memory Usage/Total"))
    g.bar1_total_B = _mib(v("BAR1 Memory Usage/Total"))
    link = "PCI/GPU Link Info"
    g.pcie_gen, g.pcie_gen_max = _int(v(f"{link}/PCIe Generation/Current")), _int(v(f"{link}/PCIe Generation/Max"))
    g.pcie_width, g.pcie_width_max = _int(v(f"{link}/Link Width/Current")), _int(v(f"{link}/Link Width/Max"))
    g.sm_clock_MHz, g.sm_clock_max_MHz = _num(v("Clocks/SM")), _num(v("Max Clocks/SM"))
    g.power_W = _num(v("GPU Power Readings/Instant Power Draw", "GPU Power Readings/Power Draw", "Power Readings/Power Draw"))
    g.power_limit_W = _num(v("GPU Power Readings/Current Power Limit", "Power Readings/Power Limit"))
    g.power_default_limit_W = _num(v("GPU Power Readings/Default Power Limit", "Power Readings/Default Power Limit"))
    g.power_max_limit_W = _num(v("GPU Power Readings/Max Power Limit", "Power Readings/Max Power Limit"))
    g.temperature_C = _num(v("Temperature/GPU Current Temp"))
    g.temp_slowdown_C = _num(v("Temperature/GPU Slowdown Temp"))
    g.temp_shutdown_C = _num(v("Temperature/GPU Shutdown Temp"))
    if g.temp_slowdown_C is None and g.temperature_C is not None:
        tl, slow = _num(v("Temperature/GPU T.Limit Temp")), _num(v("Temperature/GPU Slowdown T.Limit Temp"))
        if tl is not None and slow is not None:
            g.temp_slowdown_C = g.temperature_C + tl + slow
    sect = "Clocks Event Reasons" if any(k.startswith("Clocks Event Reasons/") for k in f) else "Clocks Throttle Reasons"
    names = {"Idle": "gpu_idle", "Applications Clocks Setting": "applications_clocks_setting", "SW Power Cap": "sw_power_cap",
             "HW Slowdown": "hw_slowdown", "HW Thermal Slowdown": "hw_thermal_slowdown", "HW Power Brake Slowdown": "hw_power_brake_slowdown",
             "Sync Boost": "sync_boost", "SW Thermal Slowdown": "sw_thermal_slowdown", "Display Clock Setting": "display_clocks_setting"}
    g.throttle_active = [n for k, n in names.items() if f.get(f"{sect}/{k}") == "Active"]
    if any(f.get(f"{sect}/{k}") in ("Active", "Not Active") for k in names):
        g.throttle_captured = True
    for k, name in COUNTER_NAMES.items():
        n = _num(v(f"Clocks Event Reasons Counters/{k}"))
        if n is not None:
            g.throttle_counters_us[name] = n
    g.pstate = v("Performance State")
    g.virtualization_mode = v("GPU Virtualization Mode/Virtualization Mode")
    g.vgpu_product = v("vGPU Software Licensed Product/Product Name")
    g.vgpu_license = v("vGPU Software Licensed Product/License Status")
    g.utilization_pct = _num(v("Utilization/GPU"))
    return g


def parse_nvsmi_table(text: str) -> list[NvsmiGpu]:
    """GPU index, name, persistence, bus id, temperature, power and memory from the plain
    ``nvidia-smi`` table (rows ``|   0  NVIDIA H200   On  |   00000000:00:06.0 Off |    0 |``), and
    ECC on with its volatile uncorrectable count when the last column holds a number.

    >>> g = parse_nvsmi_table("|   0  NVIDIA H200                    On  |   00000000:00:06.0 Off |                    0 |")[0]
    >>> (g.ecc_current, g.ecc_volatile_uncorrected)
    (True, 0)
    >>> parse_nvsmi_table("|   0  NVIDIA GeForce RTX 5070      Off |   00000000:01:00.0  On |                  N/A |")[0].ecc_current

    The third line's last cell is the MIG mode (ollama/ollama#4814: two A100s in MIG mode):

    >>> parse_nvsmi_table("|   0  NVIDIA A100 80G...  Off  | 00000000:05:00.0 Off |                   On |\\n"
    ...                   "| N/A   44C    P0    66W / 300W |     48MiB / 81920MiB |     N/A      Default |\\n"
    ...                   "|                               |                      |              Enabled |")[0].mig_current
    'Enabled'
    """
    out: list[NvsmiGpu] = []
    lines = strip_ansi(text).splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^\|\s+(\d+)\s+(.+?)\s+(On|Off)\s+\|\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s", line)
        if not m:
            continue
        g = NvsmiGpu(bdf=normalize_bdf(m.group(4)), name=m.group(2).strip(), persistence_mode=m.group(3) == "On")
        ecc = re.match(r"\s{0,16}\S{1,8}\s{0,16}\|\s{0,32}(\d{1,9})\s{0,16}\|", line[m.end():])
        if ecc:  # "Volatile Uncorr. ECC" is a count only with ECC on ("N/A": off or not supported, not told apart)
            g.ecc_current, g.ecc_volatile_uncorrected = True, int(ecc.group(1))
        if i + 1 < len(lines):
            n = re.search(r"(\d{1,4})C\s{1,16}(P\d{1,2})\s{1,16}(\d{1,6})W\s{0,16}/\s{0,16}(\d{1,6})W\s{0,16}\|\s{0,16}(\d{1,9})MiB\s{0,16}/\s{0,16}(\d{1,9})MiB\s{0,16}\|\s{0,16}(\d{1,3})%\s{1,16}(\S+)", lines[i + 1])
            if n:
                g.temperature_C, g.pstate = float(n.group(1)), n.group(2)
                g.power_W, g.power_limit_W = float(n.group(3)), float(n.group(4))
                g.memory_total_B = int(n.group(6)) * 2**20
                g.utilization_pct, g.compute_mode = float(n.group(7)), n.group(8)
        if i + 2 < len(lines):  # the third line's last cell is "MIG M." (nvidia-smi since R450): Enabled, Disabled or N/A
            mig = re.search(r"\|\s{0,48}(Enabled|Disabled)\s{0,8}\|\s{0,4}$", lines[i + 2])
            if mig:
                g.mig_current = mig.group(1)
        out.append(g)
    return out


#: A row of ``nvidia-smi mig -lgi`` (GPU, profile name, profile id, instance id, placement) and
#: of ``nvidia-smi mig -lci`` (GPU, GPU instance, name, profile id, instance id, placement), as
#: printed by nvidia-smi of R450 and later (``|   3  MIG 1g.10gb   19   7   0:1   |``).
_MIG_GI = re.compile(r"^\|\s{1,8}(\d{1,3})\s{1,8}MIG (\d{1,2}g\.\d{1,4}gb(?:\+\w{1,8})?)\s{1,30}(\d{1,4})\s{1,30}(\d{1,4})\s{1,30}(\d{1,2}):(\d{1,2})\s{0,30}\|$")
_MIG_CI = re.compile(r"^\|\s{1,8}(\d{1,3})\s{1,8}(\d{1,4})\s{1,10}MIG (\d{1,2}(?:c\.\d{1,2})?g\.\d{1,4}gb(?:\+\w{1,8})?)\s{1,30}(\d{1,4})\s{1,30}(\d{1,4})\s{1,30}(\d{1,2}):(\d{1,2})\s{0,30}\|$")


def parse_mig_instances(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The MIG instances ``nvidia-smi mig -lgi`` (GPU instances) or ``-lci`` (compute instances)
    lists: one dict per instance, ``kind`` ``gpu_instance`` or ``compute_instance``, ``gpu``
    (the nvidia-smi index), ``gi`` (the GPU instance of a compute instance), ``profile`` (its
    name, ``1g.10gb``: compute slices and memory), ``profile_id``, ``id``, ``placement``
    (``start:size`` in memory slices). Rows outside those tables are ignored.

    >>> parse_mig_instances(["| GPU instances:                                          |",
    ...                      "|   3  MIG 1g.10gb           19        7          0:1     |"])
    [{'kind': 'gpu_instance', 'gpu': 3, 'gi': None, 'profile': '1g.10gb', 'profile_id': 19, 'id': 7, 'placement': '0:1'}]
    """
    out: list[dict[str, Any]] = []
    for line in lines:
        s = line.strip()
        if not s.startswith("|") or "MIG" not in s:
            continue
        m = _MIG_GI.match(s)
        if m:
            out.append({"kind": "gpu_instance", "gpu": int(m.group(1)), "gi": None, "profile": m.group(2), "profile_id": int(m.group(3)),
                        "id": int(m.group(4)), "placement": f"{m.group(5)}:{m.group(6)}"})
            continue
        m = _MIG_CI.match(s)
        if m:
            out.append({"kind": "compute_instance", "gpu": int(m.group(1)), "gi": int(m.group(2)), "profile": m.group(3),
                        "profile_id": int(m.group(4)), "id": int(m.group(5)), "placement": f"{m.group(6)}:{m.group(7)}"})
    return out


_NVC_FIELD = re.compile(r"^(NVRM version|CUDA version|Device Index|Model|Brand|Bus Location|Architecture):\s{1,40}(.{1,120}?)\s*$")
_NVC_LIB = re.compile(r"\] selecting \S{1,200}/libnvidia-ml\.so\.(\d{2,4}\.\d{1,4}(?:\.\d{1,4})?)$")


def parse_container_cli_info(text: str) -> tuple[str | None, str | None, list[NvsmiGpu]]:
    """(driver version, CUDA version the driver supports, GPUs) of ``nvidia-container-cli info``
    (libnvidia-container's ``src/cli/info.c``: ``NVRM version:``, ``CUDA version:``, then per GPU
    ``Device Index``, ``Model``, ``Bus Location``, ``Architecture``), with or without the debug
    log of ``-k -d /dev/tty`` around it. ``(null)`` values (a Jetson) are left out; without the
    ``NVRM version`` line the version of the ``libnvidia-ml.so`` it selected stands in.

    NVIDIA/nvidia-docker#904 (``tests/fixtures/evidence/nvdocker-904-container-cli-info.txt``):

    >>> d, c, g = parse_container_cli_info("NVRM version:   390.87\\nCUDA version:   9.1\\n\\nDevice Index:   0\\n"
    ...     "Model:          GeForce GTX 1080 with Max-Q Design\\nBus Location:   00000000:01:00.0\\nArchitecture:   6.1\\n")
    >>> d, c, [(x.bdf, x.name) for x in g]
    ('390.87', '9.1', [('0000:01:00.0', 'GeForce GTX 1080 with Max-Q Design')])
    """
    driver = cuda = lib = None
    gpus: list[NvsmiGpu] = []
    cur: dict[str, str] = {}

    def flush() -> None:
        bus = cur.get("Bus Location")
        if bus and re.fullmatch(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]", bus):
            gpus.append(NvsmiGpu(bdf=normalize_bdf(bus), name=cur.get("Model")))

    for raw in strip_ansi(text).splitlines():
        s = raw.strip()
        if (m := _NVC_LIB.search(s)) is not None:
            lib = lib or m.group(1)
        if (m := _NVC_FIELD.match(s)) is None or m.group(2) == "(null)":
            continue
        key, val = m.groups()
        if key == "NVRM version":
            driver = val
        elif key == "CUDA version":
            cuda = val
        elif key == "Device Index":
            flush()
            cur = {}
        else:
            cur[key] = val
    flush()
    return driver or lib, cuda, gpus
