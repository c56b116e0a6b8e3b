"""The check catalog (``infergap/data/checks.yaml``): one entry per audit check id.

Each :class:`Check` says which investigator owns the id, what evidence it reads, what evidence it
needs before it may conclude ok, what it decides and the public document it rests on. The
catalog is what ``infergap checks`` prints; ``tests/test_checks_catalog.py`` keeps it in step with
what the investigators emit.

>>> c = get("kernel.numa_balancing")
>>> c.investigator, c.fix_kind
('numa', 'runtime')
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infergap.errors import UserError

FixKindName = Literal["runtime", "software", "reboot", "bios", "hardware"]


class Check(BaseModel):
    """One catalog entry (field meanings in the header of ``checks.yaml``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9_]+(\.[a-z0-9_]+)+$")
    investigator: str
    also_from: tuple[str, ...] = ()
    title: str
    reads: tuple[str, ...]
    ok_needs: str
    decides: str
    fix_kind: FixKindName | None
    source: str = Field(min_length=8)

    @property
    def emitters(self) -> set[str]:
        """Every investigator allowed to report this id: the owner and ``also_from``."""
        return {self.investigator, *self.also_from}


class _Catalog(BaseModel):
    model_config = ConfigDict(extra="forbid")
    checks: list[Check]


@lru_cache(maxsize=1)
def load() -> dict[str, Check]:
    """All checks of the packaged catalog by id, in file order.

    Raises :class:`~infergap.errors.UserError` when the packaged file is not valid (a damaged
    install) or holds an id twice.
    """
    text = resources.files("infergap").joinpath("data/checks.yaml").read_text(encoding="utf-8")
    try:
        cat = _Catalog.model_validate(yaml.safe_load(text))
    except (ValidationError, yaml.YAMLError) as e:
        raise UserError(f"check catalog data/checks.yaml is not valid: {str(e).splitlines()[0]}") from None
    out: dict[str, Check] = {}
    for c in cat.checks:
        if c.id in out:
            raise UserError(f"check catalog data/checks.yaml: id {c.id} appears twice")
        out[c.id] = c
    return out


def get(check_id: str) -> Check:
    """The entry for ``check_id``; :class:`~infergap.errors.UserError` naming close ids when unknown."""
    cat = load()
    if check_id in cat:
        return cat[check_id]
    import difflib

    near = difflib.get_close_matches(check_id, list(cat), n=3, cutoff=0.5)
    hint = f" (did you mean {', '.join(near)}?)" if near else f" ({len(cat)} checks: infergap checks lists them)"
    raise UserError(f"no check with id {check_id!r}{hint}")


def matching(prefix: str | None) -> list[Check]:
    """Checks whose id equals ``prefix`` or starts with ``prefix.`` (all when ``prefix`` is None)."""
    cat = load()
    if not prefix:
        return list(cat.values())
    return [c for c in cat.values() if c.id == prefix or c.id.startswith(prefix.rstrip(".") + ".")]
