"""Open a page in headless Chromium through the DevTools protocol (aiohttp websocket) and report
every network request, console message and uncaught exception, plus screenshots and DOM queries."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PageLoad:
    requests: list[str] = field(default_factory=list)
    console: list[tuple[str, str]] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    log_errors: list[str] = field(default_factory=list)
    values: dict[str, object] = field(default_factory=dict)
    shots: dict[str, bytes] = field(default_factory=dict)
    pdf: bytes | None = None


async def _session(ws_url: str, page: str, queries: dict[str, str], shots: dict[str, tuple[int, int, str | None]],
                   viewport: tuple[int, int] | None, pdf: bool = False) -> PageLoad:
    import aiohttp

    res = PageLoad()
    ids = iter(range(1, 10_000))
    async with aiohttp.ClientSession() as http, http.ws_connect(ws_url, max_msg_size=0) as ws:
        pending: dict[int, asyncio.Future] = {}
        loaded = asyncio.Event()

        async def reader() -> None:
            async for msg in ws:
                d = json.loads(msg.data)
                if "id" in d and d["id"] in pending:
                    pending.pop(d["id"]).set_result(d)
                    continue
                m, p = d.get("method"), d.get("params", {})
                if m == "Network.requestWillBeSent":
                    res.requests.append(p["request"]["url"])
                elif m == "Runtime.consoleAPICalled":
                    res.console.append((p.get("type", ""), " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))))
                elif m == "Runtime.exceptionThrown":
                    res.exceptions.append(json.dumps(p.get("exceptionDetails", {}))[:500])
                elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                    res.log_errors.append(p["entry"].get("text", ""))
                elif m == "Page.loadEventFired":
                    loaded.set()

        task = asyncio.create_task(reader())

        async def call(method: str, **params):
            i = next(ids)
            fut = asyncio.get_running_loop().create_future()
            pending[i] = fut
            await ws.send_str(json.dumps({"id": i, "method": method, "params": params}))
            d = await asyncio.wait_for(fut, 30)
            if "error" in d:
                raise RuntimeError(f"{method}: {d['error']}")
            return d.get("result", {})

        for dom in ("Network", "Runtime", "Log", "Page"):
            await call(f"{dom}.enable")
        if viewport:
            await call("Emulation.setDeviceMetricsOverride", width=viewport[0], height=viewport[1], deviceScaleFactor=1, mobile=viewport[0] < 700)
        await call("Page.navigate", url=page)
        await asyncio.wait_for(loaded.wait(), 30)
        await asyncio.sleep(0.5)
        for name, expr in queries.items():
            r = await call("Runtime.evaluate", expression=expr, returnByValue=True)
            res.values[name] = r.get("result", {}).get("value")
        for name, (w, h, sel) in shots.items():
            await call("Emulation.setDeviceMetricsOverride", width=w, height=h, deviceScaleFactor=1, mobile=w < 700)
            await asyncio.sleep(0.3)
            params: dict = {"format": "png"}
            if sel:
                r = await call("Runtime.evaluate", returnByValue=True,
                               expression=f"(()=>{{const e=document.querySelector({json.dumps(sel)}); e.scrollIntoView(); const r=e.getBoundingClientRect(); return [r.x + window.scrollX, r.y + window.scrollY, r.width, r.height];}})()")
                x, y, cw, ch = r["result"]["value"]
                params.update(clip={"x": x, "y": y, "width": cw, "height": ch, "scale": 1}, captureBeyondViewport=True)
            res.values[f"{name}.scrollWidth"] = (await call("Runtime.evaluate", expression="document.documentElement.scrollWidth", returnByValue=True))["result"]["value"]
            shot = await call("Page.captureScreenshot", **params)
            res.shots[name] = base64.b64decode(shot["data"])
        if pdf:
            await call("Emulation.setEmulatedMedia", media="print")
            res.values["print.visible_details_text"] = (await call("Runtime.evaluate", returnByValue=True, expression=(
                "Array.from(document.querySelectorAll('details pre')).filter(e => e.checkVisibility() && e.getBoundingClientRect().height > 0).length")))["result"]["value"]
            res.pdf = base64.b64decode((await call("Page.printToPDF", printBackground=False))["data"])
        task.cancel()
    return res


def load(html: Path, profile: Path, queries: dict[str, str] | None = None,
         shots: dict[str, tuple[int, int, str | None]] | None = None, viewport: tuple[int, int] | None = None,
         pdf: bool = False, timeout_s: float = 120) -> PageLoad:
    """Load ``html`` (a file) in headless Chromium; return what the page did."""
    exe = chromium()
    port = _port()
    errlog = profile.parent / f"{profile.name}.chromium.log"
    profile.mkdir(parents=True, exist_ok=True)
    with open(errlog, "wb") as err:
        proc = subprocess.Popen([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                 "--disable-background-networking", "--disable-component-update", "--no-first-run", "--disable-sync",
                                 "--disable-default-apps", f"--user-data-dir={profile}", f"--remote-debugging-port={port}",
                                 "--remote-debugging-address=127.0.0.1", "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        ws_url = None
        while time.monotonic() < deadline and ws_url is None:
            if proc.poll() is not None:
                raise RuntimeError(f"chromium exited ({proc.returncode}): {errlog.read_text(errors='replace')[-1500:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                    pages = [t for t in json.load(r) if t.get("type") == "page"]
                if not pages:  # the browser is up but has no tab yet: open one
                    req = urllib.request.Request(f"http://127.0.0.1:{port}/json/new?about:blank", method="PUT")
                    with urllib.request.urlopen(req, timeout=5) as r:
                        pages = [json.load(r)]
                ws_url = pages[0]["webSocketDebuggerUrl"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.3)
        if ws_url is None:
            raise RuntimeError(f"chromium did not expose a page over the DevTools protocol: {errlog.read_text(errors='replace')[-1500:]}")
        return asyncio.run(asyncio.wait_for(_session(ws_url, html.resolve().as_uri(), queries or {}, shots or {}, viewport, pdf), timeout_s))
    finally:
        # chromium runs in its own session: end that process group (the browser and its helpers)
        for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
