"""The Go miners (device plugin, GPU operator) and the PyTorch distributed miner on excerpts of
their upstream sources (tests/fixtures/upstream/*/ORIGIN.md)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tools.messages import mine_k8s_device_plugin, mine_torch_distributed

UP = Path(__file__).resolve().parents[1] / "fixtures" / "upstream"


def test_device_plugin_klog_calls(tmp_path):
    out = tmp_path / "k.yaml"
    assert mine_k8s_device_plugin.main([str(UP / "k8s_device_plugin"), "v0.20.0", "--out", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    by_t = {m["template"]: m for m in doc["messages"]}
    nvml = by_t["Failed to initialize NVML: %v."]
    assert nvml["level"] == "error" and nvml["check"] == "gpu.present" and nvml["where"] == "internal/plugin/factory.go:5"
    dup = by_t["nvml init failed: %v"]  # klog.Warningf and fmt.Errorf print the same text: one entry, the louder level
    assert dup["level"] == "error" and dup["sites"] == 2
    assert doc["sites_by_level"]["error_values"] == 1 and doc["call_sites"] == 11  # 9 klog.Error(f) + 1 Warningf + 1 fmt.Errorf
    line = 'E1201 10:00:00.000000       1 factory.go:99] Failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND.'
    assert re.search(nvml["pattern"], line).group("a1") == "ERROR_LIBRARY_NOT_FOUND"


def test_torch_distributed_logger_and_raise(tmp_path):
    out = tmp_path / "t.yaml"
    assert mine_torch_distributed.main([str(UP / "torch_distributed"), "2.13.0", "--out", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    by_t = {m["template"]: m for m in doc["messages"]}
    raised = by_t["Default process group has not been initialized, please make sure to call init_process_group."]
    assert raised["level"] == "error" and raised["where"] == "torch/distributed/distributed_c10d.py:4"
    warn = by_t["Using TorchComms backend (enabled via %s) for device %s with backend %s"]
    assert warn["style"] == "percent" and doc["call_sites"] == 2 and doc["upstream"]["tag"] == "v2.13.0"


def test_ray_object_store_and_shm(tmp_path):
    from tools.messages import mine_ray

    out = tmp_path / "r.yaml"
    assert mine_ray.main([str(UP / "ray"), "2.60.0", "--out", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    shm = [m for m in doc["messages"] if "instead of /dev/shm" in m["template"]][0]
    assert shm["level"] == "warn" and shm["check"] == "container.shm" and shm["style"] == "format"
    line = "(raylet) " + shm["template"].format("/tmp", 67108864, 2.36)  # the line Ray prints, whole
    assert re.search(shm["pattern"], line).group("a2") == "67108864"
    assert doc["sites_by_level"]["raises_on_topic"] == 1 and doc["call_sites"] == 2
