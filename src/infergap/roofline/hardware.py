"""GPU figures (the datasheet table in ``infergap/data/gpus.yaml``) and the host's GPUs.

:func:`load_hardware` turns a GPU name, an alias, an NVML product name or ``auto`` (the host's GPUs,
read by the caller) into a :class:`Hardware`: the GPU's figures, how many there are, and the
bandwidth ceiling actually used (datasheet, measured, or the user's own figure).
"""

from __future__ import annotations

import difflib
import logging
import re
from typing import Any, Literal

from pydantic import BaseModel

from infergap import datafile
from infergap.errors import UserError
from infergap.facts import Facts
from infergap.gpudata import pcie_x16_GBps

log = logging.getLogger(__name__)


class MeasuredCeiling(BaseModel):
    """Figures measured on real hardware (a better ceiling than the datasheet), with their source."""

    bandwidth_GBps: float | None = None
    bf16_tflops: float | None = None
    fp8_tflops: float | None = None
    source: str = ""


class GpuSpec(BaseModel):
    """One GPU model's datasheet figures (units in the field names; TFLOPS dense) and source."""

    id: str
    label: str
    names: list[str] = []
    aliases: list[str] = []
    memory_GB: float
    bandwidth_GBps: float
    bf16_tflops: float
    fp8_tflops: float | None = None
    fp4_tflops: float | None = None
    sms: int | None = None
    smem_per_block_KB: float | None = None
    nvlink_GBps: float = 0
    pcie_gen: int | None = 4  # None: no PCIe host link (GB200's NVLink-C2C)
    sm: int | None = None
    pci_device_ids: list[str] = []
    p2p: str | None = None
    nvlink_layout: str | None = None
    nvlink_group: int | None = None
    topology_source: str | None = None
    source: str
    measured: MeasuredCeiling | None = None


class HostGpu(BaseModel):
    """A GPU as the host reports it (the facts layer's GPU record)."""

    name: str | None = None
    memory_total_B: int | None = None
    bdf: str = ""
    cuda_capability: str | None = None


class Hardware(BaseModel):
    """The GPUs a roofline runs on: the model's figures, ``count``, and the ceilings in use.

    ``bandwidth_GBps`` and ``tflops`` are the per-GPU figures the bounds use (after
    ``--ceiling``, ``--bandwidth-efficiency`` or ``--measured-bandwidth``); ``ceiling`` says which
    (``datasheet`` | ``measured`` | ``user``) and ``ceiling_note`` how it was derived.
    ``memory_B`` is the host-reported memory per GPU when known, else the datasheet's.
    """

    gpu: GpuSpec
    count: int
    bandwidth_GBps: float
    tflops: dict[str, float]
    memory_B: int
    memory_source: str
    ceiling: Literal["datasheet", "measured", "user"] = "datasheet"
    ceiling_note: str = ""
    from_host: str | None = None

    @property
    def link_GBps(self) -> float:
        """Per-direction GPU-to-GPU link bandwidth: NVLink total / 2, else PCIe x16 of the GPU's
        generation (``data/pcie.yaml``: gen4 31.5 GB/s, gen5 63 GB/s per direction)."""
        if self.gpu.nvlink_GBps:
            return self.gpu.nvlink_GBps / 2
        return pcie_x16_GBps(self.gpu.pcie_gen) or pcie_x16_GBps(4) or 31.5

    def flops_per_s(self, precision: str) -> float:
        """Dense tensor FLOP/s of one GPU at ``precision`` (bf16|fp8|fp4), falling back to the next
        wider precision the GPU has (fp4 -> fp8 -> bf16)."""
        for p in {"fp4": ("fp4", "fp8", "bf16"), "fp8": ("fp8", "bf16")}.get(precision, ("bf16",)):
            if self.tflops.get(p):
                return self.tflops[p] * 1e12
        return self.tflops["bf16"] * 1e12


def gpu_table() -> list[GpuSpec]:
    """All GPU entries of the shipped ``gpus.yaml``."""
    return [GpuSpec(**g) for g in datafile.packaged("gpus.yaml")["gpus"]]


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def find_gpu(name: str) -> GpuSpec:
    """The entry whose id, alias or NVML product name equals ``name`` (case, spaces, dashes and
    underscores ignored). Raises :class:`UserError` with the closest known names otherwise."""
    key = _norm(name)
    table = gpu_table()
    for g in table:
        if key in {_norm(x) for x in (g.id, g.label, *g.names, *g.aliases)}:
            return g
    choices: dict[str, tuple[str, str]] = {}  # normalised -> (as written, entry id)
    for g in table:
        for x in (g.id, *g.aliases, *g.names):
            choices.setdefault(_norm(x), (x, g.id))
    close = difflib.get_close_matches(key, list(choices), n=6, cutoff=0.5)
    hint: list[str] = []
    seen: set[str] = set()
    for c in close:
        written, gid = choices[c]
        if gid not in seen:
            seen.add(gid)
            hint.append(written)
    known = ", ".join(g.id for g in table)
    if hint:
        raise UserError(f"--gpu {name}: unknown GPU; closest: {', '.join(hint[:3])} (known: {known})")
    raise UserError(f"--gpu {name}: unknown GPU (known: {known})")


def host_gpus(snapshot: Any) -> list[HostGpu]:
    """The NVIDIA GPUs of ``snapshot`` (a :class:`infergap.snapshot.Snapshot`, live or captured),
    from the facts layer (:meth:`infergap.facts.Facts.gpus`: sysfs, nvidia-smi CSV/XML, NVML merged)."""
    return [
        HostGpu(name=g.name, memory_total_B=g.memory_total_B, bdf=g.bdf or "", cuda_capability=g.cuda_capability)
        for g in Facts(snapshot).gpus()
    ]


def load_hardware(
    name_or_auto: str,
    count: int | None = None,
    *,
    host: list[HostGpu] | None = None,
    snapshot: Any = None,
    ceiling: Literal["datasheet", "measured"] = "datasheet",
    bandwidth_efficiency: float | None = None,
    measured_bandwidth_GBps: float | None = None,
) -> Hardware:
    """Build the :class:`Hardware` for a GPU name (or ``auto``) and a count.

    ``auto`` takes the host's GPUs handed in as ``host`` (the caller reads them, e.g. with
    :func:`host_gpus` on the snapshot it audits), or those of ``snapshot``; the roofline never
    opens a snapshot itself. All of them must be the same model. ``count`` defaults to the host's
    GPU count (``auto``) or 1. ``ceiling="measured"`` uses the entry's measured figures (error if
    it has none); ``measured_bandwidth_GBps`` replaces the bandwidth outright;
    ``bandwidth_efficiency`` (0 < f <= 1) scales whichever bandwidth is in use.
    Raises :class:`UserError` for an unknown GPU, a host without GPUs, mixed GPU models, ``auto``
    without the host's GPUs, or out-of-range figures.
    """
    host_label: str | None = None
    memory_B: int | None = None
    memory_source = "datasheet"
    if name_or_auto.strip().lower() == "auto":
        if host is None and snapshot is None:
            raise UserError("--gpu auto: the host's GPUs were not read; name one with --gpu")
        gpus = host if host is not None else host_gpus(snapshot)
        spec, count, memory_B, host_label = _host_hardware(gpus, count, getattr(snapshot, "label", "") or "this host")
        if memory_B:
            memory_source = "host-reported"
    else:
        spec = find_gpu(name_or_auto)
    count = 1 if count is None else count
    if count < 1:
        raise UserError(f"--gpus {count}: must be at least 1")
    bw, tflops, used, note = _ceiling(spec, ceiling, bandwidth_efficiency, measured_bandwidth_GBps)
    return Hardware(gpu=spec, count=count, bandwidth_GBps=bw, tflops=tflops, memory_B=memory_B or int(spec.memory_GB * 1e9),
                    memory_source=memory_source, ceiling=used, ceiling_note=note, from_host=host_label)


def _host_hardware(gpus: list[HostGpu], count: int | None, where: str) -> tuple[GpuSpec, int, int | None, str]:
    """``--gpu auto`` over the host's GPUs: (their one GPU entry, the count, the smallest
    host-reported memory per GPU or None, a label such as ``8 x NVIDIA H200``). Raises
    :class:`UserError` for no GPU, mixed models or more GPUs asked for than the host has."""
    if not gpus:
        raise UserError(f"--gpu auto: no NVIDIA GPU found in {where} (no GPU in sysfs, nvidia-smi or NVML); name one with --gpu")
    names = sorted({g.name or "?" for g in gpus})
    if len(names) > 1:
        raise UserError(f"--gpu auto: the host has different GPU models ({', '.join(names)}); name one with --gpu")
    spec = find_gpu(names[0])
    host_count = len(gpus)
    if count is None:
        count = host_count
    elif count > host_count:
        raise UserError(f"--gpus {count}: the host has only {host_count} {names[0]}")
    mems = [g.memory_total_B for g in gpus if g.memory_total_B]
    return spec, count, (min(mems) if mems else None), f"{host_count} x {names[0]}"


_Used = Literal["datasheet", "measured", "user"]


def _ceiling(spec: GpuSpec, ceiling: str, bandwidth_efficiency: float | None,
             measured_bandwidth_GBps: float | None) -> tuple[float, dict[str, float], _Used, str]:
    """Per-GPU (bandwidth GB/s, TFLOPS by precision, which ceiling, how it was derived): the
    datasheet's, the entry's measured figures (``ceiling="measured"``), the user's bandwidth,
    then scaled by ``bandwidth_efficiency``. Raises :class:`UserError` for missing measured
    figures or out-of-range values."""
    bw = spec.bandwidth_GBps
    tflops = {"bf16": spec.bf16_tflops}
    if spec.fp8_tflops:
        tflops["fp8"] = spec.fp8_tflops
    if spec.fp4_tflops:
        tflops["fp4"] = spec.fp4_tflops
    used: _Used = "datasheet"
    note = f"datasheet {spec.bandwidth_GBps:.0f} GB/s"
    if ceiling == "measured":
        if spec.measured is None or not spec.measured.bandwidth_GBps:
            raise UserError(f"--ceiling measured: no measured figures for {spec.id}; use --measured-bandwidth")
        bw = spec.measured.bandwidth_GBps
        if spec.measured.bf16_tflops:
            tflops["bf16"] = spec.measured.bf16_tflops
        if spec.measured.fp8_tflops:
            tflops["fp8"] = spec.measured.fp8_tflops
        used = "measured"
        note = f"measured {bw:.0f} GB/s (datasheet {spec.bandwidth_GBps:.0f})"
    if measured_bandwidth_GBps is not None:
        if not measured_bandwidth_GBps > 0:
            raise UserError(f"--measured-bandwidth {measured_bandwidth_GBps}: must be > 0 GB/s")
        bw = float(measured_bandwidth_GBps)
        used = "user"
        note = f"user-measured {bw:.0f} GB/s (--measured-bandwidth)"
    if bandwidth_efficiency is not None:
        if not 0 < bandwidth_efficiency <= 1:
            raise UserError(f"--bandwidth-efficiency {bandwidth_efficiency}: must be in (0, 1]")
        bw *= bandwidth_efficiency
        used = "user"
        note += f" x efficiency {bandwidth_efficiency:g} = {bw:.0f} GB/s"
    return bw, tflops, used, note
