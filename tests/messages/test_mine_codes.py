"""tools/messages/mine_cuda.py and mine_nvml.py on excerpts of their sources (see each ORIGIN.md)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tools.messages import common as c
from tools.messages import mine_cuda, mine_nvml

UP = Path(__file__).resolve().parents[1] / "fixtures" / "upstream"


def test_cuda_codes_from_the_headers(tmp_path):
    out = tmp_path / "cuda.yaml"
    assert mine_cuda.main([str(UP / "cuda"), "13.0", "--out", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    by_name = {m["template"]: m for m in doc["messages"]}
    assert doc["call_sites"] == 6  # cudaError 1, 2, 3, 35 and CUresult 1, 2 (success left out)
    e = by_name["cudaErrorInsufficientDriver"]
    assert e["code"] == 35 and e["check"] == "driver.cuda_compat" and e["where"] == "include/driver_types.h:33"
    assert by_name["CUDA_ERROR_OUT_OF_MEMORY"]["class"] == "memory_kv"
    assert by_name["cudaErrorInitializationError"]["meaning"].startswith(
        "cudaErrorInitializationError (3): The API call failed because the CUDA driver and runtime could not be initialized.")
    assert not any(m["id"].startswith("cuda.runtime_text.") for m in doc["messages"])  # no libcudart in the fixture


def test_cuda_enum_doc_first_sentence():
    text = (UP / "cuda" / "include" / "driver_types.h").read_text()
    codes = mine_cuda.enum_codes(text, "enum __device_builtin__ cudaError")
    assert [(n, c) for n, c, _d, _l in codes] == [("cudaErrorInvalidValue", 1),  # success is no error
                                                  ("cudaErrorMemoryAllocation", 2), ("cudaErrorInitializationError", 3),
                                                  ("cudaErrorInsufficientDriver", 35)]
    assert codes[3][2] == "This indicates that the installed NVIDIA CUDA driver is older than the CUDA runtime library."


def test_nvml_codes_names_classes_and_texts(tmp_path):
    out = tmp_path / "nvml.yaml"
    assert mine_nvml.main([str(UP / "nvml" / "pynvml.py"), "13.615.71", "--out", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    forms = {m["template"]: m for m in doc["messages"]}
    assert doc["call_sites"] == 8
    mm = forms["NVMLError_LibRmVersionMismatch"]
    assert mm["code"] == 18 and mm["check"] == "driver.cuda_compat" and mm["name"] == "NVML_ERROR_LIB_RM_VERSION_MISMATCH"
    assert "RM has detected an NVML/RM version mismatch." in forms
    assert "Uninitialized" not in forms  # one word would match unrelated lines: the names carry it
    assert forms["NVMLError_GpuIsLost"]["check"] == "gpu.xid"
    line = "pynvml.NVMLError_GpuIsLost: GPU is lost"
    assert {m["template"] for m in doc["messages"] if re.search(m["pattern"], line)} == {"NVMLError_GpuIsLost", "GPU is lost"}


def test_class_name():
    assert mine_nvml.class_name("NVML_ERROR_GPU_IS_LOST") == "NVMLError_GpuIsLost"


def test_xid_codes_from_the_signature_catalog(tmp_path):
    from tools.messages import mine_nvrm_xid

    sig = Path(__file__).resolve().parents[2] / "src" / "infergap" / "data" / "signatures.yaml"
    out = tmp_path / "x.yaml"
    assert mine_nvrm_xid.main([str(sig), "test", "--out", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    x79 = next(m for m in doc["messages"] if m["code"] == 79)
    assert x79["check"] == "gpu.xid" and x79["severity"] == "P0"
    line = "[ 1234.5678] NVRM: Xid (PCI:0000:3b:00): 79, pid=2231, name=python3, GPU has fallen off the bus."
    assert [m["code"] for m in doc["messages"] if re.search(m["pattern"], line)] == [79]
    assert len({m["code"] for m in doc["messages"]}) == doc["call_sites"] >= 50


def test_union_of_two_releases_keeps_each_wording():
    """Two releases of the CUDA runtime word cudaErrorDevicesUnavailable differently (13.0 and
    10.2, as their libcudart's cudaGetErrorString returns it); the text both print is one entry."""
    rt = [("cudaErrorNoDevice", 100, "No device.", 1), ("cudaErrorDevicesUnavailable", 46, "Busy.", 2)]
    new = [mine_cuda._text_entry(n, k, t, d, set()) for (n, k, d, _l), t in
           zip(rt, ["no CUDA-capable device is detected", "CUDA-capable device(s) is/are busy or unavailable"])]
    old = [mine_cuda._text_entry(n, k, t, d, set()) for (n, k, d, _l), t in
           zip(rt, ["no CUDA-capable device is detected", "all CUDA-capable devices are busy or unavailable"])]
    out = c.union_tags(new, "13.0", old, "10.2")
    assert [(e.id, e.template, e.tags) for e in out] == [
        ("cuda.runtime_text.cudaerrornodevice", "no CUDA-capable device is detected", ["13.0", "10.2"]),
        ("cuda.runtime_text.cudaerrordevicesunavailable", "CUDA-capable device(s) is/are busy or unavailable", ["13.0"]),
        ("cuda.runtime_text.cudaerrordevicesunavailable_10_2", "all CUDA-capable devices are busy or unavailable", ["10.2"])]


def test_the_catalog_reads_the_older_cuda_wording():
    """CUDA 10.2's text as PyTorch printed it (https://github.com/ZhengZerong/PaMIR/issues/17)
    feeds the same check as 13.0's, and its source names the release that prints it."""
    from infergap.messages import match_lines

    old = match_lines(["RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable"])
    new = match_lines(["RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable"])
    assert old and new and old[0].message.check == new[0].message.check == "gpu.compute_mode"
    assert old[0].message.tag == "10.2" and new[0].message.tag == "13.0" and not old[0].loose
