"""infergap doctor against a real llama-cpp-python server on 127.0.0.1: every artefact, a
self-contained report that Chromium renders without errors or network requests, with the plots."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time

import pytest

import chromium
from plan_support import ROOT, free_port, silent_listener

ARTEFACTS = ("audit.json", "server.json", "roofline.json", "bench.json", "plan.json", "plan.md", "report.md", "report.html")


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYTHONUNBUFFERED="1", COLUMNS="140")


def _doctor(*args, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infergap", "doctor", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=_env(), stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def doctor_run(llama_server, tmp_path_factory):
    out = tmp_path_factory.mktemp("doctor")
    t0 = time.monotonic()
    r = _doctor("--url", llama_server.url, "--quick", "--model", "llama-3.1-8b", "--gpu", "h200", "--output-dir", out)
    return r, out, time.monotonic() - t0


@pytest.mark.slow
def test_doctor_writes_every_artefact(doctor_run, llama_server):
    r, out, elapsed = doctor_run
    assert r.returncode == 0, r.stderr
    for name in ARTEFACTS:
        assert (out / name).stat().st_size > 0, name
    schemas = {n: json.loads((out / n).read_text()).get("schema") for n in ("audit.json", "roofline.json", "bench.json", "plan.json")}
    assert schemas == {"audit.json": "infergap.audit/1", "roofline.json": "infergap.roofline/1", "bench.json": "infergap.bench/1",
                       "plan.json": "infergap.plan/1"}
    assert json.loads((out / "server.json").read_text())["engine"] == "llama-cpp-python"  # the server is llama-cpp-python's, named as itself
    bench = json.loads((out / "bench.json").read_text())
    assert [p["concurrency"] for p in bench["points"]] == [1, 2, 4]
    assert all(p["trials"][0]["completed"] > 0 for p in bench["points"])
    plan = json.loads((out / "plan.json").read_text())
    assert [s["name"] for s in plan["stages"]] == ["server", "process", "audit", "roofline", "bench", "plan"]
    assert all(s["status"] == "ran" for s in plan["stages"]), plan["stages"]
    verdicts = {s["name"]: s["verdict"] for s in plan["stages"]}
    assert verdicts["bench"] == "ok: 3 of 3 point(s) within the 1.0% failure budget"
    assert re.fullmatch(r"P0 \d+, P1 \d+, P2 \d+, unknown \d+", verdicts["audit"])
    assert verdicts["server"] is verdicts["roofline"] is verdicts["plan"] is None  # ran and computed; nothing judged
    assert [g["concurrency"] for g in plan["gap"]["points"]] == [1, 2, 4] and plan["gap"]["headline"]
    assert "top actions" in r.stdout and "report.html" in r.stdout
    assert llama_server.posts("/v1/chat/completions") > 0


@pytest.mark.slow
def test_report_is_self_contained(doctor_run):
    _, out, _ = doctor_run
    html = (out / "report.html").read_text()
    assert not re.search(r"""(?:src|href|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//""", html, re.I)
    assert not re.search(r"url\(\s*['\"]?\s*(?:https?:)?//", html, re.I)
    assert "@import" not in html and "<link" not in html.lower() and not re.search(r"<script[^>]+src", html, re.I)
    for sec in ("summary", "audit", "roofline", "sweep", "plan", "wont", "unknown", "evidence"):
        assert f'id="{sec}"' in html, sec
    assert html.count("<svg") >= 2 and "<details" in html and "@media print" in html and "max-width: 640px" in html


@pytest.mark.slow
def test_report_in_headless_chromium(doctor_run, tmp_path):
    if chromium.chromium() is None:
        pytest.skip("chromium is not installed (CI installs it: apt-get install -y chromium)")
    from PIL import Image

    _, out, _ = doctor_run
    page = out / "report.html"
    r = chromium.load(page, tmp_path / "profile", queries={"svgs": "document.querySelectorAll('figure svg').length",
                                                           "h2": "Array.from(document.querySelectorAll('h2')).map(h => h.textContent)"},
                      shots={"plot": (1200, 900, "#plot-throughput"), "latency": (1200, 900, "#plot-latency")})
    assert r.requests == [page.resolve().as_uri()], r.requests  # the page itself, nothing else
    assert not [c for c in r.console if c[0] in ("error", "assert", "warning")], r.console
    assert not r.exceptions and not r.log_errors, (r.exceptions, r.log_errors)
    assert r.values["svgs"] >= 2
    assert r.values["h2"][:3] == ["Summary", "Audit", "Roofline"]
    for name in ("plot", "latency"):
        img = Image.open(io.BytesIO(r.shots[name])).convert("RGB")
        assert img.width >= 300 and img.height >= 150, img.size
        colors = img.getcolors(maxcolors=1 << 20)
        assert len(colors) > 50, f"{name}: {len(colors)} colours — an empty or uniform picture"
        top = max(colors)[0] / (img.width * img.height)
        assert top < 0.97, f"{name}: {top:.1%} of the pixels are one colour"
    phone = chromium.load(page, tmp_path / "profile2", viewport=(390, 800), queries={"sw": "document.documentElement.scrollWidth",
                                                                                     "closed": "document.querySelectorAll('details pre').length"}, pdf=True)
    assert phone.values["sw"] <= 391  # nothing wider than a phone screen outside the scrollable tables
    assert phone.pdf and phone.pdf.startswith(b"%PDF") and len(phone.pdf) > 20_000
    assert phone.values["print.visible_details_text"] == phone.values["closed"] > 0  # printed, the evidence blocks are open


def _same_stages_everywhere(stages: list[dict], stderr: str, out) -> None:
    """Each stage reads the same in the terminal, plan.md, report.md and report.html."""
    from markupsafe import escape

    from infergap.guard import md_escape

    md, report_md, html = ((out / n).read_text() for n in ("plan.md", "report.md", "report.html"))
    stderr = re.sub(r"\n +", " ", stderr)  # a progress line wrapped at 100 columns, continued indented
    for s in stages:
        rest = (f" — {s['verdict']}" if s["verdict"] else "") + (f" ({s['detail']})" if s["detail"] else "")
        assert f"\n{s['name']}: {s['status']}{rest}\n" in f"\n{stderr}", s
        line = md_escape(f"{s['name']} {s['status']}{rest}")  # Markdown carries the values escaped
        assert line in md and line in report_md, s
        cells = [re.escape(str(escape(x or ""))) for x in (s["name"], s["status"], s["verdict"], s["detail"])]
        row = '<tr><td>{}</td><td class="[a-z]*">{}</td><td class="[a-z]*">{}</td><td>{}</td></tr>'.format(*cells)
        assert re.search(row, html), (row, s)


def test_stages_that_cannot_run_are_recorded(tmp_path):
    """A port that accepts connections but speaks no HTTP, and a model the roofline does not know:
    recorded, and the rest goes on."""
    with silent_listener() as port:
        url = f"http://127.0.0.1:{port}"
        r = _doctor("--url", url, "--quick", "--model", "no-such-model", "--snapshot", ROOT / "tests/fixtures/hosts/seed-8x-rtxpro6000",
                    "--output-dir", tmp_path, timeout=120)
    assert r.returncode == 2, r.stderr  # the report is written, but the server was not usable
    assert r.stderr.strip().splitlines()[-1] == f"infergap: error: --url {url}: the server did not answer; nothing was measured"
    plan = json.loads((tmp_path / "plan.json").read_text())
    st = {s["name"]: s for s in plan["stages"]}
    assert st["server"]["status"] == "failed" and st["roofline"]["status"] == "skipped" and st["bench"]["status"] == "failed"
    assert "no-such-model" in st["roofline"]["detail"] and st["audit"]["status"] == "ran"
    sev = json.loads((tmp_path / "audit.json").read_text())["summary"]
    assert st["audit"]["verdict"] == (f"P0 {sev['actionable_by_severity']['P0']}, P1 {sev['actionable_by_severity']['P1']}, "
                                      f"P2 {sev['actionable_by_severity']['P2']}, unknown {sev['counts']['unknown']}")
    assert st["audit"]["detail"] == f"8 × NVIDIA RTX PRO 6000 Blackwell Server Edition; from {ROOT / 'tests/fixtures/hosts/seed-8x-rtxpro6000'}"
    assert not [s for s in plan["stages"] if s["status"] == "ok" or (s.get("verdict") or "").startswith("ok")]  # nothing checked was fine
    _same_stages_everywhere(plan["stages"], r.stderr, tmp_path)
    assert plan["host_fixes"] and "nvidia.peermem" in [h["id"] for h in plan["host_fixes"]]  # the audit still drove the plan
    html = (tmp_path / "report.html").read_text()
    assert "Not computed" in html and "No sweep" in html


def test_bad_url_is_one_line(tmp_path):
    r = _doctor("--url", "not-a-url", "--output-dir", tmp_path, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().startswith("infergap: error: --url not-a-url") and "Traceback" not in r.stderr


@pytest.mark.slow
def test_plan_reads_a_live_server(llama_server):
    r = subprocess.run([sys.executable, "-m", "infergap", "plan", "--url", llama_server.url, "--format", "json"], capture_output=True,
                       text=True, timeout=60, env=_env(), stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert next(s for s in plan["stages"] if s["name"] == "server")["status"] == "given"
    assert plan["facts"]["engine.name"]["value"] == "llama-cpp-python" and plan["facts"]["engine.name"]["source"].startswith("GET ")
    assert plan["unknowns"] and all(u["command"].startswith("infergap ") or "--evidence" in u["command"] for u in plan["unknowns"])
    assert not any("infergap plan --url" in u["command"] for u in plan["unknowns"])  # never asks for what it was given


def test_roofline_skip_names_the_servers_model_not_a_model_option():
    """Without --model the roofline tries the names the server reports; their failure read
    "--model stub: no such file", an option the user never gave."""
    from types import SimpleNamespace

    import pytest

    from infergap.doctor import _load_spec
    from infergap.errors import UserError

    with pytest.raises(UserError) as e:
        _load_spec(None, SimpleNamespace(model="stub", served_model_name=None))
    assert "the server serves 'stub'" in str(e.value) and "--model stub" not in str(e.value)
    with pytest.raises(UserError, match=r"--model nothing-here: no such file"):
        _load_spec("nothing-here", None)
