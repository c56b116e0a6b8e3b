"""Minimal OpenAI-compatible streaming stub used to measure the bench client's own ceiling.

Each request streams ``--tokens`` chunks (default 128; one SSE ``data:`` event per token, the
event loop yielded between tokens as a real server's would be), then a usage chunk and
``data: [DONE]``. ``--itl-ms`` adds a delay between tokens (a slower server); ``--slots N`` serves at
most N streams at once, the others wait (queued, not yet answered) for a free slot, so a stub
with N slots, T tokens and an ITL of d has a known service rate of N / (T × d) requests/s.
``--close-after-stream`` closes the connection after each streamed response although the
response was sent as keep-alive (what llama.cpp's ``llama-server`` does). The stub counts
requests, tokens and the time-weighted number of streams in flight (its own view of the
concurrency the client achieved): ``GET /stats``; ``POST /reset`` zeroes them.

Faults, by the prompt's index (the number before the first ``:`` of a synthetic prompt,
``<salt><i>: …``), so that the same requests fail however the load is spread over client
processes: ``--fail-every K`` answers HTTP 503 to every request whose index ``i`` has
``i % K == K - 1``, ``--error-every K`` sends an error event after the first tokens, ``--cut-every
K`` closes the connection in the middle of the stream, ``--drop-every K`` closes a *re-used*
keep-alive connection on receiving the request, before any response byte (a client retries such a
request on a fresh connection, which is served).

    taskset -c 1 python benchmarks/stub_server.py --port 8799
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time

from aiohttp import web

MODEL = "stub"


class Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.requests = self.tokens = self.n = self.peak = 0
        self.area = 0.0
        self.t0 = self.last = None
        self.faults = {"fail": 0, "error": 0, "cut": 0, "drop": 0}

    def change(self, d: int) -> None:
        """Requests in flight change by ``d``; the window runs from the first request after a
        reset to the last change (a client's start-up time is not counted)."""
        now = time.perf_counter()
        if self.t0 is None:
            if d <= 0:
                return
            self.t0 = self.last = now
        self.area += self.n * (now - self.last)
        self.last = now
        self.n += d
        self.peak = max(self.peak, self.n)

    def as_dict(self) -> dict:
        span = max(self.last - self.t0, 1e-9) if self.t0 is not None else 0.0
        return {"requests": self.requests, "tokens": self.tokens,
                "mean_in_flight": self.area / span if span else 0.0, "peak_in_flight": self.peak, "span_s": span,
                "tokens_per_s": self.tokens / span if span else 0.0, "requests_per_s": self.requests / span if span else 0.0,
                "faults": dict(self.faults)}


_INDEX = re.compile(r"(\d+):")


def prompt_index(d: dict) -> int | None:
    """The index of a synthetic prompt (``<salt><i>: …``) in a request body, None without one."""
    msgs = d.get("messages")
    text = msgs[-1].get("content") if isinstance(msgs, list) and msgs and isinstance(msgs[-1], dict) else d.get("prompt")
    m = _INDEX.search(text[:200]) if isinstance(text, str) else None
    return int(m.group(1)) if m else None


def make_app(tokens: int, itl_ms: float, slots: int = 0, close_after_stream: bool = False,
             faults: dict[str, int] | None = None) -> web.Application:
    st = Stats()
    faults = {k: v for k, v in (faults or {}).items() if v}
    seen: dict[int, object] = {}  # connections that served a request (the object kept: ids stay unique)

    def hit(kind: str, i: int | None) -> bool:
        k = faults.get(kind)
        return bool(k) and i is not None and i % k == k - 1
    gate = asyncio.Semaphore(slots) if slots > 0 else None
    chat_chunk = (b'data: {"id":"x","object":"chat.completion.chunk","created":0,"model":"stub",'
                  b'"choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}\n\n')
    comp_chunk = (b'data: {"id":"x","object":"text_completion","created":0,"model":"stub",'
                  b'"choices":[{"index":0,"text":" tok","finish_reason":null}]}\n\n')
    role = b'data: {"id":"x","object":"chat.completion.chunk","created":0,"model":"stub","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}\n\n'
    delay = itl_ms / 1000.0

    async def models(_req):
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def completions(req: web.Request):
        body = await req.read()
        d = json.loads(body)
        n = min(int(d.get("max_tokens") or tokens), tokens)
        chat = req.path.endswith("chat/completions")
        chunk = chat_chunk if chat else comp_chunk
        if faults:
            i = prompt_index(d)
            t = req.transport
            if hit("drop", i) and t is not None and id(t) in seen:
                st.faults["drop"] += 1
                t.close()  # before any response byte, on a connection that served before
                raise web.HTTPServiceUnavailable()  # never reaches the client
            if t is not None and "drop" in faults:
                seen[id(t)] = t
            if hit("fail", i):
                st.faults["fail"] += 1
                raise web.HTTPServiceUnavailable(text="stub: failing this request on purpose")
            d["_cut"] = hit("cut", i)
            d["_error"] = hit("error", i)
        if gate is not None:
            await gate.acquire()
        try:
            return await stream(req, d, n, chat, chunk)
        finally:
            if gate is not None:
                gate.release()

    async def stream(req, d, n, chat, chunk):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(req)
        st.requests += 1
        st.change(1)
        try:
            if chat:
                await resp.write(role)
            for k in range(n):
                if k == 2 and (d.get("_cut") or d.get("_error")):
                    st.faults["cut" if d.get("_cut") else "error"] += 1
                    if d.get("_error"):
                        await resp.write(b'data: {"error": {"message": "stub: error event on purpose"}}\n\n')
                        await resp.write_eof()
                        return resp
                    req.transport.close()  # in the middle of the chunked body
                    return resp
                await resp.write(chunk)
                if delay:
                    await asyncio.sleep(delay)
                else:
                    await asyncio.sleep(0)
            st.tokens += n
            prompt = len(str(d.get("messages") or d.get("prompt") or "").split())
            fin = {"id": "x", "object": "chat.completion.chunk", "model": MODEL,
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
            use = {"id": "x", "object": "chat.completion.chunk", "model": MODEL, "choices": [],
                   "usage": {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}}
            await resp.write(b"data: " + json.dumps(fin).encode() + b"\n\ndata: " + json.dumps(use).encode()
                             + b"\n\ndata: [DONE]\n\n")
            await resp.write_eof()
            if close_after_stream and req.transport is not None:
                req.transport.close()  # after the response's bytes are flushed; no Connection: close sent
        finally:
            st.change(-1)
        return resp

    async def stats(_req):
        return web.json_response(st.as_dict())

    async def reset(_req):
        st.reset()
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/health", stats)
    app.router.add_get("/stats", stats)
    app.router.add_post("/reset", reset)
    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8799)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--itl-ms", type=float, default=0.0)
    ap.add_argument("--slots", type=int, default=0, help="streams served at once (0: no limit)")
    ap.add_argument("--close-after-stream", action="store_true")
    for kind, what in (("fail", "HTTP 503"), ("error", "an error event after 2 tokens"),
                       ("cut", "the connection closed after 2 tokens"), ("drop", "a re-used connection closed unanswered")):
        ap.add_argument(f"--{kind}-every", type=int, default=0, metavar="K", help=f"{what} for prompt indexes i % K == K - 1")
    a = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(make_app(a.tokens, a.itl_ms, a.slots, a.close_after_stream,
                         {"fail": a.fail_every, "error": a.error_every, "cut": a.cut_every, "drop": a.drop_every}), host="127.0.0.1", port=a.port, access_log=None, print=None,
                backlog=4096)


if __name__ == "__main__":
    main()
