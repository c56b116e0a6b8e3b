"""Streaming OpenAI-compatible client: one request → one :class:`RequestRecord`; server probing.

Hot path (one call of :meth:`StreamClient.request` per request, one loop turn per network read):
the stream is read with ``readany()`` (every byte the socket has, not one line per await), split
into SSE lines, and each ``data:`` payload is parsed with the stdlib C JSON decoder. Every
content-bearing chunk's arrival time is the time of the read that delivered it. The aiohttp
connector's limit is set explicitly to the concurrency asked for (aiohttp's default of 100 would
make TTFT include waiting for a connection) and the read buffer is raised to 256 KiB.

Keep-alive: a request that fails before any response byte on a *re-used* pooled connection
within :data:`RETRY_WINDOW_S` (``Server disconnected``, ``Can not write request body``: the
server had closed the connection while it sat in the pool) is sent once more on a fresh
connection, as curl and browsers do, and counted as a retry. aiohttp retries such failures itself only for idempotent methods, not POST.
Some servers (llama.cpp's ``llama-server``) close the connection after every streamed response
although their headers say ``Keep-Alive``; when most re-used connections fail that way the client
stops re-using them (one fresh connection per request) and the result says so.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from time import perf_counter
from urllib.parse import urlsplit

import aiohttp

try:  # orjson parses a 140-byte chunk in ~1.3 µs against ~6.5 µs for json.loads(bytes) (measured
    # here; JSON decoding was ~30 % of the client's CPU at concurrency 512 under cProfile).
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson is a dependency
    _loads = json.loads

from infergap.bench.datasets import Prompt
from infergap.bench.metrics import RequestRecord
from infergap.bench.results import LengthControl
from infergap.errors import UserError
from infergap.guard import loads
from infergap.httpsafe import MAX_ERROR_BYTES, MAX_JSON_BYTES, BodyTooLarge, read_body, redirect_error

log = logging.getLogger(__name__)

READ_BUFSIZE = 256 * 1024
#: Re-used connections that failed before a response: after this many, and when they are at least
#: half of the re-uses, the server is taken to close connections after responses.
CLOSE_DETECT_MIN = 3
#: A re-used connection that fails later than this after the request was sent may have delivered
#: it (the server then died or a proxy cut it): not retried, so no request is ever run twice
#: knowingly. A connection the server had already closed fails within a round trip.
RETRY_WINDOW_S = 1.0
CLOSE_NOTE = ("the server does not keep connections alive after streamed responses (it closes them although "
              "it answers Keep-Alive): each request opens a new connection")
#: Longest SSE line kept while waiting for its end (a real chunk is well under 64 KiB; a server
#: that never sends a newline must not grow the client's memory without bound).
MAX_SSE_LINE = 8 * 1024 * 1024
#: Largest whole (non-streamed) response body read.
MAX_BODY_BYTES = 64 * 1024 * 1024
#: Largest streamed answer read (decompressed): 128k tokens of one-token chunks of ~300 bytes
#: each are about 40 MB; a stream past this is a server writing without end.
MAX_STREAM_BYTES = 512 * 1024 * 1024
#: Token counts above this in a usage block are not believed (no served context is this long).
MAX_USAGE_TOKENS = 100_000_000


def check_usage(rec: RequestRecord, u: object) -> None:
    """Take ``prompt_tokens``/``completion_tokens`` from a usage block into ``rec`` when each is
    an integer from 0 to :data:`MAX_USAGE_TOKENS`; any other value (negative, absurd, a float, a
    string) makes the request failed (``bad_usage``) with the value as the reason, because a
    throughput computed from it would be false."""
    if type(u) is not dict:
        return
    for key in ("prompt_tokens", "completion_tokens"):
        v = u.get(key)
        if v is None:
            continue
        if type(v) is not int or not 0 <= v <= MAX_USAGE_TOKENS:
            rec.error = "bad_usage"
            rec.error_detail = f"usage.{key} = {str(v)[:40]!r}: not a token count from 0 to {MAX_USAGE_TOKENS}"
            continue
        if key == "prompt_tokens":
            rec.usage_prompt = v
        else:
            rec.usage_completion = v
def check_usage_bounds(rec: RequestRecord, max_tokens: int, content: bool) -> None:
    """Fail ``rec`` as ``bad_usage`` when its usage block claims what the answer cannot hold: more
    completion tokens than the ``max_tokens`` the request asked for (OpenAI API: the server stops
    at max_tokens), or completion tokens while no content (``content`` False) was sent. Such a
    count taken as output would give throughputs of millions of tok/s and a TPOT of 0."""
    n = rec.usage_completion
    if n is None or n == 0:
        return
    if max_tokens and n > max_tokens:
        rec.error = "bad_usage"
        rec.error_detail = f"usage.completion_tokens = {n}: more than the request's max_tokens {max_tokens}"
    elif not content:
        rec.error = "bad_usage"
        rec.error_detail = f"usage.completion_tokens = {n} with no content sent"
    if rec.error == "bad_usage":
        rec.usage_completion = None


PROBE_TIMEOUT_S = 30.0
_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}


def split_url(url: str) -> str:
    """Base URL (scheme://host:port[/prefix]) of an OpenAI-compatible server given as the base,
    the ``/v1`` root or a full endpoint URL. Raises UserError for a URL that is not http(s)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UserError(f"--url {url!r}: expected http://HOST:PORT[/v1]")
    path = parts.path.rstrip("/")
    for tail in ("/v1/chat/completions", "/v1/completions", "/v1/models", "/v1"):
        if path.endswith(tail):
            path = path[: -len(tail)]
            break
    return f"{parts.scheme}://{parts.netloc}{path}"


@dataclass
class StreamClient:
    """Sends requests to ``base`` (see :func:`split_url`) and fills :class:`RequestRecord` objects.

    ``extra`` are request fields added to every body (``ignore_eos``/``min_tokens``,
    ``stream_options``). ``connections`` is the aiohttp connector limit (0 = unlimited).
    ``count_tokens`` (optional) is a local tokenizer ``str -> int``.
    """

    base: str
    model: str
    api: str = "chat"
    stream: bool = True
    extra: dict = field(default_factory=dict)
    length_fields: tuple[str, ...] = ()
    connections: int = 0
    timeout_s: float = 600.0
    count_tokens: object = None
    session: aiohttp.ClientSession | None = None
    #: Requests sent on a re-used connection; of them, those that failed before any response
    #: byte and were retried; retries that failed too. ``fresh_per_request``: see the module doc.
    reused: int = 0
    reuse_failures: int = 0
    retry_failures: int = 0
    fresh_per_request: bool = False
    _old_sessions: list = field(default_factory=list)
    _fresh: aiohttp.ClientSession | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.base}/v1/chat/completions" if self.api == "chat" else f"{self.base}/v1/completions"

    def _new_session(self, force_close: bool) -> aiohttp.ClientSession:
        conn = aiohttp.TCPConnector(limit=self.connections, limit_per_host=self.connections,
                                    ttl_dns_cache=300, enable_cleanup_closed=False, force_close=force_close)
        trace = aiohttp.TraceConfig()
        trace.on_connection_reuseconn.append(_mark_reused)
        return aiohttp.ClientSession(connector=conn, read_bufsize=READ_BUFSIZE,
                                     timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                                     skip_auto_headers=("User-Agent",), trace_configs=[trace])

    async def open(self, force_close: bool = False) -> None:
        """Create the connection pool (``force_close``: a new connection for every request)."""
        self.session = self._new_session(force_close)

    async def _retry_session(self) -> aiohttp.ClientSession:
        """The session for retries: never re-uses a connection, so a retry cannot meet another
        connection the server already closed."""
        if self._fresh is None:
            self._fresh = self._new_session(True)
        return self._fresh

    async def close(self) -> None:
        for s in [*self._old_sessions, self.session, self._fresh]:
            if s is not None:
                await s.close()
        self.session = self._fresh = None
        self._old_sessions.clear()

    def counts(self) -> dict:
        """The connection counters (``reused``, ``reuse_failures``, ``retry_failures``,
        ``fresh_per_request``), for another process's client to add with :meth:`add_counts`."""
        return {"reused": self.reused, "reuse_failures": self.reuse_failures,
                "retry_failures": self.retry_failures, "fresh_per_request": self.fresh_per_request}

    def add_counts(self, d: dict) -> None:
        """Add another client's :meth:`counts` to this one's (the counts of one run spread over
        several client processes): sums, and ``fresh_per_request`` when any client switched."""
        self.reused += d["reused"]
        self.reuse_failures += d["reuse_failures"]
        self.retry_failures += d["retry_failures"]
        self.fresh_per_request = self.fresh_per_request or d["fresh_per_request"]

    @property
    def connection_note(self) -> str | None:
        """What the client saw of the server's keep-alive behaviour, in words (None: nothing)."""
        if self.fresh_per_request:
            return (f"{CLOSE_NOTE} ({self.reuse_failures} request(s) failed on a re-used connection before any "
                    f"response byte and were retried on a fresh one)")
        if self.reuse_failures:
            return (f"{self.reuse_failures} request(s) found their re-used keep-alive connection closed by the server "
                    "and were retried once on a fresh connection")
        return None

    async def _stop_reusing(self) -> None:
        """Switch to one fresh connection per request; requests in flight finish on the old pool."""
        if self.fresh_per_request or self.session is None:
            return
        self.fresh_per_request = True
        self._old_sessions.append(self.session)
        self.session = await self._retry_session()
        self._fresh = None
        log.info(CLOSE_NOTE)

    def body(self, p: Prompt) -> bytes:
        """The JSON request body for prompt ``p`` (max_tokens = its output length)."""
        d = {"model": self.model, "max_tokens": p.output_tokens, "stream": self.stream, "temperature": 0.0}
        if self.api == "chat":
            d["messages"] = p.messages if p.messages is not None else [{"role": "user", "content": p.text}]
        else:
            d["prompt"] = p.text
        for f in self.length_fields:
            d[f] = True if f == "ignore_eos" else p.output_tokens
        d.update(self.extra)
        return json.dumps(d).encode()

    async def request(self, p: Prompt, rec: RequestRecord) -> RequestRecord:
        """Send ``p`` and record timings and counts into ``rec`` (never raises for server faults:
        they become ``rec.error`` = ``http_<status>``, ``timeout``, ``connection`` (no response:
        refused, reset or closed before the status line), ``cut`` (the connection closed after a
        successful status line, before the end of the response), ``stream_error``, ``bad_chunk``,
        ``incomplete_stream`` or ``cancelled``)."""
        data = self.body(p)
        began = False  # a 2xx/3xx status line arrived: a connection lost from here on cut an answer
        if self.count_tokens is not None or rec.keep_reply:
            rec.text = []
        rec.start = perf_counter()
        try:
            while True:
                rec.reused = False
                answered = False
                attempt = perf_counter()
                try:
                    session = self.session if not rec.retries else await self._retry_session()
                    async with session.post(self.endpoint, data=data, headers=_HEADERS, trace_request_ctx=rec,
                                            allow_redirects=False) as resp:
                        answered = True
                        if resp.status >= 300:
                            await _failed_status(resp, rec, self.endpoint)
                        elif self.stream:
                            began = True
                            await self._consume(resp, rec)
                        else:
                            began = True
                            await self._whole(resp, rec, p.output_tokens)
                    if rec.reused:
                        self.reused += 1
                    break
                except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
                    if rec.reused:
                        self.reused += 1
                    if rec.retries:
                        self.retry_failures += 1
                    if answered or not rec.reused or rec.retries or isinstance(e, aiohttp.ClientConnectorError) \
                            or perf_counter() - attempt > RETRY_WINDOW_S:
                        raise
                    # The pooled connection was closed by the server before this request reached it.
                    rec.retries += 1
                    rec.retry_detail = f"{type(e).__name__}: {e}"[:200]
                    self.reuse_failures += 1
                    if self.reuse_failures >= CLOSE_DETECT_MIN and 2 * self.reuse_failures >= self.reused:
                        await self._stop_reusing()
        except asyncio.TimeoutError:
            rec.error, rec.error_detail = "timeout", f"no complete response within {self.timeout_s:g} s"
        except asyncio.CancelledError:
            rec.error, rec.error_detail = "cancelled", "interrupted"
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientConnectionError) as e:
            if began:
                what = (f"after {len(rec.chunk_times)} token chunk(s), before finish_reason or [DONE]" if self.stream
                        else "before the end of the response body")
                rec.error, rec.error_detail = "cut", f"the connection closed {what} ({type(e).__name__}: {e})"[:200]
            else:
                rec.error, rec.error_detail = "connection", f"{type(e).__name__}: {e}"[:200]
        except aiohttp.ClientError as e:
            rec.error, rec.error_detail = "client_error", f"{type(e).__name__}: {e}"[:200]
        if not rec.end:
            rec.end = perf_counter()
        if rec.chunk_times:
            rec.first = rec.chunk_times[0]
        if rec.error is None and self.stream:
            check_usage_bounds(rec, rec.max_tokens or p.output_tokens, bool(rec.chunk_times))
        if rec.text is not None and rec.error is None and self.count_tokens is not None:
            rec.tokenizer_completion = self.count_tokens("".join(rec.text))
        if rec.keep_reply and rec.text is not None:
            rec.reply = "".join(rec.text)
        rec.text = None
        return rec

    async def _whole(self, resp, rec: RequestRecord, max_tokens: int) -> None:
        try:
            body = await read_body(resp, MAX_BODY_BYTES, "response")
        except BodyTooLarge:
            rec.end = perf_counter()
            rec.error, rec.error_detail = "bad_response", f"response body larger than {MAX_BODY_BYTES} bytes (decompressed)"
            return
        rec.end = perf_counter()
        try:
            obj = loads(body, "response")
        except UserError as e:
            rec.error, rec.error_detail = "bad_response", str(e)[:200]
            return
        choices = obj.get("choices") if type(obj) is dict else None
        c0 = choices[0] if type(choices) is list and choices and type(choices[0]) is dict else None
        if c0 is None:
            rec.error, rec.error_detail = "bad_response", "response without choices[0]"
            return
        msg = c0.get("message")
        text = (msg.get("content") if type(msg) is dict else None) if self.api == "chat" else c0.get("text")
        fr = c0.get("finish_reason")
        rec.finish_reason = str(fr) if fr is not None else None
        u = obj.get("usage")
        check_usage(rec, u)
        rec.usage_cached = cached_tokens(u) if type(u) is dict else None
        if rec.error is None:
            check_usage_bounds(rec, rec.max_tokens or max_tokens, bool(text))
        if rec.text is not None and text:
            rec.text.append(text if type(text) is str else str(text))

    async def _consume(self, resp, rec: RequestRecord) -> None:
        content = resp.content
        parser = SSEParser(rec, self.api == "chat")
        feed = parser.feed
        read = _drain if FAST_DRAIN else _readany
        total = 0
        try:
            while True:
                data = await read(content)
                if not data:
                    break
                feed(data, perf_counter())
                total += len(data)
                if parser.overflow:
                    break
                if total > MAX_STREAM_BYTES:
                    rec.error, rec.error_detail = "bad_response", f"a stream of more than {MAX_STREAM_BYTES} bytes (decompressed)"
                    break
        except aiohttp.ClientPayloadError:
            # A connection cut after the stream's [DONE] lost nothing of the answer; llama-cpp-python
            # cuts a stream it interrupts this way ([DONE], then no end of the chunked body), and
            # finish() names that from the missing finish_reason and tokens.
            if not parser.done:
                raise
        parser.finish()


async def _failed_status(resp, rec: RequestRecord, url: str) -> None:
    """``rec`` failed by the status of ``resp`` (3xx or above): a redirect is ``redirect`` naming
    its target (never followed, see :mod:`infergap.httpsafe`), else ``http_<status>`` with the
    start of the body (read under :data:`~infergap.httpsafe.MAX_ERROR_BYTES` decompressed)."""
    msg = redirect_error(resp.status, resp.headers.get("Location"), url)
    if msg:
        rec.error, rec.error_detail = "redirect", msg[:300]
        return
    try:
        detail = (await read_body(resp, MAX_ERROR_BYTES)).decode("utf-8", "replace")[:200]
    except BodyTooLarge:
        detail = f"(an error body of more than {MAX_ERROR_BYTES} bytes)"
    rec.error = f"http_{resp.status}"
    rec.error_detail = f"HTTP {resp.status}: {detail}"


async def _readany(content) -> bytes:
    return await content.readany()


def _fast_drain_works() -> bool:
    """Whether aiohttp's ``StreamReader`` declares the internals :func:`_drain` relies on
    (aiohttp 3.10 and later list them in ``__slots__``); otherwise the public ``readany()`` is used."""
    slots = set(getattr(aiohttp.StreamReader, "__slots__", ()))
    need = {"_buffer", "_buffer_offset", "_size", "_cursor", "_http_chunk_splits", "_protocol", "_eof",
            "_exception", "_waiter"}
    return need <= slots and callable(getattr(aiohttp.StreamReader, "_wait", None)) \
        and callable(getattr(aiohttp.StreamReader, "_read_nowait", None))


async def _drain(content) -> bytes:
    """Everything aiohttp's ``StreamReader`` holds, in one piece, after waiting for data as
    ``readany()`` does. ``readany()`` pops one HTTP chunk at a time (a streaming server sends one
    SSE event per chunk) and calls the connection's ``resume_reading()`` for each one, paused or
    not: at concurrency 512 that bookkeeping was about a quarter of the client's CPU (cProfile,
    aiohttp 3.14). Empty bytes: end of the body."""
    if content._exception is not None:
        raise content._exception
    buf = content._buffer
    while not buf and not content._eof:
        await content._wait("readany")
    if not buf:
        return b""
    if content._buffer_offset:  # a partial read left an offset: let aiohttp handle it
        return content._read_nowait(-1)
    data = buf[0] if len(buf) == 1 else b"".join(buf)
    buf.clear()
    content._size = 0
    content._cursor += len(data)
    splits = content._http_chunk_splits
    if splits:
        splits.clear()
    proto = content._protocol
    if proto._reading_paused:
        proto.resume_reading()
    return data


#: Whether :func:`_drain` replaces ``readany()`` (see :func:`_fast_drain_works`).
FAST_DRAIN = _fast_drain_works()


async def _mark_reused(session, ctx, params) -> None:
    """aiohttp trace hook: the request whose record is ``trace_request_ctx`` got a pooled connection."""
    rec = ctx.trace_request_ctx
    if rec is not None:
        rec.reused = True


def cached_tokens(usage: dict) -> int | None:
    """Prompt tokens the server served from its prefix cache, from an OpenAI ``usage`` object's
    ``prompt_tokens_details.cached_tokens`` (llama-server always; vLLM with
    ``--enable-prompt-tokens-details``; SGLang); ``None`` when the server does not say."""
    d = usage.get("prompt_tokens_details")
    v = d.get("cached_tokens") if type(d) is dict else None
    return v if type(v) is int else None


class SSEParser:
    """Incremental parser of an OpenAI streaming response (server-sent events) into a record.

    :meth:`feed` takes the bytes of one network read and its arrival time (perf_counter s); it
    may split events anywhere. A chunk carries a token when its ``delta.content``,
    ``delta.reasoning_content``/``delta.reasoning`` (chat) or ``text`` (completions) is non-empty;
    its arrival time is appended to ``rec.chunk_times``. ``usage`` (any chunk, last one wins),
    ``finish_reason``, ``[DONE]`` and ``error`` objects are recorded. :meth:`finish` marks a stream
    that ended without ``finish_reason`` or ``[DONE]`` as ``incomplete_stream``.
    """

    __slots__ = ("rec", "chat", "buf", "done", "last", "overflow")

    def __init__(self, rec: RequestRecord, chat: bool) -> None:
        self.rec = rec
        self.chat = chat
        self.buf = b""
        self.done = False
        self.last = 0.0
        self.overflow = False

    def feed(self, data: bytes, now: float) -> None:
        rec = self.rec
        times = rec.chunk_times
        texts = rec.text
        self.last = now
        if self.buf:
            data = self.buf + data
        lines = data.split(b"\n")
        self.buf = lines.pop()
        if len(self.buf) > MAX_SSE_LINE:  # a line without end: stop reading this stream
            self.buf = b""
            self.overflow = True
            rec.error, rec.error_detail = "bad_chunk", f"an event line longer than {MAX_SSE_LINE} bytes"
        loads = _loads
        chat = self.chat
        for line in lines:
            if line[:5] != b"data:":
                continue
            payload = line[5:].strip()
            if payload[:1] != b"{":
                if payload == b"[DONE]":
                    self.done = True
                continue
            try:
                obj = loads(payload)
            except ValueError:
                rec.error, rec.error_detail = "bad_chunk", f"unparsable chunk: {payload[:80]!r}"
                continue
            if type(obj) is not dict:
                continue
            choices = obj.get("choices")
            if choices and type(choices) is list and type(choices[0]) is dict:
                c0 = choices[0]
                if chat:
                    d = c0.get("delta")
                    t = (d.get("content") or d.get("reasoning_content") or d.get("reasoning")) if type(d) is dict else None
                else:
                    t = c0.get("text")
                if t:
                    times.append(now)
                    if texts is not None:
                        texts.append(t if type(t) is str else str(t))
                fr = c0.get("finish_reason")
                if fr:
                    rec.finish_reason = str(fr)
            u = obj.get("usage")
            if u and type(u) is dict:
                check_usage(rec, u)
                rec.usage_cached = cached_tokens(u)
            err = obj.get("error")
            if err:
                rec.error = "stream_error"
                rec.error_detail = str(err.get("message") if isinstance(err, dict) else err)[:200]

    def finish(self) -> None:
        """End of stream: a trailing unterminated line is parsed; set ``end`` and completeness."""
        rec = self.rec
        tail = self.buf.strip()
        if tail:  # a last line without newline: parse it if whole, else the stream was cut mid-line
            payload = tail[5:].strip() if tail[:5] == b"data:" else b""
            try:
                whole = payload == b"[DONE]" or (payload[:1] == b"{" and _loads(payload) is not None)
            except (ValueError, RecursionError):
                whole = False
            if whole:
                self.feed(b"\n", self.last)
            self.buf = b""
        rec.end = self.last or perf_counter()
        if rec.error is None and not self.done and rec.finish_reason is None:
            rec.error, rec.error_detail = "incomplete_stream", "stream ended before finish_reason or [DONE]"
        elif rec.error is None and rec.finish_reason is None and rec.max_tokens:
            n = rec.usage_completion if rec.usage_completion is not None else len(rec.chunk_times)
            if n < rec.max_tokens:
                rec.error = "interrupted"
                rec.error_detail = (f"the server ended the stream ([DONE]) after {n} of {rec.max_tokens} tokens "
                                    "without a finish_reason")


# ----------------------------------------------------------------------------- probing


async def _get_json(session: aiohttp.ClientSession, url: str, timeout_s: float = 5.0):
    """(status, parsed JSON or None, headers) of GET ``url``: no redirect followed (a 3xx raises
    UserError naming its target), the body read under MAX_JSON_BYTES decompressed (more raises
    UserError), ``timeout_s`` for the whole request."""
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s), allow_redirects=False) as r:
        msg = redirect_error(r.status, r.headers.get("Location"), url)
        if msg:
            raise UserError(msg)
        if r.status != 200:
            return r.status, None, r.headers
        try:
            body = await read_body(r, MAX_JSON_BYTES, url)
        except BodyTooLarge as e:
            raise UserError(str(e)) from None
        try:
            return r.status, loads(body, url), r.headers
        except UserError:
            return r.status, None, r.headers


@dataclass
class ServerInfo:
    """What :func:`probe` learned: base URL, endpoint, model, versions, length control."""

    base: str
    endpoint: str
    model: str
    versions: dict[str, str]
    length: LengthControl
    requests: int = 0


async def probe(url: str, model: str | None, api: str, *, output_len: int = 8,
                timeout_s: float = PROBE_TIMEOUT_S) -> ServerInfo:
    """Check that ``url`` serves the OpenAI API before any load, pick the model, read versions,
    and find which length-control fields the server accepts.

    Sends ``GET /v1/models`` and a few streamed requests of ``min(output_len, 8)`` tokens: first
    with ``stream_options.include_usage``, ``ignore_eos`` and ``min_tokens`` together, then with
    fewer fields each time the server answers 4xx (servers that validate strictly answer 422).
    A field a server ignores silently does no harm; whether generation really ran to
    ``max_tokens`` is checked on every request of the run (``truncated``).

    Raises UserError (one line) when the server is unreachable, the path is wrong, the endpoint
    fails, or ``model`` is not among the models /v1/models lists (when it lists any).
    """
    base = split_url(url)
    versions: dict[str, str] = {}
    to = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=to) as s:
        try:
            status, models, headers = await _get_json(s, f"{base}/v1/models", min(timeout_s, 10.0))
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            raise UserError(f"--url {url}: server unreachable ({type(e).__name__}: {e})") from None
        if status != 200 or not isinstance(models, dict):
            raise UserError(f"--url {url}: {base}/v1/models answered HTTP {status} (not an OpenAI-compatible server at this path?)")
        if headers.get("Server"):
            versions["server_header"] = headers["Server"]
        ids = [m.get("id") for m in models.get("data") or [] if isinstance(m, dict) and m.get("id")]
        if model is None:
            if not ids:
                raise UserError(f"--url {url}: /v1/models lists no model; pass --model")
            model = ids[0]
        elif ids and model not in ids:
            shown = ", ".join(repr(i[:80]) for i in ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
            raise UserError(f"--served-model {model[:80]!r}: {base}/v1/models does not list it (it serves {shown})")
        for path in ("/version", "/props", "/get_server_info"):
            try:
                st, obj, _ = await _get_json(s, base + path, 3.0)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, UserError):
                continue
            if st == 200 and isinstance(obj, dict):
                for k in ("version", "build_info", "server_version"):
                    if k in obj and isinstance(obj[k], (str, int, float)):
                        versions[f"{path.strip('/')}.{k}"] = str(obj[k])

    n = max(1, min(output_len, 8))
    attempts = [
        (("ignore_eos", "min_tokens"), True),
        (("min_tokens",), True),
        (("ignore_eos",), True),
        ((), True),
        ((), False),
    ]
    length = LengthControl()
    last_err = None
    sent = 0
    for fields, with_usage in attempts:
        sent += 1
        c = StreamClient(base, model, api, extra={"stream_options": {"include_usage": True}} if with_usage else {},
                         length_fields=fields, connections=1, timeout_s=timeout_s)
        await c.open()
        try:
            rec = await c.request(Prompt("Say something.", 3, n), RequestRecord(intended=perf_counter()))
        finally:
            await c.close()
        if rec.error is None:
            length.fields = list(fields)
            length.stream_options_accepted = with_usage
            length.stream_usage = rec.usage_completion is not None
            return ServerInfo(base, c.endpoint, model, versions, length, sent)
        last_err = rec
        key = "+".join(fields + (("stream_options",) if with_usage else ())) or "plain request"
        length.rejected[key] = rec.error_detail or rec.error
        if not (rec.error or "").startswith("http_4") or rec.error in ("http_404", "http_401", "http_403"):
            break
    raise UserError(f"--url {url}: test request to {c.endpoint} failed ({last_err.error_detail or last_err.error})")
