"""Live server introspection: a real llama-cpp-python server, and SGLang/vLLM response bodies
(written from their code) served on 127.0.0.1; bad answers, auth failures and a hanging server."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from types import SimpleNamespace

import pytest
from aiohttp import web

from tests.evidence.evidence_data import API_KEY, FIX, H200, free_port
from infergap.evidence import EvidenceSnapshot
from infergap.investigators import server_config
from infergap.server import introspect
from infergap.snapshot import open_snapshot

SERVERS = FIX / "servers"


class AppServer:
    """An aiohttp app on 127.0.0.1 in a background thread, with a request log."""

    def __init__(self, routes: dict[str, web.StreamResponse | callable]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests: list[tuple[str, str | None]] = []
        self.routes = routes
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.path, request.headers.get("Authorization")))
        h = self.routes.get(request.path)
        if h is None:
            return web.json_response({"detail": "Not Found"}, status=404)
        return await h(request)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5, handler_cancellation=True)
        self._loop.run_until_complete(self._runner.setup())
        self._loop.run_until_complete(web.TCPSite(self._runner, "127.0.0.1", self.port).start())
        self._started.set()
        self._loop.run_forever()

    def __enter__(self):
        self._thread.start()
        self._started.wait(10)
        return self

    def __exit__(self, *exc):
        async def stop():
            await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def body(name: str, content_type="application/json"):
    data = (SERVERS / name).read_bytes()

    async def h(request):
        return web.Response(body=data, content_type=content_type)

    return h


def sglang_routes():
    return {"/get_server_info": body("sglang_server_info.json"), "/server_info": body("sglang_server_info.json"),
            "/get_model_info": body("sglang_model_info.json"), "/model_info": body("sglang_model_info.json")}


def vllm_routes():
    return {"/version": body("vllm_version.json"), "/metrics": body("vllm_metrics.txt", "text/plain"), "/v1/models": body("vllm_models.json")}


def test_sglang_server_info():
    with AppServer(sglang_routes()) as s:
        cfg = introspect(s.url, timeout_s=5)
    info = json.loads((SERVERS / "sglang_server_info.json").read_text())
    assert cfg.reachable and cfg.engine == "sglang" and cfg.version == info["version"]
    assert (cfg.tp_size, cfg.cuda_graph_max_bs, cfg.mem_fraction, cfg.kv_cache_dtype, cfg.kv_tokens, cfg.chunked_prefill_size) == (
        info["tp_size"], info["cuda_graph_max_bs"], info["mem_fraction_static"], info["kv_cache_dtype"], info["max_total_num_tokens"], info["chunked_prefill_size"])
    assert cfg.attention_backend == info["internal_states"][0]["attention_backend"]
    assert cfg.sources["tp_size"] == "GET /server_info" and cfg.model == info["model_path"]
    assert cfg.errors == []


def test_vllm_version_metrics_models():
    with AppServer(vllm_routes()) as s:
        cfg = introspect(s.url, timeout_s=5)
    assert (cfg.engine, cfg.version, cfg.served_model_name, cfg.context_length) == ("vllm", "0.10.2", "Qwen/Qwen3-30B-A3B", 32768)
    assert (cfg.kv_cache_dtype, cfg.mem_fraction, cfg.kv_tokens, cfg.running_requests) == ("fp8", 0.9, 27081 * 16, 96.0)
    assert cfg.sources["kv_cache_dtype"] == "GET /metrics" and cfg.sources["version"] == "GET /version"


def test_api_key_sent_and_never_stored():
    with AppServer(sglang_routes()) as s:
        cfg = introspect(s.url, api_key="s3cret-admin", timeout_s=5)
    assert ("/get_server_info", "Bearer s3cret-admin") in s.requests
    assert "s3cret" not in cfg.model_dump_json()


def test_html_and_auth_failures_are_one_line_each():
    async def html(request):
        return web.Response(text="<!DOCTYPE html><html><body>login</body></html>", content_type="text/html")

    async def unauthorized(request):
        return web.json_response({"error": "Unauthorized"}, status=401)

    with AppServer({"/server_info": unauthorized, "/get_server_info": unauthorized, "/version": html, "/v1/models": html}) as s:
        cfg = introspect(s.url, timeout_s=5)
    assert cfg.reachable is True and cfg.engine is None
    assert "GET /server_info: HTTP 401, needs an admin API key (--api-key or INFERGAP_API_KEY)" in cfg.errors
    assert "GET /version: answered an HTML page, not JSON" in cfg.errors
    assert all("\n" not in e for e in cfg.errors)
    assert not any("/props" in e for e in cfg.errors)  # 404: not exposed, not an error


def test_hanging_server_times_out():
    async def hang(request):
        await asyncio.sleep(30)
        return web.json_response({})

    with AppServer({p: hang for p in ("/server_info", "/get_server_info", "/version", "/v1/models", "/metrics")}) as s:
        t0 = time.monotonic()
        cfg = introspect(s.url, timeout_s=1.0)
        assert time.monotonic() - t0 < 5
    assert any("timed out after 1 s" in e for e in cfg.errors)


def test_nothing_listening():
    cfg = introspect(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    assert cfg.reachable is False and len(cfg.errors) == 1 and "no answer" in cfg.errors[0]
    (f,) = server_config.investigate(SimpleNamespace(snap=EvidenceSnapshot(None, []), server=cfg))
    assert f.id == "server.config" and f.status.value == "unknown"


def test_unidentified_engine_says_what_was_read_and_how_to_find_out():
    """A server answering only /v1/models (a plain OpenAI-compatible endpoint): the engine is
    unknown, and the finding says so with the endpoints tried and the startup log to pass."""
    async def models(request):
        return web.json_response({"object": "list", "data": [{"id": "stub", "object": "model"}]})

    with AppServer({"/v1/models": models}) as s:
        cfg = introspect(s.url, timeout_s=5)
    (f,) = server_config.investigate(SimpleNamespace(snap=EvidenceSnapshot(None, []), server=cfg))
    assert (f.id, f.status.value, f.title) == ("server.config", "unknown", "Unknown engine serving stub")
    assert "/server_info" in f.impact and "/props" in f.impact and "--evidence" in f.impact


def test_bad_url():
    with pytest.raises(ValueError, match="not an http"):
        introspect("ftp://example")


def test_server_findings_against_host():
    """SGLang with cuda_graph_max_bs 32 while a log shows 46 requests decoding: graph limit below
    the concurrency the server runs; TP 8 with custom all-reduce off on a host whose topology
    has no NVLink (the public PXB/PIX paste) is expected."""
    with AppServer(sglang_routes()) as s:
        cfg = introspect(s.url, timeout_s=5)
    snap = EvidenceSnapshot(None, [FIX / "topo-667-pxb-pix.txt", FIX / "sglang-26248-kv-full.log"])
    found = {f.id: f for f in server_config.investigate(SimpleNamespace(snap=snap, server=cfg))}
    assert found["server.config"].status.value == "ok"
    assert found["allreduce.custom"].status.value == "expected"
    assert found["server.cuda_graph_max_bs"].status.value == "ok"  # that log ran 4 requests
    snap = EvidenceSnapshot(None, [FIX / "topo-667-pxb-pix.txt", FIX / "sglang-13023-decode-no-graph.log"])
    found = {f.id: f for f in server_config.investigate(SimpleNamespace(snap=snap, server=cfg))}
    assert "server.cuda_graph_max_bs" not in found  # the log's own engine.cuda_graph finding says it


def test_llama_cpp_python_live(llama_server):
    cfg = introspect(llama_server, api_key=API_KEY, timeout_s=10)
    import llama_cpp

    assert cfg.reachable and cfg.engine == "llama-cpp-python" and cfg.version == llama_cpp.__version__
    assert cfg.served_model_name and cfg.served_model_name.endswith("tiny.gguf")
    assert cfg.sources["served_model_name"] == "GET /v1/models"


def test_llama_cpp_python_without_key(llama_server):
    cfg = introspect(llama_server, api_key="", timeout_s=10)
    assert cfg.engine == "llama-cpp-python"  # /openapi.json is public
    assert "GET /v1/models: HTTP 401, needs an admin API key (--api-key or INFERGAP_API_KEY)" in cfg.errors


def test_fp8_kv_on_sm120_prefill_heavy():
    """vLLM reporting an FP8 KV cache and 16 prompt tokens per generated token, on the RTX 5070
    of a public nvidia-smi paste (SM120): FP8 KV buys capacity, not speed, there."""
    with AppServer(vllm_routes()) as s:
        cfg = introspect(s.url, timeout_s=5)
    snap = EvidenceSnapshot(None, [FIX / "nvsmi-libc6shim14-rtx5070.txt"])
    found = {f.id: f for f in server_config.investigate(SimpleNamespace(snap=snap, server=cfg))}
    f = found["server.kv_fp8_sm120"]
    assert f.status.value == "actionable" and f.severity.value == "P2"
    assert any("16.0" in e.value for e in f.evidence)
    # the same server on the real H200 capture (SM90): no such finding
    found = {f.id for f in server_config.investigate(SimpleNamespace(snap=open_snapshot(H200), server=cfg))}
    assert "server.kv_fp8_sm120" not in found


def test_sglang_graph_limit_below_running_batch():
    """SGLang capturing graphs up to batch 32 while its /metrics shows 46 running requests."""
    routes = {**sglang_routes(), "/metrics": body("sglang_metrics.txt", "text/plain")}
    with AppServer(routes) as s:
        cfg = introspect(s.url, timeout_s=5)
    assert cfg.running_requests == 46.0 and cfg.sources["running_requests"] == "GET /metrics"
    found = {f.id: f for f in server_config.investigate(SimpleNamespace(snap=open_snapshot(H200), server=cfg))}
    f = found["server.cuda_graph_max_bs"]
    assert f.status.value == "actionable" and f.severity.value == "P1"
    assert "--cuda-graph-max-bs 64" in f.remedy.commands[0]


def test_llama_server_props_and_metrics():
    routes = {"/props": body("llamacpp_props.json"), "/metrics": body("llamacpp_metrics.txt", "text/plain")}
    with AppServer(routes) as s:
        cfg = introspect(s.url, timeout_s=5)
    assert (cfg.engine, cfg.version, cfg.n_slots, cfg.context_length, cfg.model) == (
        "llama.cpp", "b6130-e54d41be", 4, 8192, "/models/Qwen3-8B-Q4_K_M.gguf")
    assert (cfg.running_requests, cfg.waiting_requests) == (4.0, 7.0)
    assert cfg.sources["n_slots"] == "GET /props"


def test_transformers_serve_recognised_from_its_real_openapi_body():
    """The real H200 run's transformers 5.17 server listed no model in /v1/models; its OpenAPI
    document (recorded there) still names the engine."""
    from pathlib import Path

    rec = Path(__file__).resolve().parents[1] / "fixtures" / "real-gpu" / "h200-transformers"
    openapi = (rec / "openapi.json").read_bytes()
    models = b'{"object":"list","data":[]}'

    def raw(data):
        async def h(request):
            return web.Response(body=data, content_type="application/json")
        return h

    with AppServer({"/openapi.json": raw(openapi), "/v1/models": raw(models)}) as s:
        cfg = introspect(s.url, timeout_s=5)
    assert cfg.engine == "transformers" and cfg.sources["engine"] == "GET /openapi.json"


def test_body_arriving_in_pieces_is_read_whole():
    """A JSON body split over several writes (as a large /openapi.json is) must be read to the end."""
    doc = json.dumps({"openapi": "3.1.0", "info": {"title": "🦙 llama.cpp Python API", "version": "0.3.36"},
                      "paths": {f"/p{i}": {} for i in range(2000)}}).encode()

    async def pieces(request):
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        for i in range(0, len(doc), 4096):
            await resp.write(doc[i:i + 4096])
            await asyncio.sleep(0.01)
        await resp.write_eof()
        return resp

    with AppServer({"/openapi.json": pieces}) as s:
        cfg = introspect(s.url, timeout_s=10)
    assert not any("openapi" in e for e in cfg.errors), cfg.errors
    assert cfg.engine == "llama-cpp-python" and cfg.version == "0.3.36"  # its own engine, not llama-server


def test_llama_cpp_python_is_its_own_engine_in_the_plan():
    """llama-cpp-python's server (its FastAPI title "🦙 llama.cpp Python API", its /v1/models
    entry owned by "me", as llama_cpp/server/app.py serves them) is named as what it is: never
    "llama.cpp" with the package's version, never given llama-server's flags."""
    from infergap.plan import build_plan
    from infergap.server import ServerConfig, _apply, finish

    cfg = ServerConfig(url="http://127.0.0.1:8000", reachable=True)
    doc = {"openapi": "3.1.0", "info": {"title": "🦙 llama.cpp Python API", "version": "0.3.36"}, "paths": {}}
    _apply(cfg, "/openapi.json", doc, json.dumps(doc))
    models = {"object": "list", "data": [{"id": "/models/tiny.gguf", "object": "model", "owned_by": "me", "permissions": []}]}
    _apply(cfg, "/v1/models", models, json.dumps(models))
    finish(cfg)
    assert (cfg.engine, cfg.version) == ("llama-cpp-python", "0.3.36")
    text = build_plan(server=cfg).model_dump_json()
    assert "llama-cpp-python" in text and "llama.cpp" not in text.replace("llama.cpp Python", "")
    assert not any(flag in text for flag in ("--parallel", "--ctx-size", "-np ", "--n-gpu-layers"))
