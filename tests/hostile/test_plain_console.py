"""The plain console of reports written to a pipe or a file (:class:`infergap.guard.PlainConsole`)
prints exactly what the Rich console of :func:`infergap.guard.safe_console` prints with the same
report settings (no colour, no wrapping, no markup): hostile values (terminal escapes, bidi
overrides, carriage returns, Rich markup, tabs after wide characters) included, and whole audit
reports of real captures."""

from __future__ import annotations

import io

import pytest
from rich.text import Text

from infergap.audit import run_audit
from infergap.evidence.overlay import open_with_evidence
from infergap.guard import PlainConsole, safe_console
from infergap.render.audit import render_text
from tests.conftest import HOSTS

HOSTILE = [
    "plain", "", "a\tb", "abcdefgh\tx", "abcdefg\tx", "漢字\tx", "wide 漢字 and emoji 🚀\tend\tx", "trailing   ", "  leading",
    "x" * 3000, "two\nlines\twith\ttabs", "\x1b[31mred\x1b[0m\x07", "cr\roverwrite", "bidi \u202eevil\u202c", "zero\u200bwidth",
    "[bold]not markup[/] [link=https://evil.example]hidden[/link]", ":smile: :rocket:", "\x00nul\x7fdel\x9bcsi", "\u2028sep",
]


def _rich(*calls: tuple[object, ...]) -> str:
    buf = io.StringIO()
    con = safe_console(file=buf, width=1000, force_terminal=False, no_color=True, highlight=False, soft_wrap=True, markup=False, emoji=False)
    for objs in calls:
        con.print(*objs)
    return buf.getvalue()


def _plain(*calls: tuple[object, ...]) -> str:
    buf = io.StringIO()
    con = PlainConsole(buf)
    for objs in calls:
        con.print(*objs)
    return buf.getvalue()


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_string_prints_as_rich_prints_it(value):
    styled = Text("head ", style="bold")
    styled.append(value, style="red")
    calls = [(value,), (Text(value, style="bold"),), (styled,), ("left", value, "right"), ()]
    assert _plain(*calls) == _rich(*calls)
    assert "\x1b" not in _plain((value,)) and "\u202e" not in _plain((value,))


def test_a_table_is_refused_not_dropped():
    from rich.table import Table

    with pytest.raises(TypeError, match="Table"):
        PlainConsole(io.StringIO()).print(Table())


@pytest.mark.parametrize("snapshot", ["seed-8x-rtxpro6000", "h200-1gpu-collect.tar.gz", "h200-2gpu-collect.tar.gz"])
def test_an_audit_report_is_the_same_text_without_rich(snapshot):
    with open_with_evidence(HOSTS / snapshot, [], host=True, active=False) as snap:
        report = run_audit(snap)
    plain = render_text(report)  # a pipe or a file: the plain console
    wide = render_text(report, width=1_000_000)  # the Rich console, at a width no line reaches
    assert plain == wide and plain.count("\n") > 40
