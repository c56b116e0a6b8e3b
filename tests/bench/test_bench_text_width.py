"""The terminal bench report of real runs (tests/fixtures/real-gpu) at 100 columns: nothing cut,
nothing repeated per point that says the same thing, no definitions block after every run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infergap.bench import load_result
from infergap.render.bench import to_text

RUNS = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "real-gpu").rglob("bench*.json"))


@pytest.mark.parametrize("path", RUNS[:6], ids=lambda p: "/".join(p.parts[-3:]))
def test_report_fits_100_columns_without_cutting_a_cell(path):
    result = load_result(path)
    text = to_text(result, width=100)
    assert max(len(line) for line in text.splitlines()) <= 100
    assert not re.search(r"\S…", text)  # a cell cut to "UNSTA…" or "retr…" hides what it says
    from infergap.render.bench import rows

    words = set(text.split())
    for row in rows(result):  # every word of every cell is printed whole (cells wrap, never cut)
        for cell in row:
            assert all(w in words or all(f in text for f in w.split("-")) for w in str(cell).split()), cell
    assert "definitions:" not in text and "-f md" in text  # one line, not the block, on a terminal
    assert "definitions:" in to_text(result)  # a file or a pipe keeps them


def test_no_engine_metrics_is_said_once_for_the_points_it_concerns():
    from infergap.bench.engine_metrics import explain

    result = load_result(RUNS[0])
    for p in result.points:  # the same run as if the server had exposed no metrics
        p.engine = None
        p.telemetry = None
        p.client_bound = False
    for p, ex in zip(result.points, explain(result.points)):
        p.explanation = ex
    unknown = [p for p in result.points if p.explanation is not None and p.explanation.cause == "unknown" and not p.explanation.knee]
    assert len(unknown) >= 2
    text = to_text(result, width=100)
    said = [ln for ln in text.splitlines() if ln.startswith("- ") and "no engine metrics" in ln and "knee" not in ln]
    assert len(said) == 1, said
    assert ", ".join(p.label for p in unknown) in text


def test_retries_alone_are_not_headed_as_failed_requests():
    """A real llama-server run whose requests all completed, some after a retry on a fresh
    connection (the server closes kept-alive connections), is not headed FAILED REQUESTS; a run
    with failed requests still is."""
    clean = load_result(Path(__file__).resolve().parents[1] / "fixtures" / "real-gpu" / "h200-llama-process" / "q8" / "bench.json")
    assert sum(p.failed for p in clean.points) == 0 and sum(p.retried for p in clean.points) > 0
    text = to_text(clean, width=100)
    assert text.startswith("CONNECTIONS (no request failed)\n- connections: ") and "FAILED REQUESTS" not in text
    failed = load_result(Path(__file__).resolve().parents[1] / "fixtures" / "real-gpu" / "h200-llama-server" / "kv-refuse" / "bench.json")
    assert sum(p.failed for p in failed.points) > 0
    assert to_text(failed, width=100).startswith("FAILED REQUESTS\n")
