"""Roofline: the theoretical maximum of a model on a host, per tensor precision.

``load_model`` reads a Hugging Face ``config.json`` (or a built-in name), ``load_hardware`` a GPU
name or the host's GPUs, and ``bounds`` computes single-stream, batched, prefill and KV-capacity
bounds as a :class:`RooflineResult` (JSON schema ``infergap.roofline/1``).
"""

from infergap.roofline.bounds import (
    SCHEMA,
    BatchPoint,
    Bound,
    Parallel,
    RooflineResult,
    Workload,
    bounds,
    causal_pairs,
    collective_time_s,
    expected_max_experts_per_rank,
    experts_touched,
)
from infergap.roofline.hardware import GpuSpec, Hardware, find_gpu, gpu_table, host_gpus, load_hardware
from infergap.roofline.model import ModelSpec, builtin_models, load_model
from infergap.roofline.precision import bytes_per_param

__all__ = [
    "SCHEMA", "BatchPoint", "Bound", "GpuSpec", "Hardware", "ModelSpec", "Parallel", "RooflineResult",
    "Workload", "bounds", "builtin_models", "bytes_per_param", "causal_pairs", "collective_time_s",
    "expected_max_experts_per_rank", "experts_touched", "find_gpu", "gpu_table", "host_gpus",
    "load_hardware", "load_model",
]
