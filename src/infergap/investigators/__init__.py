"""Investigators: one module per dimension of the host, each with ``NAME`` and
``investigate(ctx) -> list[Finding]``. The audit runs every module of :data:`REGISTRY` concurrently."""

from infergap.investigators import (
    bandwidth,
    container,
    cpu_power,
    driver,
    engine_log,
    evidence_files,
    firmware,
    gpu_health,
    interconnect,
    kernel_runtime,
    kernel_version,
    memory,
    nccl_log,
    numa,
    pcie,
    runtime,
    server_config,
    serving_process,
)

REGISTRY = [pcie, interconnect, numa, cpu_power, kernel_runtime, kernel_version, firmware, container, driver, gpu_health, memory, runtime, bandwidth,
            nccl_log, engine_log, server_config, serving_process, evidence_files]
