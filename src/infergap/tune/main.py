"""One ``infergap tune`` from start to end: the baseline start, the levers, the record, the server
left running. :func:`run_tune` is the library entry point; ``infergap tune`` is its command line.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from infergap.errors import UserError
from infergap.tune.launch import Cancelled, Launch, Refused, Server, apply_change
from infergap.tune.run import (LeverTry, Trial, Tuner, TuneResult, best_config, curve, lv_setting, now, plan_levers,
                               prepare_port, workload_key)

if TYPE_CHECKING:  # annotations only: the bench is imported when a run starts
    from infergap.bench.results import BenchSettings

log = logging.getLogger(__name__)


@dataclass
class TuneOptions:
    """What to try and how: ``levers`` (None: the plan's), ``rounds`` of A B, the ``budget_s``,
    ``keep_best`` (leave the best configuration running instead of the user's), ``leave_running``
    (False: stop the server at the end), where the servers' logs go, the ledger file."""

    levers: list[LeverTry] | None = None
    rounds: int = 3
    budget_s: float | None = None
    keep_best: bool = False
    leave_running: bool = True
    log_dir: Path = Path(".")
    start_timeout_s: float = 600.0
    db: Any = None
    on_trial: Callable[[Trial], None] = field(default=lambda t: None)


def _bench(url: str, settings: Any) -> Any:
    from infergap.bench.runner import run

    return run(url, None, settings.model_copy(deep=True))


def _probe(tuner: Tuner, result: TuneResult) -> tuple[Any, Any, Any]:
    """Start the baseline, read what it serves (engine, version, model), its process, and one
    bench run: the "before" curve. Returns (bench result, server config, process evidence)."""
    from infergap.server import introspect
    from infergap.snapshot.process import serving_process

    srv = Server(tuner.base, tuner.url, tuner.log_dir / "server-00-baseline.log")
    try:
        srv.start(tuner.start_timeout_s, cancel=lambda: tuner.stopping is not None)
        tuner.started = True
    except Refused as e:
        tail = "\n  ".join(e.tail[-8:])
        raise UserError(f"the --launch command did not start a server at {tuner.url}: {e.why}" + (f"; its log ends:\n  {tail}" if tail else "")) from None
    try:
        cfg = introspect(tuner.url, timeout_s=10)
        proc, _ = serving_process(tuner.url, nvml=False)
        before = None if tuner.stopping else tuner.bench_fn(tuner.url, tuner.settings)
    finally:
        srv.stop()
    result.engine = cfg.engine or tuner.base.engine
    result.engine_version = cfg.version
    result.model = cfg.model or cfg.served_model_name or ""
    if before is None:
        result.baseline_stopped = "interrupted before its first run"
    else:
        result.baseline_curve = curve(before)
        if getattr(before, "interrupted", False):
            tuner.stopping = "interrupted (SIGINT/SIGTERM)"
            done = [k for k, v in result.baseline_curve.items() if v.get("output_tps") is not None]
            result.baseline_stopped = "interrupted during its first run" + (
                f" (measured so far: {', '.join(done)}; kept in the ledger)" if done else " (no load level measured)")
    return before, cfg, proc


def _key(result: TuneResult) -> Any:
    from infergap.ledger import ExperimentKey

    return ExperimentKey(host=result.host, engine=result.engine or "unknown", engine_version=result.engine_version or "",
                         model=result.model or "", workload=result.workload)


def _record_trial(led: Any, run_id: int | None, result: TuneResult, tr: Trial) -> None:
    if led is None or run_id is None:
        return
    tr.experiment_id = led.record_experiment(
        run_id, _key(result), lever=tr.lever, setting=tr.setting, metric=tr.judgement.metric, verdict=tr.verdict,
        change_pct=tr.judgement.change_pct,
        payload={"judgement": tr.judgement.model_dump(mode="json"), "command": tr.command, "runs": tr.runs,
                 "refused": tr.refused, "log_tail": tr.log_tail, "target": tr.target, "fix_runs": tr.fix_runs})


def _open_ledger(db: Any) -> Any:
    from infergap.ledger import Ledger, LedgerError

    try:
        return Ledger(db)
    except LedgerError as e:
        log.warning("tune not recorded in the ledger: %s", e)
        return None


def _leave(tuner: Tuner, launch: Launch, opts: TuneOptions, result: TuneResult) -> None:
    """Start ``launch`` once more and leave it running (its log in the log directory)."""
    if not opts.leave_running or not tuner.started:
        return  # the user's command never started a server: nothing to leave running
    srv = Server(launch, tuner.url, opts.log_dir / "server-final.log")
    signals = tuner.signals
    try:
        srv.start(opts.start_timeout_s, cancel=lambda: tuner.signals > signals)
    except Refused as e:
        result.notes.append(f"the final configuration did not start again: {e.why}")
        return
    except Cancelled:
        result.notes.append("the final configuration was not left running (interrupted while it started)")
        return
    result.left_running = {"pid": srv.proc.pid, "command": launch.text(), "log": str(srv.log), "url": tuner.url}


def run_tune(base: Launch, settings: BenchSettings, opts: TuneOptions, url: str | None = None) -> TuneResult:
    """Tune the server that ``base`` starts under the bench ``settings`` (trials=1 per run). Raises
    UserError before anything is measured (a busy port, a command that does not start); after
    that, never for a lever: its failure is its verdict."""
    from infergap.ledger import local_host

    tuner = Tuner(base, settings, rounds=opts.rounds, budget_s=opts.budget_s, log_dir=opts.log_dir,
                  start_timeout_s=opts.start_timeout_s, bench_fn=_bench, url=url or "")
    result = TuneResult(started_at=now(), launch=base.text(), url=tuner.url, host=local_host().fingerprint,
                        workload=workload_key(settings), rounds=opts.rounds, budget_s=opts.budget_s)
    note = prepare_port(base, tuner.url)
    if note:
        result.notes.append(note)
    led = _open_ledger(opts.db)
    restore = _signals(tuner.on_signal)
    try:
        _tune_all(tuner, result, opts, led)
    finally:
        restore()
        if led is not None:
            led.close()
    return result


def _signals(handler: Callable[[int, object], None]) -> Callable[[], None]:
    """Make SIGINT and SIGTERM call ``handler`` (a flag, never an exception in the middle of a
    server's stop); returns what puts the previous handlers back. Outside the main thread: nothing."""
    import signal

    sigs = (signal.SIGINT, signal.SIGTERM)
    try:
        before = {s: signal.signal(s, handler) for s in sigs}
    except ValueError:
        return lambda: None

    def restore() -> None:
        for s, h in before.items():
            signal.signal(s, h)
    return restore


def _tune_all(tuner: Tuner, result: TuneResult, opts: TuneOptions, led: Any) -> None:
    run_id = led.record("tune", result.model_dump(mode="json", by_alias=True), None, status="running") if led else None

    def keep(bench: Any) -> int | None:
        return led.record("bench", bench.model_dump(mode="json", by_alias=True), None, parent_id=run_id) if led else None

    tuner.record_bench = keep
    levers = opts.levers
    try:
        before, cfg, proc = _probe(tuner, result)
        tuner.before = before
        if before is not None:
            result.baseline_run = keep(before)
        if levers is None and result.baseline_stopped:
            result.notes.append("the plan's levers were not chosen: the baseline run, which the plan reads, did not finish")
            levers = []
        elif levers is None:
            levers, notes = plan_levers(before, cfg, proc)
            result.notes += notes
            if not levers:
                result.notes.append("the plan proposes no lever that is a change of this command line")
        for lv in levers:
            if lv.host is not None:
                lv.host.ledger, lv.host.parent = led, run_id
            if tuner.stopping:
                result.trials.append(_unmeasured(tuner, lv))
                continue
            tr = _try(tuner, result, lv)
            _record_trial(led, run_id, result, tr)
            result.trials.append(tr)
            opts.on_trial(tr)
    except (KeyboardInterrupt, Cancelled):
        tuner.stopping = tuner.stopping or "interrupted (SIGINT/SIGTERM)"
        if tuner.before is None and not result.baseline_stopped:
            result.baseline_stopped = "interrupted while its server started: nothing measured"
    finally:
        _finish(tuner, result, opts, levers or [], led, run_id)


def _try(tuner: Tuner, result: TuneResult, lv: LeverTry) -> Trial:
    """One lever's trial; a host change that could not be reverted stops the tune (nothing more
    is started on a host that is not as the audit found it) and says how to revert it."""
    from infergap.tune.host import RevertFailed

    try:
        return tuner.try_lever(lv)
    except RevertFailed as e:
        tuner.stopping = f"a host change was not reverted: {e}"
        result.notes.append(f"{lv.id}: {e}")
        tr = _unmeasured(tuner, lv)
        tr.fix_runs = list(lv.host.runs) if lv.host is not None else []
        return tr


def _keep_host(tuner: Tuner, result: TuneResult, levers: list[LeverTry]) -> None:
    """``--keep-best``: apply once more, and leave applied, each host lever that helped; its fix
    run is the one ``infergap fix --revert`` undoes. A host lever that did not help stays reverted."""
    from infergap.tune.host import RevertFailed
    from infergap.tune.launch import Refused

    helped = {t.lever for t in result.trials if t.verdict == "helps"}
    for lv in levers:
        if lv.host is None or lv.id not in helped:
            continue
        try:
            run = lv.host.apply()
        except (Refused, RevertFailed) as e:
            result.notes.append(f"{lv.id} helped but was not applied again: {getattr(e, 'why', e)}")
            continue
        result.host_kept.append({"lever": lv.id, "fix_run": run, "commands": lv.host.commands()})
        result.notes.append(f"{lv.id} left applied (fix run {run}): undo with infergap fix --revert {run}")


def _unmeasured(tuner: Tuner, lv: LeverTry) -> Trial:
    from infergap.tune.verdict import TARGETS, Judgement

    why = f"not started: {tuner.stopping}" + ("; the baseline run did not finish" if tuner.before is None or getattr(tuner.before, "interrupted", False) else "")
    return Trial(lever=lv.id, title=lv.title, setting=lv_setting(lv), command=apply_change(tuner.base, lv.change).text(),
                 target=lv.target, verdict="not measured",
                 judgement=Judgement(target=lv.target, metric=TARGETS[lv.target][0], reason=why))


def _finish(tuner: Tuner, result: TuneResult, opts: TuneOptions, levers: list[LeverTry], led: Any, run_id: int | None) -> None:
    """The best command, the server left running, the tune run's final payload and status."""
    best, used = best_config(tuner.base, result.trials, {lv.id: lv for lv in levers})
    result.best, result.best_levers = best.text(), used
    if len(used) > 1:
        result.notes.append("the best command combines levers measured one at a time: their gains need not add up; tune it once more to measure it")
    for t in result.trials:
        if t.verdict == "helps" and t.lever in {lv.id for lv in levers if lv.host is not None}:
            result.best_host.append(t.lever)
    result.stopped = tuner.stopping
    try:
        if opts.keep_best and tuner.started and not (tuner.stopping or "").startswith("a host change"):
            _keep_host(tuner, result, levers)
        _leave(tuner, best if opts.keep_best else tuner.base, opts, result)
    finally:
        result.finished_at = now()
        if led is not None and run_id is not None:
            led.update_run(run_id, payload=result.model_dump(mode="json", by_alias=True),
                           status="interrupted" if tuner.stopping and "interrupt" in tuner.stopping else "done")


