"""Minimal OpenAI-compatible streaming stub used to measure the bench client's own ceiling.

Each request streams ``--tokens`` chunks (default 128; one SSE ``data:`` event per token, one
HTTP chunk and one socket write each, written by a decode loop that gives every stream in flight
one token per step, as an engine's decode step does; see :class:`Steps`), then a usage chunk and
``data: [DONE]``. ``--itl-ms`` adds a delay between tokens (a slower server); ``--slots N`` serves at
most N streams at once, the others wait (queued, not yet answered) for a free slot, so a stub
with N slots, T tokens and an ITL of d has a known service rate of N / (T × d) requests/s.
``--workers N`` runs N server processes on the same port (SO_REUSEPORT), counting into shared
memory, for clients faster than one core of server (peak in flight is then the sum of the workers'
peaks). ``--spread F`` ends each response at a length drawn uniformly from ``(1 − F)`` × ``max_tokens`` to
``max_tokens``, as end-of-sequence ends real responses (with one fixed length, a closed loop's
requests all end in the same decode step and the client answers them in one burst: an artefact of
the experiment, not a property of a client or a workload). ``--close-after-stream`` closes the
connection after each streamed response although the
response was sent as keep-alive (what llama.cpp's ``llama-server`` does). The stub counts
requests, tokens and the time-weighted number of requests in flight, from the arrival of their
headers to the end of their answer (its own view of the
concurrency the client achieved; ``steady_in_flight``: the same up to the start of the last
request, without a closed loop's draining tail, and — after ``POST /reset?ramp=N`` — from the
arrival of the N-th request, without the client's ramp-up, i.e. the time it takes to open its first
N connections; ``ramp_s``: that ramp-up): ``GET /stats``; ``POST /reset`` zeroes them.

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
import math
import random
import re
import time

from aiohttp import web

MODEL = "stub"


_FIELDS = ("requests", "tokens", "n", "peak", "area", "area_started", "t0", "last", "last_start", "arrivals",
           "area_ramp", "t_ramp", "ramp", "ramp_end")
_W = len(_FIELDS)


class Stats:
    """Counters of the stub. With ``--workers`` each worker process counts into its own slot of a
    shared array (no lock: one writer per slot) and ``/stats`` adds the workers' figures up: in
    flight is the sum of each worker's time-weighted mean over its own window. The end of the
    ramp-up is one moment for all workers (``ramp_end`` in worker 0's slot, written once by the
    worker that counts the ``ramp``-th arrival; ``time.perf_counter`` is the system-wide monotonic
    clock on Linux); a worker's steady window starts there or at its own first request, whichever
    is later. A time of 0.0 means unset."""

    def __init__(self, shared=None, worker: int = 0, workers: int = 1) -> None:
        self.all = shared if shared is not None else [0.0] * _W
        self.workers = workers
        self.off = worker * _W
        self.faults = {"fail": 0, "error": 0, "cut": 0, "drop": 0}  # this worker's (faults: use one worker)
        self.reset()

    def reset(self, ramp: int = 0) -> None:
        """Zero the counters; the steady window then starts at the ``ramp``-th arrival (0: the first),
        counted over all workers."""
        for k in range(len(self.all)):
            self.all[k] = 0.0
        for w in range(self.workers):
            self.all[w * _W + 12] = ramp
        self.faults = dict.fromkeys(self.faults, 0)

    def add(self, field: str, v: int) -> None:
        self.all[self.off + _FIELDS.index(field)] += v

    def change(self, d: int) -> None:
        """Requests in flight change by ``d``; the window runs from the first request after a
        reset to the last change (a client's start-up time is not counted)."""
        now = time.perf_counter()
        a, o = self.all, self.off
        if a[o + 6] == 0.0:  # t0
            if d <= 0:
                return
            a[o + 6] = a[o + 7] = now
        if a[o + 11] == 0.0 and a[13]:  # the first change here since the ramp-up ended
            self._mark_ramp(a[13])
        a[o + 4] += a[o + 2] * (now - a[o + 7])  # area += n × (now - last)
        a[o + 7] = now
        a[o + 2] += d
        a[o + 3] = max(a[o + 3], a[o + 2])
        if d > 0:  # the steady window ends when the last request starts (a closed loop's tail excluded)
            a[o + 5], a[o + 8] = a[o + 4], now
            a[o + 9] += 1
            if not a[13] and sum(a[w * _W + 9] for w in range(self.workers)) >= max(a[o + 12], 1):
                a[13] = now  # the ramp-up ends: every worker's steady window starts here
                self._mark_ramp(now)

    def _mark_ramp(self, end: float, v: list | None = None, o: int | None = None) -> None:
        """Set a worker's steady-window start (its area and time at ``end``, or at its own first
        request if that came later): in its own slot, or in ``v`` (a copy) when reading."""
        a = v if v is not None else self.all
        o = self.off if o is None else o
        if end <= a[o + 6]:
            a[o + 10], a[o + 11] = 0.0, a[o + 6]
        else:
            a[o + 10], a[o + 11] = a[o + 4] + a[o + 2] * (end - a[o + 7]), end

    def as_dict(self) -> dict:
        req = tok = peak = 0
        mean = steady_mean = span = steady = 0.0
        first = float("inf")
        vals = list(self.all)
        for w in range(self.workers):
            if vals[w * _W + 6] and not vals[w * _W + 11] and vals[13]:
                self._mark_ramp(vals[13], vals, w * _W)  # no change here since the ramp-up ended
            v = dict(zip(_FIELDS, vals[w * _W:(w + 1) * _W]))
            req += int(v["requests"])
            tok += int(v["tokens"])
            peak += int(v["peak"])
            if v["t0"]:
                sp = max(v["last"] - v["t0"], 1e-9)
                start, area0 = (v["t_ramp"], v["area_ramp"]) if v["t_ramp"] else (v["t0"], 0.0)
                first = min(first, v["t0"])
                st = v["last_start"] - start
                mean += v["area"] / sp
                steady_mean += (v["area_started"] - area0) / st if st > 0 else 0.0
                span, steady = max(span, sp), max(steady, st)
        return {"requests": req, "tokens": tok, "mean_in_flight": mean, "peak_in_flight": peak, "span_s": span,
                "steady_in_flight": steady_mean, "steady_s": steady,
                "ramp_s": vals[13] - first if vals[13] and first < vals[13] else 0.0,
                "tokens_per_s": tok / span if span else 0.0, "requests_per_s": req / span if span else 0.0,
                "faults": dict(self.faults)}


def _chunked(payload: bytes) -> bytes:
    """``payload`` as one HTTP/1.1 chunk (RFC 9112 §7.1: size in hex, CRLF, data, CRLF)."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class Steps:
    """The stub's decode loop, shared by all streams of a process, as an engine's decode step is:
    each step writes one token event to every stream in flight, then waits ``delay`` seconds (0:
    one event-loop turn, so that new requests are read between steps). A stream's events go
    straight to its transport as ready-made HTTP chunks: the per-token cost is one ``write``, so
    one stub core outruns a client core (through aiohttp's per-write path it did not: about
    114,000 tok/s per core, below the client's ceiling on the same machine)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.active: list[list] = []  # [transport, frame, tokens left, tokens sent, future]
        self.task: asyncio.Task | None = None

    def stream(self, transport, frame: bytes, n: int) -> asyncio.Future:
        """Write ``frame`` ``n`` times, one per step, to ``transport``; the future gives the number
        written (fewer when the connection closed first)."""
        fut = asyncio.get_running_loop().create_future()
        if n <= 0 or transport is None:
            fut.set_result(0)
            return fut
        self.active.append([transport, frame, n, 0, fut])
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._run())
        return fut

    async def _run(self) -> None:
        while self.active:
            keep = []
            for s in self.active:  # no await in here: arrivals join during the sleep below
                if s[0].is_closing() or s[4].done():  # the client went away (or its handler was cancelled)
                    if not s[4].done():
                        s[4].set_result(s[3])
                    continue
                s[0].write(s[1])
                s[2] -= 1
                s[3] += 1
                if s[2]:
                    keep.append(s)
                else:
                    s[4].set_result(s[3])
            self.active = keep
            await asyncio.sleep(self.delay)


_INDEX = re.compile(r"(\d+):")


def prompt_index(d: dict) -> int | None:
    """The index of a synthetic prompt (``<salt><i>: …``) in a request body, None without one."""
    msgs = d.get("messages")
    text = msgs[-1].get("content") if isinstance(msgs, list) and msgs and isinstance(msgs[-1], dict) else d.get("prompt")
    m = _INDEX.search(text[:200]) if isinstance(text, str) else None
    return int(m.group(1)) if m else None


#: Prompt tokens the usage block counts per whitespace word (--tokens-per-word): a tokenizer that
#: splits each word into several tokens, as real ones do for rare words and most scripts.
TOKENS_PER_WORD = 1.0


def make_app(tokens: int, itl_ms: float, slots: int = 0, close_after_stream: bool = False,
             faults: dict[str, int] | None = None, shared=None, worker: int = 0, workers: int = 1,
             spread: float = 0.0) -> web.Application:
    st = Stats(shared, worker, workers)
    rng = random.Random(worker)
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
    steps = Steps(itl_ms / 1000.0)

    async def models(_req):
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def completions(req: web.Request):
        st.change(1)  # in flight at the server from the arrival of its headers to the end of its answer
        try:
            return await answer(req)
        finally:
            st.change(-1)

    async def answer(req: web.Request):
        body = await req.read()
        d = json.loads(body)
        n = min(int(d.get("max_tokens") or tokens), tokens)
        if spread:
            n = rng.randint(max(1, math.ceil(n * (1 - spread))), n)
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
        await resp.prepare(req)  # a StreamResponse sends its headers here: later raw writes follow them
        st.add("requests", 1)
        if chat:
            await resp.write(role)
        bad = d.get("_cut") or d.get("_error")
        sent = await steps.stream(req.transport, _chunked(chunk), min(n, 2) if bad else n)
        if sent < (min(n, 2) if bad else n):
            return resp  # the client went away
        if bad:
            st.faults["cut" if d.get("_cut") else "error"] += 1
            if d.get("_error"):
                await resp.write(b'data: {"error": {"message": "stub: error event on purpose"}}\n\n')
                await resp.write_eof()
                return resp
            req.transport.close()  # in the middle of the chunked body
            return resp
        st.add("tokens", n)
        prompt = round(len(str(d.get("messages") or d.get("prompt") or "").split()) * TOKENS_PER_WORD)
        fin = {"id": "x", "object": "chat.completion.chunk", "model": MODEL,
               "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
        use = {"id": "x", "object": "chat.completion.chunk", "model": MODEL, "choices": [],
               "usage": {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}}
        await resp.write(b"data: " + json.dumps(fin).encode() + b"\n\ndata: " + json.dumps(use).encode()
                         + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        if close_after_stream and req.transport is not None:
            req.transport.close()  # after the response's bytes are flushed; no Connection: close sent
        return resp

    async def stats(_req):
        return web.json_response(st.as_dict())

    async def reset(req):
        st.reset(int(req.query.get("ramp", "0")))
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/health", stats)
    app.router.add_get("/stats", stats)
    app.router.add_post("/reset", reset)
    return app


def serve(a: argparse.Namespace, shared=None, worker: int = 0) -> None:
    """One server process on ``a.port`` (with ``shared``: worker ``worker`` of several sharing the port)."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    faults = {"fail": a.fail_every, "error": a.error_every, "cut": a.cut_every, "drop": a.drop_every}
    web.run_app(make_app(a.tokens, a.itl_ms, a.slots, a.close_after_stream, faults, shared, worker, a.workers, a.spread), host="127.0.0.1",
                port=a.port, access_log=None, print=None, backlog=4096, reuse_port=shared is not None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8799)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--itl-ms", type=float, default=0.0)
    ap.add_argument("--slots", type=int, default=0, help="streams served at once (0: no limit)")
    ap.add_argument("--close-after-stream", action="store_true")
    ap.add_argument("--spread", type=float, default=0.0, metavar="F",
                    help="each response ends after a length drawn uniformly from [(1 - F) × its max_tokens, max_tokens]")
    ap.add_argument("--workers", type=int, default=1,
                    help="server processes sharing the port (SO_REUSEPORT) and the counters; --slots is per process")
    for kind, what in (("fail", "HTTP 503"), ("error", "an error event after 2 tokens"),
                       ("cut", "the connection closed after 2 tokens"), ("drop", "a re-used connection closed unanswered")):
        ap.add_argument(f"--{kind}-every", type=int, default=0, metavar="K", help=f"{what} for prompt indexes i %% K == K - 1")
    ap.add_argument("--tokens-per-word", type=float, default=1.0, metavar="F",
                    help="usage.prompt_tokens counts F tokens per whitespace word of the prompt")
    a = ap.parse_args()
    global TOKENS_PER_WORD
    TOKENS_PER_WORD = a.tokens_per_word
    if a.workers <= 1:
        serve(a)
        return
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    shared = ctx.RawArray("d", _W * a.workers)
    procs = [ctx.Process(target=serve, args=(a, shared, w), daemon=True) for w in range(1, a.workers)]
    for p in procs:
        p.start()
    try:
        serve(a, shared)
    finally:
        for p in procs:
            p.terminate()


if __name__ == "__main__":
    main()
