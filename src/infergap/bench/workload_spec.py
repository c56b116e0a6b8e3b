"""The ``--dataset`` value of a workload, parsed: ``shared-prefix:GxP+S``, ``multi-turn:T[,think=1s]``,
``mooncake:FILE`` and ``azure:FILE`` (what each means: :mod:`infergap.bench.workloads`).

Only the grammar lives here, with no file read and no heavy import, so that
:class:`~infergap.bench.results.BenchSettings` can check a ``dataset`` and its combination with
the other settings wherever settings are built (the command line, ``doctor``, a library caller).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from infergap.bench.slo import parse_duration_ms
from infergap.bench.traces import TRACE_KINDS
from infergap.errors import UserError

WORKLOAD_KINDS = ("shared-prefix", "multi-turn", *TRACE_KINDS)
DEFAULT_THINK_S = 1.0


@dataclass
class DatasetSpec:
    """A parsed ``--dataset`` value: ``kind`` and its parameters (``path`` for files)."""

    kind: str
    path: str | None = None
    groups: int = 0
    prefix: int = 0
    suffix: int = 0
    turns: int = 0
    think_s: float = 0.0
    params: dict = field(default_factory=dict)


_GPS = re.compile(r"^\s*(\d+)\s*[x×]\s*(\d+)\s*\+\s*(\d+)\s*$")


def _kv(text: str, what: str) -> dict[str, str]:
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, eq, v = part.partition("=")
        if not eq or not v.strip():
            raise UserError(f"--dataset {what}: {part!r} is not key=value")
        out[k.strip().lower()] = v.strip()
    return out


def _pos_int(v: str, what: str, key: str) -> int:
    try:
        n = int(v)
    except ValueError:
        raise UserError(f"--dataset {what}: {key}={v!r} is not a whole number") from None
    if n < 1:
        raise UserError(f"--dataset {what}: {key} must be at least 1")
    return n


def parse_dataset(text: str) -> DatasetSpec | None:
    """Parse a workload ``--dataset`` value; ``None`` for ``random``/``sharegpt:`` (handled
    elsewhere). Raises UserError with one line naming the value and what is wrong."""
    kind, _, rest = text.partition(":")
    kind = kind.strip().lower()
    if kind in ("random", "sharegpt"):
        return None
    if kind not in WORKLOAD_KINDS:
        raise UserError(f"--dataset {text!r}: expected random, sharegpt:FILE, shared-prefix:GxP+S, "
                        f"multi-turn:T, mooncake:FILE or azure:FILE")
    if kind in TRACE_KINDS:
        if not rest.strip():
            raise UserError(f"--dataset {text!r}: give the trace file, {kind}:FILE")
        return DatasetSpec(kind, path=rest.strip())
    if kind == "shared-prefix":
        m = _GPS.match(rest)
        if m:
            g, p, s = m.groups()
            kv = {"groups": g, "prefix": p, "suffix": s}
        else:
            kv = _kv(rest, text)
            if set(kv) - {"groups", "prefix", "suffix"} or len(kv) < 3:
                raise UserError(f"--dataset {text!r}: expected shared-prefix:GxP+S, e.g. shared-prefix:4x512+64")
        return DatasetSpec(kind, groups=_pos_int(kv["groups"], text, "groups"),
                           prefix=_pos_int(kv["prefix"], text, "prefix"), suffix=_pos_int(kv["suffix"], text, "suffix"))
    # multi-turn
    head, comma, tail = rest.partition(",")
    if head.strip().isdigit():  # multi-turn:T or multi-turn:T,think=1s
        kv = {"turns": head.strip(), **(_kv(tail, text) if comma else {})}
    else:
        kv = _kv(rest, text)
    if set(kv) - {"turns", "think"} or "turns" not in kv:
        raise UserError(f"--dataset {text!r}: expected multi-turn:T or multi-turn:turns=T,think=1s")
    think = parse_duration_ms(kv["think"], "--dataset think") / 1e3 if "think" in kv else DEFAULT_THINK_S
    return DatasetSpec(kind, turns=_pos_int(kv["turns"], text, "turns"), think_s=think)
