"""Hostile servers: usage blocks with impossible token counts, endless event lines, nested or
huge JSON answers, crafted Prometheus labels. A real aiohttp server on 127.0.0.1 misbehaves on
purpose (no real engine can be made to answer like this on demand)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from time import perf_counter

import pytest
from aiohttp import web

from infergap.bench.client import MAX_SSE_LINE, StreamClient
from infergap.bench.datasets import Prompt
from infergap.bench.metrics import RequestRecord


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _chunk(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class HostileServer:
    """Answers ``POST /v1/chat/completions`` according to ``mode``; ``GET`` paths from ``pages``."""

    def __init__(self, mode: str = "ok", pages: dict[str, str] | None = None) -> None:
        self.mode, self.pages = mode, pages or {}
        self.port = _port()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        self.ready.wait(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _chat(self, req: web.Request):
        body = await req.json()
        if not body.get("stream"):
            if self.mode == "nested":
                return web.Response(text="[" * 100_000 + "]" * 100_000, content_type="application/json")
            if self.mode in ("over_max", "no_content"):
                content, n = ("hi", 1000) if self.mode == "over_max" else ("", 4)
                return web.json_response({"choices": [{"message": {"content": content}, "finish_reason": "length"}],
                                          "usage": {"prompt_tokens": 5, "completion_tokens": n}})
            return web.json_response({"choices": [{"message": {"content": "hi"}, "finish_reason": "length"}],
                                      "usage": {"prompt_tokens": -7420, "completion_tokens": 10**15}})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(req)
        if self.mode == "endless":
            block = b"data: {\"choices\": [{\"delta\": {\"content\": \"" + b"x" * 65536
            for _ in range(MAX_SSE_LINE // 65536 + 64):
                await resp.write(block)
            return resp
        if self.mode != "no_content":
            await resp.write(_chunk({"choices": [{"delta": {"content": " x"}, "finish_reason": None}]}))
        usage = {"over_max": {"prompt_tokens": 5, "completion_tokens": 1_000_000},
                 "no_content": {"prompt_tokens": 5, "completion_tokens": 4},"negative": {"prompt_tokens": 5, "completion_tokens": -7420},
                 "absurd": {"prompt_tokens": 10**15, "completion_tokens": 4},
                 "float": {"prompt_tokens": 5, "completion_tokens": 4.5},
                 "ok": {"prompt_tokens": 5, "completion_tokens": 4}}[self.mode]
        await resp.write(_chunk({"choices": [{"delta": {}, "finish_reason": "length"}], "usage": usage}))
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def _page(self, req: web.Request):
        text = self.pages.get(req.path)
        if text is None:
            return web.Response(status=404)
        return web.Response(text=text, content_type="text/plain" if req.path == "/metrics" else "application/json")

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application(client_max_size=1 << 30)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/{tail:.*}", self._page)
        runner = web.AppRunner(app)
        self.loop.run_until_complete(runner.setup())
        self.loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self.ready.set()
        self.loop.run_forever()


def _request(server: HostileServer, stream: bool = True) -> RequestRecord:
    async def go():
        c = StreamClient(server.url, "m", stream=stream, connections=1, timeout_s=60)
        await c.open()
        try:
            return await c.request(Prompt("hi", 1, 4), RequestRecord(intended=perf_counter()))
        finally:
            await c.close()
    return asyncio.run(go())


@pytest.mark.parametrize("mode", ["negative", "absurd", "float"])
def test_impossible_usage_counts_fail_the_request(mode):
    rec = _request(HostileServer(mode))
    assert rec.error == "bad_usage", (rec.error, rec.error_detail)
    assert "usage." in rec.error_detail
    assert rec.usage_completion is None or rec.usage_completion >= 0


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("mode", ["over_max", "no_content"])
def test_usage_the_answer_cannot_have_is_bad_usage(mode, stream):
    """Usage above the request's max_tokens (4), or tokens counted with no content sent, are
    counts the server invented: the request fails as bad_usage instead of becoming output."""
    rec = _request(HostileServer(mode), stream=stream)
    assert rec.error == "bad_usage", (rec.error, rec.error_detail, rec.usage_completion)
    assert ("max_tokens" in rec.error_detail) if mode == "over_max" else ("no content" in rec.error_detail)


def test_valid_usage_is_taken():
    rec = _request(HostileServer("ok"))
    assert rec.error is None and rec.usage_completion == 4


def test_non_streamed_answer_with_impossible_usage():
    rec = _request(HostileServer("negative"), stream=False)
    assert rec.error == "bad_usage"


def test_nested_non_streamed_answer_is_a_failed_request():
    rec = _request(HostileServer("nested"), stream=False)
    assert rec.error == "bad_response" and "nested" in rec.error_detail


def test_endless_event_line_is_bounded():
    import tracemalloc

    tracemalloc.start()
    rec = _request(HostileServer("endless"))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert rec.error == "bad_chunk" and "longer than" in rec.error_detail
    assert peak < 4 * MAX_SSE_LINE


def test_crafted_prometheus_labels_and_nested_answers_in_introspection():
    from infergap.server import introspect

    metrics = "sglang:num_running_reqs{" + 'a="' * 30_000 + "} 1\n" + "vllm:x{" + "a" * 60_000 + "} 2\n"
    server = HostileServer(pages={"/metrics": metrics, "/server_info": "[" * 100_000 + "]" * 100_000,
                                  "/v1/models": json.dumps({"data": [{"id": "m", "max_model_len": float("1e308") * 10}]}, allow_nan=True)})
    t0 = time.monotonic()
    cfg = introspect(server.url, timeout_s=10)
    assert time.monotonic() - t0 < 10
    assert any("nested" in e for e in cfg.errors), cfg.errors
