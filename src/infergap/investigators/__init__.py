"""Investigators: one module per dimension of the host, each with ``NAME`` and
``investigate(ctx) -> list[Finding]``. The audit runs every module of :data:`REGISTRY` concurrently."""

from infergap.investigators import (
    bandwidth,
    container,
    cpu_power,
    driver,
    firmware,
    gpu_health,
    interconnect,
    kernel_runtime,
    kernel_version,
    memory,
    numa,
    pcie,
    runtime,
)

REGISTRY = [pcie, interconnect, numa, cpu_power, kernel_runtime, kernel_version, firmware, container, driver, gpu_health, memory, runtime, bandwidth]
