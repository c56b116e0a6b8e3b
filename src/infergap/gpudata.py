"""One lookup for GPU and link knowledge: ``data/gpus.yaml`` (per SKU) and ``data/pcie.yaml``.

Every module that needs to know what a GPU is (compute capability, whether it offers PCIe
peer-to-peer, how its NVLinks are laid out, its PCI device ids, its datasheet memory bandwidth) or
what a PCIe generation carries asks here; the figures and their sources live in the data files.

>>> sku("NVIDIA H200").sm, sku("NVIDIA H200").nvlink_layout
(90, 'switch')
>>> s = sku("NVIDIA H100 PCIe"); (s.id, s.nvlink_layout, s.nvlink_group)
('h100-pcie', 'bridge', 2)
>>> sku(None, device_id=0x2bb5).label
'NVIDIA RTX PRO 6000 Blackwell Server Edition'
>>> sku("NVIDIA GeForce RTX 4090").p2p
'not_supported'
>>> pcie_x16_GBps(4), pcie_gen_of_gts(32.0)
(31.5, 5)
"""

from __future__ import annotations

import functools
import re
from typing import Any, Literal

from pydantic import BaseModel

P2p = Literal["supported", "not_supported"]
NvlinkLayout = Literal["none", "bridge", "switch"]


class Sku(BaseModel):
    """What the product knows about one GPU model (or family of models) and where it says so.

    ``sm`` compute capability x10 (90 = 9.0); ``p2p`` whether the stock driver offers PCIe
    peer-to-peer between two of them (None: not known here); ``nvlink_layout`` ``none``,
    ``bridge`` (bridges join ``nvlink_group`` GPUs, e.g. pairs) or ``switch`` (every pair linked);
    ``pci_device_ids`` NVIDIA (0x10de) device ids; ``bandwidth_GBps`` the datasheet memory
    bandwidth when the entry has datasheet figures; ``pcie_gen`` the PCIe generation of its host link (x16); ``source`` the public documents cited.
    """

    id: str
    label: str
    sm: int | None = None
    p2p: P2p | None = None
    nvlink_layout: NvlinkLayout | None = None
    nvlink_group: int | None = None
    pci_device_ids: list[int] = []
    bandwidth_GBps: float | None = None
    #: The PCIe generation of the GPU's own host link (datasheet entries only).
    pcie_gen: int | None = None
    source: str = ""


class PcieGen(BaseModel):
    """One PCIe generation: raw rate per lane (GT/s), encoding, x16 bandwidth per direction (GB/s)."""

    gen: int
    GTps: float
    encoding: str
    x16_GBps: float


def _data(name: str) -> Any:
    from infergap import datafile

    return datafile.packaged(name)


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def _ids(raw: list[Any] | None) -> list[int]:
    return [int(str(x), 16) for x in raw or []]


@functools.lru_cache(maxsize=1)
def _table() -> tuple[list[tuple[set[str], Sku]], list[tuple[re.Pattern[str], Sku]]]:
    d = _data("gpus.yaml")
    exact = []
    for g in d["gpus"]:
        s = Sku(id=g["id"], label=g["label"], sm=g.get("sm"), p2p=g.get("p2p"), nvlink_layout=g.get("nvlink_layout"),
                nvlink_group=g.get("nvlink_group"), pci_device_ids=_ids(g.get("pci_device_ids")), bandwidth_GBps=g.get("bandwidth_GBps"),
                pcie_gen=g.get("pcie_gen"), source="; ".join(x for x in (g.get("topology_source"), g.get("source")) if x))
        exact.append(({_norm(x) for x in (g["label"], *g.get("names", []))}, s))
    fams = []
    for f in d.get("families", []):
        s = Sku(id=f["id"], label=f["label"], sm=f.get("sm"), p2p=f.get("p2p"), nvlink_layout=f.get("nvlink_layout"),
                nvlink_group=f.get("nvlink_group"), pci_device_ids=_ids(f.get("pci_device_ids")), source=f.get("source", ""))
        fams.append((re.compile(f["match"], re.I), s))
    return exact, fams


def sku(name: str | None, device_id: int | None = None) -> Sku | None:
    """The entry for a GPU product name as NVML / nvidia-smi report it (``NVIDIA H200``) or, when
    the name is missing or unknown, for an NVIDIA PCI device id (``0x2335``). Exact names and
    device ids of the datasheet entries win over the families' name patterns. None when unknown."""
    exact, fams = _table()
    if name:
        key = _norm(name)
        for names, s in exact:
            if key in names:
                return s
    if device_id is not None:
        for _, s in exact + fams:
            if device_id in s.pci_device_ids:
                return s
    if name:
        for rx, s in fams:
            if rx.search(name):
                return s
    return None


@functools.lru_cache(maxsize=1)
def _switches() -> dict[int, str]:
    return {int(str(s["pci_device_id"]), 16): s["label"] for s in _data("gpus.yaml").get("switches", [])}


def device_name(device_id: int) -> str | None:
    """The product name for an NVIDIA PCI device id from the data (GPUs and NVSwitches newer than
    the system pci.ids), or None.

    >>> device_name(0x22A3)
    'NVIDIA NVSwitch (H100 generation, GH100)'
    """
    s = sku(None, device_id=device_id)
    return s.label if s is not None else _switches().get(device_id)


def sm_of(name: str | None) -> int | None:
    """Compute capability x10 of a GPU product name (``NVIDIA H200`` -> 90), None when unknown."""
    s = sku(name)
    return s.sm if s is not None else None


def datasheet_bandwidth_TBps(name: str | None) -> float | None:
    """Datasheet memory bandwidth (TB/s) of a GPU product name, None when the data has no figure."""
    s = sku(name)
    return s.bandwidth_GBps / 1000 if s is not None and s.bandwidth_GBps else None


@functools.lru_cache(maxsize=1)
def pcie_table() -> dict[int, PcieGen]:
    """PCIe generations from ``data/pcie.yaml``, keyed by generation."""
    return {g["gen"]: PcieGen(**g) for g in _data("pcie.yaml")["generations"]}


def pcie_gts(gen: int | None) -> float | None:
    """Raw rate per lane (GT/s) of a PCIe generation (also the LnkCap/LnkSta speed code)."""
    g = pcie_table().get(gen or 0)
    return g.GTps if g else None


def pcie_gen_of_gts(gts: float | None) -> int | None:
    """PCIe generation of a link speed in GT/s (``16.0`` -> 4), None when not a known rate."""
    for g in pcie_table().values():
        if gts is not None and abs(g.GTps - gts) < 1e-6:
            return g.gen
    return None


def pcie_x16_GBps(gen: int | None) -> float | None:
    """Usable bandwidth of an x16 link per direction (GB/s) of a PCIe generation."""
    g = pcie_table().get(gen or 0)
    return g.x16_GBps if g else None


def pcie_link_GBps(gen: int | None, width: int = 16) -> float | None:
    """Usable bandwidth per direction (GB/s) of a link of ``width`` lanes at a generation."""
    x16 = pcie_x16_GBps(gen)
    return x16 * width / 16 if x16 is not None else None
