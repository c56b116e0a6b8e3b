"""GPU facts: the NVIDIA GPUs merged from every source, their links (``topo -m``), peer-to-peer
status, compute capability, driver and CUDA versions, and the NCCL runs of the input.

Sources, later ones winning per field: sysfs (the GPU's PCI function), the plain ``nvidia-smi``
table, ``nvidia-smi -q``, the ``--query-gpu`` CSV, ``nvidia-smi -q -x`` and the NVML probe
(``probes/nvml.json``); all parsing is :mod:`infergap.parsers.nvsmi`.

GPU keys: a GPU is its PCI address (BDF, ``0000:17:00.0``) where one is known; GPU pairs of
``topo -m`` and P2P matrices are keyed by nvidia-smi's device names, ``("GPU0", "GPU1")``
(:class:`infergap.parsers.nvsmi.Topology`), whatever the source (NVML and torch indices are
written the same way). A GPU known only from ``topo -m`` has its device name (``GPU0``) as ``bdf``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from infergap.errors import UserError
from infergap.facts.base import FactsBase, Value, memo
from infergap.facts.logs import nccl_logs
from infergap.facts.pci import BDF, NVIDIA
from infergap.gpudata import device_name as data_device_name
from infergap.guard import loads
from infergap.parsers.nccl import parse_nccl_log
from infergap.parsers.nvsmi import (
    parse_container_cli_info,
    NvsmiGpu,
    NvsmiParseError,
    Topology,
    csv_driver_version,
    csv_to_gpus,
    normalize_bdf,
    nvml_to_gpus,
    parse_nvlink_status,
    parse_nvsmi_q_text,
    parse_nvsmi_q_versions,
    parse_nvsmi_table,
    parse_nvsmi_xml,
    parse_p2p,
    parse_query_csv,
    parse_topo,
)
from infergap.parsers.pci import system_pci_ids
from infergap.snapshot.core import Snapshot

#: ``nvmlGpuP2PStatus_t`` (nvml.h; pynvml ``NVML_P2P_STATUS_*``) -> the ``topo -p2p`` legend:
#: OK, CHIPSET_NOT_SUPPORTED, GPU_NOT_SUPPORTED, IOH_TOPOLOGY_NOT_SUPPORTED, DISABLED_BY_REGKEY,
#: NOT_SUPPORTED, UNKNOWN.
NVML_P2P_STATUS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "DR", 5: "NS", 6: "U"}

_T = TypeVar("_T")


@dataclass
class GpuFacts(NvsmiGpu):
    """A GPU merged from sysfs, ``nvidia-smi`` CSV/XML and NVML (later sources win per field).
    ``sources`` lists where its fields came from; ``name_source`` how it was named."""

    sources: list[str] = field(default_factory=list)
    name_source: str | None = None
    cuda_capability: str | None = None
    field_sources: dict[str, str] = field(default_factory=dict)

    def src(self, *fields: str) -> str:
        """Where the first of ``fields`` that is known was read (for a finding's evidence)."""
        for k in fields:
            if k in self.field_sources:
                return self.field_sources[k]
        return self.sources[-1] if self.sources else "nvidia-smi"


class GpuDomain(FactsBase):
    """GPU accessors of :class:`infergap.facts.Facts`."""

    @memo
    def nvsmi_xml(self) -> Any:
        """Parsed ``nvidia-smi -q -x`` (NvsmiLog) or None; a parse problem goes to :attr:`problems`."""
        return self._parsed_nvsmi("nvsmi_qx", parse_nvsmi_xml)

    def _parsed_nvsmi(self, name: str, parse: Callable[[str], _T]) -> _T | None:
        """``parse`` of command ``name``'s output, or None when it did not run; an
        :class:`NvsmiParseError` is recorded in :attr:`problems` under the command's source."""
        r = self.cmd_ok(name)
        if not r:
            return None
        try:
            return parse(r.stdout)
        except NvsmiParseError as e:
            self.problems[self.src(name)] = str(e)
            return None

    @memo
    def nvml(self) -> dict[str, Any] | None:
        """The NVML probe JSON when NVML was available, else None."""
        p = self.snap.probe("nvml")
        if isinstance(p, dict) and p.get("available") and isinstance(p.get("gpus"), list):
            return p
        if isinstance(p, dict) and p.get("invalid"):
            self.problems["probes/nvml.json"] = str(p.get("error")).removeprefix("probes/nvml.json: ")
        return None

    def _gpu_layers(self) -> list[tuple[str, list[NvsmiGpu]]]:
        """(source, GPUs) of every nvidia-smi output and NVML, in the order they override."""
        layers: list[tuple[str, list[NvsmiGpu]]] = []
        for name, parse in (("nvc_info", lambda t: parse_container_cli_info(t)[2]), ("nvsmi", parse_nvsmi_table), ("nvsmi_q", parse_nvsmi_q_text),
                            ("nvsmi_csv", lambda t: csv_to_gpus(parse_query_csv(t)))):
            r = self.cmd_ok(name)
            if r:
                layers.append((self.src(name), parse(r.stdout)))
        x = self.nvsmi_xml()
        if x is not None:
            layers.append((self.src("nvsmi_qx"), x.gpus))
        n = self.nvml()
        if n is not None:
            layers.append(("probes/nvml.json", nvml_to_gpus(n)))
        return layers

    @memo
    def gpus(self) -> list[GpuFacts]:
        """NVIDIA GPUs, ordered by BDF, merged from sysfs, nvidia-smi CSV, XML and NVML. Without any
        PCI address (only ``topo -m`` given, or sections of ``-q`` pasted without their header) they
        are ``GPU0``… in that output's order."""
        merged = {f.bdf: GpuFacts(bdf=f.bdf, sources=[f.source]) for f in self.pci_functions().values() if f.is_gpu}
        layers = self._gpu_layers()
        for src, gl in layers:
            for g in gl:
                if g.bdf and not _INDEX_NAME.fullmatch(g.bdf):
                    _overlay(merged.setdefault(g.bdf, GpuFacts(bdf=g.bdf)), g, src)
        # GPUs of a pasted -q fragment are known by index (GPU0 …): the n-th GPU in PCI order,
        # as nvidia-smi lists them, when addresses are known; else they stay by that name.
        real = sorted(merged)
        for src, gl in layers:
            for g in gl:
                if g.bdf and _INDEX_NAME.fullmatch(g.bdf):
                    i = int(g.bdf[3:])
                    key = real[i] if real and i < len(real) else g.bdf
                    _overlay(merged.setdefault(key, GpuFacts(bdf=key)), g, src)
        n = self.nvml()
        for d in (n.get("gpus", []) if n is not None else []):
            g2 = merged.get(normalize_bdf(d.get("pci_bus_id") or ""))
            if g2 is not None and d.get("cuda_capability"):
                g2.cuda_capability = d["cuda_capability"]
        caps = self.torch_info().get("capability") if self.torch_info() else None
        gl2 = sorted(merged.values(), key=lambda g: g.bdf)
        topo = self.topology()
        if not gl2 and topo is not None and topo.gpus:
            # Only topo -m was given: the GPUs are known by index, not by PCI address or name.
            gl2 = [GpuFacts(bdf=name, sources=[self.src("nvsmi_topo")]) for name in topo.gpus]
        if caps and len(caps) == len(gl2):
            for g, c in zip(gl2, caps):
                if g.cuda_capability is None and isinstance(c, list) and len(c) == 2:
                    g.cuda_capability = f"{c[0]}.{c[1]}"
        for g in gl2:
            if g.name is None:
                self._name_from_pci(g)
        return gl2

    def _name_from_pci(self, g: GpuFacts) -> None:
        """Name a GPU no nvidia-smi output named: from its PCI device id (system pci.ids, else the
        product's GPU data), else from the name ``lspci`` printed, else ``unknown device``."""
        f = self.pci_functions().get(g.bdf)
        dn = system_pci_ids().device_name(NVIDIA, f.device) if f and f.device is not None else None
        if dn:
            g.name, g.name_source = f"NVIDIA {dn}", "pci.ids"
        elif f is not None and f.device is not None and data_device_name(f.device):
            g.name, g.name_source = data_device_name(f.device), "infergap gpus.yaml (PCI device id)"
        elif f is not None and f.device is None and f.lspci is not None and "NVIDIA Corporation " in f.lspci.description:
            # lspci without -nn printed the name from its own pci.ids
            desc = f.lspci.description.split("NVIDIA Corporation ", 1)[1]
            g.name, g.name_source = "NVIDIA " + re.sub(r"\s{0,8}\((?:rev|prog-if) [^)]{0,64}\)+", "", desc).strip(), f.source
        else:
            g.name = "unknown device"
        if g.name_source:
            g.field_sources["name"] = f.source if f is not None else g.name_source

    def gpu_names(self) -> list[str]:
        """Product names of the GPUs that have one (``unknown device`` left out), in BDF order."""
        return [g.name for g in self.gpus() if g.name and g.name != "unknown device"]

    @memo
    def topology(self) -> Topology | None:
        """Parsed ``nvidia-smi topo -m`` or None; a parse problem goes to :attr:`problems`."""
        return self._parsed_nvsmi("nvsmi_topo", parse_topo)

    def nvlink_between_gpus(self) -> bool | None:
        """True when some GPU pair of ``topo -m`` has an NVLink cell (``NV#``), False when the
        matrix shows none, None without a matrix of GPUs."""
        topo = self.topology()
        cells = {v for (a, b), v in (topo.matrix.items() if topo else []) if a != b and a.startswith("GPU") and b.startswith("GPU")}
        if not cells:
            return None
        return any(c.startswith("NV") for c in cells)

    @memo
    def p2p(self) -> dict[tuple[str, str], str]:
        """Pairwise P2P read status from ``topo -p2p r`` (``GPU0``,``GPU1``) -> OK/CNS/…"""
        r = self.cmd_ok("nvsmi_p2p")
        return parse_p2p(r.stdout) if r else {}

    @memo
    def p2p_status(self) -> tuple[dict[tuple[str, str], str], str | None]:
        """Pairwise P2P status (``GPU0``, ``GPU1``) -> OK/CNS/GNS/TNS/NS/DR/U and its source, from
        ``nvidia-smi topo -p2p r``, else NVML (:data:`NVML_P2P_STATUS`, both orders of each pair),
        else the torch probe (``can_device_access_peer``: OK or NS); ({}, None) when none was captured."""
        p2p = self.p2p()
        if p2p:
            return p2p, self.src("nvsmi_p2p")
        n = self.nvml()
        if n and isinstance(n.get("p2p"), dict):
            p2p = {}
            for k, v in n["p2p"].items():
                a, _, b = str(k).partition(",")
                if v is not None and a.isdigit() and b.isdigit():
                    p2p[(f"GPU{a}", f"GPU{b}")] = p2p[(f"GPU{b}", f"GPU{a}")] = NVML_P2P_STATUS.get(v, "U")
            if p2p:
                return p2p, "probes/nvml.json"
        t = self.torch_info()
        if t and t.get("p2p"):
            m = t["p2p"]
            p2p = {(f"GPU{i}", f"GPU{j}"): ("OK" if m[i][j] else "NS") for i in range(len(m)) for j in range(len(m)) if i != j and m[i][j] is not None}
            if p2p:
                return p2p, self.src("torch")
        return {}, None

    @memo
    def torch_info(self) -> dict[str, Any] | None:
        """The ``torch`` command's JSON (torch version, CUDA build, arch list, devices), or None."""
        r = self.cmd_ok("torch")
        if not r:
            return None
        for line in reversed(r.stdout.strip().splitlines()):
            try:
                d = loads(line, self.src("torch"))
                if isinstance(d, dict):
                    return d
            except UserError:
                continue
        self.problems[self.src("torch")] = "no JSON line in torch probe output"
        return None

    def compute_capabilities(self) -> list[str]:
        """CUDA compute capabilities (``"12.0"``) from the NVML probe, else the torch probe's
        ``capability`` pairs; empty when neither has them."""
        n = self.snap.probe("nvml")
        if isinstance(n, dict) and isinstance(n.get("gpus"), list):
            caps = [g.get("cuda_capability") for g in n["gpus"] if isinstance(g, dict) and g.get("cuda_capability")]
            if caps:
                return caps
        t = self.torch_info()
        pairs = t.get("capability") if t else None
        return [f"{c[0]}.{c[1]}" for c in pairs if isinstance(c, list) and len(c) == 2] if isinstance(pairs, list) else []

    @memo
    def driver_version(self) -> Value | None:
        """The NVIDIA kernel driver version (``/sys/module/nvidia/version``, NVML, ``nvidia-smi -q -x``,
        ``nvidia-smi -q`` text, the ``nvidia-smi`` table's header, the ``driver_version`` column of
        ``--query-gpu`` CSV, ``/proc/driver/nvidia/version``)."""
        v = self.value("/sys/module/nvidia/version")
        if v:
            return v
        n = self.nvml()
        if n and n.get("driver_version"):
            return Value(n["driver_version"], "probes/nvml.json")
        x = self.nvsmi_xml()
        if x and x.driver_version:
            return Value(x.driver_version, self.src("nvsmi_qx"))
        for name, (driver, _cuda) in self._smi_versions():
            if driver:
                return Value(driver, self.src(name))
        r = self.cmd_ok("nvsmi_csv")
        c = csv_driver_version(parse_query_csv(r.stdout)) if r else None
        if c:
            return Value(c, self.src("nvsmi_csv"))
        pv = self.value("/proc/driver/nvidia/version")
        if pv:
            m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", pv.value)
            if m:
                return Value(m.group(1), pv.source)
        return None

    @memo
    def cuda_driver_version(self) -> Value | None:
        """Highest CUDA version the driver supports (``13.0``), from NVML, ``nvidia-smi -q -x``,
        ``nvidia-smi -q`` text or the ``nvidia-smi`` table's header."""
        n = self.nvml()
        if n and n.get("cuda_driver_version"):
            c = int(n["cuda_driver_version"])
            return Value(f"{c // 1000}.{(c % 1000) // 10}", "probes/nvml.json")
        x = self.nvsmi_xml()
        if x and x.cuda_version:
            return Value(x.cuda_version, self.src("nvsmi_qx"))
        for name, (_driver, cuda) in self._smi_versions():
            if cuda:
                return Value(cuda, self.src(name))
        return None

    @memo
    def _smi_versions(self) -> list[tuple[str, tuple[str | None, str | None]]]:
        """(command, (driver, CUDA)) from the header of ``nvidia-smi -q`` text, then of the plain
        ``nvidia-smi`` table, then of ``nvidia-container-cli info``; only the commands that ran."""
        out = []
        for name in ("nvsmi_q", "nvsmi", "nvc_info"):
            r = self.cmd_ok(name)
            if r:
                out.append((name, parse_container_cli_info(r.stdout)[:2] if name == "nvc_info" else parse_nvsmi_q_versions(r.stdout)))
        return out

    @memo
    def nvlink_status(self) -> dict[int, dict[int, float | None]]:
        """Per-GPU NVLink links and their speed (GB/s, None for an inactive link) from ``nvidia-smi
        nvlink -s`` (:func:`~infergap.parsers.nvsmi.parse_nvlink_status`); empty when absent."""
        r = self.cmd_ok("nvsmi_nvlink")
        return parse_nvlink_status(r.stdout) if r else {}

    @memo
    def active_probe(self) -> Any:
        """``probes/active.json`` (copy, memory and NCCL measurements of ``--active``) as read, or None."""
        return self.snap.probe("active")

    @memo
    def nccl_runs(self) -> list[tuple[str, Any]]:
        """(source, :class:`~infergap.parsers.nccl.NcclLogFacts`) for every NCCL log in the input:
        pasted or snapshot evidence, and the NCCL run of ``audit --active`` (``probes/active.json``)."""
        out = [(part.label, f) for part, f in nccl_logs(self.snap)]
        a = self.snap.probe("active")
        if isinstance(a, dict) and isinstance(a.get("nccl_log"), str) and a["nccl_log"].strip():
            f = parse_nccl_log(a["nccl_log"].splitlines())
            if f.nccl_lines:
                out.append(("probes/active.json (NCCL log)", f))
        return out

    @memo
    def collective_network(self) -> tuple[str | None, str | None]:
        """How NCCL moved data in the logs of this input: ``rdma`` (a NET/IB channel), ``socket``
        (a NET/Socket channel), ``local`` (one host, only P2P/SHM/NVLink channels) or None (no log
        with channels); with the source."""
        runs = self.nccl_runs()
        for want, fam in (("rdma", "NET/IB"), ("socket", "NET/Socket")):
            for src, f in runs:
                if f.transports.get(fam) or any(lk.transport == fam for lk in f.links):
                    return want, src
        for src, f in runs:
            if f.single_host and f.links and not any(lk.transport.startswith("NET") for lk in f.links):
                return "local", src
        return None, None


#: A GPU named by its nvidia-smi index (``GPU0``), as a ``-q`` fragment without addresses gives it.
_INDEX_NAME = re.compile(r"GPU\d{1,3}")


def _overlay(m: GpuFacts, g: NvsmiGpu, src: str) -> None:
    """Copy every known field of ``g`` (read from ``src``) onto ``m``, recording the source."""
    for k, v in vars(g).items():
        if k == "bdf" or v is None or v == [] or v == {}:
            continue
        setattr(m, k, v)
        m.field_sources[k] = src
        if k == "name":
            m.name_source = src
    m.sources.append(src)

