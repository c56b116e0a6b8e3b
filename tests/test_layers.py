"""The layering of docs/design.md: no module imports from a layer above its own.

Reads every ``import``/``from … import`` of ``src/infergap`` with :mod:`ast` (imports inside
functions included), so a lazy import cannot hide an upward dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "infergap"

#: Layer of each top-level package or module of ``infergap`` (docs/design.md, "Layers").
LAYERS = {
    "errors": 0, "findings": 0, "checks": 0, "gpudata": 0, "guard": 0, "datafile": 0, "httpsafe": 0, "shellcmd": 0,
    "snapshot": 1, "parsers": 1,
    "messages": 1,
    "evidence": 2, "facts": 2,
    "investigators": 3, "roofline": 3, "bench": 3, "server": 3,
    "synthesis": 4, "audit": 4,
    "plan": 5, "render": 5, "remedy": 5, "ledger": 5,
    "doctor": 6, "fleet": 6, "tune": 6,
    "cli": 7, "__main__": 7,
}
DEFAULT_LAYER = 6  # a package not yet listed: above the library, below the command line


def _top(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "infergap" or len(parts) < 2:
        return None
    return parts[1]


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported infergap top-level name) for every import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    pkg = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import: resolve against this module's package
                base = pkg.split(".")[: -node.level]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod == "infergap":  # from infergap import X: a subpackage, or an attribute of the root
                names = [f"infergap.{a.name}" for a in node.names
                         if (SRC / a.name).is_dir() or (SRC / f"{a.name}.py").is_file()]
            else:
                names = [mod]
        else:
            continue
        for n in names:
            top = _top(n)
            if top:
                out.append((node.lineno, top))
    return out


def _own_top(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def test_no_upward_imports() -> None:
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        own = _own_top(path)
        if own == "__init__":
            continue
        mine = LAYERS.get(own, DEFAULT_LAYER)
        for line, top in _imports(path):
            theirs = LAYERS.get(top, DEFAULT_LAYER)
            if theirs > mine:
                bad.append(f"{path.relative_to(SRC.parent)}:{line} ({own}, layer {mine}) imports "
                           f"infergap.{top} (layer {theirs})")
    assert not bad, "upward imports (see docs/design.md, Layers):\n" + "\n".join(bad)


def test_the_checker_sees_imports() -> None:
    """The import reader agrees with a plain reading of a module's import lines."""
    import re

    sample = SRC / "audit.py"
    plain = set(re.findall(r"^\s*from infergap\.(\w+)", sample.read_text(encoding="utf-8"), re.M))
    assert plain, "audit.py has no infergap imports to compare with"
    assert {top for _, top in _imports(sample)} == plain


# -- investigators read facts ---------------------------------------------------------------

INVESTIGATORS = SRC / "investigators"
#: The one module that hands the snapshot to the facts (the investigators' input, ``Context``).
CONTEXT_MODULES = {"__init__.py", "base.py"}


#: Functions outside ``parsers/`` that read raw text (evidence files, a part's lines): the facts'
#: business as much as a parser is (``Facts.signature_hits``, ``Facts.message_matches``).
TEXT_READERS = {"scan_lines", "scan_file", "match_lines", "stack_versions", "parse_pip_lines"}


def _reads_snapshot_or_parser(path: Path) -> list[str]:
    """The places in ``path`` that read the snapshot (any use of a name or attribute ``snap``) or
    call into a parser (a name imported from ``infergap.parsers`` that is not a type or a
    constant: types are CamelCase, constants UPPER_CASE)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "snap":
            bad.append(f"{node.lineno}: .snap")
        elif isinstance(node, ast.Name) and node.id == "snap":
            bad.append(f"{node.lineno}: snap")
        elif isinstance(node, ast.arg) and node.arg == "snap":
            bad.append(f"{node.lineno}: argument snap")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("infergap.parsers"):
            for a in node.names:
                if not (a.name[:1].isupper()):
                    bad.append(f"{node.lineno}: from {node.module} import {a.name}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("infergap."):
            bad.extend(f"{node.lineno}: from {node.module} import {a.name}" for a in node.names if a.name in TEXT_READERS)
        elif isinstance(node, ast.Import) and any(a.name.startswith("infergap.parsers") for a in node.names):
            bad.append(f"{node.lineno}: import {node.names[0].name}")
    return bad


def test_investigators_read_facts_not_the_snapshot_or_a_parser() -> None:
    """docs/design.md: an investigator asks :class:`infergap.facts.Facts` (``ctx.facts``); the
    snapshot and the parsers are the facts' business (one record per source, one parser each)."""
    bad = [f"investigators/{p.name}:{x}" for p in sorted(INVESTIGATORS.glob("*.py")) if p.name not in CONTEXT_MODULES
           for x in _reads_snapshot_or_parser(p)]
    assert not bad, "investigators reading the snapshot or a parser directly:\n" + "\n".join(bad)


def test_the_facts_checker_sees_a_snapshot_read(tmp_path: Path) -> None:
    p = tmp_path / "x.py"
    p.write_text("from infergap.parsers.host import parse_meminfo, KernelVersion\n"
                 "from infergap.evidence.signatures import catalog, scan_lines\n"
                 "def f(ctx):\n    return ctx.snap.read('/proc/meminfo')\n")
    assert _reads_snapshot_or_parser(p) == ["1: from infergap.parsers.host import parse_meminfo",
                                            "2: from infergap.evidence.signatures import scan_lines", "4: .snap"]
