"""nvidia-smi's own error lines (data/messages/nvidia_smi.yaml, written by
tools/messages/mine_nvidia_smi.py) read in a paste of any shape: each joins its check as actionable.
The lines are from public reports that are not the ones the texts' ``where`` cites."""

from __future__ import annotations

import pytest

from infergap.audit import run_audit
from infergap.evidence.overlay import EvidenceSnapshot
from infergap.findings import Severity, Status
from tools.messages import mine_nvidia_smi

CASES = [
    # nvidia-container-runtime#189: one GPU unusable inside a container
    ("[xxx ~]$ docker run --rm --runtime=nvidia --gpus '\"device=1\"' nvidia/cuda:11.4.0-runtime-ubuntu20.04 nvidia-smi\n"
     "Unable to determine the device handle for GPU0000:65:00.0: Unknown Error\n", "gpu.health"),
    # gpu-operator#430: a Kubeflow pod loses its GPU after a day
    ("(base) jovyan@agm-0:~/vol-1$ nvidia-smi\nFailed to initialize NVML: Unknown Error\n", "gpu.present"),
    # open-gpu-kernel-modules#789: a 3090 whose GSP firmware did not start
    ("invidia-smi , No devices were found, RmInitAdapter failed!\n"
     "[  903.610907] NVRM: GPU 0000:98:00.0: RmInitAdapter failed! (0x62:0x65:1792)\n", "gpu.present"),
]


@pytest.mark.parametrize("text,check", CASES)
def test_nvidia_smi_error_lines_are_actionable(tmp_path, text, check):
    paste = tmp_path / "paste.txt"
    paste.write_text(text)
    with EvidenceSnapshot(None, [paste]) as snap:
        report = run_audit(snap, parallel=False)
    assert not report.get("evidence.unrecognized")
    (f,) = [f for f in report.get(check) if f.status == Status.actionable]
    assert f.severity == Severity.P0 and f.details["messages"][0]["id"].startswith("nvidia_smi.")


def test_the_catalog_is_written_from_the_curated_texts(tmp_path):
    out = tmp_path / "nvidia_smi.yaml"
    assert mine_nvidia_smi.main(["--out", str(out)]) == 0
    packaged = (mine_nvidia_smi.ROOT / "src/infergap/data/messages/nvidia_smi.yaml").read_text(encoding="utf-8")
    assert out.read_text(encoding="utf-8") == packaged  # the packaged catalog is this script's output
    with pytest.raises(ValueError):
        mine_nvidia_smi.entries({"nvidia_smi.x": {"template": "t", "level": "error"}})


def test_a_list_of_gpus_then_an_error_is_read_as_the_message(tmp_path):
    """``nvidia-smi -L`` lines start what could be an NVLink listing; with no link lines after them
    the segment is no known output, and the nvidia-smi error further down must still be read. The
    -L line is the one NVIDIA's container-toolkit documentation prints, the error gpu-operator#430's."""
    paste = tmp_path / "paste.txt"
    paste.write_text("$ nvidia-smi -L\nGPU 0: Graphics Device (UUID: GPU-b8ea3855-276c-c9cb-b366-c6fa655957c5)\n"
                     "$ nvidia-smi\nFailed to initialize NVML: Unknown Error\n")
    with EvidenceSnapshot(None, [paste]) as snap:
        report = run_audit(snap, parallel=False)
    assert not report.get("evidence.unrecognized")
    assert [f.status for f in report.get("gpu.present")] == [Status.actionable]
