"""Plan, apply (journal first) and revert the runtime remedies of an audit's findings.

Order of one change under ``apply_plan``: re-read the value → journal it with the command and the
time (status ``pending``) → make the change → re-read → journal the new value and ``applied`` (or
``failed`` when the re-read does not show the intended value). ``--persist`` files are journalled
the same way, with their previous content (or their absence), before they are written. The first
failure stops the run: what was applied stays journalled and ``revert_run`` restores it.

``revert_run`` walks a run's journal in reverse, restores each value and file exactly, and
verifies each by re-reading. A run already reverted is only re-verified, never written again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import tempfile
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Iterable

from pydantic import BaseModel, Field

from infergap.errors import UserError
from infergap.findings import SEVERITY_ORDER, Action, Finding, FixKind, Severity, Status
from infergap.ledger import Ledger, local_host
from infergap.remedy.actions import HANDLERS, Handler, RemedyFailed, RemedyRefused, handler_for, normalize, undeclared
from infergap.remedy.system import SystemPaths, container_reason, is_root


class FixRefused(UserError):
    """The whole fix cannot proceed (not root, nothing to revert). One line, exit status 2."""


class ChangeState(str, Enum):
    """Where one change stands. ``planned``: would run; ``already``: the system already shows the
    intended value; ``refused``: will not run (``reason``); ``manual``: no executable action in the
    catalog; ``not_runtime``: a reboot/BIOS/hardware/software fix, explained only; ``declined``: the
    user said no; ``applied``/``failed``: outcome; ``not_attempted``: skipped after a failure."""

    planned = "planned"
    already = "already"
    refused = "refused"
    manual = "manual"
    not_runtime = "not_runtime"
    declined = "declined"
    applied = "applied"
    failed = "failed"
    not_attempted = "not_attempted"


class Change(BaseModel):
    """One remedy action of one finding, as planned and then as applied.

    ``now``: value read on this machine; ``audit_value``: the value the audit saw
    (``Action.previous``); ``after``: the intended value; ``read_back``: value re-read after the
    change. ``commands`` are the report's display strings (never executed); ``command`` and
    ``revert_command`` are what this code runs, rendered as shell.
    """

    check_id: str
    subject: str | None = None
    title: str = ""
    severity: Severity | None = None
    fix_kind: FixKind | None = None
    action: Action | None = None
    command: str | None = None
    revert_command: str | None = None
    now: str | None = None
    audit_value: str | None = None
    after: str | None = None
    read_back: str | None = None
    persist: list[str] = Field(default_factory=list)
    state: ChangeState = ChangeState.planned
    reason: str | None = None
    commands: list[str] = Field(default_factory=list)
    host_controlled: bool = False


class FixPlan(BaseModel):
    """The changes for the selected findings, plus how many actionable findings were left out by
    the filters (``filtered_out``) and, when running in a container, why (``container``)."""

    changes: list[Change] = Field(default_factory=list)
    filtered_out: int = 0
    container: str | None = None


class FixResult(BaseModel):
    """Outcome of ``apply_plan``: the ledger run id, its status (``applied``, ``failed``,
    ``nothing``) and the changes with their final states."""

    run_id: int | None
    status: str
    changes: list[Change]
    files: list[str] = Field(default_factory=list)


class RevertStep(BaseModel):
    """The revert of one journalled step: what it restored, the value re-read, the outcome
    (``reverted``, ``unchanged`` — already at the previous value, ``revert_failed``, ``verified``
    — a run already reverted, re-read only, ``drifted`` — same, but the value differs now)."""

    seq: int
    check_id: str
    step_kind: str
    target: str
    command: str
    restored: str | None
    read_back: str | None
    status: str
    error: str | None = None


class RevertResult(BaseModel):
    """Outcome of ``revert_run``: which run, the ledger id of the revert itself, the steps, and
    whether the run had already been reverted (then nothing was written)."""

    run_id: int
    revert_run_id: int | None
    already_reverted: bool
    ok: bool
    steps: list[RevertStep]
    warnings: list[str] = Field(default_factory=list)


NOT_RUNTIME_REASON = {
    FixKind.reboot: "takes effect only after a reboot (kernel command line, module or kernel): not applied by fix",
    FixKind.bios: "a firmware setup change: done in the BIOS/UEFI setup, not by fix",
    FixKind.hardware: "a physical limit or change (slot, riser, cable, card): nothing to apply",
    FixKind.software: "a package upgrade or replacement: use the distribution's package manager",
}


def select_findings(findings: Iterable[Finding], *, only: set[str] | None = None, severity: Severity | None = None,
                    kinds: set[FixKind] | None = None) -> tuple[list[Finding], int]:
    """Actionable findings matching ``only`` (check ids), at ``severity`` or more severe, of
    ``kinds`` (default runtime). Returns them and the count of actionable findings filtered out."""
    kinds = kinds or {FixKind.runtime}
    chosen, left = [], 0
    for f in findings:
        if f.status != Status.actionable:
            continue
        if only and f.id not in only:
            continue
        if severity and (f.severity is None or SEVERITY_ORDER[f.severity] > SEVERITY_ORDER[severity]):
            left += 1
            continue
        if (f.fix_kind or FixKind.runtime) not in kinds:
            left += 1
            continue
        chosen.append(f)
    return chosen, left


def plan_fix(findings: Iterable[Finding], *, paths: SystemPaths | None = None, only: set[str] | None = None,
             severity: Severity | None = None, kinds: set[FixKind] | None = None,
             container: str | None | bool = True) -> FixPlan:
    """Turn the selected findings into changes, reading each value now on this machine.

    ``container``: ``True`` detects it (:func:`container_reason`), a string is the reason given,
    ``None``/``False`` means a host. A change is refused when its action is not in the catalog's
    allow-lists, the setting is host-controlled (the report says so, or a host-owned setting seen
    from inside a container), the value cannot be read, or the value differs from the audit's.
    """
    paths = paths or SystemPaths.from_env()
    reason_ct = container_reason(paths.root) if container is True else (container or None)
    chosen, left = select_findings(findings, only=only, severity=severity, kinds=kinds)
    plan = FixPlan(filtered_out=left, container=reason_ct)
    for f in chosen:
        remedy = f.remedy
        base = dict(check_id=f.id, subject=f.subject, title=f.title, severity=f.severity, fix_kind=f.fix_kind,
                    commands=list(remedy.commands) if remedy else [],
                    host_controlled=bool(remedy and remedy.host_controlled))
        kind = f.fix_kind or FixKind.runtime
        if kind != FixKind.runtime:
            plan.changes.append(Change(**base, state=ChangeState.not_runtime, reason=NOT_RUNTIME_REASON.get(kind, kind.value)))
            continue
        if remedy is None or not remedy.actions:
            plan.changes.append(Change(**base, state=ChangeState.manual,
                                       reason="the check catalog declares no executable action for this finding; "
                                              "its commands are shown for reference only"))
            continue
        for a in remedy.actions:
            plan.changes.append(_plan_action(base, a, paths, reason_ct, remedy.host_controlled))
    return plan


def _plan_action(base: dict[str, Any], a: Action, paths: SystemPaths, container: str | None, host_controlled: bool) -> Change:
    ch = Change(**base, action=a, audit_value=a.previous)
    try:
        h = handler_for(a, paths)
        why = undeclared(base["check_id"], a)
        if why:
            raise RemedyRefused(why)
    except RemedyRefused as e:
        ch.state, ch.reason = ChangeState.refused, f"not in the check catalog: {e}"
        return ch
    ch.command = h.command(a)
    try:
        ch.persist = [f"{p.path}: {p.content.strip().splitlines()[-1]}" for p in h.persist_files(a)] if h.persistable else []
    except OSError as e:
        ch.persist = [f"cannot read the persistent file {getattr(e, 'filename', '')}: {e.strerror or e}"]
    if host_controlled or (container and h.host_owned(a)):
        why = "the audit marked it host-controlled" if host_controlled else f"running inside a container ({container})"
        ch.state, ch.host_controlled = ChangeState.refused, True
        ch.reason = f"host-controlled setting ({why}); run on the host instead: {'; '.join(ch.commands) or ch.command}"
        try:  # reading is harmless and shows what the host has, as far as it is visible from here
            ch.now = h.read(a)
        except RemedyFailed:
            pass
        ch.after = h.intended(a, ch.now or a.previous or "") if (ch.now or a.previous) else normalize(a.value)
        return ch
    try:
        ch.now = h.read(a)
    except RemedyFailed as e:
        ch.state, ch.reason = ChangeState.refused, f"cannot read the current value: {e}"
        return ch
    ch.after = h.intended(a, ch.now)
    ch.revert_command = h.revert_command(a, ch.now)
    if not h.same_as_audit(a, ch.now):
        ch.state = ChangeState.refused
        ch.reason = f"value changed since the audit (audit saw {a.previous!r}, now {ch.now!r}): re-audit first"
    elif h.matches(a, ch.now, ch.after):
        ch.state, ch.reason = ChangeState.already, "the system already shows the intended value"
    return ch


def _atomic_write(path: Path, data: bytes, mode: int | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode if mode is not None else 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def apply_plan(plan: FixPlan, ledger: Ledger, *, paths: SystemPaths | None = None, persist: bool = False,
               confirm: Callable[[Change], bool] | None = None, source: dict[str, Any] | None = None,
               parent_id: int | None = None) -> FixResult:
    """Apply the plan's ``planned`` changes, journalling each in ``ledger`` first.

    ``confirm(change)`` is asked before each change (``None``: yes to all). Raises
    :class:`FixRefused` when not root. The run is recorded as kind ``fix`` with payload
    ``{"mode": "apply", "source", "persist", "changes": [Change...]}`` and status ``applied``,
    ``failed`` or ``nothing``. Stops at the first failure; later changes become ``not_attempted``.
    """
    if not is_root():
        raise FixRefused(f"fix --apply must run as root (effective uid {os.geteuid()}): it writes /proc/sys, "
                         "sysfs and PCI config space; the dry run (without --apply) works as any user")
    paths = paths or SystemPaths.from_env()
    changes = [c.model_copy(deep=True) for c in plan.changes]
    todo = [c for c in changes if c.state == ChangeState.planned]
    if not todo:
        return FixResult(run_id=None, status="nothing", changes=changes)
    payload: dict[str, Any] = {"mode": "apply", "source": source or {}, "persist": persist, "changes": [],
                               "roots": {"proc_sys": str(paths.proc_sys), "etc": str(paths.etc), "sys": str(paths.sys)}}
    run_id = ledger.record("fix", payload, local_host(), status="running", parent_id=parent_id)
    try:
        return _apply_all(ledger, run_id, payload, changes, todo, paths, persist, confirm)
    except BaseException:
        # Interrupted (Ctrl-C) or crashed: what was journalled stays revertable.
        payload["changes"] = [c.model_dump(mode="json") for c in changes]
        ledger.update_run(run_id, payload=payload, status="interrupted")
        raise


def _apply_all(ledger: Ledger, run_id: int, payload: dict[str, Any], changes: list[Change], todo: list[Change],
               paths: SystemPaths, persist: bool, confirm: Callable[[Change], bool] | None) -> FixResult:
    seq, failed, files = 0, False, []
    for ch in todo:
        if failed:
            ch.state, ch.reason = ChangeState.not_attempted, "not attempted: an earlier change failed"
            continue
        if confirm is not None and not confirm(ch):
            ch.state, ch.reason = ChangeState.declined, "declined at the prompt"
            continue
        assert ch.action is not None
        h = handler_for(ch.action, paths)
        seq += 1
        ok = _apply_one(ledger, run_id, seq, ch, h)
        if ch.state != ChangeState.applied:  # failed, or refused at the last re-read
            failed = not ok
            continue
        if persist and h.persistable:
            try:
                pfiles = h.persist_files(ch.action)
            except OSError as e:
                ch.state, ch.reason = ChangeState.failed, f"applied, but cannot read {e.filename} to persist it: {e.strerror or e}"
                pfiles, ok = [], False
            for pf in pfiles:
                for d in _missing_dirs(pf.path, paths.etc):
                    seq += 1
                    if not _mkdir_one(ledger, run_id, seq, ch, d):
                        ok = False
                        break
                if not ok:
                    break
                seq += 1
                if not _persist_one(ledger, run_id, seq, ch, pf.path, pf.content.encode()):
                    ok = False
                    break
                files.append(str(pf.path))
        elif persist:
            ch.reason = "no persistent file for this action type"
        failed = not ok
    status = "failed" if failed else ("applied" if any(c.state == ChangeState.applied for c in changes) else "nothing")
    payload["changes"] = [c.model_dump(mode="json") for c in changes]
    payload["files"] = files
    ledger.update_run(run_id, payload=payload, status=status)
    return FixResult(run_id=run_id, status=status, changes=changes, files=files)


def _apply_one(ledger: Ledger, run_id: int, seq: int, ch: Change, h: Handler) -> bool:
    a = ch.action
    assert a is not None
    try:
        before = h.read(a)
    except RemedyFailed as e:
        ch.state, ch.reason = ChangeState.failed, f"cannot read the value before the change: {e}"
        return False
    if not h.same_as_audit(a, before):
        ch.state = ChangeState.refused
        ch.reason = f"value changed since the audit (audit saw {a.previous!r}, now {before!r}): re-audit first"
        return True
    intended = h.intended(a, before)
    step = ledger.journal_begin(run_id, seq, check_id=ch.check_id, subject=ch.subject, step_kind="value",
                                target=f"{a.type}:{a.target}", command=h.command(a), action_json=a.model_dump_json(),
                                before=before, intended=intended)
    error = None
    try:
        h.apply(a)
    except RemedyFailed as e:
        error = str(e)
    try:
        after: str | None = h.read(a)
    except RemedyFailed as e:
        after, error = None, error or f"cannot re-read after the change: {e}"
    if error is None and not h.matches(a, after or "", intended):
        error = f"re-read shows {after!r}, not the intended {intended!r}"
    ch.now, ch.after, ch.read_back = before, intended, after
    if error:
        ledger.journal_end(step, status="failed", after=after, error=error)
        ch.state, ch.reason = ChangeState.failed, error
        return False
    ledger.journal_end(step, status="applied", after=after)
    ch.state = ChangeState.applied
    return True


def _missing_dirs(path: Path, top: Path) -> list[Path]:
    """The directories between ``top`` (kept) and ``path`` that do not exist yet, outermost first."""
    out = []
    d = path.parent
    while d != top and top in d.parents and not d.exists():
        out.append(d)
        d = d.parent
    return out[::-1]


def _mkdir_one(ledger: Ledger, run_id: int, seq: int, ch: Change, d: Path) -> bool:
    """Create ``d`` for ``--persist``, journalled first (step kind ``dir``) so the revert removes it."""
    step = ledger.journal_begin(run_id, seq, check_id=ch.check_id, subject=ch.subject, step_kind="dir",
                                target=str(d), command=f"mkdir {d}", file_existed=False)
    try:
        d.mkdir()
    except OSError as e:
        ledger.journal_end(step, status="failed", error=f"mkdir {d}: {e.strerror or e}")
        ch.state, ch.reason = ChangeState.failed, f"applied, but cannot create {d} to persist it: {e.strerror or e}"
        return False
    ledger.journal_end(step, status="applied", after="created")
    return True


def _digest(data: bytes) -> str:
    return f"{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}"


def _persist_one(ledger: Ledger, run_id: int, seq: int, ch: Change, path: Path, data: bytes) -> bool:
    existed = path.exists()
    try:
        previous = path.read_bytes() if existed else None
        mode = path.stat().st_mode & 0o7777 if existed else None
    except OSError as e:
        ch.state, ch.reason = ChangeState.failed, f"applied, but cannot read {path} to persist it: {e.strerror or e}"
        return False
    step = ledger.journal_begin(run_id, seq, check_id=ch.check_id, subject=ch.subject, step_kind="file",
                                target=str(path), command=f"write {path}", file_existed=existed,
                                file_previous=previous, file_mode=mode)
    try:
        _atomic_write(path, data, mode)
        ok = path.read_bytes() == data
        err = None if ok else "re-read content differs from what was written"
    except OSError as e:
        ok, err = False, f"write {path}: {e.strerror or e}"
    ledger.journal_end(step, status="applied" if ok else "failed", after=_digest(data) if ok else None, error=err)
    if not ok:
        ch.state, ch.reason = ChangeState.failed, f"applied, but persisting failed: {err}"
    else:
        ch.persist = [*ch.persist, f"wrote {path}"] if f"wrote {path}" not in ch.persist else ch.persist
    return ok


def find_run(ledger: Ledger, ref: str = "last") -> int:
    """The id of the fix run ``ref`` names: a number, or ``last`` (the newest apply run with at
    least one journalled change). Raises :class:`FixRefused` when there is none or the run is not
    an apply run."""
    if ref == "last":
        for run in ledger.runs(kind="fix"):
            if isinstance(run.payload, dict) and run.payload.get("mode") == "apply" and ledger.steps(run.id):
                return run.id
        raise FixRefused(f"ledger {ledger.path}: no fix run to revert")
    run = ledger.get(ref)
    if run.kind != "fix" or not isinstance(run.payload, dict) or run.payload.get("mode") != "apply":
        raise FixRefused(f"run {ref} is not a fix run that applied changes (kind {run.kind})")
    return run.id


def revert_run(ledger: Ledger, ref: str = "last", *, paths: SystemPaths | None = None, force: bool = False) -> RevertResult:
    """Restore every journalled value and file of fix run ``ref`` in reverse order, verifying each.

    Steps still ``pending`` (interrupted between journal and change) and ``failed`` steps are
    restored too: their ``before`` value is known. A run whose status is ``reverted`` is only
    re-read (``verified``/``drifted``), so reverting twice writes nothing the second time.

    The journal is input (docs/security.md, class 2): only files the handlers write under the
    run's ``etc`` root and the directories ``--persist`` created there are restored or removed,
    only ``before`` values valid for their handler are written, and a setting whose value is no
    longer the one the run set is left alone (``changed_since``) unless ``force``. Raises
    :class:`FixRefused` when not root, there is no such run, or a later fix run that is not
    reverted changed one of the same settings (with ``force``: a warning instead).
    """
    run_id = find_run(ledger, ref)
    if not is_root():
        raise FixRefused(f"fix --revert must run as root (effective uid {os.geteuid()})")
    run = ledger.get(run_id)
    if paths is None:
        paths = _revert_paths(run_id, run.payload)
    already = run.status == "reverted"
    steps = ledger.steps(run_id)
    if already:
        # After a revert each target holds the state journalled by its *first* step.
        first: dict[str, dict[str, Any]] = {}
        for st in steps:
            first.setdefault(st["target"], st)
        out = [_verify_step(st, paths) for st in reversed(list(first.values()))]
        return RevertResult(run_id=run_id, revert_run_id=None, already_reverted=True,
                            ok=all(s.status == "verified" for s in out), steps=out)
    warnings = _later_changes(ledger, run_id, steps)
    if warnings and not force:
        raise FixRefused(f"fix run {run_id}: {warnings[0]}: revert it first (reverting out of order would leave the wrong "
                         "value), or give --force")
    out = [_revert_step(ledger, st, paths, force) for st in reversed(steps)]
    ok = all(s.status in ("reverted", "unchanged") for s in out)
    rev_id = ledger.record("fix", {"mode": "revert", "reverts": run_id, "warnings": warnings, "steps": [s.model_dump(mode="json") for s in out]},
                           local_host(), status="ok" if ok else "failed", parent_id=run_id)
    ledger.update_run(run_id, status="reverted" if ok else "revert_failed")
    return RevertResult(run_id=run_id, revert_run_id=rev_id, already_reverted=False, ok=ok, steps=out, warnings=warnings)


def _revert_paths(run_id: int, payload: Any) -> SystemPaths:
    """The trees a revert writes: the environment's (``SystemPaths.from_env``), which must be the
    ones the run journalled it changed. The journal is input: its ``roots`` never choose where a
    root process writes; a run made under other ``INFERGAP_*`` roots is refused naming them."""
    here = SystemPaths.from_env()
    roots = payload.get("roots") if isinstance(payload, dict) else None
    if not isinstance(roots, dict):
        return here
    names = {"proc_sys": "INFERGAP_PROC_SYS", "etc": "INFERGAP_ETC", "sys": "INFERGAP_SYS"}
    differ = [f"{env}={str(roots.get(k))[:200]!r}" for k, env in names.items() if str(roots.get(k)) != str(getattr(here, k))]
    if differ:
        raise FixRefused(f"fix run {run_id} journalled other trees than this environment's ({', '.join(differ)}): "
                         "set those variables to revert it there")
    return here


def _later_changes(ledger: Ledger, run_id: int, steps: list[dict[str, Any]]) -> list[str]:
    """One line per later fix run, not reverted, that changed a setting or file of ``steps``."""
    mine = {st["target"] for st in steps if st["step_kind"] in ("value", "file")}
    out = []
    for run in sorted(ledger.runs(kind="fix"), key=lambda r: r.id):
        if run.id <= run_id or run.status == "reverted" or not isinstance(run.payload, dict) or run.payload.get("mode") != "apply":
            continue
        same = sorted(mine & {st["target"] for st in ledger.steps(run.id)})
        if same:
            out.append(f"fix run {run.id} changed {', '.join(same)} after it and is not reverted")
    return out


def _allowed(paths: SystemPaths) -> tuple[set[Path], set[Path]]:
    """The files the handlers' ``--persist`` writes under ``paths.etc``, and the directories
    between ``etc`` and them (those ``--persist`` may have created)."""
    files = {paths.etc / f for cls in HANDLERS.values() for f in cls.FILES}
    dirs = {d for f in files for d in f.parents if paths.etc in d.parents}
    return files, dirs


def _step_handler(st: dict[str, Any], paths: SystemPaths) -> tuple[Action, Handler]:
    a = Action.model_validate_json(st["action_json"])
    why = undeclared(st["check_id"], a)
    if why:
        raise RemedyRefused(f"journalled action not in the check catalog: {why}")
    return a, handler_for(a, paths)


def _verify_step(st: dict[str, Any], paths: SystemPaths) -> RevertStep:
    rs = RevertStep(seq=st["seq"], check_id=st["check_id"], step_kind=st["step_kind"], target=st["target"],
                    command="(re-read only)", restored=None, read_back=None, status="verified")
    try:
        if st["step_kind"] == "value":
            if st["before"] is None:
                return rs
            a, h = _step_handler(st, paths)
            rs.restored, rs.read_back = st["before"], h.read(a)
            if not h.matches(a, rs.read_back, st["before"]):
                rs.status = "drifted"
        elif st["step_kind"] == "dir":
            rs.read_back = "present" if Path(st["target"]).exists() else "absent"
            if rs.read_back == "present":
                rs.status = "drifted"
        else:
            p = Path(st["target"])
            want = st["file_previous"] if st["file_existed"] else None
            have = p.read_bytes() if p.exists() else None
            rs.read_back = "absent" if have is None else f"{len(have)} bytes"
            if have != want:
                rs.status = "drifted"
    except (RemedyFailed, RemedyRefused, OSError, ValueError) as e:
        rs.status, rs.error = "drifted", str(e)
    return rs


def _revert_step(ledger: Ledger, st: dict[str, Any], paths: SystemPaths, force: bool = False) -> RevertStep:
    rs = RevertStep(seq=st["seq"], check_id=st["check_id"], step_kind=st["step_kind"], target=st["target"],
                    command="", restored=None, read_back=None, status="reverted")
    try:
        {"value": _revert_value, "dir": _revert_dir}.get(st["step_kind"], _revert_file)(rs, st, paths, force)
    except (RemedyFailed, RemedyRefused, OSError, ValueError) as e:
        rs.status, rs.error = "revert_failed", str(e)
    ledger.journal_revert(st["id"], status=rs.status, value=rs.read_back, error=rs.error)
    return rs


def _revert_value(rs: RevertStep, st: dict[str, Any], paths: SystemPaths, force: bool) -> None:
    a, h = _step_handler(st, paths)
    before = st["before"]
    if before is None:
        rs.status, rs.command = "unchanged", "(no value was read before: nothing was changed)"
        return
    if not isinstance(before, str) or not h.valid_state(before):
        raise RemedyRefused(f"journalled value {before!r} is not a valid {a.type} state: not written")
    rs.command, rs.restored = h.revert_command(a, before), before
    now = h.read(a)
    set_by_run = st["after"] if st["after"] is not None else st["intended"]
    if h.matches(a, now, before):
        rs.status = "unchanged"
    elif set_by_run is not None and not h.matches(a, now, set_by_run) and not force:
        rs.status, rs.read_back = "changed_since", now
        rs.error = (f"now {now!r}, the run set {set_by_run!r}: changed since by something else, not restored "
                    f"(--force restores {before!r})")
        return
    else:
        h.restore(a, before)
    rs.read_back = h.read(a)
    if not h.matches(a, rs.read_back, before):
        rs.status, rs.error = "revert_failed", f"re-read shows {rs.read_back!r}, not {before!r}"


def _revert_file(rs: RevertStep, st: dict[str, Any], paths: SystemPaths, force: bool) -> None:
    p = Path(st["target"])
    if p not in _allowed(paths)[0]:
        raise RemedyRefused(f"{p} is not a file infergap fix writes under {paths.etc}: not touched")
    have = p.read_bytes() if p.exists() else None
    wrote = st["after"]
    if wrote and "sha256" in wrote and (have is None or _digest(have) != wrote) and not force:
        rs.status, rs.read_back = "changed_since", "absent" if have is None else f"{len(have)} bytes"
        rs.error = f"{p} is no longer what the run wrote ({wrote}): changed since, not restored (--force restores it)"
        return
    if st["file_existed"]:
        prev = st["file_previous"] or b""
        owner = next(cls for cls in HANDLERS.values() for f in cls.FILES if paths.etc / f == p)
        foreign = owner.foreign_line(prev)
        if foreign is not None:
            raise RemedyRefused(f"journalled previous content of {p} holds a line infergap fix --persist does not write "
                                f"({foreign[:200]!r}): not restored")
        rs.command, rs.restored = f"restore {p} ({len(prev)} bytes)", f"{len(prev)} bytes"
        if have != prev:
            _atomic_write(p, prev, (st["file_mode"] or 0o644) & 0o777)
        have = p.read_bytes()
        rs.read_back = f"{len(have)} bytes"
        if have != prev:
            rs.status, rs.error = "revert_failed", "content differs from the journalled previous content"
    else:
        rs.command, rs.restored = f"remove {p} (it did not exist before)", "absent"
        if p.exists():
            p.unlink()
        rs.read_back = "absent" if not p.exists() else "present"
        if p.exists():
            rs.status, rs.error = "revert_failed", "file still exists"


def _revert_dir(rs: RevertStep, st: dict[str, Any], paths: SystemPaths, force: bool) -> None:
    d = Path(st["target"])
    if d not in _allowed(paths)[1]:
        raise RemedyRefused(f"{d} is not a directory infergap fix --persist creates under {paths.etc}: not touched")
    rs.command, rs.restored = f"rmdir {d} (created by the run)", "absent"
    if d.is_dir():
        try:
            d.rmdir()
        except OSError as e:
            rs.status, rs.read_back, rs.error = "revert_failed", "present", f"kept: {e.strerror or e} (something else was put there)"
            return
    rs.read_back = "absent" if not d.exists() else "present"
    if d.exists():
        rs.status, rs.error = "revert_failed", "directory still exists"


def check_report(findings: Iterable[Finding], path: Path | str) -> None:
    """Refuse a report (``fix --audit``) whose shown commands and executable actions disagree: each
    action's command, as its handler renders it, must be one of the finding's commands (compared
    as words, :func:`shlex.split`). A report edited to run something other than what it shows
    raises :class:`UserError` naming the file, the finding and the action, in one line. Actions
    no handler accepts are left to the plan, which refuses them one by one."""
    paths = SystemPaths()
    for f in findings:
        if f.remedy is None or not f.remedy.actions:
            continue
        shown = []
        for c in f.remedy.commands:
            try:
                shown.append(shlex.split(c, comments=True))
            except ValueError:
                continue
        for a in f.remedy.actions:
            try:
                cmd = handler_for(a, paths).command(a)
            except (RemedyRefused, ValueError):
                continue
            if shlex.split(cmd, comments=True) not in shown:
                raise UserError(f"{path}: finding {f.id}{' ' + f.subject if f.subject else ''}: the action {cmd} is not among "
                                "its commands (the report shows one change and would make another): refused")


def load_report(path: Path) -> tuple[list[Finding], dict[str, Any]]:
    """Findings of an ``infergap.audit/1`` JSON file and its ``host`` object.

    Raises :class:`UserError` naming the file when it is unreadable, not JSON, of another schema,
    or holds a finding that does not match the Finding contract.
    """
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise UserError(f"--audit {path}: cannot read ({e.strerror or e})") from None
    except (ValueError, RecursionError) as e:
        reason = str(e) if isinstance(e, ValueError) else "nested too deeply"
        raise UserError(f"--audit {path}: not JSON ({reason})") from None
    if not isinstance(doc, dict) or doc.get("schema") != "infergap.audit/1":
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise UserError(f"--audit {path}: not an infergap audit report (schema {got!r}, expected 'infergap.audit/1')")
    findings = []
    for i, f in enumerate(doc.get("findings") or []):
        try:
            findings.append(Finding.model_validate(f))
        except ValueError as e:
            first = str(e).splitlines()
            raise UserError(f"--audit {path}: finding {i} is invalid ({' '.join(first[:3])})") from None
    return findings, doc.get("host") or {}
