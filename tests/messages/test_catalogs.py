"""Every packaged message catalog (src/infergap/data/messages/*.yaml): well formed, every matcher
finds its own template rendered with sample values, and no matcher is slow on long hostile lines."""

from __future__ import annotations

import re
import time

import pytest

from infergap import checks
from infergap.messages import MIN_LITERAL, catalog, match_lines
from infergap.messages.template import CLASSES, MAX_LINE, longest_literal, render_sample, template_pattern

CAT = catalog()
MSGS = CAT.messages


def test_catalogs_are_present_and_cite_their_source():
    assert {"nccl", "cuda", "nvml"} <= set(CAT.headers)
    for name, h in CAT.headers.items():
        assert h["upstream"]["repo"] and h["upstream"]["tag"], name
        assert h["mined_by"].startswith("tools/messages/mine_"), name
        assert isinstance(h["call_sites"], int), name


@pytest.mark.parametrize("component", sorted(CAT.headers))
def test_entries_are_valid(component):
    known = checks.load()
    for m in (m for m in MSGS if m.component == component):
        assert m.id.startswith(component + "."), m.id
        assert m.cls in CLASSES and m.meaning, m.id
        assert m.where, m.id
        assert m.check is None or m.check in known, (m.id, m.check)
        assert m.severity in (None, "P0", "P1", "P2"), m.id
        assert m.pattern == template_pattern(m.template, m.style, _attrs(m)), f"{m.id}: pattern is stale, re-run the script"


def _attrs(m):
    return list(m.attrs)


@pytest.mark.parametrize("component", sorted(CAT.headers))
def test_every_matcher_finds_its_rendered_template(component):
    """Each message rendered with sample values, behind a log prefix, is found by match_lines and
    the match is that message (or one at least as specific covering the same text)."""
    missed = []
    for m in (m for m in MSGS if m.component == component and m.matchable):
        line = "2026-01-01 00:00:00 host:1:2 [0] " + render_sample(m.template, m.style, _attrs(m))
        got = match_lines([line])
        if not any(x.message.id == m.id or x.message.literal_len >= m.literal_len and x.message.regex.search(line) and m.regex.search(line)
                   for x in got):
            missed.append(m.id)
    assert not missed, f"{len(missed)} matcher(s) do not find their own template: {missed[:10]}"


def test_unmatchable_entries_are_only_the_generic_ones():
    for m in MSGS:
        assert m.matchable == (len(longest_literal(m.template, m.style)) >= MIN_LITERAL)


def _hostile(m) -> list[str]:
    lits = [w for w in re.split(r"%[-+ #0-9.]*[a-zA-Z]+|\{[^{}]*\}", m.template) if w.strip()] or [m.template]
    out = []
    for lit in lits[:3]:
        out.append((lit * (MAX_LINE // max(1, len(lit)) + 1))[:MAX_LINE])
        out.append((lit + " " * 7 + "x" * 50) * 40)
    out.append(("a" * 299 + " ") * 14)
    return out


def test_no_matcher_backtracks_on_hostile_lines():
    """Every pattern searched in lines of 4096 characters built from its own literals repeated
    (the input that makes a nested or unbounded pattern explode): the slowest must stay below half
    a second. A bounded pattern's worst case is about (line length x 300) steps, some 0.05 s on the
    2-core machine; a backtracking one takes seconds to hours."""
    _assert_bounded(lambda m: m.regex)


def test_real_nccl_lines():
    lines = [
        "dgx-a:8842:8900 [3] NCCL INFO NET/IB : No device found.",
        "dgx-a:8842:8900 [3] NCCL INFO Channel 00/0 : 3[3] -> 4[4] via P2P/IPC",
        "dgx-a:8842:8900 [3] NCCL WARN Cuda failure 'out of memory'",
        "dgx-a:8842:8900 [3] NCCL INFO Using network Socket",
    ]
    ids = [m.message.id for m in match_lines(lines)]
    assert ids == ["nccl.net_ib.net_ib_no_device_found", "nccl.p2p.channel_via_p2p_ipc", "nccl.checks.cuda_failure",
                   "nccl.init.using_network"]
    m = match_lines(lines[3:])[0]
    assert m.captures == {"a1": "Socket"} and m.text == "Using network Socket"


def test_lines_without_messages_match_nothing():
    assert match_lines(["hello world", "", "x" * 10000, "Channel"]) == []


def test_loose_form_reads_another_releases_wording():
    """A message printed by an older release of its component (vLLM 0.2 stops the bfloat16
    refusal after its first sentence; another release joins "the" and "`dtype`" without a blank)
    is found through the template's loose form, and says so; the real lines are the corpus's."""
    old = ("Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
           "Your Tesla P100-PCIE-16GB GPU has compute capability 6.0.")
    glued = ("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 "
             "GPU has compute capability 7.5. You can use float16 instead by explicitly setting the`dtype` flag in "
             "CLI, for example: --dtype=half.")
    for line in (old, glued):
        (m,) = [x for x in match_lines([line]) if x.message.id == "vllm.cuda.bfloat16_only_supported_gpus_compute"]
        assert m.loose and m.message.check == "engine.config"
    assert match_lines(["Bfloat16 is only supported on GPUs"]) == []  # a fragment shorter than the first sentence


def test_loose_forms_do_not_backtrack_on_hostile_lines():
    """The loose forms are timed like the patterns (same pieces, same atomic groups)."""
    _assert_bounded(lambda m: m.loose_regex)


def _assert_bounded(regex_of) -> None:
    """The slowest search of ``regex_of(message)`` (None: the message has no such form) over the
    hostile lines of every message stays below half a second."""
    worst, who = 0.0, ""
    for m in MSGS:
        rx = regex_of(m)
        for line in (_hostile(m) if rx is not None else ()):
            t0 = time.perf_counter()
            rx.search(line[:MAX_LINE])
            dt = time.perf_counter() - t0
            if dt > worst:
                worst, who = dt, m.id
    assert worst < 0.5, f"{who} took {worst:.3f} s on a hostile line"
