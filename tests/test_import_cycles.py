"""No import circle inside ``src/``: the graph of imports (read with :mod:`ast`) of every module
under ``src/`` has no strongly connected component of more than one module, and no module imports
itself.

Two graphs are checked. The module-level one is what runs when a module is imported: imports at
the top, in ``try`` and ``if`` blocks, but not inside functions and not under
``if TYPE_CHECKING:`` (never run). The whole one adds the function-local imports: such an import
runs later, when its function does, which is how a circle is held open (``parsers.engine_args``
and ``snapshot.process`` once were one, each reaching the other from inside a function), so a
circle there is refused too. An import of ``pkg.mod`` or ``from pkg import mod`` is an edge to
that module; ``from pkg import name`` where ``name`` is not a submodule is an edge to ``pkg``
(its ``__init__``).

No circle is allowed: there is no allow-list (the command line's registration circle went when
the commands' shared helpers moved to ``cli/base.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or \
        (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _module_level(body: list[ast.stmt], local: bool = False):
    """The import statements that run when the module body runs (not in functions or classes'
    methods, not under ``if TYPE_CHECKING:``); with ``local``, those inside functions too (still
    not under ``if TYPE_CHECKING:``)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node):
                yield from _module_level(node.body, local)
            yield from _module_level(node.orelse, local)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _module_level(block, local)
        elif isinstance(node, (ast.With, ast.ClassDef, ast.For, ast.While)):
            yield from _module_level(node.body, local)
        elif local and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _module_level(node.body, local)


def _targets(node: ast.Import | ast.ImportFrom, me: str, is_pkg: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that one import statement of module ``me`` imports."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in known}
    if node.level:
        base = me.split(".") if is_pkg else me.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        mod = ".".join(base + ([node.module] if node.module else []))
    else:
        mod = node.module or ""
    out = set()
    for a in node.names:
        sub = f"{mod}.{a.name}"
        if sub in known:
            out.add(sub)
        elif mod in known:
            out.add(mod)
    return out


def import_graph(root: Path, local: bool = False) -> dict[str, set[str]]:
    """Module → the modules under ``root`` it imports at module level (with ``local``, in its
    functions too), for every ``.py`` file."""
    files = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    known = set(files)
    graph = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: set[str] = set()
        for node in _module_level(tree.body, local):
            edges |= _targets(node, name, path.name == "__init__.py", known)
        graph[name] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module, and modules importing
    themselves (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in graph[v]:
                    out.append(frozenset(comp))
    return out


def _shown(found: list[frozenset[str]]) -> str:
    return "; ".join(" ↔ ".join(sorted(c)) for c in found)


def test_no_import_circle_in_src() -> None:
    found = circles(import_graph(SRC))
    assert not found, "import circles (module-level imports): " + _shown(found)


def test_no_circle_held_open_by_a_function_local_import() -> None:
    found = circles(import_graph(SRC, local=True))
    assert not found, "import circles closed by function-local imports: " + _shown(found)


def test_the_graph_covers_every_module_of_src() -> None:
    graph = import_graph(SRC)
    assert len(graph) == len(list(SRC.rglob("*.py")))
    assert {"infergap.bench.runner", "infergap.bench.shapes", "infergap.cli", "infergap.cli.base"} <= set(graph)
    assert "infergap.cli.base" in graph["infergap.cli.audit"] and "infergap.cli.audit" in graph["infergap.cli"]
    assert "infergap.bench.trial" in graph["infergap.bench.shapes.closed_loop"]


def test_a_circle_is_found(tmp_path) -> None:
    """The check can fail: two modules importing each other at module level (one through a
    relative import, one inside ``try``) are a circle; the same import inside a function or
    under ``TYPE_CHECKING`` is not."""
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("try:\n    from p.a import x\nexcept ImportError:\n    pass\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p import d\n")
    (pkg / "d.py").write_text("def f():\n    from p import c\n")
    (pkg / "e.py").write_text("import p.e\n")
    assert sorted(map(sorted, circles(import_graph(tmp_path)))) == [["p.a", "p.b"], ["p.e"]]
    # counting function-local imports, f → g → f is a circle; c ↔ d still is not (TYPE_CHECKING)
    (pkg / "f.py").write_text("def f():\n    from p import g\n")
    (pkg / "g.py").write_text("from p import f\n")
    assert sorted(map(sorted, circles(import_graph(tmp_path)))) == [["p.a", "p.b"], ["p.e"]]
    assert sorted(map(sorted, circles(import_graph(tmp_path, local=True)))) == [["p.a", "p.b"], ["p.e"], ["p.f", "p.g"]]


def test_bench_has_no_function_local_import() -> None:
    """``bench/`` holds its layers open by nothing: every import is at module level, so the graph
    above is the whole graph of the bench (docs/design.md, "The bench")."""
    local = []
    for path in sorted((SRC / "infergap" / "bench").rglob("*.py")):
        for f in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                local += [f"{path.relative_to(SRC)}:{n.lineno}" for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert local == []
