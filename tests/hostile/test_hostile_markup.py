"""Markup injection (class 3 of docs/security.md): values from snapshots, evidence, configs,
servers and fleet archives reach every ``--format md`` report and every terminal report as text,
never as markup.

Every Markdown renderer of ``src/infergap`` (found by name: ``render_md``, ``render_markdown``,
``to_markdown``, ``render_report_markdown`` …) is wrapped while the real commands run in this
process on hostile inputs; each output is rendered by a CommonMark renderer (markdown-it-py with
GitHub's tables) and the HTML it makes may hold no element or attribute a Markdown renderer does
not make itself. A renderer that no hostile case reaches fails the test, so a new one cannot be
added unchecked. The text reports of the same inputs must render without error and show rich's
markup literally (a ``[/]`` crashed them, ``[link=…]`` hid text).
"""

from __future__ import annotations

import ast
import asyncio
import html.parser
import importlib
import json
import shutil
import socket
import threading
from pathlib import Path

import pytest
from aiohttp import web
from markdown_it import MarkdownIt
from typer.testing import CliRunner

from hostile_helpers import SNAPSHOT
from tests.conftest import ROOT

SRC = ROOT / "src" / "infergap"
#: One value that is HTML, a Markdown link, a code-span breaker (backtick runs of 1, 2 and 3), a
#: table-cell breaker, emphasis, an entity and rich markup — everything a renderer must neutralise.
EVIL = ("<img src=x onerror=alert(1)>``x`<script>alert(2)</script>```|[c](javascript:alert(3))"
        "<a href='javascript:alert(4)'>a</a> &lt;b&gt; *e* [/] [link=https://evil.example]hidden[/link] [bold]b")
#: The same in a file or directory name (no ``/``, so no closing tag of rich markup).
EVIL_NAME = "n<img src=x onerror=alert(1)>``x`<b onmouseover=alert(2)>```|[c](javascript:alert(3)) [bold] [link=mailto:x@e.example]hidden"

#: Elements a CommonMark + GFM-table renderer makes itself; ``br`` is written by the audit's
#: command cells. No attribute is allowed except a table cell's alignment.
ALLOWED_TAGS = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td", "code", "pre",
                "strong", "em", "ul", "ol", "li", "hr", "blockquote", "br"}
ALLOWED_ATTRS = {("th", "style"), ("td", "style"), ("ol", "start")}

MD_NAMES = {"render_md", "render_markdown", "to_markdown", "render_report_markdown"}


def md_renderers() -> list[tuple[str, str]]:
    """(module, function) of every public Markdown renderer in src/infergap."""
    out = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        mod = ".".join(("infergap", *path.relative_to(SRC).with_suffix("").parts))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_") and (
                    node.name in MD_NAMES or "markdown" in node.name or node.name.endswith("_md")):
                out.append((mod, node.name))
    return out


class _Live(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.bad: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in ALLOWED_TAGS:
            self.bad.append(f"<{tag}>")
        for k, v in attrs:
            if (tag, k) not in ALLOWED_ATTRS or (k == "style" and not (v or "").startswith("text-align:")):
                self.bad.append(f"<{tag} {k}={v!r}>")


_MD = MarkdownIt("commonmark").enable("table")


def live_markup(md: str) -> list[str]:
    """Elements and attributes of the HTML ``md`` renders to that Markdown does not make itself."""
    p = _Live()
    p.feed(_MD.render(md))
    p.close()
    return p.bad


def test_the_checker_sees_live_html():
    """The check itself: raw HTML, a link, and a code span closed early are all seen."""
    assert live_markup("a <img src=x onerror=alert(1)> b")
    assert live_markup("[c](javascript:alert(3))") or live_markup("[c](http://x)")
    assert live_markup("`a`<b>`")
    assert not live_markup("| a |\n|---:|\n| `x` |\n\n**b** <br> c")


# -- the hostile inputs ----------------------------------------------------------------------------

def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EvilServer:
    """An OpenAI-compatible server on 127.0.0.1 whose model id is ``model`` (:data:`EVIL`)."""

    def __init__(self, model: str = EVIL) -> None:
        self.model = model
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait(10)

    async def _models(self, _req):
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _chat(self, req):
        body = await req.json()
        n = int(body.get("max_tokens") or 4)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(req)
        for _ in range(n):
            await resp.write(b'data: {"choices": [{"delta": {"content": " x"}, "finish_reason": null}]}\n\n')
        use = {"choices": [{"delta": {}, "finish_reason": "length"}], "usage": {"prompt_tokens": 3, "completion_tokens": n}}
        await resp.write(b"data: " + json.dumps(use).encode() + b"\n\ndata: [DONE]\n\n")
        return resp

    def _run(self, ready) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        runner = web.AppRunner(app)
        self.loop.run_until_complete(runner.setup())
        self.loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        ready.set()
        self.loop.run_forever()


def evil_snapshot(d: Path, name: str = EVIL_NAME) -> Path:
    """The captured H200 host under a hostile directory name, with hostile CPU model name,
    environment values and a hostile pasted log in evidence/."""
    snap = d / name
    shutil.copytree(SNAPSHOT, snap)
    cpu = snap / "files" / "proc" / "cpuinfo"
    cpu.write_text(cpu.read_text().replace("Intel(R) Xeon(R) Processor", EVIL))
    env = snap / "cmds" / "env.out"
    env.write_text(env.read_text() + f"NCCL_P2P_DISABLE={EVIL}\nNCCL_DEBUG={EVIL}\nCUDA_VISIBLE_DEVICES={EVIL}\n")
    return snap


def evil_config(d: Path) -> Path:
    cfg = d / EVIL_NAME.replace("|", "") / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps({"model_type": "llama" + EVIL, "hidden_size": 4096, "num_hidden_layers": 32,
                               "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                               "vocab_size": 128256, "torch_dtype": "bfloat16", "architectures": [EVIL]}))
    return cfg


def evil_log(d: Path) -> Path:
    p = d / "engine.log"
    p.write_text(f"INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.8.0{EVIL}\n"
                 f"INFO 01-01 00:00:01 [api_server.py:2] args: Namespace(model='{EVIL}', tensor_parallel_size=1)\n"
                 f"{EVIL} NCCL WARN {EVIL}\n"
                 f"RuntimeError: CUDA error: out of memory {EVIL}\n")
    return p


@pytest.fixture(scope="module")
def calls():
    """Every Markdown renderer wrapped for the module: name → list of outputs it returned."""
    seen: dict[str, list[str]] = {f"{m}.{f}": [] for m, f in md_renderers()}
    mp = pytest.MonkeyPatch()
    for key in seen:
        mod_name, fn_name = key.rsplit(".", 1)
        mod = importlib.import_module(mod_name)
        orig = getattr(mod, fn_name)

        def wrapped(*a, _orig=orig, _key=key, **kw):
            out = _orig(*a, **kw)
            seen[_key].append(out)
            return out
        mp.setattr(mod, fn_name, wrapped)
    yield seen
    mp.undo()


def _cli(*args: str) -> str:
    from infergap.cli import app

    r = CliRunner().invoke(app, list(args), catch_exceptions=False)
    assert r.exit_code in (0, 1), (args, r.exit_code, r.output[-2000:])
    return r.output


@pytest.fixture(scope="module")
def hostile_runs(calls, tmp_path_factory):
    """Run every command with a Markdown report on hostile inputs, in this process; then the
    doctor's report.md of the same documents. Returns the text reports of the same inputs."""
    d = tmp_path_factory.mktemp("markup")
    snap, cfg, log = evil_snapshot(d), evil_config(d), evil_log(d)
    srv = EvilServer()
    texts = {}
    _cli("audit", "--snapshot", str(snap), "--evidence", str(log), "--format", "json", "--output", str(d / "audit.json"))
    _cli("audit", "--snapshot", str(snap), "--evidence", str(log), "--format", "md", "--output", str(d / "audit.md"))
    texts["audit"] = _cli("audit", "--snapshot", str(snap), "--evidence", str(log))
    _cli("roofline", "--model", str(cfg), "--gpu", "h200", "--gpus", "1", "--format", "json", "--output", str(d / "rl.json"))
    _cli("roofline", "--model", str(cfg), "--gpu", "h200", "--gpus", "1", "--format", "md", "--output", str(d / "rl.md"))
    texts["roofline"] = _cli("roofline", "--model", str(cfg), "--gpu", "h200", "--gpus", "1")
    common = ["bench", "--url", srv.url, "--concurrency", "1", "--num-prompts", "2", "--trials", "1", "--warmup", "0",
              "--output-len", "4"]
    _cli(*common, "--format", "json", "--output", str(d / "bench.json"))
    _cli(*common, "--format", "md", "--baseline", str(d / "bench.json"), "--output", str(d / "bench.md"))
    texts["bench"] = _cli(*common, "--baseline", str(d / "bench.json"))
    docs = ["--audit", str(d / "audit.json"), "--roofline", str(d / "rl.json"), "--bench", str(d / "bench.json"),
            "--evidence", str(log)]
    _cli("plan", *docs, "--format", "json", "--output", str(d / "plan.json"))
    _cli("plan", *docs, "--format", "md", "--output", str(d / "plan.md"))
    texts["plan"] = _cli("plan", *docs)
    fleet = d / "fleet"
    fleet.mkdir()
    shutil.copytree(snap, fleet / EVIL_NAME)
    shutil.copytree(SNAPSHOT, fleet / "plain")
    _cli("fleet", "audit", "--snapshots", str(fleet), "--workers", "0", "--no-record", "--format", "md", "--output", str(d / "fleet.md"))
    texts["fleet"] = _cli("fleet", "audit", "--snapshots", str(fleet), "--workers", "0", "--no-record")
    _doctor_report(d)
    return texts


def _doctor_report(d: Path) -> None:
    """doctor's report.md from the hostile stage documents (doctor writes it with this function)."""
    from infergap.bench import load_result
    from infergap.guard import read_json
    from infergap.plan import Plan
    from infergap.render import report
    from infergap.roofline import RooflineResult
    from infergap.synthesis import AuditReport

    plan = Plan.model_validate(read_json(d / "plan.json"))
    audit = AuditReport.model_validate(read_json(d / "audit.json"))
    rl = RooflineResult.model_validate(read_json(d / "rl.json"))
    report.render_report_markdown(plan, audit, rl, load_result(d / "bench.json"))


def test_every_markdown_renderer_is_reached_by_a_hostile_input(calls, hostile_runs):
    missing = [k for k, v in calls.items() if not v]
    assert not missing, f"Markdown renderers no hostile case reaches (add one): {missing}"


def test_no_markdown_report_renders_live_html(calls, hostile_runs):
    bad = {}
    for key, outs in calls.items():
        for out in outs:
            live = live_markup(out)
            if live:
                bad[key] = sorted(set(live))[:6]
    assert not bad, f"live HTML in Markdown reports: {bad}"


def test_the_hostile_values_are_shown_not_dropped(calls, hostile_runs):
    """The reports still show the values (escaped): the model id, the CPU name, the node name."""
    for key in ("infergap.render.bench.to_markdown", "infergap.render.audit.render_md", "infergap.fleet.render.render_md"):
        text = "".join(_MD.render(o) for o in calls[key])
        assert "onerror=alert(1)" in text and "[link=" in text, key


def test_text_reports_show_rich_markup_literally(hostile_runs):
    """Each text report rendered (no crash on ``[/]``); where it shows a hostile value, rich's
    markup in it is shown as typed, and the reports that name the model, host or node do."""
    for name, text in hostile_runs.items():
        if "onerror=alert(1)" in text or name in ("audit", "bench", "roofline", "fleet"):
            assert "[link=" in text and "hidden" in text and "[bold]" in text, (name, text[:3000])
