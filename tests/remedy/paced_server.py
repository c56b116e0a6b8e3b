"""A minimal OpenAI-compatible streaming server whose speed depends on a real sysctl.

Serves ``GET /v1/models`` and streamed ``POST /v1/chat/completions``: a role chunk, exactly
``max_tokens`` content chunks, a finish chunk, a usage chunk when ``stream_options.include_usage``
is set, then ``data: [DONE]``. Between tokens it sleeps ``--slow-ms`` while
``/proc/sys/net/core/somaxconn`` (read on every request, in the server's network namespace) is
below ``--threshold``, and ``--fast-ms`` once it is at or above it: a fix that raises the backlog
makes this server measurably faster, so a before/after check has a real effect to detect.

    ip netns exec NS python paced_server.py --port 8011
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from aiohttp import web


def _chunk(delta: dict, finish: str | None = None) -> bytes:
    return b"data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "created": int(time.time()), "model": "paced",
                                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).encode() + b"\n\n"


def make_app(slow_ms: float, fast_ms: float, threshold: int) -> web.Application:
    async def models(_req: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "paced", "object": "model"}]})

    async def chat(req: web.Request) -> web.StreamResponse:
        body = await req.json()
        n = int(body.get("max_tokens") or 16)
        with open("/proc/sys/net/core/somaxconn") as f:
            delay = (fast_ms if int(f.read()) >= threshold else slow_ms) / 1000
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages") or [])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(req)
        await resp.write(_chunk({"role": "assistant"}))
        for _ in range(n):
            await asyncio.sleep(delay)
            await resp.write(_chunk({"content": " tok"}))
        await resp.write(_chunk({}, "length"))
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
            await resp.write(b"data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "model": "paced",
                                                     "choices": [], "usage": usage}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--slow-ms", type=float, default=4.0)
    ap.add_argument("--fast-ms", type=float, default=1.0)
    ap.add_argument("--threshold", type=int, default=8192)
    a = ap.parse_args()
    runner = web.AppRunner(make_app(a.slow_ms, a.fast_ms, a.threshold))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", a.port).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
