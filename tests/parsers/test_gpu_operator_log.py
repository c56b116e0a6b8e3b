"""parsers/gpu_operator_log.py: the GPU Operator's driver container log from a public report."""

from __future__ import annotations

from pathlib import Path

from infergap.evidence.recognize import log_kinds
from infergap.parsers.gpu_operator_log import parse_driver_container_log

EV = Path(__file__).resolve().parents[1] / "fixtures" / "evidence"


def test_the_kernel_that_could_not_be_resolved_is_the_failure() -> None:
    """gpu-operator#155: driver 450.80.02 for 3.10.0-862.el7; the failure glued to the line before it."""
    f = parse_driver_container_log((EV / "gpuop-155-driver-kernel-unresolved.log").read_text(encoding="utf-8").splitlines())
    assert (f.driver, f.kernel, f.failure, f.done) == ("450.80.02", "3.10.0-862.el7.x86_64", "Could not resolve Linux kernel version", False)
    assert f.last_step == "Unmounting NVIDIA driver rootfs..." and f.lines == 12


def test_a_driver_that_loaded_is_done_and_other_logs_lines_are_not_its_own() -> None:
    """The script's last line once the modules are loaded; a device plugin line and a vLLM line are not read."""
    f = parse_driver_container_log(["Loading NVIDIA driver kernel modules...", "Done, now waiting for signal",
                                    "I0819 07:02:54.756599       1 main.go:245] Starting OS watcher."])
    assert f.done and f.failure is None and f.lines == 2
    assert log_kinds("Done, now waiting for signal") == ("gpu_operator_driver",)
    assert log_kinds("INFO 05-15 11:07:08 [api_server.py:1] vLLM API server version 0.8.5") == ("vllm_log",)
