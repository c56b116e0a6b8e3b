"""In-process probes: NVML (package ``nvidia-ml-py``, module ``pynvml``).

A probe returns JSON-able data and never raises: a missing library or driver becomes
``{"available": false, "error": "..."}``. Field names follow the NVML API
(https://docs.nvidia.com/deploy/nvml-api/), units are in the names.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict

#: The library ``pynvml`` loads on Linux (``pynvml._LoadNvmlLibrary``, nvidia-ml-py 12.x/13.x:
#: ``CDLL("libnvidia-ml.so.1")``), installed with the NVIDIA driver.
NVML_LIBRARY = "libnvidia-ml.so.1"


def nvml_library_missing() -> bool:
    """True on Linux when the dynamic loader cannot load :data:`NVML_LIBRARY`: no NVIDIA driver, so
    NVML cannot start. Checked before importing ``pynvml``, whose bindings take about 0.1 s of CPU
    to import (a host without GPUs, a CI runner, pays that for nothing); ``pynvml.nvmlInit`` would
    fail the same way, with NVML_ERROR_LIBRARY_NOT_FOUND."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return True
    return False


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """Call an NVML function; NotSupported/other NVML errors give None (the field is absent)."""
    import pynvml

    try:
        return fn(*args)
    except pynvml.NVMLError:
        return None


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def nvml_probe() -> dict[str, Any]:
    """Query every GPU NVML sees. Returns ``{"available": bool, "driver_version", "cuda_driver_version",
    "gpus": [{...}], "p2p": {"i,j": status}, "error"?}``.

    Per GPU: ``index, name, pci_bus_id, memory_total_B, bar1_total_B, persistence_mode, compute_mode,
    mig_current, ecc_current, ecc_pending, ecc_volatile_uncorrected, retired_pages_pending,
    remap_pending, sm_clock_MHz, sm_clock_max_MHz, mem_clock_MHz, power_W, power_limit_W,
    power_default_limit_W, power_min_limit_W, power_max_limit_W, temperature_C, temp_slowdown_C,
    temp_shutdown_C, throttle_reasons, pcie_gen, pcie_gen_max, pcie_width, pcie_width_max,
    nvlink_active (list of link indices up), cuda_capability, cpu_affinity``.
    Serial numbers and UUIDs are not collected.
    """
    if nvml_library_missing():  # what nvmlInit reports then (pynvml's NVMLError_LibraryNotFound)
        return {"available": False, "error": "NVML init failed: NVML Shared Library Not Found"}
    try:
        import pynvml
    except ImportError as e:
        return {"available": False, "error": f"nvidia-ml-py not installed ({e})"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return {"available": False, "error": f"NVML init failed: {e}"}
    try:
        out: dict[str, Any] = {
            "available": True,
            "driver_version": _text(_call(pynvml.nvmlSystemGetDriverVersion)),
            "cuda_driver_version": _call(pynvml.nvmlSystemGetCudaDriverVersion),
            "gpus": [],
            "p2p": {},
        }
        n = _call(pynvml.nvmlDeviceGetCount) or 0
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        for i, h in enumerate(handles):
            g: dict[str, Any] = {"index": i}
            _gpu_identity(pynvml, h, g)
            _gpu_state(pynvml, h, g)
            out["gpus"].append(g)
        out["p2p"] = _p2p(pynvml, handles)
        return out
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _gpu_identity(nv: Any, h: Any, g: dict[str, Any]) -> None:
    """Fill ``g`` with one GPU's name, PCI address and device id, memory and BAR1 sizes, modes
    (persistence, compute, MIG, ECC) and memory health (ECC errors, retired and remapped rows)."""
    g["name"] = _text(_call(nv.nvmlDeviceGetName, h))
    pci = _call(nv.nvmlDeviceGetPciInfo, h)
    g["pci_bus_id"] = _text(pci.busId) if pci is not None else None
    if pci is not None:
        g["pci_device_id"] = f"{pci.pciDeviceId:08x}"
    mem = _call(nv.nvmlDeviceGetMemoryInfo, h)
    g["memory_total_B"] = mem.total if mem else None
    g["memory_used_B"] = mem.used if mem else None
    bar1 = _call(nv.nvmlDeviceGetBAR1MemoryInfo, h)
    g["bar1_total_B"] = bar1.bar1Total if bar1 else None
    g["persistence_mode"] = _call(nv.nvmlDeviceGetPersistenceMode, h)
    g["compute_mode"] = _call(nv.nvmlDeviceGetComputeMode, h)
    mig = _call(nv.nvmlDeviceGetMigMode, h)
    g["mig_current"] = mig[0] if mig else None
    ecc = _call(nv.nvmlDeviceGetEccMode, h)
    g["ecc_current"], g["ecc_pending"] = (ecc[0], ecc[1]) if ecc else (None, None)
    g["ecc_volatile_uncorrected"] = _call(
        nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
    )
    g["retired_pages_pending"] = _call(nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
    rr = _call(nv.nvmlDeviceGetRemappedRows, h)
    g["remap_pending"] = bool(rr[2]) if rr else None
    g["remap_failed"] = bool(rr[3]) if rr else None


def _gpu_state(nv: Any, h: Any, g: dict[str, Any]) -> None:
    """Fill ``g`` with one GPU's clocks (MHz), power and limits (W, NVML answers mW),
    temperatures and thresholds (°C), clock event reasons, PCIe link, active NVLinks and compute
    capability."""
    g["sm_clock_MHz"] = _call(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
    g["sm_clock_max_MHz"] = _call(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM)
    g["mem_clock_MHz"] = _call(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)
    mw = _call(nv.nvmlDeviceGetPowerUsage, h)
    g["power_W"] = mw / 1000 if mw is not None else None
    for key, fn in (
        ("power_limit_W", nv.nvmlDeviceGetEnforcedPowerLimit),
        ("power_default_limit_W", nv.nvmlDeviceGetPowerManagementDefaultLimit),
    ):
        v = _call(fn, h)
        g[key] = v / 1000 if v is not None else None
    cons = _call(nv.nvmlDeviceGetPowerManagementLimitConstraints, h)
    g["power_min_limit_W"], g["power_max_limit_W"] = (cons[0] / 1000, cons[1] / 1000) if cons else (None, None)
    g["temperature_C"] = _call(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
    g["temp_slowdown_C"] = _call(nv.nvmlDeviceGetTemperatureThreshold, h, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
    g["temp_shutdown_C"] = _call(nv.nvmlDeviceGetTemperatureThreshold, h, nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)
    g["throttle_reasons"] = _call(nv.nvmlDeviceGetCurrentClocksEventReasons, h)
    if g["throttle_reasons"] is None:
        g["throttle_reasons"] = _call(nv.nvmlDeviceGetCurrentClocksThrottleReasons, h)
    g["pcie_gen"] = _call(nv.nvmlDeviceGetCurrPcieLinkGeneration, h)
    g["pcie_gen_max"] = _call(nv.nvmlDeviceGetMaxPcieLinkGeneration, h)
    g["pcie_width"] = _call(nv.nvmlDeviceGetCurrPcieLinkWidth, h)
    g["pcie_width_max"] = _call(nv.nvmlDeviceGetMaxPcieLinkWidth, h)
    links = []
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        st = _call(nv.nvmlDeviceGetNvLinkState, h, link)
        if st is None:
            break
        if st:
            links.append(link)
    g["nvlink_active"] = links
    cc = _call(nv.nvmlDeviceGetCudaComputeCapability, h)
    g["cuda_capability"] = f"{cc[0]}.{cc[1]}" if cc else None


def _p2p(nv: Any, handles: list[Any]) -> dict[str, Any]:
    """NVML's peer-to-peer read status of every GPU pair, keyed ``"i,j"`` with i < j."""
    p2p_index = getattr(nv, "NVML_P2P_CAPS_INDEX_READ", 0)
    out: dict[str, Any] = {}
    for i, hi in enumerate(handles):
        for j, hj in enumerate(handles):
            if i < j:
                out[f"{i},{j}"] = _call(nv.nvmlDeviceGetP2PStatus, hi, hj, p2p_index)
    return out


#: name -> (function, timeout in seconds)
PROBES: dict[str, tuple[Callable[[], Any], float]] = {"nvml": (nvml_probe, 15.0)}


# -- the shape of a probe file read back from a snapshot ------------------------------------------


class NvmlGpu(BaseModel):
    """One GPU of :func:`nvml_probe` (NVML's units: bytes, MHz, W, °C; modes as NVML's enums)."""

    model_config = ConfigDict(extra="allow")

    index: int | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    pci_device_id: str | None = None
    memory_total_B: int | None = None
    memory_used_B: int | None = None
    bar1_total_B: int | None = None
    persistence_mode: int | None = None
    compute_mode: int | None = None
    mig_current: int | None = None
    ecc_current: int | None = None
    ecc_pending: int | None = None
    ecc_volatile_uncorrected: int | None = None
    retired_pages_pending: int | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    sm_clock_MHz: float | None = None
    sm_clock_max_MHz: float | None = None
    mem_clock_MHz: float | None = None
    power_W: float | None = None
    power_limit_W: float | None = None
    power_default_limit_W: float | None = None
    power_min_limit_W: float | None = None
    power_max_limit_W: float | None = None
    temperature_C: float | None = None
    temp_slowdown_C: float | None = None
    temp_shutdown_C: float | None = None
    throttle_reasons: int | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    nvlink_active: list[int] = []
    cuda_capability: str | None = None


class NvmlProbe(BaseModel):
    """``probes/nvml.json``: what :func:`nvml_probe` wrote."""

    model_config = ConfigDict(extra="allow")

    available: bool = False
    error: str | None = None
    driver_version: str | None = None
    cuda_driver_version: int | None = None
    gpus: list[NvmlGpu] = []
    p2p: dict[str, int | None] = {}


#: Probe files read back from a snapshot, checked against these models (a probe without a model
#: is checked by its reader, as ``probes/active.json`` is by the bandwidth investigator).
PROBE_MODELS: dict[str, type[BaseModel]] = {"nvml": NvmlProbe}
