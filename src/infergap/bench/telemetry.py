"""GPU telemetry sampled from NVML in a background thread while the load runs.

Readings per GPU and sample: power draw and enforced limit (``nvmlDeviceGetPowerUsage``,
``nvmlDeviceGetEnforcedPowerLimit``, mW → W), SM and memory clocks and the rated maximum SM
clock (``nvmlDeviceGetClockInfo``/``nvmlDeviceGetMaxClockInfo``), GPU and memory utilization
(``nvmlDeviceGetUtilizationRates``), memory used/total (``nvmlDeviceGetMemoryInfo``) and the
throttle reasons bitmask (``nvmlDeviceGetCurrentClocksThrottleReasons``; names from nvml.h).
A host without NVML or GPUs gives ``TelemetrySummary(available=False, reason=...)``, never an error.
"""

from __future__ import annotations

import logging
import threading
from time import perf_counter

import numpy as np

from infergap.bench.results import GPUTelemetry, TelemetrySummary
# How a reading is judged lives with the schema (the report reads it without loading NVML).
from infergap.bench.results import THROTTLED_CLOCK_SHARE as THROTTLED_CLOCK_SHARE
from infergap.bench.results import throttled as throttled
from infergap.parsers.nvsmi import throttle_names as all_names

try:  # NVML's Python binding; without it telemetry is "unavailable", as without a driver
    import pynvml

    _NVML_MISSING: ImportError | None = None
except ImportError as e:  # pragma: no cover - nvidia-ml-py is a dependency
    pynvml, _NVML_MISSING = None, e

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.2


def throttle_names(mask: int) -> list[str]:
    """Names of the throttle-reason bits set in ``mask``, idle excluded (idle is not a limit);
    the names are those of :func:`infergap.parsers.nvsmi.throttle_names` (nvml.h bits).

    >>> throttle_names(0x4 | 0x40 | 0x1)
    ['sw_power_cap', 'hw_thermal_slowdown']
    """
    return [n for n in all_names(mask) if n != "gpu_idle"]


class GPUSampler:
    """Samples every GPU every ``interval_s`` (≤ 0.25 s) in a daemon thread between
    :meth:`start` and :meth:`stop`; :meth:`summary` aggregates the samples inside given
    ``perf_counter`` windows."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S):
        self.interval_s = min(interval_s, 0.25)
        self.available = False
        self.reason: str | None = None
        self._nvml = None
        self._handles: list = []
        self._static: list[dict] = []
        self._samples: list[tuple[float, int, tuple]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> "GPUSampler":
        try:
            if pynvml is None:
                raise _NVML_MISSING
            pynvml.nvmlInit()
            n = pynvml.nvmlDeviceGetCount()
        except Exception as e:  # NVML missing, no driver, no permission: all mean "unavailable"
            self.reason = f"NVML unavailable ({type(e).__name__}: {e})".strip()
            return self
        if n == 0:
            self.reason = "no GPU found by NVML"
            return self
        self._nvml = pynvml
        for i in range(n):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            self._handles.append(h)
            st = {"name": "", "limit_W": None, "max_sm_MHz": None, "mem_total_MiB": None}
            for key, fn in (("name", lambda: pynvml.nvmlDeviceGetName(h)),
                            ("limit_W", lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0),
                            ("max_sm_MHz", lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)),
                            ("mem_total_MiB", lambda: pynvml.nvmlDeviceGetMemoryInfo(h).total / 2**20)):
                try:
                    v = fn()
                    st[key] = v.decode() if isinstance(v, bytes) else v
                except Exception:
                    pass
            self._static.append(st)
        self.available = True
        self._thread = threading.Thread(target=self._run, name="infergap-nvml", daemon=True)
        self._thread.start()
        return self

    def _read(self, i: int, h) -> tuple:
        p = self._nvml

        def q(fn, *a):
            try:
                return fn(h, *a)
            except Exception:
                return None

        power = q(p.nvmlDeviceGetPowerUsage)
        sm = q(p.nvmlDeviceGetClockInfo, p.NVML_CLOCK_SM)
        mem_clk = q(p.nvmlDeviceGetClockInfo, p.NVML_CLOCK_MEM)
        util = q(p.nvmlDeviceGetUtilizationRates)
        mem = q(p.nvmlDeviceGetMemoryInfo)
        thr = q(p.nvmlDeviceGetCurrentClocksThrottleReasons)
        return (None if power is None else power / 1000.0, sm, mem_clk,
                None if util is None else util.gpu, None if util is None else util.memory,
                None if mem is None else mem.used / 2**20, thr or 0)

    def _run(self) -> None:
        while not self._stop.is_set():
            t = perf_counter()
            rows = [(t, i, self._read(i, h)) for i, h in enumerate(self._handles)]
            with self._lock:
                self._samples.extend(rows)
            self._stop.wait(max(0.0, self.interval_s - (perf_counter() - t)))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass

    def summary(self, windows: list[tuple[float, float]]) -> TelemetrySummary:
        """Aggregate the samples taken inside any of ``windows`` ((start, end) perf_counter s)."""
        if not self.available:
            return TelemetrySummary(available=False, reason=self.reason or "telemetry unavailable")
        with self._lock:
            rows = [r for r in self._samples if any(a <= r[0] <= b for a, b in windows)]
        gpus = []
        for i, st in enumerate(self._static):
            mine = [r[2] for r in rows if r[1] == i]

            def col(k, fn=np.mean):
                vals = [m[k] for m in mine if m[k] is not None]
                return float(fn(vals)) if vals else None

            mask = 0
            for m in mine:
                if m[1] is None or not st["max_sm_MHz"] or m[1] < THROTTLED_CLOCK_SHARE * st["max_sm_MHz"]:
                    mask |= m[6]
            gpus.append(GPUTelemetry(
                index=i, name=st["name"], samples=len(mine), power_W_mean=col(0), power_W_max=col(0, np.max),
                power_limit_W=st["limit_W"], sm_clock_MHz_mean=col(1), sm_clock_MHz_max_rated=st["max_sm_MHz"],
                mem_clock_MHz_mean=col(2), util_pct_mean=col(3), mem_util_pct_mean=col(4),
                mem_used_MiB_max=col(5, np.max), mem_total_MiB=st["mem_total_MiB"],
                throttle_reasons=throttle_names(mask)))
        return TelemetrySummary(available=True, interval_ms=self.interval_s * 1e3, gpus=gpus)
