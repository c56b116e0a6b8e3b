"""Every regular expression literal in ``src/infergap`` against adversarial strings.

Patterns are found with :mod:`ast` (``re.compile``/``search``/``match``/``fullmatch``/``findall``/
``finditer``/``sub``/``split`` with a literal pattern, module-level or inside functions), so a new
pattern is fuzzed without being registered. The adversarial strings repeat the characters and
character pairs each pattern is made of (the inputs that make a backtracking matcher try every
start position against a long run it can almost match) many thousand times.
"""

from __future__ import annotations

import ast
import itertools
import re
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "infergap"
_FUNCS = {"compile", "search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split"}
_CLASS_REP = {"d": "0", "s": " ", "w": "a", "S": "x", "D": "x", "W": "-", "b": "", "B": ""}


def patterns() -> list[tuple[str, str, int, bool]]:
    """(``file:line``, pattern text, flags, anchored) of every regex literal in the source;
    ``anchored``: used with ``re.match``/``re.fullmatch`` only (tried at the start alone)."""
    out = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _FUNCS):
                continue
            if not (isinstance(node.func.value, ast.Name) and node.func.value.id in ("re", "regex")):
                continue
            if not node.args or not isinstance(node.args[0], ast.Constant) or not isinstance(node.args[0].value, str):
                continue
            flags = 0
            src = ast.unparse(node)
            for name, val in (("re.M", re.M), ("re.MULTILINE", re.M), ("re.I", re.I), ("re.IGNORECASE", re.I), ("re.S", re.S), ("re.DOTALL", re.S)):
                if name in src:
                    flags |= val
            anchored = node.func.attr in ("match", "fullmatch")
            out.append((f"{path.relative_to(SRC.parent)}:{node.lineno}", node.args[0].value, flags, anchored))
    return out


def alphabet(pattern: str) -> list[str]:
    """Characters a pattern is built of: its literals and one representative per class escape."""
    chars: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            n = pattern[i + 1]
            rep = _CLASS_REP.get(n, n if not n.isalnum() else "")
            if rep:
                chars.append(rep)
            i += 2
            continue
        if c == ".":
            chars.append("a")
        elif c not in "()[]{}?*+|^$":
            chars.append(c)
        i += 1
    seen = []
    for c in chars + [" ", "a", "0", ":", "\t"]:
        if c not in seen:
            seen.append(c)
    return seen


def adversarial(pattern: str, n: int = 20_000) -> list[str]:
    """Long strings made of the pattern's own characters: each repeated, each pair alternated,
    and the pattern's literal text repeated."""
    alpha = alphabet(pattern)
    out = [c * n for c in alpha]
    for a, b in itertools.islice(itertools.combinations(alpha[:12], 2), 40):
        out.append((a + b) * (n // 2))
    lit = "".join(c for c in alpha if c)
    if lit:
        out.append(lit * max(1, n // len(lit)))
    out.append(("a" * 50 + "\n") * (n // 51))
    return out


def worst(pattern: str, flags: int, anchored: bool = False, n: int = 20_000) -> tuple[float, str]:
    """(seconds, description) of the slowest ``search`` and ``findall`` (``match`` when the
    pattern is only ever anchored) over :func:`adversarial`."""
    rx = re.compile(pattern, flags)
    slowest, what = 0.0, ""
    for s in adversarial(pattern, n):
        t0 = time.perf_counter()
        if anchored:
            rx.match(s)
        else:
            rx.search(s)
            rx.findall(s)
        dt = time.perf_counter() - t0
        if dt > slowest:
            slowest, what = dt, repr(s[:12]) + f"… ({len(s)} chars)"
    return slowest, what
