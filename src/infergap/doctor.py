"""``infergap doctor``: audit (+ evidence) → server introspection → roofline → bench sweep → plan,
and one self-contained report of it all.

Each stage that cannot run (no GPU on the host, a model the roofline does not know, a server that
does not answer) is recorded with its reason and the rest goes on; the JSON of every stage is
written as soon as it exists, so nothing measured is lost. This module reads the host and the
network; the stages it calls are the project's libraries.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from pydantic import BaseModel, Field

from infergap.audit import run_audit
from infergap.errors import UserError
from infergap.evidence.overlay import open_with_evidence
from infergap.facts import other_host
from infergap.guard import dumps, write_atomic
from infergap.plan import Plan, Stage, build_plan
from infergap.plan.build import is_local_url
from infergap.plan.inputs import engine_logs_from
from infergap.render.plan import render_json, render_markdown
from infergap.roofline import Parallel, Workload, bounds, host_gpus, load_hardware, load_model
from infergap.roofline.gguf import ggml_types
from infergap.server import introspect
from infergap.snapshot import LiveSnapshot, open_snapshot
from infergap.snapshot.process import cpu_since, serving_process

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.bench.results import BenchResult
    from infergap.roofline.model import ModelSpec
    from infergap.server import ServerConfig
    from infergap.snapshot.core import Snapshot
    from infergap.parsers.process import ProcessEvidence
    from infergap.synthesis import AuditReport

log = logging.getLogger(__name__)

#: --quick: three concurrencies, one trial, short requests — under two minutes on a small model.
QUICK = {"concurrency": [1, 2, 4], "trials": 1, "warmup": 1, "input_len": 64, "output_len": 32, "num_prompts": 8}
FULL = {"concurrency": [1, 2, 4, 8, 16, 32, 64], "trials": 3, "warmup": 4, "input_len": 256, "output_len": 128, "num_prompts": None}


class DoctorResult(BaseModel):
    """What a doctor run produced: the stages with their status, the files written, the plan."""

    stages: list[Stage] = Field(default_factory=list)
    files: dict[str, str] = Field(default_factory=dict)
    plan: Plan | None = None
    duration_s: float = 0.0
    #: Whether the server at the URL answered (introspection or any bench request).
    reachable: bool = False
    #: Bench points measured (0: the run measured nothing).
    points: int = 0
    #: Bench points above the failure budget (their figures are not used).
    invalid_points: int = 0


#: Python exception class names and aiohttp connector internals, kept out of what users read.
_INTERNAL = re.compile(r"\b(?:[A-Z]\w{0,64}?(?:Error|Exception|Timeout\w{0,16})|Exception):\s{0,8}|\s{1,8}ssl:(?:default|None|True|False)\b")


def plain(message: object) -> str:
    """``str(message)`` without Python class names (``ClientConnectorError: ``) or aiohttp's
    ``ssl:default``, so a stage's reason reads as words."""
    return _INTERNAL.sub(" ", str(message)).replace("( ", "(").replace("  ", " ").strip()


def bench_stage(bench: BenchResult | None) -> tuple[str, str, str]:
    """Status, verdict and detail of the doctor's bench stage. Status: ``partial`` when the sweep
    ended early (server gone), ``failed`` when it ended before measuring any point, else ``ran``.
    Verdict against the failure budget (``settings.max_error_rate`` per point): ``failed`` when no
    point is within it (or none was measured), ``degraded`` when some are not, ``ok`` when every
    measured point is (failures below the budget are still counted in the detail)."""
    from infergap.bench.metrics import likely_cause

    n = len(bench.points)
    bad = bench.invalid_points
    sent = sum(p.requests for p in bench.points)
    failed = sum(p.failed for p in bench.points)
    errors: dict[str, int] = {}
    for p in bench.points:
        for k, v in p.errors.items():
            errors[k] = errors.get(k, 0) + v
    detail = f"{n} point(s)"
    if failed:
        kinds = ", ".join(f"{k} ×{v}" for k, v in sorted(errors.items(), key=lambda kv: -kv[1]))
        detail += f"; {failed} of {sent} requests failed ({kinds})"
    budget = f"{bench.settings.max_error_rate:.1%} failure budget"
    if bad:
        detail += f"; {', '.join(p.label for p in bad)} above the budget, not used"
        cause = likely_cause(errors)
        if cause:
            detail += f"; most likely cause: {cause}"
    if bench.connections.note:
        detail += f"; {bench.connections.note}"
    if bench.error:
        detail += f"; {plain(bench.error)}"
    status = "partial" if bench.error else "ran"
    if not n:
        return ("failed" if bench.error else status), "failed: no point measured", detail
    if len(bad) == n:
        return status, f"failed: all {n} point(s) above the {budget}", detail
    if bad:
        return status, f"degraded: {len(bad)} of {n} point(s) above the {budget}", detail
    return status, f"ok: {n} of {n} point(s) within the {budget}", detail


def audit_stage(audit: AuditReport | None) -> tuple[str, str, str | None]:
    """Status, verdict and detail of the doctor's audit stage: ``partial`` when an investigator
    errored (its checks are missing from the report), else ``ran``; the verdict counts the
    actionable findings by severity, the unknown ones (checks the evidence could not settle) and
    the pasted parts no finding explains; the detail names what was audited and its GPUs."""
    summary = audit.summary or {}
    sev = summary.get("actionable_by_severity") or {}
    counts = summary.get("counts") or {}
    verdict = ", ".join(f"{k} {sev.get(k, 0)}" for k in ("P0", "P1", "P2")) + f", unknown {counts.get('unknown', 0)}"
    if summary.get("evidence_unmatched"):
        verdict += f", {summary['evidence_unmatched']} pasted part(s) with no known cause"
    label, gpus = audit.host.snapshot.label if audit.host.snapshot else None, audit.host.gpu_summary
    detail = f"{gpus}; from {label}" if label and gpus else (label or gpus)
    errored = summary.get("investigator_errors") or []
    if errored:
        return "partial", verdict, (detail + "; " if detail else "") + f"investigator(s) that errored: {', '.join(errored)}"
    return "ran", verdict, detail


def _model_candidates(cfg: ServerConfig) -> list[str]:
    """Names to try for the roofline from what the server reports (a local path with a
    config.json, or a built-in name matching the path's last component)."""
    out = []
    for v in (getattr(cfg, "model", None), getattr(cfg, "served_model_name", None)):
        if not v:
            continue
        p = Path(v)
        if p.is_dir() and (p / "config.json").exists():
            out.append(str(p))
        if p.name.lower().endswith(".gguf"):
            out.append(str(p))  # the file when it is here, else the built-in model its name gives
        base = re.sub(r"[-_](instruct|chat|hf)$", "", p.name.lower().removesuffix(".gguf"))
        out.append(base)
    return out


def _gguf_overrides(cfg: ServerConfig, name: str) -> dict[str, str]:
    """For a GGUF the server reports but this machine does not have: the weights' tensor type
    from the server's own ``model_ftype`` (``/props``: ``Q4_K - Medium`` → ``q4_k``)."""
    ft = getattr(cfg, "model_type", None)
    if not ft or not name.lower().endswith(".gguf") or Path(name).is_file():
        return {}

    t = re.split(r"[\s-]", str(ft).strip().lower(), maxsplit=1)[0]
    return {"weights": t} if t in ggml_types() else {}


def run_doctor(url: str, output_dir: str | Path, *, model: str | None = None, quick: bool = False,
               evidence: list[str] | None = None, api_key: str | None = None, gpu: str | None = None,
               gpus: int | None = None, snapshot: str | None = None, served_model: str | None = None,
               progress: Callable[[str, str], None] | None = None, max_error_rate: float = 0.01,
               sweep: dict[str, Any] | None = None) -> DoctorResult:
    """Run every stage against the server at ``url`` and write the artefacts into ``output_dir``:
    ``audit.json``, ``server.json``, ``roofline.json``, ``bench.json``, ``plan.json``, ``plan.md``,
    ``report.md``, ``report.html``, and ``process.json`` when the server runs on this machine. ``model``: a config.json path or built-in name for the
    roofline (default: from the server); ``gpu``/``gpus``: GPU name and count when the host's
    cannot be read; ``snapshot``: audit a snapshot instead of this host; ``max_error_rate``: the
    bench's failure budget per point (see :func:`bench_stage`); ``sweep``: overrides of the
    sweep's ``concurrency`` (list), ``input_len``, ``output_len``, ``num_prompts`` (None: a
    default enough for every slot to turn over, :func:`infergap.bench.runner.default_num_prompts`),
    on top of :data:`QUICK` or :data:`FULL`. Raises
    :class:`UserError` only for an unusable ``output_dir`` or a malformed URL.
    """
    t0 = time.monotonic()
    out = Path(output_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--output-dir {out}: cannot create ({e.strerror or e})") from None
    if not re.match(r"^https?://[^/\s]+", url):
        raise UserError(f"--url {url}: not an http:// or https:// URL")
    run = _Run(out, DoctorResult(), progress or (lambda stage, msg: None), [snapshot, *(evidence or [])])
    cfg = _server_stage(run, url, api_key)  # first: the audit's server investigator reads it
    proc = _process_stage(run, url)
    audit, logs, snap = _audit_stage(run, cfg, snapshot, evidence)
    settings = sweep_settings(quick, sweep)
    try:
        elsewhere = evidence_elsewhere(snap, snapshot)
        rl = _roofline_stage(run, cfg, snap, snapshot, settings, model, gpu, gpus)
    finally:
        if snap is not None:
            snap.close()
    bench = _bench_stage(run, url, served_model, settings, max_error_rate, progress is not None)
    cpu = _process_cpu(run, proc, bench)
    res = run.res

    # plan

    plan = build_plan(audit=audit, roofline=rl, bench=bench, server=cfg if cfg is not None and cfg.reachable else None,
                      engine_logs=logs, stages=list(res.stages), elsewhere=elsewhere, process=proc, process_cpu=cpu)
    res.plan = plan
    run.write("plan.json", render_json(plan))
    run.stage("plan", "ran", f"{len(plan.levers)} lever(s), {len(plan.wont_help)} will-not-help, {len(plan.unknowns)} unknown(s)")
    plan.stages = list(res.stages)
    run.write("plan.json", render_json(plan))
    run.write("plan.md", render_markdown(plan))

    # report
    from infergap.render.report import render_html, render_report_markdown

    res.duration_s = time.monotonic() - t0
    run.write("report.md", render_report_markdown(plan, audit, rl, bench))
    try:  # optional: every stage's document is written, and is recorded from there
        html = render_html(plan, audit=audit, roofline=rl, bench=bench, server=cfg, duration_s=res.duration_s)
    except Exception as e:  # noqa: BLE001 - a value a plot cannot draw must not lose the run
        run.say("report", f"warning: report.html not written ({type(e).__name__}: {str(e)[:200]})")
    else:
        run.write("report.html", html)
    return res


@dataclass
class _Run:
    """One doctor run's output directory, result and progress callback, shared by the stages."""

    out: Path
    res: DoctorResult
    say: Callable[[str, str], None]
    inputs: list[Any]

    def write(self, name: str, text: str) -> None:
        """Write one artefact atomically (never over an input) and list it in the result."""
        p = self.out / name
        write_atomic(p, text, inputs=self.inputs, option="--output-dir")
        self.res.files[name] = str(p)

    def stage(self, name: str, status: str, detail: str | None = None, verdict: str | None = None) -> None:
        """Record a stage's status (one of :data:`infergap.plan.build.STAGE_STATUSES`), its
        verdict and detail, and report them to the progress callback."""
        st = Stage(name=name, status=status, verdict=verdict, detail=detail)
        self.res.stages.append(st)
        self.say(name, st.text().removeprefix(f"{name}: "))


def sweep_settings(quick: bool, sweep: dict[str, Any] | None) -> dict[str, Any]:
    """The bench sweep's settings: :data:`QUICK` or :data:`FULL` with ``sweep``'s overrides (a
    concurrency list without a request count counts per concurrency). Raises UserError for an
    unknown key."""
    settings = dict(QUICK if quick else FULL)
    for k, v in (sweep or {}).items():
        if k not in settings:
            raise UserError(f"sweep setting {k!r}: not one of {', '.join(settings)}")
        settings[k] = v
    if sweep and "concurrency" in sweep and "num_prompts" not in sweep:
        settings["num_prompts"] = None
    return settings


def _server_stage(run: _Run, url: str, api_key: str | None) -> Any:
    """Introspect the server (``server.json``); the config, or None when introspection failed."""
    cfg = None
    try:
        cfg = introspect(url, api_key=api_key)
        run.write("server.json", cfg.model_dump_json(indent=2, exclude={"raw"}))
        detail = f"answered: {cfg.engine or 'engine not identified'} {cfg.version or ''}".strip()
        if cfg.engine == "llama.cpp" and cfg.n_slots:
            detail += f"; {cfg.n_slots} slot(s) of {cfg.slot_context or '?'} tokens"
        if cfg.metrics_enabled is False:
            detail += "; /metrics is off (start the server with --metrics for queue and token counters)"
        run.stage("server", "ran" if cfg.reachable else "failed", detail if cfg.reachable else plain("; ".join(cfg.errors[:2])))
        run.res.reachable = bool(cfg.reachable)
    except Exception as e:  # a stage failing must not stop the others
        run.stage("server", "failed", plain(e))
    return cfg


def _process_stage(run: _Run, url: str) -> Any:
    """The serving process behind ``url`` when it runs on this machine (``process.json``:
    :class:`~infergap.parsers.process.ProcessEvidence`, secrets scrubbed); None when the URL is
    another machine's or the process cannot be found (the stage says why)."""
    if not is_local_url(url):
        run.stage("process", "skipped", "the server runs on another machine: its process is read there (infergap doctor on that host)")
        return None
    try:
        proc, why = serving_process(url)
    except Exception as e:  # a stage failing must not stop the others
        run.stage("process", "failed", plain(e))
        return None
    if proc is None:
        run.stage("process", "skipped", why)
        return None
    run.write("process.json", proc.model_dump_json(indent=2) + "\n")
    env = proc.env.get("CUDA_VISIBLE_DEVICES")
    detail = f"pid {proc.pid}: {os.path.basename(proc.argv[0]) if proc.argv else '?'}, {proc.threads or '?'} threads"
    detail += f", CUDA_VISIBLE_DEVICES={env!r}" if env is not None else ""
    detail += "; " + "; ".join(proc.problems[:2]) if proc.problems else ""
    run.stage("process", "ran", detail)
    return proc


def _process_cpu(run: _Run, proc: ProcessEvidence | None, bench: BenchResult) -> dict[str, Any] | None:
    """The CPU the serving process used during the sweep (:func:`~infergap.snapshot.process.cpu_since`),
    written into ``process.json``; None without a process or a bench."""
    if proc is None or bench is None:
        return None

    try:
        cpu = cpu_since(proc)
    except Exception:  # the process may have exited: the facts then lack its CPU use
        return None
    if cpu is not None:
        run.write("process.json", dumps({**proc.model_dump(mode="json"), "cpu_during_sweep": cpu}, indent=2) + "\n")
    return cpu


def _audit_stage(run: _Run, cfg: ServerConfig, snapshot: str | None, evidence: list[str] | None) -> tuple[Any, list[tuple[str, Any]], Any]:
    """Audit the host or snapshot with the evidence (``audit.json``): (the report or None, the
    engine logs found, the snapshot, left open for the roofline; the caller closes it)."""
    audit = None
    logs: list[tuple[str, Any]] = []
    snap = None
    try:
        snap = open_with_evidence(snapshot, list(evidence or []), host=True)
        audit = run_audit(snap, server=cfg if cfg is not None and cfg.reachable else None)
        logs = engine_logs_from(snap)
        run.write("audit.json", dumps(audit.to_json(), indent=2, ensure_ascii=False) + "\n")
        status, verdict, detail = audit_stage(audit)
        run.stage("audit", status, detail, verdict)
    except Exception as e:
        run.stage("audit", "failed", plain(e))
    return audit, logs, snap


def evidence_elsewhere(snap: Snapshot, snapshot: str | None) -> str | None:
    """Why the audited evidence describes another machine than this one, or None when it may be
    this one: pasted evidence the audit took for another host (``snap.other_host``), or a
    ``snapshot`` whose GPUs are not this machine's (:func:`infergap.facts.other_host`, which
    reads this machine's GPUs). The plan then does not send its verify commands to a server on
    this machine."""
    why = getattr(snap, "other_host", None)
    if why or snap is None or snapshot is None:
        return why

    try:
        with LiveSnapshot() as live:
            why = other_host(live, snap)
    except Exception as e:  # this machine's GPUs unreadable: the snapshot may be of another one
        return f"--snapshot {snapshot}: whether it is this machine is unknown ({plain(e)})"
    return f"--snapshot {snapshot}: {why}" if why else None


def _load_spec(model: str | None, cfg: ServerConfig) -> ModelSpec:
    """The roofline's model: ``model``, else the first of the server's names that loads. Raises
    UserError when none does."""
    names = [model] if model else _model_candidates(cfg)
    errs = []
    for n in names:
        try:
            return load_model(n, _gguf_overrides(cfg, n))
        except UserError as e:
            errs.append(str(e))
    if model:
        raise UserError(f"model unknown: pass --model CONFIG|NAME ({errs[0]})")
    if not names:
        raise UserError("model unknown: pass --model CONFIG|NAME (the server did not report one)")
    served = getattr(cfg, "model", None) or getattr(cfg, "served_model_name", None) or names[0]
    raise UserError(f"model unknown: the server serves {served!r}, which is neither a model directory here "
                    "nor a built-in model; pass --model CONFIG|NAME")


def _roofline_stage(run: _Run, cfg: ServerConfig, snap: Snapshot, snapshot: str | None, settings: dict[str, Any],
                    model: str | None, gpu: str | None, gpus: int | None) -> Any:
    """Bound the model on the audited host's GPUs (or ``gpu`` × ``gpus``) at the server's TP and
    the sweep's concurrencies (``roofline.json``); the result, or None when skipped or failed."""
    try:
        spec = _load_spec(model, cfg)
        host = None
        if not gpu:  # --gpu auto: the GPUs of the host the audit read, handed to the roofline
            if snap is not None:
                host = host_gpus(snap)
            else:
                with open_snapshot(snapshot) as s:
                    host = host_gpus(s)
        hw = load_hardware(gpu or "auto", gpus if gpus else (None if not gpu else (cfg.tp_size if cfg and cfg.tp_size else 1)), host=host)
        tp = (cfg.tp_size if cfg is not None and cfg.tp_size else None) or hw.count
        rl = bounds(spec, hw, Parallel(tp=min(tp, hw.count)), Workload(batches=list(settings["concurrency"])))
        run.write("roofline.json", dumps(rl.to_json_dict(), indent=2) + "\n")
        run.stage("roofline", "ran", f"{spec.name} on {hw.count} × {hw.gpu.label}, TP{min(tp, hw.count)}")
        return rl
    except UserError as e:
        run.stage("roofline", "skipped", plain(e))
    except Exception as e:
        run.stage("roofline", "failed", plain(e))
    return None


def _bench_stage(run: _Run, url: str, served_model: str | None, settings: dict[str, Any], max_error_rate: float,
                 live_progress: bool) -> Any:
    """The bench sweep (``bench.json``, rewritten after every point); the result or None. With
    ``live_progress`` (a command line is watching) a live line per point on a terminal."""
    from infergap.bench.results import BenchSettings
    from infergap.bench.runner import run as run_bench

    try:
        bs = BenchSettings.checked(concurrency=list(settings["concurrency"]), trials=settings["trials"],
                                   warmup=settings["warmup"], input_len=settings["input_len"], output_len=settings["output_len"],
                                   num_prompts=settings["num_prompts"], max_error_rate=max_error_rate)
        live = None
        if live_progress:
            from infergap.render.bench import BenchProgress

            live = BenchProgress()
        try:
            bench = run_bench(url, served_model, bs, on_partial=lambda r: run.write("bench.json", r.to_json() + "\n"),
                              progress=live.hooks() if live is not None else None)
        finally:
            if live is not None:
                live.stop()
        run.write("bench.json", bench.to_json() + "\n")
        run.res.points = len(bench.points)
        run.res.invalid_points = len(bench.invalid_points)
        run.res.reachable = True  # the bench raises before any load when the server does not answer
        status, verdict, detail = bench_stage(bench)
        run.stage("bench", status, detail, verdict)
        return bench
    except Exception as e:
        run.stage("bench", "failed", plain(e))
    return None
