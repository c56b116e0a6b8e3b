"""Run the doctests of every module in ``src/infergap``: examples in docstrings are tests.

Each module with at least one example is a test case; a module whose examples fail lists the
failures. Parsers document real sample output this way (docs/design.md, "Tests").
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import infergap


def _modules_with_examples() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(infergap.__path__, prefix="infergap."):
        spec = info.module_finder.find_spec(info.name)  # type: ignore[union-attr]
        origin = getattr(spec, "origin", None)
        if origin and origin.endswith(".py"):
            with open(origin, encoding="utf-8") as fh:
                if ">>> " in fh.read():
                    names.append(info.name)
    return sorted(names)


MODULES = _modules_with_examples()


def test_examples_are_found() -> None:
    assert len(MODULES) >= 5, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_module_doctests(name: str) -> None:
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.attempted > 0, f"{name}: no example ran although its source has '>>> '"
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed (run python -m doctest -v on it)"
