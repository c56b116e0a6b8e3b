"""The same synthesis on an NVLink host (the real two-H200 capture): no PCIe workarounds, custom
all-reduce not 'expected off'."""

from __future__ import annotations

import json

import pytest

from plan_support import H200X2, ROOT, constructed_bench
from infergap.plan import build_plan

PCIE_ONLY = {"allreduce.pcie_ipc", "eng.pcie_allreduce_kernel", "parallel.dp_replicas", "no.reenable_custom_allreduce",
             "no.tp4_pp2", "no.ep_at_batch1_pcie"}


def _server(tp: int, custom_ar_off: bool):
    """The recorded SGLang /server_info body (tests/fixtures/evidence/servers) with TP and
    disable_custom_all_reduce set for this case, read by the real ServerConfig code."""
    from infergap.server import ServerConfig, _apply

    body = json.loads((ROOT / "tests/fixtures/evidence/servers/sglang_server_info.json").read_text())
    body.update(tp_size=tp, disable_custom_all_reduce=custom_ar_off, model_path="/models/Llama-3.1-70B-Instruct")
    cfg = ServerConfig(url="http://127.0.0.1:30000", reachable=True)
    _apply(cfg, "/server_info", body, json.dumps(body))
    return cfg


@pytest.fixture(scope="module", params=[False, True], ids=["custom-ar-on", "custom-ar-off"])
def nvlink_plan(request):
    from infergap.audit import run_audit
    from infergap.roofline import Parallel, Workload, bounds, load_hardware, load_model
    from infergap.snapshot import open_snapshot

    cfg = _server(2, request.param)
    snap = open_snapshot(str(H200X2))
    try:
        audit = run_audit(snap, server=cfg)
    finally:
        snap.close()
    rl = bounds(load_model("llama-3.1-70b"), load_hardware("h200", 2), Parallel(tp=2), Workload(batches=[1, 8, 64]))
    # Illustrative figures (no assertion depends on them): a bench is needed for the regime facts.
    bench = constructed_bench([(1, 38.0, None), (8, 260.0, None), (64, 1500.0, 650.0)], gpu_name="NVIDIA H200", gpus=2)
    return request.param, audit, build_plan(audit=audit, roofline=rl, bench=bench, server=cfg)


def test_nvlink_host_gets_no_pcie_workarounds(nvlink_plan):
    _, audit, plan = nvlink_plan
    assert plan.facts["gpu.nvlink"].value is True
    ids = {x.id for x in plan.levers + plan.wont_help}
    assert not ids & PCIE_ONLY
    text = json.dumps(plan.to_json_dict())
    assert "PCIE_IPC" not in text and "PCIe-only" not in text


def test_custom_allreduce_never_expected_disabled(nvlink_plan):
    off, audit, plan = nvlink_plan
    ar = audit.get("allreduce.custom")
    assert ar and all(f.status.value != "expected" for f in ar)
    if off:  # turned off by hand on NVLink: the plan says turn it back on
        item = next(x for x in plan.tier("flag_flip") if x.id == "allreduce.custom_reenable")
        assert "gpu.nvlink" in item.facts or "par.tp" in item.facts
    else:
        assert "allreduce.custom_reenable" not in {x.id for x in plan.levers}
    assert plan.facts.get("finding.allreduce.custom").value != "expected"
    assert all("custom all-reduce" not in x.title.lower() for x in plan.wont_help)


def test_sm90_specifics(nvlink_plan):
    _, _, plan = nvlink_plan
    ids = {x.id for x in plan.levers + plan.wont_help}
    assert plan.facts["gpu.sm"].value == 90
    assert "no.flashinfer_ar_fusion_sm120" not in ids and "no.larger_cutlass_tiles" not in ids and "eng.arch_build" not in ids
