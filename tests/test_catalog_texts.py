"""A check's own knowledge — the impact a finding states, the documents it cites — lives in the
catalog (``data/checks.yaml``: ``texts``, read with ``Check.text(name, **values)``, a template
where the text depends on measured values; ``source``), not as literals in an investigator.

The investigators still hold such literals; :data:`ALLOWED` counts them per module as they stand,
and may only shrink: a module with more literal texts than its entry fails (a new text goes into
the catalog), and one with fewer fails too until its entry is lowered, so the count moved into the
catalog cannot come back. A literal text is a string (plain or f-string) of at least
:data:`MIN_WORDS` words given as ``impact=`` or ``references=`` to any call, or as the reason
(third argument) of ``unknown(...)`` / ``not_applicable(...)``.
"""

from __future__ import annotations

import ast
from pathlib import Path

INV_DIR = Path(__file__).resolve().parents[1] / "src" / "infergap" / "investigators"
#: Fewer words than this is a label or a placeholder, not a text (``"n/a"``, a URL is one word).
MIN_WORDS = 3
#: References are counted whatever their length: a URL literal is a citation the catalog's
#: ``source`` should hold.
KEYWORDS = {"impact", "references"}

#: Literal texts per investigator module as they stand; lower an entry when texts move to the
#: catalog, never raise one.
ALLOWED: dict[str, int] = {
    "bandwidth.py": 13,
    "container.py": 25,
    "cpu_power.py": 11,
    "driver.py": 10,
    "engine_log.py": 13,
    "evidence_files.py": 7,
    "firmware.py": 2,
    "gpu_health.py": 40,
    "interconnect.py": 43,
    "kernel_runtime.py": 21,
    "kernel_version.py": 12,
    "memory.py": 6,
    "messages.py": 2,
    "nccl_log.py": 27,
    "numa.py": 11,
    "pcie.py": 25,
    "runtime.py": 10,
    "server_config.py": 4,
    "serving_process.py": 1,
}


def _strings(node: ast.AST) -> list[str]:
    """The string literals in an expression (f-strings by their literal parts)."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) else []
    if isinstance(node, ast.JoinedStr):  # its literal parts, a placeholder counted as a word
        return [" ".join(v.value if isinstance(v, ast.Constant) else "x" for v in node.values)]
    return [s for child in ast.iter_child_nodes(node) for s in _strings(child)]


def _name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else (f.attr if isinstance(f, ast.Attribute) else "")


def literal_texts(source: str) -> list[tuple[int, str]]:
    """(line, text) of each literal impact, reference or reason in ``source``."""
    out = []
    for call in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)):
        given = [(k.arg, k.value) for k in call.keywords if k.arg in KEYWORDS]
        if _name(call) in ("unknown", "not_applicable") and len(call.args) >= 3:
            given.append(("reason", call.args[2]))
        for kind, value in given:
            for s in _strings(value):
                if kind == "references" or len(s.split()) >= MIN_WORDS:
                    out.append((call.lineno, s))
    return out


def _counts() -> dict[str, int]:
    return {p.name: n for p in sorted(INV_DIR.glob("*.py"))
            if (n := len(literal_texts(p.read_text(encoding="utf-8"))))}


def test_no_new_literal_text_in_an_investigator() -> None:
    grown = {m: (n, ALLOWED.get(m, 0)) for m, n in _counts().items() if n > ALLOWED.get(m, 0)}
    assert not grown, ("literal impact/reference/reason texts added to investigators (put them in data/checks.yaml "
                       f"'texts' or 'source' and read them with Check.text): {grown} (found, allowed)")


def test_the_allow_list_only_shrinks() -> None:
    """An entry above its module's count is lowered to it, so the texts moved cannot return."""
    counts = _counts()
    stale = {m: (counts.get(m, 0), n) for m, n in ALLOWED.items() if counts.get(m, 0) < n}
    assert not stale, f"lower these entries of ALLOWED to the count found: {stale} (found, allowed)"


def test_the_reader_sees_each_kind_of_literal() -> None:
    """The check can fail: an impact, an f-string reason and a reference are counted; a short
    label, a catalog text and a variable are not."""
    src = ('def f(ctx, gpu):\n'
           '    a = finding("x.y", st, impact="Slower copies for every request here")\n'
           '    b = unknown("x.y", "t", f"Needs nvidia-smi -q on {gpu} to tell")\n'
           '    c = finding("x.y", st, references=["https://example.org/doc"])\n'
           '    d = finding("x.y", st, impact="n/a", references=refs)\n'
           '    e = finding("x.y", st, impact=check.text("impact", gpu=gpu))\n')
    assert [line for line, _ in literal_texts(src)] == [2, 3, 4]
