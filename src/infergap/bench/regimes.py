"""The judgements a sweep's curve is read with, each named once: the bench's explanation of a
point (:mod:`infergap.bench.engine_metrics`) and the plan's facts about the load read the same
constants, so the two cannot disagree on what "saturated" or "host-bound" means.

- :data:`KNEE_GAIN` — more load stopped becoming throughput.
- :data:`HOST_BOUND_GPU_PCT` — requests wait while the GPU is mostly idle: the host, not the GPU,
  is the limit.

Both are infergap's own judgement, not an upstream constant; where each number comes from is
said beside it.
"""

KNEE_GAIN = 0.25
"""Share of extra load that must become extra throughput for the curve to be still rising: below
it, the point is the knee (load ×2 → output tok/s below ×1.25). The bench applies it to the load
ratio between two points (``throughput gain < KNEE_GAIN × load gain``); the plan's
``load.slots_saturated`` reads it at its slot count as a throughput ratio below
``1 + KNEE_GAIN`` (with median TTFT ×2 or more). The number: a quarter of the added load is the
margin above the trial-to-trial spread a point may show and still be stable
(:data:`infergap.bench.metrics.UNSTABLE_SPREAD_PCT`, 10 %) with room for a second point's spread."""

HOST_BOUND_GPU_PCT = 60.0
"""NVML GPU utilisation (%, share of the sample period in which a kernel ran:
``nvmlDeviceGetUtilizationRates``, NVML API reference) below which a server with every slot busy
or requests queued is host-bound. The number: llama-server with 16 slots on one H200 was
38–43 % busy at c = 16, 32 and 64 (every slot occupied) against 84 % at c = 1
(``tests/fixtures/real-gpu/h200-llama-server/healthy/bench.json``, telemetry ``util_pct_mean``),
and a compute-saturated engine is ≥ 90 % (:data:`infergap.bench.engine_metrics.GPU_BUSY_PCT`);
60 % separates the two with a margin on either side."""
