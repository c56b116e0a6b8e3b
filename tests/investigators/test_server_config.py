"""server_config investigator: server.config, server.cuda_graph_max_bs, server.kv_fp8_sm120 and its
allreduce.custom, from SGLang's introspection bodies served on 127.0.0.1 (tests/fixtures/evidence/servers)
against the seed host (8 PCIe-only SM120 GPUs) and the two-H200 capture (NVLink)."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web

from infergap.server import ServerConfig, introspect
from tests.evidence.test_server import SERVERS, AppServer, body, sglang_routes
from tests.investigators.memsnap import MemorySnapshot, audit_ids, host_cmds, one, pasted

SEED = "seed-8x-rtxpro6000"
H2 = "h200-2gpu-collect"


def _metrics(running: str):
    text = (SERVERS / "sglang_metrics.txt").read_text().replace("} 46.0", "} " + running)

    async def h(request: web.Request) -> web.Response:
        return web.Response(text=text, content_type="text/plain")

    return h


def _live(running: str = "46.0") -> ServerConfig:
    routes: dict[str, Any] = {**sglang_routes(), "/metrics": _metrics(running)}
    with AppServer(routes) as s:
        return introspect(s.url, timeout_s=5)


@pytest.fixture(scope="module")
def sglang() -> ServerConfig:
    return _live()


def _host(name: str) -> MemorySnapshot:
    return MemorySnapshot({}, cmds=host_cmds(name, "nvsmi_q", "nvsmi_topo"))


def test_live_server_config_is_ok_citing_its_endpoint(sglang: ServerConfig) -> None:
    f = one(audit_ids(_host(SEED), "server_config", server=sglang), "server.config")
    assert f.status == "ok" and f.title == "sglang 0.5.1.post3 serving /models/DeepSeek-R1-0528"
    assert f.subject == sglang.url and ("GET /server_info", "version=0.5.1.post3") in [(e.source, e.value) for e in f.evidence]


def test_unreachable_server_is_unknown_and_nothing_else() -> None:
    cfg = introspect("http://127.0.0.1:9", timeout_s=1)
    found = audit_ids(_host(SEED), "server_config", server=cfg)
    assert set(found) == {"server.config"}
    f = found["server.config"][0]
    assert f.status == "unknown" and "did not answer" in f.title and f.evidence


def test_running_batch_above_the_graphs_is_p1(sglang: ServerConfig) -> None:
    f = one(audit_ids(_host(SEED), "server_config", server=sglang), "server.cuda_graph_max_bs")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "runtime")
    assert [(e.source, e.value) for e in f.evidence] == [("GET /server_info", "cuda_graph_max_bs=32"), ("GET /metrics", "running requests: 46")]
    assert "--cuda-graph-max-bs 64" in f.remedy.commands[0]


def test_running_batch_within_the_graphs_is_ok() -> None:
    f = one(audit_ids(_host(SEED), "server_config", server=_live("16.0")), "server.cuda_graph_max_bs")
    assert f.status == "ok" and f.title == "CUDA graphs cover the running batch (16 ≤ 32)"


def test_fp8_kv_on_sm120_is_expected_and_p2_under_prefill_heavy_load(sglang: ServerConfig) -> None:
    f = one(audit_ids(_host(SEED), "server_config", server=sglang), "server.kv_fp8_sm120")
    assert f.status == "expected" and [e.value for e in f.evidence] == ["kv_cache_dtype=fp8_e4m3", "GPU compute capability 12.x (SM120)"]
    heavy = sglang.model_copy(deep=True)
    heavy.raw.update({"prompt_tokens_total": 500000.0, "generation_tokens_total": 50000.0})
    f = one(audit_ids(_host(SEED), "server_config", server=heavy), "server.kv_fp8_sm120")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P2", "runtime") and f.evidence[-1].value == "prompt/generated tokens ≈ 10.0"


def test_fp8_kv_off_sm120_is_not_reported(sglang: ServerConfig) -> None:
    assert "server.kv_fp8_sm120" not in audit_ids(_host(H2), "server_config", server=sglang)  # H200 is SM90


def test_custom_allreduce_off_on_pcie_only_gpus_is_expected_on_nvlink_p1(sglang: ServerConfig) -> None:
    f = one(audit_ids(_host(SEED), "server_config", server=sglang), "allreduce.custom")
    assert f.status == "expected" and f.evidence[-1].source == "cmds/nvsmi_topo.out"
    f = one(audit_ids(_host(H2), "server_config", server=sglang), "allreduce.custom")
    assert (f.status, f.severity) == ("actionable", "P1") and f.evidence[0].value == "disable_custom_all_reduce=True"


def test_without_server_or_engine_log_no_finding() -> None:
    assert audit_ids(_host(SEED), "server_config") == {}


def test_engine_log_stands_in_for_the_server() -> None:
    # vLLM's log already says why custom all-reduce is off: the engine_log investigator reports it, not this one.
    found = audit_ids(pasted("vllm-4770-custom-ar-no-p2p.log", base=_host(SEED)), "server_config")
    assert "allreduce.custom" not in found and "server.config" not in found
