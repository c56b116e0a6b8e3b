"""A small evaluator for the lever catalog's conditions: three-valued logic over a facts dict.

A condition is data (parsed YAML), never code: ``{"fact": NAME, OP: VALUE}`` for one test, or
``{"all": [...]}``, ``{"any": [...]}``, ``{"not": {...}}`` to combine them. Operators: ``eq``,
``ne``, ``gt``, ``ge``, ``lt``, ``le``, ``in``, ``not_in``, ``version_ge``, ``version_lt``,
``exists``. A test on a fact that is absent is *unknown* (``None``), not false: ``all`` is false
when any part is false, unknown when none is false and one is unknown; ``any`` is true when any
part is true, unknown when none is true and one is unknown; ``not`` keeps unknown. ``{"unless":
{...}}`` is for what would explain a symptom away: false when its condition holds, true when it
does not or is unknown (a lever is not held back by an explanation nobody established). Evaluation
returns the outcome and the tests that decided it, which the plan prints as the evidence chain.

>>> facts = {"gpu.nvlink": Fact(value=False, source="topo -m"), "par.tp": Fact(value=8, source="log")}
>>> r = evaluate({"all": [{"fact": "gpu.nvlink", "eq": False}, {"fact": "par.tp", "gt": 2}]}, facts)
>>> r.value, [t.fact for t in r.used]
(True, ['gpu.nvlink', 'par.tp'])
>>> evaluate({"fact": "engine.version", "version_ge": "0.5.21"}, facts).value is None
True
>>> evaluate({"unless": {"fact": "engine.version", "eq": "1"}}, facts).value, evaluate({"unless": {"fact": "par.tp", "gt": 2}}, facts).value
(True, False)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from infergap.errors import UserError

OPS = ("eq", "ne", "gt", "ge", "lt", "le", "in", "not_in", "version_ge", "version_lt", "exists")


class Fact(BaseModel):
    """One fact the plan reasons on: its value and where it was read (a finding id and its
    evidence source, a server endpoint, a bench point, a roofline bound)."""

    value: Any
    source: str


@dataclass
class Test:
    """One decided atomic test: ``fact op arg`` held (or not) with the fact's ``value``."""

    fact: str
    op: str
    arg: Any
    value: Any
    source: str
    held: bool

    def text(self) -> str:
        sym = {"eq": "=", "ne": "≠", "gt": ">", "ge": "≥", "lt": "<", "le": "≤", "in": "∈", "not_in": "∉",
               "version_ge": "≥", "version_lt": "<", "exists": "known"}[self.op]
        if self.op in ("exists", "eq"):
            return f"{self.fact} = {_show(self.value)} [{self.source}]"
        return f"{self.fact} = {_show(self.value)} ({sym} {_show(self.arg)}) [{self.source}]"


@dataclass
class Outcome:
    """Result of a condition: ``value`` True/False/None (unknown); ``used`` the tests that
    decided it; ``missing`` the facts whose absence left it unknown."""

    value: bool | None
    used: list[Test] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def _show(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_show(x) for x in v) + "]"
    return str(v)


_VER = re.compile(r"(\d+)")


def version_key(text: str) -> tuple[int, ...]:
    """Numeric key of a version string: ``0.5.9.post1`` → (0, 5, 9, 1); ``v0.11.0rc2`` → (0, 11, 0, 2).
    Pre-release tags sort as their numbers (a reader-facing approximation, not PEP 440).

    >>> version_key("0.5.21") >= version_key("0.5.9.post1")
    True
    """
    nums = [int(x) for x in _VER.findall(str(text))]
    return tuple(nums[:4]) if nums else (0,)


def _atom(cond: dict[str, Any], facts: dict[str, Fact]) -> Outcome:
    name = cond["fact"]
    ops = [k for k in cond if k != "fact"]
    if len(ops) != 1 or ops[0] not in OPS:
        raise UserError(f"lever catalog: condition {cond!r} needs exactly one operator of {', '.join(OPS)}")
    op = ops[0]
    arg = cond[op]
    f = facts.get(name)
    if f is None or f.value is None:
        if op == "exists" and arg is False:
            return Outcome(True, [Test(name, op, arg, None, "not found", True)])
        return Outcome(None, missing=[name])
    v = f.value
    try:
        if op == "eq":
            held = v == arg
        elif op == "ne":
            held = v != arg
        elif op == "gt":
            held = v > arg
        elif op == "ge":
            held = v >= arg
        elif op == "lt":
            held = v < arg
        elif op == "le":
            held = v <= arg
        elif op == "in":
            held = v in arg
        elif op == "not_in":
            held = v not in arg
        elif op == "version_ge":
            held = version_key(v) >= version_key(arg)
        elif op == "version_lt":
            held = version_key(v) < version_key(arg)
        else:  # exists
            held = bool(arg)
    except TypeError:
        return Outcome(None, missing=[name])
    return Outcome(held, [Test(name, op, arg, v, f.source, held)])


def evaluate(cond: dict[str, Any] | None, facts: dict[str, Fact]) -> Outcome:
    """Evaluate ``cond`` over ``facts`` (three-valued; see the module docstring). An empty or
    missing condition is true. Raises :class:`UserError` for a malformed condition."""
    if not cond:
        return Outcome(True)
    if not isinstance(cond, dict):
        raise UserError(f"lever catalog: condition {cond!r} is not a mapping")
    if "fact" in cond:
        return _atom(cond, facts)
    if len(cond) != 1:
        raise UserError(f"lever catalog: condition {cond!r} must have one key of fact, all, any, not, unless")
    (key, body), = cond.items()
    if key == "not":
        o = evaluate(body, facts)
        if o.value is None:
            return o
        return Outcome(not o.value, [_negate(t) for t in o.used], o.missing)
    if key == "unless":
        o = evaluate(body, facts)
        return Outcome(False, [_negate(t) for t in o.used]) if o.value else Outcome(True, [t for t in o.used if not t.held])
    if key not in ("all", "any") or not isinstance(body, list):
        raise UserError(f"lever catalog: condition {cond!r}: expected all/any with a list, or not")
    parts = [evaluate(c, facts) for c in body]
    missing = [m for p in parts for m in p.missing]
    if key == "all":
        false = [p for p in parts if p.value is False]
        if false:
            return Outcome(False, [t for p in false for t in p.used])
        if any(p.value is None for p in parts):
            return Outcome(None, [t for p in parts for t in p.used], missing)
        return Outcome(True, [t for p in parts for t in p.used])
    true = [p for p in parts if p.value is True]
    if true:
        return Outcome(True, [t for p in true for t in p.used])
    if any(p.value is None for p in parts):
        return Outcome(None, [t for p in parts for t in p.used], missing)
    return Outcome(False, [t for p in parts for t in p.used])


def _negate(t: Test) -> Test:
    return Test(t.fact, t.op, t.arg, t.value, t.source, not t.held)


def facts_in(cond: dict[str, Any] | None) -> list[str]:
    """Every fact name a condition mentions, in order, without repeats."""
    out: list[str] = []

    def walk(c: Any) -> None:
        if isinstance(c, dict):
            if "fact" in c and c["fact"] not in out:
                out.append(c["fact"])
            for k, v in c.items():
                if k in ("all", "any"):
                    for x in v:
                        walk(x)
                elif k in ("not", "unless"):
                    walk(v)

    walk(cond)
    return out
