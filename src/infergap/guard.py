"""Guards for everything read from outside: text made safe for a terminal and for Markdown, JSON
read with a depth limit and without NaN/Infinity, documents validated by their pydantic model,
numbers checked, outputs written atomically and never over an input, byte caps.

Every function here raises :class:`infergap.errors.UserError` (one line naming the input and the
problem) for bad input, never a bare ``ValueError``/``RecursionError``/``ValidationError``.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterable, TypeVar

from rich.cells import cell_len

from infergap.errors import UserError

#: Deepest nesting accepted in a JSON document read from a file, a snapshot or a server. The
#: documents infergap reads nest at most 8 levels; 64 leaves room for servers' extras while
#: keeping every recursive walk far from Python's recursion limit (1000).
MAX_JSON_DEPTH = 64

#: Bytes of one JSON document read from a file (the largest real ones, bench results with
#: per-request records, stay below 50 MB).
MAX_DOCUMENT_BYTES = 256 * 1024 * 1024

# C0 and C1 control characters except tab and newline, DEL, and the Unicode format characters
# that reorder or hide text (bidi overrides and isolates, zero-width joiners). One character
# class, so matching is linear.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
_UNSAFE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")


def _visible(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def term_safe(value: object, *, one_line: bool = False) -> str:
    """``value`` as text that cannot drive a terminal: every control character (ESC, BEL, CR,
    backspace, C1 controls) and every bidi/zero-width format character is replaced by its visible
    escape (``\\x1b``). Tab and newline are kept unless ``one_line``."""
    s = value if isinstance(value, str) else str(value)
    return (_UNSAFE_LINE if one_line else _UNSAFE).sub(_visible, s)


def name_safe(name: str) -> str:
    """A file name as one line of valid text: bytes that were not UTF-8 (decoded by Python as
    surrogate escapes, PEP 383) shown as ``\\xNN``, and every control character, newline and tab
    included, as its escape (:func:`term_safe` with ``one_line``), so a name can neither split a
    report line nor reach a terminal or a JSON reader as a lone surrogate.

    >>> name_safe("a\\nb\\udcff.txt")
    'a\\\\x0ab\\\\xff.txt'
    """
    out = "".join(f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in name)
    return term_safe(out, one_line=True)


#: Terminal escape sequences in captured or pasted text: ANSI CSI (colours, cursor moves), OSC and
#: two-byte ESC sequences; also SGR remains whose ESC byte was lost in a copy from a web page
#: (``[0m``, ``[1;32m``, also right before text: ``[0;32mname``) — those need at least one digit
#: and nothing but digits and ``;``, so a bracketed log field such as ``[2025-01-01``, ``[TP0]`` or
#: a character class ``[a-z]`` is never touched (ECMA-48 §5.4 for the sequence syntax).
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]|(?<![\w\]])\[\d{1,3}(?:;\d{1,3})*m")


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape sequences (:data:`ANSI`); ``nvidia-smi topo -m``
    underlines its header row with them.

    >>> strip_ansi("\\x1b[4mGPU0\\tGPU1\\x1b[0m")
    'GPU0\\tGPU1'
    """
    return ANSI.sub("", text)


_MD_SPECIAL = re.compile(r"[\\`*_\[\]<>|#!&]")
_MD_ENTITY = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}


def md_escape(value: object) -> str:
    """``value`` as literal Markdown inline text on one line: terminal-safe, Markdown punctuation
    backslash-escaped, ``<``, ``>`` and ``&`` as HTML entities (GitHub renders raw HTML). Safe in
    a table cell too (``|`` is escaped). Every Markdown renderer puts every value through this
    or :func:`md_code` (docs/security.md)."""
    s = term_safe(value, one_line=True).replace("\\x0a", " ").replace("\\x0d", " ")
    return _MD_SPECIAL.sub(lambda m: _MD_ENTITY.get(m.group(), "\\" + m.group()), s)


_BACKTICKS = re.compile("`+")


def md_code(value: object, *, cell: bool = False) -> str:
    """``value`` as one Markdown code span on one line, which nothing inside can close: the fence
    is a backtick run longer than the longest run in the value, with a space on each side when
    the value starts or ends with a backtick or a space (CommonMark 0.31, "Code spans": a span
    ends at the first run of exactly its fence's length; one space is stripped from each side).
    A code span renders no HTML, entity or emphasis. ``cell``: inside a GFM table row, where a
    ``|`` ends the cell even in a code span unless escaped (GFM spec, "Tables", example 200)."""
    s = term_safe(value, one_line=True).replace("\\x0a", " ").replace("\\x0d", " ")
    if cell:
        s = s.replace("|", "\\|")
    fence = "`" * (max((len(m) for m in _BACKTICKS.findall(s)), default=0) + 1)
    pad = " " if s[:1] in ("`", " ") or s[-1:] in ("`", " ") or not s else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def md_fence(text: str) -> str:
    """``text`` (several lines) as a fenced code block that no line inside can close: the fence
    is longer than any backtick run in the text (CommonMark 0.31, "Fenced code blocks"). Lines
    are terminal-safe; no info string."""
    s = term_safe(text)
    fence = "`" * max(3, max((len(m) for m in _BACKTICKS.findall(s)), default=0) + 1)
    return f"{fence}\n{s}\n{fence}"


def map_leaves(obj: Any, leaf: Any) -> Any:
    """A copy of a JSON-like tree (mappings, lists, tuples) with ``leaf`` applied to every other
    value (strings, numbers, None). Keys are kept as they are. (Plain dicts and lists, what a
    report is made of, are told apart by their exact type first: the abstract ``Mapping`` check
    costs a few microseconds a node, which an audit report's 8,000 nodes multiply.)"""
    t = type(obj)
    if t is dict or (t is not list and isinstance(obj, Mapping)):
        return {k: map_leaves(v, leaf) for k, v in obj.items()}
    if t is list or isinstance(obj, (list, tuple)):
        return [map_leaves(v, leaf) for v in obj]
    return leaf(obj)


def safe_tree(obj: Any) -> Any:
    """A copy of a JSON-like tree (dicts, lists, strings) with every string :func:`term_safe`."""
    return map_leaves(obj, lambda v: term_safe(v) if isinstance(v, str) else v)


def safe_console(**kwargs: Any) -> Any:
    """A :class:`rich.console.Console` (same arguments) whose ``print`` makes every string and
    :class:`rich.text.Text` argument terminal-safe first (:func:`term_safe`), so a value from an
    input can neither move the cursor nor retitle, clear or recolour the terminal. Rich markup is
    off unless ``markup=True`` is passed: a string printed (or put in a table cell) is shown as
    it is, so a model id ``[/]`` cannot crash the report nor ``[link=…]`` hide text; a caller
    that turns markup on passes every value through ``rich.markup.escape``."""
    from rich.console import Console

    kwargs.setdefault("markup", False)
    from rich.text import Text

    class _SafeConsole(Console):
        def print(self, *objects: Any, **kw: Any) -> None:  # type: ignore[override]
            safe: list[Any] = []
            for o in objects:
                if isinstance(o, str):
                    o = term_safe(o)
                elif isinstance(o, Text) and _UNSAFE.search(o.plain):
                    fixed = term_safe(o.plain)
                    o = Text(fixed, style=o.style)  # spans would no longer line up: keep the base style
                safe.append(o)
            super().print(*safe, **kw)

    return _SafeConsole(**kwargs)


class PlainConsole:
    """The part of :func:`safe_console`'s ``print`` a report for a pipe or a file uses (no colour,
    no wrapping, no markup, emoji or highlighting), without Rich: the same text, about twenty times
    cheaper (Rich renders each line through its segment and style machinery; an audit report is
    about 150 lines). ``print(*objects)`` writes the objects — strings, or anything with a
    ``plain`` text such as :class:`rich.text.Text` — made terminal-safe (:func:`term_safe`),
    joined by a space, tabs expanded to stops of 8 cells as Rich does, then a newline. Any other
    object is a ``TypeError`` (a table needs the Rich console)."""

    def __init__(self, file: Any) -> None:
        self.file = file

    def print(self, *objects: Any) -> None:
        """Write one line (or several, for values holding newlines), as described above."""
        parts = []
        for o in objects:
            if not isinstance(o, str):
                plain = getattr(o, "plain", None)
                if not isinstance(plain, str):
                    raise TypeError(f"PlainConsole prints text, not {type(o).__name__}")
                o = plain
            parts.append(term_safe(o))
        text = " ".join(parts)
        self.file.write((expand_tabs(text) if "\t" in text else text) + "\n")


def expand_tabs(text: str, size: int = 8) -> str:
    """``text`` with each tab replaced by the spaces up to the next multiple of ``size`` cells of
    its line, a wide character (CJK, emoji) counting two cells as on a terminal: what Rich's
    ``Text.expand_tabs`` does (``str.expandtabs`` counts characters instead).

    >>> expand_tabs("GPU0\\tX\\n漢字\\tx")
    'GPU0    X\\n漢字    x'
    """
    out = []
    for line in text.split("\n"):
        pieces, col = [], 0
        parts = line.split("\t")
        for i, part in enumerate(parts):
            pieces.append(part)
            col += cell_len(part) if not part.isascii() else len(part)
            if i < len(parts) - 1:
                pad = size - col % size
                pieces.append(" " * pad)
                col += pad
        out.append("".join(pieces))
    return "\n".join(out)


# -- JSON ---------------------------------------------------------------------------------------

def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"{text[:40]} is out of range for a number")
    return v


def depth(obj: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """Nesting depth of a JSON-like tree, counted without recursion; stops counting past ``limit``
    (returns ``limit + 1``)."""
    best = 0
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, (dict, list)):
            if d > limit:
                return limit + 1
            best = max(best, d)
            stack.extend((v, d + 1) for v in (o.values() if isinstance(o, dict) else o))
    return best


def loads(data: bytes | str, source: str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse JSON from ``source`` (a file name or URL, for the message). Rejects ``NaN``,
    ``Infinity``, nesting deeper than ``max_depth`` and non-UTF-8 bytes. Raises UserError
    ``"<source>: <problem>"``."""
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    except UnicodeDecodeError:
        raise UserError(f"{source}: not UTF-8 text") from None
    try:
        obj = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise UserError(f"{source}: JSON nested deeper than {max_depth} levels") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{source}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except ValueError as e:  # NaN / Infinity
        raise UserError(f"{source}: not valid JSON ({e})") from None
    if depth(obj, max_depth) > max_depth:
        raise UserError(f"{source}: JSON nested deeper than {max_depth} levels")
    return obj


def read_json(path: str | os.PathLike[str], what: str = "", *, max_bytes: int = MAX_DOCUMENT_BYTES,
              max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Read and parse a JSON file (see :func:`loads`); ``what`` prefixes the message (``--audit``).
    A file larger than ``max_bytes``, a directory or a device is refused with one line."""
    label = f"{what} {path}".strip()
    data = read_capped(path, max_bytes, label)
    return loads(data, label, max_depth=max_depth)


def finite(obj: Any) -> Any:
    """A copy of a JSON-like tree with every NaN/±Infinity float replaced by None (JSON has no
    such numbers; Python's ``json`` would write bare ``NaN``, which other readers reject)."""
    return map_leaves(obj, _finite_or_none)


def _finite_or_none(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` that never writes NaN/Infinity (they become null, see :func:`finite`)."""
    return json.dumps(finite(obj), allow_nan=False, **kwargs)


M = TypeVar("M")


def field_path(loc: Iterable[Any]) -> str:
    """A pydantic error location as ``findings[3].status``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "document"


def validate(model: type[M], data: Any, source: str) -> M:
    """``model.model_validate(data)``; a bad document raises UserError naming ``source``, the
    first bad field and what is wrong with it (and how many more problems there are)."""
    from pydantic import ValidationError

    if depth(data) > MAX_JSON_DEPTH:
        raise UserError(f"{source}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return model.model_validate(data)  # type: ignore[attr-defined]
    except ValidationError as e:
        errs = e.errors()
        first = errs[0]
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        raise UserError(f"{source}: field {field_path(first['loc'])}: {first['msg']}{more}") from None
    except RecursionError:
        raise UserError(f"{source}: nested too deeply") from None


# -- numbers ------------------------------------------------------------------------------------

def number(value: Any, what: str, *, lo: float | None = None, hi: float | None = None,
           integer: bool = False) -> float | int:
    """``value`` as a finite number (an int when ``integer``) within [lo, hi]; else UserError
    naming ``what``. Booleans and strings are not numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"{what}: expected a number, got {term_safe(repr(value), one_line=True)[:60]}")
    if isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"{what}: {value} is not a finite number")
    if integer and int(value) != value:
        raise UserError(f"{what}: expected an integer, got {value}")
    if lo is not None and value < lo:
        raise UserError(f"{what}: {value} is below {lo:g}")
    if hi is not None and value > hi:
        raise UserError(f"{what}: {value} is above {hi:g}")
    return int(value) if integer else value


# -- files --------------------------------------------------------------------------------------

def os_reason(e: OSError) -> str:
    """Why an OS call failed, in words; a full disk is named as such."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return "disk full (no space left on device)"
    if e.errno == errno.EROFS:
        return "read-only file system"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return e.strerror or str(e)


def read_capped(path: str | os.PathLike[str], max_bytes: int, label: str | None = None) -> bytes:
    """The bytes of a regular file, refusing one larger than ``max_bytes`` (a directory, FIFO or
    device is refused too, without blocking). Raises UserError ``"<label>: <problem>"``."""
    import stat

    label = label or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise UserError(f"{label}: cannot read ({os_reason(e)})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{label}: not a regular file")
        if st.st_size > max_bytes:
            raise UserError(f"{label}: {st.st_size} bytes, more than the {max_bytes} accepted")
        chunks, total = [], 0
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            total += len(b)
            if total > max_bytes:
                raise UserError(f"{label}: more than the {max_bytes} bytes accepted")
            chunks.append(b)
        return b"".join(chunks)
    except OSError as e:
        raise UserError(f"{label}: cannot read ({os_reason(e)})") from None
    finally:
        os.close(fd)


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name the same file (same inode, or the same real path when one is absent)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_not_input(output: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str] | None],
                    option: str = "--output") -> None:
    """Raise UserError when ``output`` is one of ``inputs`` or lies inside an input directory
    (writing the report would destroy what it was made from)."""
    out_real = os.path.realpath(output)
    for i in inputs:
        if i is None:
            continue
        if same_file(output, i):
            raise UserError(f"{option} {output}: is the input {i}; refusing to overwrite it")
        in_real = os.path.realpath(i)
        if os.path.isdir(in_real) and out_real.startswith(in_real.rstrip(os.sep) + os.sep):
            raise UserError(f"{option} {output}: lies inside the input {i}; write it elsewhere")


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, inputs: Iterable[Any] = (),
                 option: str = "--output") -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename, so
    a failure (full disk, interrupt) leaves the previous file whole. Refuses a path that is one of
    ``inputs``. Raises UserError naming ``option`` and the path (a full disk is named as such)."""
    import stat

    check_not_input(path, inputs, option)
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{option} {path}: is a directory")
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        special = not stat.S_ISREG(os.stat(p).st_mode)
    except OSError:
        special = False
    if special:  # /dev/stdout, a FIFO, a device: written in place (renaming over it would replace it)
        try:
            with open(p, "wb") as f:
                f.write(payload)
            return
        except OSError as e:
            raise UserError(f"{option} {path}: cannot write ({os_reason(e)})") from None
    d = p.parent if str(p.parent) else Path(".")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=d)
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        try:
            mode = os.stat(p).st_mode & 0o7777 if p.exists() else 0o666 & ~_umask()
            os.chmod(tmp, mode)
        except OSError:
            pass
        os.replace(tmp, p)
        tmp = None
    except OSError as e:
        raise UserError(f"{option} {path}: cannot write ({os_reason(e)})") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


_BRACKETS = re.compile(r"[\[\](){}]")


def literal(text: str, *, max_depth: int = MAX_JSON_DEPTH, max_len: int = 1 << 20) -> Any:
    """``ast.literal_eval`` of a Python literal found in a log (an argument dump), refusing text
    longer than ``max_len`` or nested deeper than ``max_depth`` before the parser sees it (the
    parser would raise RecursionError or MemoryError). Raises ValueError for anything refused."""
    import ast

    if len(text) > max_len:
        raise ValueError(f"literal of {len(text)} characters, more than {max_len}")
    level = 0
    for m in _BRACKETS.finditer(text):
        level += 1 if m.group() in "([{" else -1
        if level > max_depth:
            raise ValueError(f"literal nested deeper than {max_depth} levels")
    try:
        return ast.literal_eval(text)
    except (SyntaxError, MemoryError, RecursionError, TypeError) as e:
        raise ValueError(f"not a Python literal ({type(e).__name__})") from None


#: Descriptors a process needs besides its connections (stdio, Python's imports, the event loop,
#: the telemetry subprocess, the ledger, logs).
FD_RESERVE = 64


def ensure_open_files(connections: int, what: str) -> int:
    """Make sure ``connections`` sockets can be open at once: raise the soft RLIMIT_NOFILE to what
    is needed when the hard limit allows, else UserError naming ``what``, the need and the
    limits (a sweep that hits EMFILE halfway measures nothing). Returns the soft limit now."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return connections + FD_RESERVE
    need = connections + FD_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return need if soft == resource.RLIM_INFINITY else soft
    if hard == resource.RLIM_INFINITY or hard >= need:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
            return need
        except (ValueError, OSError):
            pass
    raise UserError(f"{what}: needs about {need} open files, but the limit is {soft} (hard limit {hard}); "
                    f"raise it (ulimit -n {need}) or lower {what.split()[0]}")


#: Words that, as one word of an option's or variable's name, make its value a secret. ``tokens``
#: is not one: engines count tokens in dozens of options (``--max-num-batched-tokens``).
SECRET_NAME_WORDS = frozenset({"key", "keys", "apikey", "token", "secret", "secrets", "password", "passwd", "credential",
                               "credentials", "auth"})


def secret_name(name: str) -> bool:
    """True when option or variable ``name`` holds a secret: one of its words (split at ``-``,
    ``_``, ``.``) is in :data:`SECRET_NAME_WORDS`.

    >>> [secret_name(n) for n in ("--api-key", "--hf-token=x", "HF_TOKEN", "--max-num-batched-tokens", "--tokenizer", "--ssl-keyfile")]
    [True, True, True, False, False, False]
    """
    words = re.split(r"[-_.=\s]+", name.split("=", 1)[0].strip("-").lower())
    return any(w in SECRET_NAME_WORDS for w in words)
