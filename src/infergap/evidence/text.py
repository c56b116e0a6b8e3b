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
    if "`" in line:
        line = _unquote(line)
    return line if line.isascii() else line.translate(_NBSP)


def _unquote(line: str) -> str:
    """A whole line that Markdown's inline code quotes (```offloaded 0/49 layers to GPU```), without
    its backticks; a fence (`````` ``` ``````) and a line that only holds a backtick are kept."""
    st = line.strip()
    if len(st) > 2 and st[0] == "`" and st[-1] == "`" and st[1] != "`" and "`" not in st[1:-1]:
        return line[: len(line) - len(line.lstrip())] + st[1:-1]
    return line


#: A line of ``cat -n`` (or an editor's gutter): its number, right-aligned, then a tab or a space.
_NUMBERED = re.compile(r"^ {0,8}(\d{1,7})(?:\t| |$)")


def line_number(line: str) -> tuple[int, str] | None:
    """(number, the rest) of a line that starts with a line number, or None.

    >>> line_number("  1 P2P=Disabled Latency Matrix (us)")
    (1, 'P2P=Disabled Latency Matrix (us)')
    >>> line_number("     7")
    (7, '')
    """
    m = _NUMBERED.match(line)
    return (int(m.group(1)), line[m.end():]) if m else None


class LineNumbers:
    """Removes the line numbers ``cat -n`` (or a viewer's gutter) put in front of a pasted output.

    A run starts at a line numbered 1 whose text does not itself start with a digit (a matrix row
    ``1  11.09 …`` is data, not a numbered line) and continues while each line carries the next
    number; every line of the run is given back without its number. ``numbered`` tells whether
    a run was seen.

    >>> n = LineNumbers()
    >>> [n.feed(x) for x in ["  1 P2P=Disabled Latency Matrix (us)", "  2    GPU     0      1", "  3      0   2.61  14.95", "plain"]]
    ['P2P=Disabled Latency Matrix (us)', '   GPU     0      1', '     0   2.61  14.95', 'plain']
    >>> LineNumbers().feed("     1  11.09  2.10")
    '     1  11.09  2.10'
    """

    def __init__(self) -> None:
        self.expect: int | None = None
        self.numbered = False

    def feed(self, line: str) -> str:
        """``line`` without its number when it continues (or starts) a numbered run."""
        got = line_number(line) if line[:1] in (" ", "\t") or line[:1].isdigit() else None
        if got is not None and (got[0] == self.expect or (got[0] == 1 and got[1][:1] not in "0123456789 \t" and got[1])):
            self.expect, self.numbered = got[0] + 1, True
            return got[1]
        self.expect = None
        return line


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


def clean_text(text: str, numbered: bool = False) -> str:
    """A whole pasted block normalised: every line cleaned (and, when ``numbered``, without the
    line numbers of ``cat -n``: :class:`LineNumbers`), common indentation removed, leading and
    trailing blank lines dropped, one ``\\n`` at the end."""
    lines = [clean_line(ln) for ln in text.splitlines()]
    if numbered:
        lines = strip_numbers(lines)
    lines = dedent_block(lines)
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines) + ("\n" if lines else "")


def strip_numbers(lines: Iterable[str]) -> list[str]:
    """Lines of a part the recogniser found numbered, each without its leading line number."""
    out = []
    for ln in lines:
        got = line_number(ln)
        out.append(got[1] if got is not None else ln)
    return out


def iter_clean(lines: Iterable[str]) -> Iterator[str]:
    """Lines cleaned one by one (no dedent: that needs the whole block); leading blanks kept."""
    for ln in lines:
        yield clean_line(ln)
