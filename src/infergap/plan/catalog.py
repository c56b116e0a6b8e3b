"""The lever catalog (``infergap/data/levers.yaml``): loading, validation, version selection.

Each :class:`Lever` is data — tier, conditions over facts, per-engine flags by version, expected
gain with its public source, effort, risk, verification command and undo. Conditions are checked
by :mod:`infergap.plan.conditions`; nothing in the file is executed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from infergap.errors import UserError
from infergap.plan.conditions import OPS, version_key

Tier = Literal["flag_flip", "small_change", "engineering", "wont_help"]
TIER_ORDER: dict[str, int] = {"flag_flip": 0, "small_change": 1, "engineering": 2, "wont_help": 3}
TIER_LABEL: dict[str, str] = {
    "flag_flip": "Flag flips (minutes: restart with other arguments)",
    "small_change": "Small changes (hours: a config file, a tuned table, a patch)",
    "engineering": "Engineering (days: kernels, a draft model, a different deployment)",
    "wont_help": "Will not help",
}


class EngineVariant(BaseModel):
    """The exact flag or variable for one range of engine versions (``>=A``, ``<B``, ``>=A,<B``)."""

    versions: str = ">=0"
    set: str
    note: str | None = None
    #: The release the flag first appears in, when this variant's range is older: the action then
    #: starts with the upgrade ("upgrade to SGLang >= 0.5.21 first, then …"), never ends with it.
    upgrade_to: str | None = None
    #: What ``infergap tune`` changes in the launch command to try the lever: flags with their
    #: values (``["--parallel", "{slots}"]``, placeholders as in ``set``) and flags to remove
    #: (``["--no-kv-offload"]``). Empty: the lever is not a change of the command line.
    args: list[str] = Field(default_factory=list)
    drop: list[str] = Field(default_factory=list)

    def matches(self, version: str) -> bool:
        """True when ``version`` lies in this variant's range."""
        for part in filter(None, (p.strip() for p in self.versions.split(","))):
            if part.startswith(">="):
                if version_key(version) < version_key(part[2:]):
                    return False
            elif part.startswith("<"):
                if version_key(version) >= version_key(part[1:]):
                    return False
            else:
                raise UserError(f"lever catalog: version range {self.versions!r}: expected >=A, <B or both")
        return True


class Lever(BaseModel):
    """One catalog entry (field meanings in the header of ``levers.yaml``)."""

    id: str
    title: str
    tier: Tier
    #: P0/P1 when the lever fixes a misconfiguration (the plan lists P0 levers first); None for tuning.
    priority: Literal["P0", "P1"] | None = None
    when: dict[str, Any] = Field(default_factory=dict)
    #: Facts without which the lever is not weighed at all (no unknown is listed for it): a flag
    #: only the serving process shows (``proc.read``), a measurement only some sweeps make. The
    #: levers on the behaviour the flag causes stand for it when the fact is absent.
    requires: list[str] = Field(default_factory=list)
    engines: dict[str, list[EngineVariant]] = Field(default_factory=dict)
    gain: tuple[float, float] | None = None
    metric: str | None = None
    effort_h: float | None = None
    effect: str | None = None
    source: str
    risk: str | None = None
    verify: str | None = None
    undo: str | None = None
    why: str | None = None
    #: The metric ``infergap tune`` judges the lever on (infergap.tune.verdict.TARGETS).
    target: Literal["throughput", "ttft", "tpot"] = "throughput"

    @model_validator(mode="after")
    def _complete(self) -> "Lever":
        if self.tier == "wont_help":
            if not self.why:
                raise ValueError("a wont_help entry needs 'why'")
        else:
            missing = [k for k in ("gain", "metric", "effort_h", "effect", "risk", "verify", "undo") if getattr(self, k) in (None, "")]
            if missing:
                raise ValueError(f"missing {', '.join(missing)}")
            if self.gain[0] > self.gain[1] or self.gain[0] <= 0:
                raise ValueError("gain must be [low, high] with 0 < low <= high")
            if self.effort_h <= 0:
                raise ValueError("effort_h must be positive")
        _check_cond(self.when)
        return self

    def score(self) -> float | None:
        """Expected gain over effort: (√(low·high) − 1) / effort_h — the fractional speed-up per hour
        of work, using the geometric middle of the stated gain range. None for wont_help."""
        if self.gain is None or not self.effort_h:
            return None
        return ((self.gain[0] * self.gain[1]) ** 0.5 - 1.0) / self.effort_h


def _check_cond(c: Any) -> None:
    if not c:
        return
    if not isinstance(c, dict):
        raise ValueError(f"condition {c!r} is not a mapping")
    if "fact" in c:
        ops = [k for k in c if k != "fact"]
        if len(ops) != 1 or ops[0] not in OPS:
            raise ValueError(f"condition {c!r}: one operator of {', '.join(OPS)}")
        return
    if len(c) != 1:
        raise ValueError(f"condition {c!r}: one of fact, all, any, not, unless")
    (k, v), = c.items()
    if k in ("not", "unless"):
        _check_cond(v)
    elif k in ("all", "any") and isinstance(v, list):
        for x in v:
            _check_cond(x)
    else:
        raise ValueError(f"condition {c!r}: unknown combinator {k!r}")


def load_catalog(path: str | Path | None = None) -> list[Lever]:
    """The shipped catalog, or the YAML file at ``path``. Raises :class:`UserError` naming the
    file and the entry for a file that does not parse or an entry that does not validate."""
    from infergap import datafile

    where = str(path) if path else "infergap/data/levers.yaml"
    data = datafile.read(path) if path else datafile.packaged("levers.yaml")
    items = data.get("levers") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise UserError(f"{where}: expected a top-level 'levers' list")
    out: list[Lever] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        name = item.get("id", f"#{i}") if isinstance(item, dict) else f"#{i}"
        try:
            lv = Lever.model_validate(item)
        except ValidationError as e:
            err = e.errors()[0]
            raise UserError(f"{where}: lever {name}: {'.'.join(map(str, err['loc'])) or 'entry'}: {err['msg']}") from None
        if lv.id in seen:
            raise UserError(f"{where}: lever {lv.id} defined twice")
        seen.add(lv.id)
        out.append(lv)
    return out
