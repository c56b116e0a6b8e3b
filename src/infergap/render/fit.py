"""Text reports fitted to :data:`WIDTH` columns without breaking a command.

A report for a terminal, a pipe or a file is read by a person and copied from: prose longer than
:data:`WIDTH` columns is wrapped at spaces, with each continuation indented under the text it
continues (after a list marker such as ``1.``, ``•``, ``?``, after a label such as ``why:``, or
under the last column of a table-like line), while a command stays whole: a string the report's
own document names as a command (:func:`commands_in`) and a span quoted with ``'…'`` or `` `…` ``
are never split, and when one does not fit where it stands it starts the next line on its own.
A command longer than the width is the only thing that may exceed it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Any

#: Columns a text report fits (the issue of first use: piped lines reached ~700 columns).
WIDTH = 100
#: Keys of a report's JSON document whose strings are commands a user copies (audit remedies,
#: the plan's host fixes and unknowns, a lever's verification, tune's best command line).
COMMAND_KEYS = frozenset({"commands", "command", "revert", "verify", "best_command", "launch", "cmd"})

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# a quoted span: opening quote not glued to a word (so "NCCL's" opens nothing), closing one not
# followed by a word character
_QUOTED = re.compile(r"(?<![\w'`])'[^'\s][^'\n]*?'(?![\w])|`[^`\n]+`")
_MARKER = re.compile(r"(?:\d{1,4}\.|[•?✓!*+~-]|\[[^\]]{1,40}\])\s+")
_LABEL = re.compile(r"[A-Za-z][\w /()-]{0,22}:\s+")
_GAP = re.compile(r"\S {2,}(?=\S)")


def cells(s: str) -> int:
    """Terminal columns of ``s``: colour codes take none, East Asian wide characters two."""
    s = _ANSI.sub("", s)
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 0 if unicodedata.combining(ch) else 1 for ch in s)


def commands_in(doc: Any) -> list[str]:
    """Every string of a JSON-like ``doc`` (dicts, lists) under a key of :data:`COMMAND_KEYS`,
    at any depth, longest first: the commands a text rendering of ``doc`` must keep whole."""
    out: set[str] = set()

    def walk(o: Any, key: str | None) -> None:
        if isinstance(o, dict):
            for k, v in o.items():
                walk(v, str(k))
        elif isinstance(o, (list, tuple)):
            for v in o:
                walk(v, key)
        elif isinstance(o, str) and key in COMMAND_KEYS and len(o) > 8:
            out.add(o.strip())

    walk(doc, None)
    return sorted(out, key=len, reverse=True)


def _hang(line: str, spans: list[tuple[int, int]]) -> int:
    """The column a continuation of ``line`` starts at: under the text after a list marker or a
    label, or under the last column of a table-like line (a gap of two spaces or more outside
    the ``spans`` kept whole) that starts in the first half; else four columns past the line's
    own indent."""
    indent = len(line) - len(line.lstrip(" "))
    rest = line[indent:]
    m = _MARKER.match(rest) or _LABEL.match(rest)
    gaps = [g.end() for g in _GAP.finditer(line)
            if g.end() <= WIDTH // 2 and all(not (s <= g.start() < e) for s, e in spans)]
    cands = ([indent + m.end()] if m else []) + gaps
    col = max(cands) if cands else indent + 4
    return col if col <= WIDTH // 2 else indent + 4


def _atoms(line: str, keep: Iterable[str]) -> list[tuple[int, int]]:
    """(start, end) of the spans of ``line`` that must not be split: known commands (longest
    first, not overlapping) and quoted spans."""
    spans: list[tuple[int, int]] = []

    def free(a: int, b: int) -> bool:
        return all(b <= s or a >= e for s, e in spans)

    for cmd in keep:
        i = line.find(cmd)
        while i >= 0:
            if free(i, i + len(cmd)):
                spans.append((i, i + len(cmd)))
            i = line.find(cmd, i + len(cmd))
    for m in _QUOTED.finditer(line):
        if free(m.start(), m.end()):
            spans.append((m.start(), m.end()))
    return sorted(spans)


def fit_line(line: str, keep: Iterable[str] = (), width: int = WIDTH) -> list[str]:
    """``line`` as lines of at most ``width`` columns, broken only at spaces outside the spans
    :func:`_atoms` keeps whole and never between a list marker or label and what follows it
    (``fix: <command>`` stays one line); a span too wide for a line has one of its own, indented
    by at most four columns past the line's indent: the only lines wider than ``width``."""
    if cells(line) <= width:
        return [line]
    spans = _atoms(line, keep)
    breaks = [i for i, ch in enumerate(line) if ch == " " and all(not (s < i < e) for s, e in spans)]
    col = _hang(line, spans)
    indent = len(line) - len(line.lstrip(" "))
    out: list[str] = []
    start, prefix = 0, ""
    while start < len(line):
        room = width - cells(prefix)
        if cells(line[start:]) <= room:
            out.append(prefix + line[start:])
            break
        ok = [b for b in breaks if b > start and (start or b >= col) and line[start:b].strip()]
        fits = [b for b in ok if cells(line[start:b].rstrip()) <= room]
        cut = fits[-1] if fits else (ok[0] if ok else None)
        if cut is None:  # one unbreakable piece to the end
            out.append(prefix + line[start:])
            break
        out.append(prefix + line[start:cut].rstrip())
        start = cut
        while start < len(line) and line[start] == " ":
            start += 1
        nxt = next((b for b in breaks if b > start), len(line))
        prefix = " " * (col if cells(line[start:nxt]) <= width - col else min(col, indent + 4))
    return out or [line]


def fit_text(text: str, keep: Iterable[str] = (), width: int = WIDTH) -> str:
    """Every line of ``text`` fitted by :func:`fit_line` (``keep``: the commands to keep whole,
    e.g. :func:`commands_in` of the report's document); the final newline kept.

    >>> fit_text("  why: " + "word " * 30, width=40).splitlines()[1]
    '       word word word word word word'
    >>> cmd = "sysctl -w net.core.rmem_max=16777216 net.core.wmem_max=16777216"
    >>> fit_text("1. raise the socket buffers: " + cmd, keep=[cmd], width=60).splitlines()
    ['1. raise the socket buffers:', '   sysctl -w net.core.rmem_max=16777216 net.core.wmem_max=16777216']
    """
    keep = [k for k in keep if k]
    lines = text.split("\n")
    return "\n".join(out for ln in lines for out in fit_line(ln, keep, width))
