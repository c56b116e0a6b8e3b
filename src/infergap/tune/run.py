"""The tune loop: for each lever, restart the server with that one change and measure it against the
user's own configuration in interleaved runs (A B A B …), judge it (:mod:`infergap.tune.verdict`),
record it, and leave the server as the user started it (or in the best configuration found).

Order of one tune: the port is checked (a server of the same command already listening is
stopped first; another program is refused); the baseline starts and one bench run gives the
"before" curve, the engine, version and model (:func:`infergap.server.introspect`) and, for
``--levers plan``, the plan's levers for this server; then each lever in turn, ``rounds`` times
A then B, each run after a fresh start; a variant that does not start is ``refused`` with its
log's last lines. The budget is checked before each start: a lever whose runs do not fit is left
``not measured``. SIGINT/SIGTERM stop the run in progress; what was measured is judged and
recorded. Every bench run is a ``bench`` run of the ledger whose parent is the ``tune`` run, and
every lever one row of the ledger's experiments.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, Field

from infergap.errors import UserError
from infergap.tune.launch import Cancelled, Change, Launch, Refused, Server, address, apply_change, port_free
from infergap.tune.verdict import TARGETS, Judgement, judge, level_of

log = logging.getLogger(__name__)

SCHEMA = "infergap.tune/1"


@dataclass
class LeverTry:
    """One lever to try: its id (a catalog lever, or ``try:<change>``), the change, the target
    metric (a key of :data:`~infergap.tune.verdict.TARGETS`) and its title."""

    id: str
    change: Change
    target: str = "throughput"
    title: str = ""
    #: A host lever (:class:`infergap.tune.host.HostFix`): applied for each variant run, reverted after it.
    host: Any = None


class Trial(BaseModel):
    """The outcome of one lever: the change, the command it ran, the judgement, and the ledger
    ids of its bench runs in run order (``runs``: ``A``/``B`` with the run id, or None unrecorded)."""

    lever: str
    title: str = ""
    setting: str
    command: str
    target: str
    judgement: Judgement
    verdict: str
    refused: str | None = None
    log_tail: list[str] = Field(default_factory=list)
    runs: list[dict[str, Any]] = Field(default_factory=list)
    curve: dict[str, Any] | None = None
    experiment_id: int | None = None
    #: A host lever's fix runs in the ledger, ``{"apply": id, "revert": id}`` per variant run.
    fix_runs: list[dict[str, Any]] = Field(default_factory=list)
    #: Runs that gave no value at the judged level (the server died, the point was invalid):
    #: ``"A: why"`` / ``"B: why"``, in run order; shown beside the verdict, never dropped silently.
    failed_runs: list[str] = Field(default_factory=list)


class TuneResult(BaseModel):
    """A tune (``"schema": "infergap.tune/1"``): what was tried on which server, and what it gave."""

    schema_: str = Field(SCHEMA, alias="schema")
    started_at: str
    finished_at: str | None = None
    launch: str
    url: str
    engine: str | None = None
    engine_version: str | None = None
    model: str | None = None
    host: str = ""
    workload: str = ""
    rounds: int = 3
    budget_s: float | None = None
    baseline_curve: dict[str, Any] | None = None
    #: The ledger id of the baseline's first ("before") bench run, kept even when it was interrupted.
    baseline_run: int | None = None
    #: Why the baseline's first run did not finish (None: it did).
    baseline_stopped: str | None = None
    trials: list[Trial] = Field(default_factory=list)
    best: str | None = None
    best_levers: list[str] = Field(default_factory=list)
    #: Host levers that helped (their changes are no part of the command line).
    best_host: list[str] = Field(default_factory=list)
    #: Host levers left applied by ``--keep-best``: lever, fix run id, commands.
    host_kept: list[dict[str, Any]] = Field(default_factory=list)
    left_running: dict[str, Any] | None = None
    stopped: str | None = None
    notes: list[str] = Field(default_factory=list)

    model_config = {"populate_by_name": True}


def workload_key(settings: Any) -> str:
    """The workload in words, the part of an experiment's key that says what load it was measured
    under: API, concurrency levels, input and output lengths, dataset."""
    levels = ",".join(str(c) for c in settings.concurrency)
    return f"{settings.api} c={levels} in={settings.input_len} out={settings.output_len} {settings.dataset}"


def curve(bench: Any) -> dict[str, Any]:
    """The points of one bench run as plain numbers (label → output tok/s, TTFT and TPOT p50)."""
    out = {}
    for p in bench.points:
        def m(k: str) -> float | None:
            s = p.summary.get(k)
            return s.median if s is not None else None
        out[p.label] = {"concurrency": p.concurrency, "valid": p.valid, "output_tps": m("output_throughput_tps"),
                        "ttft_p50_ms": m("ttft_p50_ms"), "tpot_p50_ms": m("tpot_p50_ms")}
    return out


@dataclass
class Tuner:
    """The state of one tune. ``bench_fn(url, settings) -> BenchResult`` runs one bench run;
    ``record_bench(result) -> run id or None`` keeps it; ``on_trial`` is told each finished lever."""

    base: Launch
    settings: Any
    rounds: int = 3
    budget_s: float | None = None
    log_dir: Path = Path(".")
    start_timeout_s: float = 600.0
    bench_fn: Callable[[str, Any], Any] | None = None
    record_bench: Callable[[Any], int | None] = lambda b: None
    on_trial: Callable[[Trial], None] = lambda t: None
    url: str = ""
    t0: float = field(default_factory=time.monotonic)
    stopping: str | None = None
    block_s: float = 0.0
    n_logs: int = 0
    before: Any = None
    started: bool = False
    signals: int = 0

    def __post_init__(self) -> None:
        if not self.url:
            host, port = address(self.base)
            self.url = f"http://{host}:{port}"

    def on_signal(self, signum: int, frame: object) -> None:
        """SIGINT/SIGTERM between runs: stop starting anything; the run or start in progress ends
        at its next check (a bench run has its own handlers while it runs)."""
        self.signals += 1
        self.stopping = "interrupted (SIGINT/SIGTERM)"

    def left(self) -> float | None:
        """Seconds of the budget left (None: no budget)."""
        return None if self.budget_s is None else self.budget_s - (time.monotonic() - self.t0)

    def _fits(self) -> bool:
        left = self.left()
        if left is not None and left < max(self.block_s, 1.0):
            self.stopping = self.stopping or f"budget: {self.budget_s:g} s spent"
        return self.stopping is None

    def _server(self, launch: Launch) -> Server:
        self.n_logs += 1
        return Server(launch, self.url, self.log_dir / f"server-{self.n_logs:02d}.log")

    def block(self, launch: Launch, host: Any = None) -> Any:
        """Start ``launch``, run one bench run, stop the server; with a host lever ``host``
        (:class:`~infergap.tune.host.HostFix`) its changes are applied before the start and
        reverted after the stop, whatever happened between. Raises :class:`Refused`, and
        :class:`~infergap.tune.host.RevertFailed` when the host is left changed."""
        t = time.monotonic()
        fix_run = host.apply() if host is not None else None
        srv = self._server(launch)
        try:
            srv.start(self.start_timeout_s, cancel=lambda: self.stopping is not None)
            result = self.bench_fn(self.url, self.settings)
        except (KeyboardInterrupt, Cancelled):
            self.stopping = self.stopping or "interrupted (SIGINT/SIGTERM)"
            return None
        finally:
            srv.stop()
            if fix_run is not None:
                host.revert(fix_run)
        if getattr(result, "interrupted", False):
            self.stopping = "interrupted (SIGINT/SIGTERM)"
        self.block_s = max(self.block_s, time.monotonic() - t)
        return result

    def try_lever(self, lv: LeverTry) -> Trial:
        """Rounds of A (the user's command) and B (with ``lv.change``) in the order of the bench's
        A/B shape (:func:`infergap.bench.shapes.interleave`), judged on ``lv.target``."""
        from infergap.bench.metrics import metric_value
        from infergap.bench.shapes import interleave

        variant = apply_change(self.base, lv.change)
        metric, where = TARGETS[lv.target]
        at = level_of(self.before.points, where) if self.before is not None else None
        label = at.label if at is not None else None
        tr = Trial(lever=lv.id, title=lv.title, setting=lv_setting(lv), command=variant.text(), target=lv.target,
                   judgement=Judgement(target=lv.target, metric=metric, level=label), verdict="not measured")
        arms = _Arms(self, tr, label)
        try:
            out = interleave({"A": arms.arm("A", self.base), "B": arms.arm("B", variant, lv.host)}, self.rounds)
        finally:
            tr.fix_runs = list(lv.host.runs) if lv.host is not None else []
        if arms.refused is not None:
            side, e = arms.refused
            if side == "A":
                raise UserError(f"the user's own command no longer starts the server: {e.why}")
            tr.verdict, tr.refused, tr.log_tail = "refused", e.why, e.tail
            tr.judgement.verdict, tr.judgement.reason = "refused", e.why
            return tr
        vals = {k: [v for v in (metric_value(t, metric) for t in out.points[k].trials) if v is not None] if k in out.points else []
                for k in ("A", "B")}
        tr.judgement = judge(lv.target, vals["A"], vals["B"], level=label)
        if arms.failed and not vals["B"] and vals["A"]:
            # The variant starts but cannot serve the workload the baseline serves: that is an effect.
            tr.judgement.verdict, tr.judgement.reason = "hurts", f"every variant run failed at {label}: {arms.failed[0]}"
        tr.verdict = tr.judgement.verdict
        if tr.failed_runs and not tr.judgement.reason.startswith("every variant run failed"):
            tr.judgement.reason = (f"{tr.judgement.reason}; {len(tr.failed_runs)} run(s) gave no value and are not in "
                                   f"the verdict: {tr.failed_runs[0]}")
        if self.stopping and tr.verdict == "not measured":
            tr.judgement.reason = f"{tr.judgement.reason}; stopped: {self.stopping}"
        return tr


@dataclass
class _Arms:
    """The two arms of one lever for :func:`~infergap.bench.shapes.interleave`: each trial is a
    fresh start of the arm's command and one bench run, of which the point at ``label`` is the
    trial; the whole run is kept in the ledger (its id in ``trial.runs``) and the variant's last
    run is the "after" curve. A refusal or a stop ends the interleaving with a point that says so."""

    tuner: Tuner
    trial: Trial
    label: str | None
    refused: tuple[str, Refused] | None = None
    failed: list[str] = field(default_factory=list)

    def arm(self, side: str, launch: Launch, host: Any = None) -> Callable[[int], Any]:
        def run(k: int) -> Any:
            from infergap.bench.results import PointResult

            tu = self.tuner
            if not tu._fits():
                return PointResult(mode="concurrency", error=f"stopped: {tu.stopping}")
            try:
                res = tu.block(launch, host)
            except Refused as e:
                self.refused = (side, e)
                return PointResult(mode="concurrency", error=f"refused: {e.why}")
            if res is None or tu.stopping and getattr(res, "interrupted", False):
                return PointResult(mode="concurrency", error=f"stopped: {tu.stopping}")
            self.trial.runs.append({"config": side, "bench_run": tu.record_bench(res), "error": res.error})
            if side == "B":
                self.trial.curve = curve(res)
            point = next((p for p in res.points if p.label == self.label), None)
            if point is not None and point.valid:
                return point
            why = _failure(res, self.label)
            self.trial.failed_runs.append(f"{side}: {why}")
            if side == "B":
                self.failed.append(why)
            return PointResult(mode="concurrency")  # no trial: this run gives no value
        return run


def _failure(res: Any, label: str | None) -> str:
    """Why a run has no value at ``label``: the point's invalid reason and first error, or the run's error."""
    for p in res.points:
        if p.label == label:
            ex = next((e for t in p.trials for e in t.error_examples), "")
            return "; ".join(x for x in (p.invalid_reason, ex[:300]) if x) or "no value"
    return res.error or f"no point {label}"


def lv_setting(lv: LeverTry) -> str:
    """A lever's change in words: the command-line change, or a host lever's fix commands."""
    return lv.host.commands() if lv.host is not None else lv.change.text()


def best_config(base: Launch, trials: list[Trial], levers: dict[str, LeverTry]) -> tuple[Launch, list[str]]:
    """The user's command with every lever that helped applied, in the order tried (a later
    change to the same flag wins). Levers that helped were measured one at a time: their gains
    need not add up, which the report says."""
    launch, used = base, []
    for t in trials:
        if t.verdict == "helps" and t.lever in levers and levers[t.lever].host is None:
            launch = apply_change(launch, levers[t.lever].change)
            used.append(t.lever)
    return launch, used


def prepare_port(base: Launch, url: str, stop_same: bool = True) -> str | None:
    """Make the server's port free: nothing listening → None; a process of the same command
    (its argv equal to the launch's) → stopped, returns a note; anything else → UserError."""
    from urllib.parse import urlsplit

    u = urlsplit(url)
    if port_free(u.hostname or "127.0.0.1", u.port or 80):
        return None
    from infergap.snapshot.process import find_listener

    pid, _, why = find_listener(url)
    if pid is None:
        raise UserError(f"something already listens at {url} ({why}); stop it or start the server on another --port")
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    except OSError as e:
        raise UserError(f"a process (pid {pid}) listens at {url} and its command line cannot be read ({e.strerror})") from None
    words = [w.decode("utf-8", "replace") for w in argv]
    if not stop_same or words[1:] != base.argv[1:]:
        raise UserError(f"pid {pid} listens at {url} and was not started with the --launch command; stop it first")
    import os
    import signal

    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not port_free(u.hostname or "127.0.0.1", u.port or 80):
        time.sleep(0.2)
    return f"stopped the running server (pid {pid}, the same command) to restart it with each change"


def now() -> str:
    """UTC now, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _pairs(base: Launch, words: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Flag (canonical) → the word after it ("" for a flag followed by another flag or nothing)."""
    from infergap.tune.launch import _key

    out = {}
    for k, w in enumerate(words):
        if w.startswith("-"):
            nxt = words[k + 1] if k + 1 < len(words) else ""
            out[_key(base, w.partition("=")[0])] = w.partition("=")[2] or ("" if nxt.startswith("-") else nxt)
    return out


def recognise(text: str, base: Launch) -> tuple[str, str]:
    """(lever id, target) of a ``--try`` change: the catalog lever of the launch's engine whose
    tune change it is — the same flags removed, or a subset of its flags set to its values where
    the catalog fixes them (``--parallel 8`` is ``llamacpp.parallel``, whose value is sized from
    the facts; ``-ub 8`` is not ``llamacpp.ubatch``, which sets 512) — else ``try:<change>``,
    judged on throughput. A ``ttft:``/``tpot:``/``throughput:`` prefix names the target."""
    from infergap.plan import load_catalog
    from infergap.tune.launch import _key, parse_change

    target = None
    head, sep, rest = text.partition(":")
    if sep and head.strip() in TARGETS:
        target, text = head.strip(), rest.strip()
    ch = parse_change(text)
    mine, drops = _pairs(base, ch.set), {_key(base, d) for d in ch.drop}
    for lv in load_catalog():
        for var in lv.engines.get(base.engine or "", []):
            theirs = _pairs(base, var.args)
            if not (mine or drops) or drops != {_key(base, d) for d in var.drop} or not set(mine) <= set(theirs):
                continue
            if all("{" in theirs[f] or theirs[f] == v for f, v in mine.items()):
                return lv.id, target or lv.target
    return f"try:{ch.text()}", target or "throughput"


def plan_levers(before: Any, cfg: Any, proc: Any) -> tuple[list[LeverTry], list[str]]:
    """The plan's flag flips and small changes for this server that are command-line changes,
    in plan order, and a note for each selected lever that cannot be tried here (and why)."""
    from infergap.plan import build_plan
    from infergap.tune.launch import Change

    from infergap.plan import load_catalog

    plan = build_plan(bench=before, server=cfg, process=proc)
    cat = {lv.id: lv for lv in load_catalog()}
    out, notes = [], []
    for x in plan.levers:
        if x.tier not in ("flag_flip", "small_change"):
            continue
        if not x.tune:
            has = any(v.args or v.drop for v in cat.get(x.id).engines.get(str(cfg.engine), [])) if x.id in cat else False
            notes.append(f"{x.id}: not tried: " + ("a value its change needs is not known for this server (" +
                         "; ".join(x.actions)[:300] + ")" if has else "the catalog gives no command-line change for it on this engine"))
            continue
        out.append(LeverTry(x.id, Change(tuple(x.tune["set"]), tuple(x.tune["drop"])), x.tune.get("target") or "throughput", x.title))
    return out, notes
