"""HTTP reads from servers infergap does not control: no redirect is followed, every body is
read under a cap on its *decompressed* size, and every request has a total deadline.

A server's answer is data (docs/security.md): a redirect would send the next request (and an
``Authorization`` header) to an address the user never named; a gzip body of a few MiB inflates
to gigabytes; a per-read timeout never fires for a server that sends one byte a second. The
aiohttp paths (bench, introspection) pass ``allow_redirects=False`` and a ``ClientTimeout(total=…)``
and read bodies with :func:`read_body`; the synchronous engine-metrics scraper uses :func:`get`.
"""

from __future__ import annotations

import threading
from typing import Any, Mapping
from urllib.parse import urlsplit

#: Largest JSON document read from a server's small endpoints (/v1/models, /props, /version):
#: real ones are a few KiB; llama-server's /props with a long chat template stays under 1 MiB.
MAX_JSON_BYTES = 8 * 1024 * 1024
#: Bytes of an error body kept for the message (only the first 200 characters are shown).
MAX_ERROR_BYTES = 64 * 1024


class RequestRefused(OSError):
    """A request infergap ended itself: a redirect, a body over its cap, a missed deadline or an
    encoding it did not ask for. ``str()`` is one line naming the URL and the reason."""


class BodyTooLarge(ValueError):
    """A body larger (decompressed) than its cap."""


def redirect_error(status: int, location: str | None, url: str) -> str | None:
    """The one-line failure for a 3xx answer to ``url`` (naming the target it points to), or None
    for any other status. Redirects are never followed: the target is an address the user did
    not name (RFC 9110 §15.4 lets a server name any)."""
    if not 300 <= status < 400:
        return None
    return f"{url} answered HTTP {status}, a redirect to {location or '(no Location header)'}; redirects are not followed"


async def read_body(resp: Any, cap: int, url: str | None = None) -> bytes:
    """The body of an aiohttp response, read chunk by chunk as aiohttp decompresses it (its
    ``max_decompress_size`` bounds each step), refusing more than ``cap`` decompressed bytes.
    Raises :class:`BodyTooLarge` naming ``url`` (else the response's URL) and the cap."""
    chunks: list[bytes] = []
    total = 0
    while True:
        b = await resp.content.readany()
        if not b:
            return b"".join(chunks)
        total += len(b)
        if total > cap:
            raise BodyTooLarge(f"{url or resp.url}: body of more than {cap} bytes (decompressed); not read further")
        chunks.append(b)


def get(url: str, *, timeout_s: float, max_bytes: int, headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
    """GET ``url`` synchronously: (status, body). The whole request — connect, status line,
    headers, body — ends by ``timeout_s`` (a timer shuts the socket down at the deadline, so a
    server dripping bytes cannot hold it); a 3xx, a body over ``max_bytes`` or a
    ``Content-Encoding`` other than identity (none is asked for) is refused. Raises
    :class:`RequestRefused` (an OSError) with one line for every failure."""
    return _request("GET", url, None, timeout_s=timeout_s, max_bytes=max_bytes, headers=headers)


def post_json(url: str, body: Any, *, timeout_s: float, max_bytes: int,
              headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
    """POST ``body`` as JSON to ``url``: (status, body), with the deadline, caps and refusals of
    :func:`get`. Raises :class:`RequestRefused` with one line for every failure."""
    import json

    data = json.dumps(body).encode()
    return _request("POST", url, data, timeout_s=timeout_s, max_bytes=max_bytes,
                    headers={"Content-Type": "application/json", **(headers or {})})


def _request(method: str, url: str, data: bytes | None, *, timeout_s: float, max_bytes: int,
             headers: Mapping[str, str] | None) -> tuple[int, bytes]:
    """One request of :func:`get` / :func:`post_json`."""
    import http.client
    import socket

    parts = urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname or "", parts.port, timeout=timeout_s)
    cut = threading.Event()

    def _deadline() -> None:
        cut.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
    timer = threading.Timer(timeout_s, _deadline)
    timer.daemon = True
    timer.start()
    try:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.connect()
        if cut.is_set():  # the deadline passed while connecting, before there was a socket to shut
            raise TimeoutError
        conn.request(method, path, body=data, headers={"Accept-Encoding": "identity", **(headers or {})})
        r = conn.getresponse()
        return r.status, _checked_body(r, url, max_bytes)
    except (OSError, http.client.HTTPException) as e:
        if isinstance(e, RequestRefused):
            raise
        if cut.is_set() or isinstance(e, TimeoutError):
            raise RequestRefused(f"{url}: no complete answer within {timeout_s:g} s") from None
        raise RequestRefused(f"{url}: {type(e).__name__}: {e}") from None
    finally:
        timer.cancel()
        conn.close()


def _checked_body(r: Any, url: str, max_bytes: int) -> bytes:
    msg = redirect_error(r.status, r.getheader("Location"), url)
    if msg:
        raise RequestRefused(msg)
    enc = (r.getheader("Content-Encoding") or "identity").strip().lower()
    if enc not in ("identity", ""):
        raise RequestRefused(f"{url}: body sent with Content-Encoding {enc[:40]}, which was not asked for")
    body = r.read(max_bytes + 1)
    if len(body) > max_bytes:
        raise RequestRefused(f"{url}: body of more than {max_bytes} bytes; not read further")
    return body
