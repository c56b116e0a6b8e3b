"""parsers/k8s_log.py and gpu.present: the NVIDIA Kubernetes device plugin's log from public reports."""

from __future__ import annotations

from pathlib import Path

from infergap.findings import Severity, Status
from infergap.parsers.k8s_log import is_device_plugin_line, parse_device_plugin_log
from tests.investigators.memsnap import audit_ids, evidence_text, one, pasted, pasted_text, replaced
from tests.parsers.inputs import lines


def test_the_1x_log_says_nvml_could_not_be_loaded() -> None:
    """k8s-device-plugin#303: the 1.x plugin's Go log lines, NVML not loadable in its container."""
    f = parse_device_plugin_log(lines("k8sdp-303-nvml-not-loaded.log"))
    assert (f.nvml_error, f.mig_strategy, f.no_devices) == ("could not load NVML library", None, False)
    assert f.lines == 2  # "Loading NVML" and the failure; the hints are not plugin lines of their own
    assert not is_device_plugin_line("2022/05/13 23:09:23 some other program")


def test_gpu_present_is_p0_from_the_plugin_log_alone() -> None:
    f = one(audit_ids(pasted("k8sdp-303-nvml-not-loaded.log"), "gpu_health"), "gpu.present")
    assert f.status is Status.actionable and f.severity is Severity.P0
    assert "could not load NVML library" in f.title and f.evidence[0].value.endswith("could not load NVML library.")


def test_a_plugin_that_loaded_nvml_is_not_a_finding(tmp_path: Path) -> None:
    text = replaced(evidence_text("k8sdp-303-nvml-not-loaded.log"), "Failed to initialize NVML: could not load NVML library.", "Fetching devices.")
    f = one(audit_ids(pasted_text(tmp_path, "dp.log", text), "gpu_health"), "gpu.present")
    assert f.status is Status.unknown


def test_nvidia_smis_own_nvml_failure_is_not_the_plugins() -> None:
    """scicomp#60: nvidia-smi printing ``Failed to initialize NVML: Driver/library version mismatch``
    is the driver's finding, not a device plugin log."""
    from infergap.evidence.recognize import scan_file
    from tests.parsers.inputs import EVIDENCE

    parts, _ = scan_file(EVIDENCE / "scicomp-60-nvml-mismatch.txt")
    assert "k8s_device_plugin" not in {k for p in parts for k in p.kinds}
    assert not is_device_plugin_line("Failed to initialize NVML: Driver/library version mismatch")
