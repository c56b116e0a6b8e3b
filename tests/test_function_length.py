"""No function of the library is longer than 80 lines (docs/design.md, "Tests").

A long function hides its stages; splitting along them is what keeps a check, a parser or a bench
step findable and testable alone. The command-line modules (``infergap/cli``) are exempt: a Typer
command's body is mostly its option declarations. Lines are counted from ``def`` to the last line of
the body, decorators and docstring included, as :mod:`ast` reports them.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "infergap"
MAX_LINES = 80
EXEMPT = ("cli",)


def _long_functions() -> list[str]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if rel.parts[0] in EXEMPT:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_LINES:
                    out.append(f"{rel}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_no_library_function_over_80_lines():
    assert _long_functions() == []


def test_the_counter_sees_functions():
    """The walk finds the library's functions at all (an empty result must mean short, not unread)."""
    tree = ast.parse((SRC / "guard.py").read_text(encoding="utf-8"))
    assert any(isinstance(n, ast.FunctionDef) for n in ast.walk(tree))
    assert len(list(SRC.rglob("*.py"))) > 50
