"""Class → check routing of catalog messages that name no check (``data/message_routes.yaml``).

A catalog entry without a curated ``check`` is explained but can be no ranked finding; when its
class, component, level and template say which check its meaning concerns (a ``device_not_visible``
error → ``gpu.present``, NCCL's network transport failing → ``nccl.net``, an engine's GPU
out-of-memory → ``engine.oom``), the rule in the routes file names that check and the severity by
level (error/fatal P1, warning P2; never P0, never an info message). The rules, their order and
their sources are data; this module only applies them.

>>> r = routes()
>>> r.route("cuda", "error", "device_not_visible", "no CUDA-capable device is detected", "")
('gpu.present', 'P1', 'no_device')
>>> r.route("cuda", "info", "device_not_visible", "no CUDA-capable device is detected", "") is None
True
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from infergap import datafile

__all__ = ["Route", "Routes", "routes"]

FILE = "message_routes.yaml"
_LEVELS = ("fatal", "error", "warn")


@dataclass(frozen=True)
class Route:
    """One rule of the routes file: which entries it takes (classes, components, levels, the
    ``when``/``unless`` regexes on the template, ``where`` on the upstream path) and the check."""

    id: str
    check: str
    classes: frozenset[str]
    components: frozenset[str] | None
    levels: tuple[str, ...]
    when: re.Pattern[str] | None
    unless: re.Pattern[str] | None
    where: re.Pattern[str] | None
    why: str
    source: str

    def takes(self, component: str, level: str, cls: str, template: str, where: str) -> bool:
        """Whether this rule applies to an entry of these fields."""
        return (level in self.levels and cls in self.classes
                and (self.components is None or component in self.components)
                and (self.where is None or self.where.search(where) is not None)
                and (self.when is None or self.when.search(template) is not None)
                and (self.unless is None or self.unless.search(template) is None))


def _rx(text: Any) -> re.Pattern[str] | None:
    return re.compile(str(text), re.IGNORECASE) if text else None


class Routes:
    """The rules of the routes file, in order, with the harmless test and the severity per level."""

    def __init__(self, doc: dict[str, Any]) -> None:
        sev = doc.get("severity") or {}
        self.severity = {lv: str(sev[lv]) for lv in _LEVELS if lv in sev}
        if any(s not in ("P1", "P2") for s in self.severity.values()):
            raise ValueError(f"data/{FILE}: a route's severity is P1 or P2 (P0 is a person's judgement)")
        self.harmless = _rx(doc.get("harmless"))
        self.rules = tuple(self._rule(r) for r in doc.get("rules") or [])
        self._by_id = {r.id: r for r in self.rules}

    def _rule(self, r: dict[str, Any]) -> Route:
        levels = tuple(lv for lv in (r.get("levels") or _LEVELS) if lv in self.severity)
        comps = r.get("components")
        return Route(id=str(r["id"]), check=str(r["check"]), classes=frozenset(r.get("classes") or ()),
                     components=frozenset(comps) if comps else None, levels=levels, when=_rx(r.get("when")),
                     unless=_rx(r.get("unless")), where=_rx(r.get("where")), why=str(r.get("why", "")),
                     source=str(r.get("source", "")))

    def route(self, component: str, level: str, cls: str, template: str, where: str) -> tuple[str, str, str] | None:
        """``(check, severity, rule id)`` of the first rule that takes an entry of these fields,
        or None: an info message, a template that calls itself harmless, or no rule."""
        if level not in self.severity or (self.harmless is not None and self.harmless.search(template)):
            return None
        for r in self.rules:
            if r.takes(component, level, cls, template, where):
                return r.check, self.severity[level], r.id
        return None

    def by_id(self, rule_id: str) -> Route:
        """The rule of this id; KeyError if none."""
        return self._by_id[rule_id]


@functools.lru_cache(maxsize=1)
def routes() -> Routes:
    """The packaged routes file, loaded once. Raises ValueError for a rule that would give P0 and
    :class:`~infergap.errors.UserError` for a damaged file (packaged data: a bug, not user input)."""
    return Routes(datafile.packaged(FILE))
