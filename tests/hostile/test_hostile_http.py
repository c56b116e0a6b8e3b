"""Hostile HTTP answers (class 4 of docs/security.md): redirects to another address, gzip bodies
that inflate to hundreds of MiB, a server that drips its header one byte a second. Real servers
on 127.0.0.1 (aiohttp, and a raw socket for the drip) misbehave on purpose."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import tracemalloc
from time import perf_counter

import pytest
from aiohttp import web

from benchmarks.hostile import gzip_bomb
from infergap.bench.client import StreamClient, probe
from infergap.bench.datasets import Prompt
from infergap.bench.engine_metrics import SCRAPE_TIMEOUT_S, EngineScraper
from infergap.bench.metrics import RequestRecord
from infergap.errors import UserError

BOMB_MIB = 256


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """An aiohttp server in a thread answering each path with ``routes[path](request)``."""

    def __init__(self, routes) -> None:
        self.routes, self.port = routes, _port()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _any(self, req: web.Request):
        h = self.routes.get(req.path)
        return web.Response(status=404) if h is None else await h(req)

    def _run(self, ready) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._any)
        runner = web.AppRunner(app)
        self.loop.run_until_complete(runner.setup())
        self.loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        ready.set()
        self.loop.run_forever()


async def _models(_req):
    return web.json_response({"data": [{"id": "m"}]})


async def _chat(_req):
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(_req)
    await resp.write(b'data: {"choices": [{"delta": {"content": "x"}, "finish_reason": "length"}]}\n\ndata: [DONE]\n\n')
    return resp


def _redirect(target: str, status: int = 307):
    async def h(_req):
        return web.Response(status=status, headers={"Location": target})
    return h


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return gzip_bomb(BOMB_MIB)


def _gzip(body: bytes, status: int = 200, ctype: str = "application/json"):
    async def h(_req):
        return web.Response(body=body, status=status, headers={"Content-Encoding": "gzip", "Content-Type": ctype})
    return h


def _request(url: str, stream: bool = True) -> RequestRecord:
    async def go():
        c = StreamClient(url, "m", stream=stream, connections=1, timeout_s=30)
        await c.open()
        try:
            return await c.request(Prompt("hi", 1, 4), RequestRecord(intended=perf_counter()))
        finally:
            await c.close()
    return asyncio.run(go())


# -- redirects ----------------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [True, False])
def test_a_redirected_request_fails_naming_the_target(stream):
    other = Server({"/v1/models": _models, "/v1/chat/completions": _chat})
    target = other.url + "/v1/chat/completions"
    rec = _request(Server({"/v1/chat/completions": _redirect(target)}).url, stream)
    assert rec.error == "redirect", (rec.error, rec.error_detail)
    assert target in rec.error_detail and "307" in rec.error_detail


def test_probe_refuses_a_redirect_of_the_model_list():
    other = Server({"/v1/models": _models, "/v1/chat/completions": _chat})
    target = other.url + "/v1/models"
    with pytest.raises(UserError) as e:
        asyncio.run(probe(Server({"/v1/models": _redirect(target, 302)}).url, None, "chat", timeout_s=10))
    assert target in str(e.value) and "redirect" in str(e.value)


# -- decompressed size ----------------------------------------------------------------------------

def _peak(fn):
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_gzip_bomb_model_list_is_refused_without_inflating_it(bomb):
    url = Server({"/v1/models": _gzip(bomb)}).url

    def go():
        with pytest.raises(UserError) as e:
            asyncio.run(probe(url, None, "chat", timeout_s=20))
        return str(e.value)
    msg, peak = _peak(go)
    assert "more than" in msg and "/v1/models" in msg, msg
    assert peak < 64 << 20, f"peak {peak >> 20} MiB while reading a {BOMB_MIB} MiB body"


@pytest.mark.parametrize("stream", [True, False])
def test_gzip_bomb_error_or_answer_body_is_capped(bomb, stream):
    for srv in (Server({"/v1/chat/completions": _gzip(bomb, 503, "text/plain")}),
                Server({"/v1/chat/completions": _gzip(bomb, 200, "text/event-stream" if stream else "application/json")})):
        rec, peak = _peak(lambda: _request(srv.url, stream))
        assert rec.error is not None
        assert peak < 96 << 20, f"peak {peak >> 20} MiB while reading a {BOMB_MIB} MiB body ({rec.error})"


# -- total deadline ---------------------------------------------------------------------------------

class Drip:
    """A raw socket server that answers every connection with an HTTP header, one byte a second."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            conn, _ = self.sock.accept()
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Pad: " + b"a" * 10_000
        try:
            for b in head:
                if self.stop.is_set():
                    break
                conn.sendall(bytes([b]))
                time.sleep(1.0)
        except OSError:
            pass
        finally:
            conn.close()


def test_metrics_scraper_has_a_total_deadline():
    drip = Drip()
    done = threading.Event()
    result = {}

    def go():
        t0 = time.monotonic()
        result["ok"] = EngineScraper(drip.url).scrape()
        result["s"] = time.monotonic() - t0
        done.set()
    threading.Thread(target=go, daemon=True).start()
    finished = done.wait(SCRAPE_TIMEOUT_S + 5)
    drip.stop.set()
    assert finished, f"the scrape of a dripping server did not end within {SCRAPE_TIMEOUT_S + 5:g} s"
    assert result["ok"] is False and result["s"] < SCRAPE_TIMEOUT_S + 2


def test_probe_of_a_dripping_server_ends_by_its_deadline():
    drip = Drip()
    t0 = time.monotonic()
    with pytest.raises(UserError):
        asyncio.run(probe(drip.url, None, "chat", timeout_s=3))
    drip.stop.set()
    assert time.monotonic() - t0 < 15


def test_introspection_names_a_redirect_and_does_not_follow_it():
    from infergap.server import introspect

    other = Server({"/v1/models": _models})
    cfg = introspect(Server({"/v1/models": _redirect(other.url + "/v1/models", 301)}).url, timeout_s=5)
    assert any("redirect to " + other.url + "/v1/models" in e for e in cfg.errors), cfg.errors
    assert cfg.served_model_name is None
