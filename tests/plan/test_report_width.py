"""The doctor's HTML report of a real run (tests/fixtures/real-gpu/h200-llama-server/healthy, the
doctor's own plan, bench, roofline and server answers) on a 1,280-px page in headless Chromium:
every table fits its box (the sweep's notes and efficiency, the engine table's "why the curve
bends" are on the page, not behind a scroll bar), no command is cut."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "plan"))
import chromium  # noqa: E402

RUN = ROOT / "tests" / "fixtures" / "real-gpu" / "h200-llama-server" / "healthy"


def test_report_fits_a_1280_px_page(tmp_path):
    from infergap.bench import load_result
    from infergap.plan.build import Plan
    from infergap.render.report import render_html
    from infergap.server import ServerConfig

    html = render_html(Plan.model_validate_json((RUN / "plan.json").read_text()), roofline=json.loads((RUN / "roofline.json").read_text()),
                       bench=load_result(RUN / "bench.json"), server=ServerConfig.model_validate_json((RUN / "server.json").read_text()))
    assert "why the curve bends" in html and "efficiency" in html
    page = tmp_path / "report.html"
    page.write_text(html, encoding="utf-8")
    if chromium.chromium() is None:
        pytest.skip("chromium is not installed (CI installs it: apt-get install -y chromium)")
    from PIL import Image

    r = chromium.load(page, tmp_path / "profile", viewport=(1280, 900), queries={
        "page": "document.documentElement.scrollWidth <= window.innerWidth",
        "boxes": "Array.from(document.querySelectorAll('.scroll')).map(e => [e.scrollWidth - e.clientWidth, e.textContent.slice(0, 40)])",
        "cut": "Array.from(document.querySelectorAll('code.cmd, pre')).filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent.slice(0, 60))",
        "right": "Math.max(...Array.from(document.querySelectorAll('td, th')).map(e => e.getBoundingClientRect().right))",
        "width": "window.innerWidth"},
        shots={"page": (1280, 900, None)})
    assert not r.exceptions, r.exceptions
    assert r.values["page"] is True
    wide = [b for b in r.values["boxes"] if b[0] > 0]
    assert len(r.values["boxes"]) >= 4 and not wide, wide  # the sweep and engine tables among them
    assert r.values["cut"] == [], r.values["cut"]
    assert r.values["right"] <= r.values["width"], r.values  # no cell, notes included, right of the page
    img = Image.open(io.BytesIO(r.shots["page"])).convert("RGB")
    assert img.width >= 1000 and len(img.getcolors(maxcolors=1 << 20)) > 20
