"""Message templates as bounded regexes: the one parser shared by the mining scripts
(``tools/messages/common.py``) and the runtime matcher (:mod:`infergap.messages`).

A template is an upstream format string (C ``printf``, Python ``%`` or ``{}``/f-string, Go
``slog`` message, or a literal); :func:`template_pattern` turns it into an unanchored regex whose
placeholders are named bounded captures, each with the literal after it in an atomic group, so a
search is linear in the line length (``src/infergap/data/messages/README.md``, "Patterns").

>>> template_pattern("NET/IB : No device found.", "printf")
'NET/IB\\\\s{1,8}:\\\\s{1,8}No\\\\s{1,8}device\\\\s{1,8}found\\\\.'
>>> key_words("Found ulimit of %s and failed to automatically increase", "percent")
['Found', 'ulimit', 'and', 'failed', 'automatically', 'increase']
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

#: Longest line (characters) the runtime searches; patterns are timed on hostile lines of this size.
MAX_LINE = 4096
#: Bound of a string capture (characters).
STR_MAX = 300

CLASSES = (
    "network_fallback", "p2p_refused", "memory_kv", "driver_cuda_mismatch", "device_not_visible",
    "limit", "backend_fallback", "crash", "config", "internal", "informational",
)
LEVELS = ("fatal", "error", "warn", "info")
STYLES = ("printf", "percent", "format", "slog", "literal")

# ------------------------------------------------------------------------------------------------
# Template parsing

_PRINTF = re.compile(
    r"%(?:\((?P<name>\w+)\))?[-+ #0']*(?:\*|\d+)?(?:\.(?:\*|\d+))?"
    r"(?:hh|h|ll|l|L|q|j|z|Z|t|I64|I32)?(?P<conv>[diouxXeEfFgGaAcsSpr%vwqTtb])"
)
_FORMAT = re.compile(r"\{\{|\}\}|\{(?P<field>[^{}]*)\}")
_KIND_OF_CONV = {
    "d": "int", "i": "int", "u": "int", "o": "int", "x": "hex", "X": "hex", "p": "ptr",
    "e": "float", "E": "float", "f": "float", "F": "float", "g": "float", "G": "float",
    "a": "float", "A": "float", "c": "char", "s": "str", "S": "str", "r": "str",
    "v": "str", "w": "str", "q": "str", "T": "str", "t": "str", "b": "int",  # Go's fmt verbs
}
CAPTURE = {
    "int": r"-?\d{1,20}",
    "hex": r"(?:0[xX])?[0-9a-fA-F]{1,16}",
    "float": r"(?:[-+]?[0-9][0-9.eE+-]{0,31}|[-+]?(?:inf|nan))",
    "ptr": r"(?:0x[0-9a-fA-F]{1,16}|\(nil\)|[0-9a-fA-F]{1,16})",
    "char": r".",
}
SAMPLE = {"int": "42", "hex": "0x1f", "float": "3.50", "ptr": "0x7f3a2c000000", "char": "x",
          "str": "sample_value"}


@dataclass(frozen=True)
class Piece:
    """One piece of a parsed template: literal ``text``, or a placeholder of ``kind`` with ``name``."""

    text: str = ""
    kind: str = ""  # "" for literal text; int | hex | float | ptr | char | str
    name: str = ""


def _format_kind(spec: str) -> str:
    conv = spec.rsplit(":", 1)[1][-1:] if ":" in spec else ""
    return _KIND_OF_CONV.get(conv, "str") if conv not in ("s", "r", "") else "str"


def _format_name(spec: str) -> str:
    name = re.split(r"[!:]", spec, maxsplit=1)[0].strip()
    return name if name.isidentifier() else ""


def parse_template(template: str, style: str) -> list[Piece]:
    """The template as literal and placeholder pieces (adjacent literals joined).

    ``style`` printf / percent (``%`` conversions, ``%%`` literal), format (``{…}``, ``{{ }}``
    literal), slog and literal (no placeholder). Raises ValueError for an unknown style.
    """
    if style not in STYLES:
        raise ValueError(f"unknown template style {style!r}")
    out: list[Piece] = []

    def lit(t: str) -> None:
        if not t:
            return
        if out and not out[-1].kind:
            out[-1] = Piece(text=out[-1].text + t)
        else:
            out.append(Piece(text=t))

    if style in ("slog", "literal"):
        lit(template)
        return out
    rx = _PRINTF if style in ("printf", "percent") else _FORMAT
    pos = 0
    for m in rx.finditer(template):
        lit(template[pos:m.start()])
        pos = m.end()
        tok = m.group(0)
        if tok in ("%%", "{{", "}}"):
            lit(tok[0])
        elif rx is _PRINTF:
            out.append(Piece(kind=_KIND_OF_CONV[m.group("conv")], name=m.group("name") or ""))
        else:
            spec = m.group("field")
            out.append(Piece(kind=_format_kind(spec), name=_format_name(spec)))
    lit(template[pos:])
    return out


def _matchable_line(template: str) -> str:
    """The one line of a multi-line template that has the most literal text (lines are matched one by one)."""
    parts = [p for p in re.split(r"\\n|\n", template) if p.strip()]
    if not parts:
        return template.strip()
    return max(parts, key=lambda p: len(re.sub(r"%\w|\{[^{}]*\}", "", p))).strip()


def _escape_literal(text: str) -> str:
    """Literal text escaped; a run of n blanks matches 1 to max(8, 2n) blanks (a paste may
    collapse them; a source string continued over lines holds long runs)."""
    words = re.split(r"(\s+)", text)
    return "".join(re.escape(w) if i % 2 == 0 else r"\s{1,%d}" % max(8, 2 * len(w)) for i, w in enumerate(words))


def _group_name(piece: Piece, used: set[str], n: int) -> str:
    base = re.sub(r"\W", "_", piece.name) if piece.name else ""
    if base and base[0].isdigit():
        base = "_" + base
    name = base if base and base not in used else f"a{n}"
    used.add(name)
    return name


def _capture(piece: Piece, nxt: Piece | None) -> str:
    """Bounded capture of one placeholder, chosen by what follows it (see the README)."""
    if piece.kind != "str":
        return CAPTURE[piece.kind]
    if nxt is None:
        return r".{0,%d}" % STR_MAX
    lit = nxt.text.strip() if not nxt.kind else ""
    if nxt.kind or not lit:
        return r"\S{0,%d}" % STR_MAX  # followed by a blank or another value: one word
    if len(lit) == 1 and not nxt.text[0].isspace():
        return r"[^%s\n]{0,%d}" % (re.escape(lit), STR_MAX)  # up to the one character that ends it
    return r".{0,%d}?" % STR_MAX


def _lead(pieces: list[Piece]) -> int:
    """Index of the first literal with at least 3 non-blank characters: placeholders and short
    literals before it are left out of the pattern (a match starts at real text)."""
    for i, p in enumerate(pieces):
        if not p.kind and len(p.text.strip()) >= 3:
            return i
    return 0


def pieces_pattern(pieces: list[Piece], loose: bool = False) -> str:
    """Bounded regex of parsed pieces (see the README's "Patterns"); ``loose``: blanks next to
    punctuation may be missing (:func:`loose_pattern`)."""
    esc = _escape_loose if loose else _escape_literal
    pieces = list(pieces)
    if pieces and not pieces[-1].kind:
        pieces[-1] = Piece(text=pieces[-1].text.rstrip())
    start = _lead(pieces)
    n = sum(1 for p in pieces[:start] if p.kind)
    pieces = pieces[start:]
    if pieces and not pieces[0].kind:
        pieces[0] = Piece(text=pieces[0].text.lstrip())
    out: list[str] = []
    used: set[str] = set()
    i = 0
    while i < len(pieces):
        p = pieces[i]
        if not p.kind:
            out.append(esc(p.text))
            i += 1
            continue
        n += 1
        nxt = pieces[i + 1] if i + 1 < len(pieces) else None
        cap = f"(?P<{_group_name(p, used, n)}>{_capture(p, nxt)})"
        if nxt is not None and not nxt.kind:
            out.append(f"(?>{cap}{esc(nxt.text)})")
            i += 2
        else:
            out.append(f"(?>{cap})" if nxt is not None else cap)
            i += 1
    return "".join(out)


def template_pattern(template: str, style: str = "printf", attrs: Iterable[str] = ()) -> str:
    """Bounded, unanchored regex matching one line printed from ``template``.

    Placeholders become named bounded captures (``a1``… or the placeholder's own name); each
    capture and the literal after it form one atomic group, so matching is linear in the line
    length. A multi-line template is matched on its line with the most literal text. ``slog``:
    the message (bare or quoted after ``msg=``) then optional captures of ``attrs`` found on the
    rest of the line. Raises ValueError for an unknown style.
    """
    if style == "slog":
        msg = _escape_literal(template.strip())
        caps = "".join(
            r"(?:(?=.{0,2000}?\b%s=(?P<%s>\"[^\"]{0,%d}\"|\S{1,%d})))?"
            % (re.escape(k), _slog_group(k), STR_MAX, STR_MAX)
            for k in dict.fromkeys(attrs)
        )
        return f'(?:msg="?)?{msg}"?{caps}'
    return pieces_pattern(parse_template(_matchable_line(template), style))


#: Shortest literal head (characters) a template may be cut to by :func:`loose_pattern`.
HEAD_MIN = 30
_SENTENCE_END = re.compile(r"[.!?](?=\s)")


def _escape_loose(text: str) -> str:
    """Like :func:`_escape_literal`, but a blank next to punctuation may be missing (one release
    prints ``the `dtype` flag``, another ``the`dtype` flag``: adjacent string literals joined)."""
    words = re.split(r"(\s+)", text)
    out = []
    for i, w in enumerate(words):
        if i % 2 == 0:
            out.append(re.escape(w))
            continue
        before, after = words[i - 1][-1:] if i else "", words[i + 1][:1] if i + 1 < len(words) else ""
        lo = 0 if (before and not before.isalnum()) or (after and not after.isalnum()) else 1
        out.append(r"\s{%d,%d}" % (lo, max(8, 2 * len(w))))
    return "".join(out)


def _head(pieces: list[Piece]) -> list[Piece]:
    """The pieces up to the end of the template's first sentence, when that head holds at least
    :data:`HEAD_MIN` literal characters and more text follows; else all pieces."""
    lit = 0
    for i, p in enumerate(pieces):
        if p.kind:
            continue
        for m in _SENTENCE_END.finditer(p.text):
            if lit + len(p.text[:m.end()].strip()) >= HEAD_MIN:
                rest = p.text[m.end():].strip() or any(q.kind or q.text.strip() for q in pieces[i + 1:])
                return pieces[:i] + [Piece(text=p.text[:m.end()])] if rest else pieces
        lit += len(p.text.strip())
    return pieces


def head_text(template: str) -> str | None:
    """The template's first sentence when :func:`loose_pattern` may cut it there (at least
    :data:`HEAD_MIN` characters, more text after it); else None. A quick test on the raw text."""
    line = _matchable_line(template)
    for m in _SENTENCE_END.finditer(line):
        if m.end() >= HEAD_MIN and line[m.end():].strip():
            return line[:m.end()]
    return None


def loose_pattern(template: str, style: str = "printf") -> str | None:
    """A looser regex for lines an older or newer release prints from the same template, or None
    when it would be the pattern itself: blanks next to punctuation may be missing, and the
    template may stop after its first sentence (:func:`_head`). The runtime tries it only where the
    pattern did not match; it is as bounded as the pattern (same pieces, same atomic groups).

    >>> t = "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your {g} GPU {c}. You can use float16 instead by setting the `dtype` flag."
    >>> bool(re.search(loose_pattern(t, "format"), "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your T4 GPU has compute capability 7.5."))
    True
    >>> loose_pattern("peer %d failed", "printf") is None
    True
    """
    if style == "slog":
        return None
    pieces = parse_template(_matchable_line(template), style)
    out = pieces_pattern(_head(pieces), loose=True)
    return None if out == pieces_pattern(pieces) else out


def _slog_group(key: str) -> str:
    g = re.sub(r"\W", "_", key)
    return "k_" + g


def longest_literal(template: str, style: str = "printf") -> str:
    """The longest literal run (whitespace collapsed) of the matchable line of ``template``."""
    if style == "slog":
        return " ".join(template.split())
    pieces = parse_template(_matchable_line(template), style)
    lits = [" ".join(p.text.split()) for p in pieces if not p.kind]
    return max(lits, key=len, default="")


def render_sample(template: str, style: str = "printf", attrs: Iterable[str] = ()) -> str:
    """A line as the component would print it, with sample values for every placeholder.

    >>> render_sample("peer %d via %s", "printf")
    'peer 42 via sample value'
    """
    if style == "slog":
        tail = "".join(f" {k}=7" for k in attrs)
        return f'time=2026-01-01T00:00:00Z level=WARN source=x.go:1 msg="{template.strip()}"{tail}'
    pieces = parse_template(_matchable_line(template), style)
    out = []
    for i, p in enumerate(pieces):
        if not p.kind:
            out.append(p.text)
        elif p.kind == "str" and not _capture(p, pieces[i + 1] if i + 1 < len(pieces) else None).startswith(r"\S"):
            out.append("sample value")  # a value with a blank, where the pattern allows one
        else:
            out.append(SAMPLE[p.kind])
    return "".join(out)



def key_words(template: str, style: str = "printf") -> list[str]:
    """Words (``[A-Za-z0-9_]{3,}``) of the template's matchable line that any printed line holds
    whole: a word touching a placeholder (``%dMB``) is left out, since the value joins it.
    """
    if style == "slog":
        return re.findall(r"[A-Za-z0-9_]{3,}", template)
    out: list[str] = []
    pieces = parse_template(_matchable_line(template), style)
    for i, p in enumerate(pieces):
        if p.kind:
            continue
        toks = list(re.finditer(r"[A-Za-z0-9_]+", p.text))
        for j, t in enumerate(toks):
            if j == 0 and i > 0 and t.start() == 0:
                continue
            if j == len(toks) - 1 and i < len(pieces) - 1 and t.end() == len(p.text):
                continue
            if len(t.group()) >= 3:
                out.append(t.group())
    return out


