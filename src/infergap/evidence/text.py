"""Normalising text that people paste: from terminals, web pages, chat and bug trackers.

A pasted output differs from the captured one in ways that break naive parsers: CRLF line ends,
ANSI colour codes (or their remains, ``[0m``, once a web page dropped the ESC byte), non-breaking
spaces, extra indentation added by Markdown or a quote (``> ``), and lines cut short. The functions
here undo the first five; parsers must tolerate the last (they match on prefixes).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Iterator

from infergap.guard import ANSI as _ANSI

#: A cheap test for an SGR remain without its ESC byte (the full pattern is :data:`infergap.guard.ANSI`).
_REMNANT = re.compile(r"\[\d[\d;]{0,10}m")
_NBSP = str.maketrans({"\u00a0": " ", "\u2007": " ", "\u202f": " ", "\ufeff": "", "\u200b": ""})


def clean_line(line: str) -> str:
    """One line without its line end, NUL bytes, ANSI codes, NBSPs and zero-width characters.

    >>> clean_line("\\x1b[4mGPU0\\tCPU Affinity\\x1b[0m\\r\\n")
    'GPU0\\tCPU Affinity'
    >>> clean_line("(VllmWorker rank=0 pid=281) [0;0m WARNING 05-15 11:07:08 [fused_moe.py:659] x")
    '(VllmWorker rank=0 pid=281)  WARNING 05-15 11:07:08 [fused_moe.py:659] x'
    """
    line = line.rstrip("\r\n").replace("\r", "")
    if "\x00" in line:  # NUL runs a truncated or crash-written log holds (see recognize._is_binary)
        line = line.replace("\x00", "")
    if "\x1b" in line or ("[" in line and _REMNANT.search(line)):
        line = _ANSI.sub("", line)
    return line if line.isascii() else line.translate(_NBSP)


def decode(data: bytes) -> str:
    """Bytes to text: UTF-8 (BOM dropped), else UTF-16 with a BOM, undecodable bytes replaced."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8-sig", errors="replace")


_QUOTE = re.compile(r"^\s*> ?")


def dedent_block(lines: list[str]) -> list[str]:
    """Remove what a paste added in front of every line: a Markdown quote marker (``> ``) when all
    non-blank lines carry one, then the whitespace common to all non-blank lines.

    >>> dedent_block(["    a: 1", "      b: 2", ""])
    ['a: 1', '  b: 2', '']
    """
    body = [ln for ln in lines if ln.strip()]
    if body and all(_QUOTE.match(ln) for ln in body):
        lines = [_QUOTE.sub("", ln, count=1) for ln in lines]
    return textwrap.dedent("\n".join(lines)).split("\n")


def clean_text(text: str) -> str:
    """A whole pasted block normalised: every line cleaned, common indentation removed, leading
    and trailing blank lines dropped, one ``\\n`` at the end."""
    lines = dedent_block([clean_line(ln) for ln in text.splitlines()])
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines) + ("\n" if lines else "")


def iter_clean(lines: Iterable[str]) -> Iterator[str]:
    """Lines cleaned one by one (no dedent: that needs the whole block); leading blanks kept."""
    for ln in lines:
        yield clean_line(ln)
