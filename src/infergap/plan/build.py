"""Build the plan: efficiency gap, host fixes, levers by tier with their evidence chains, what will
not help, and what is unknown — as :class:`Plan` (JSON schema ``infergap.plan/1``).

Pure: reads only its arguments (and the shipped catalog). Ranking rule (stated in every plan):
inside a tier, levers are ordered by expected gain over effort, (√(low·high) − 1) / effort_h, the
fractional speed-up per hour of work using the geometric middle of the stated gain range; host
fixes come in the audit's order (runtime first, then software, reboot, BIOS, hardware; P0 first
inside each). A lever selected by the sweep's knee cause (``load.knee_cause``: what the engine's
metrics say bent the throughput curve) comes before the other levers of no priority, whatever its
tier: it acts on the limit the sweep measured. The summary's top actions are the P0 host fixes,
the P0 and P1 levers, the knee's levers, then flag flips, then P1 runtime host fixes, then small
changes, then engineering, in those orders.
"""

from __future__ import annotations

import ipaddress
import math
import re
import shlex
import socket
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from infergap import __version__, shellcmd
from infergap.findings import Status
from infergap.guard import validate
from infergap.plan.behaviour import from_behaviour
from infergap.plan.catalog import TIER_ORDER, Lever, load_catalog
from infergap.plan.conditions import Fact, evaluate
from infergap.plan.process_facts import from_process
from infergap.plan.signals import (
    completed,
    derive,
    fact_words,
    from_audit,
    from_bench,
    from_bench_errors,
    from_engine_logs,
    from_roofline,
    from_server,
    gpu_absent_from_logs,
    how_to_find,
)

from infergap.synthesis import AuditReport

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.bench.results import BenchResult, PointResult
    from infergap.parsers.engine_log import EngineLogFacts
    from infergap.roofline.bounds import RooflineResult
    from infergap.server import ServerConfig
    from infergap.parsers.process import ProcessEvidence

SCHEMA = "infergap.plan/1"

RANKING = ("Levers inside a tier: expected gain over effort, (√(low·high) − 1) / effort hours, from the catalog's stated "
           "gain range and effort; disagree by editing the catalog (--catalog). A lever selected by what bent the sweep's "
           "curve (load.knee_cause) comes first after the P0/P1 fixes. Host fixes: runtime first, then software, "
           "reboot, BIOS, hardware; P0 before P1 before P2 inside each. Top actions: P0 host fixes, P0/P1 levers, the "
           "knee's levers, flag flips, P1 runtime host fixes, small changes, engineering.")

#: The fact naming what bent the sweep's throughput curve; levers it selects act on the measured limit.
KNEE_FACT = "load.knee_cause"

_FIX_ORDER = {"runtime": 0, "software": 1, "reboot": 2, "bios": 3, "hardware": 4}
_SEV_ORDER = {"P0": 0, "P1": 1, "P2": 2}


class GapPoint(BaseModel):
    """Measured output tok/s at one concurrency against the roofline bound at that batch."""

    concurrency: int
    measured_tok_s: float
    bound_tok_s: float | None = None
    bound: str | None = None
    binds: str | None = None
    ratio: float | None = None
    note: str | None = None


class Gap(BaseModel):
    """The efficiency gap. ``headline`` is batch-1 against each single-stream bound."""

    headline: list[dict[str, Any]] = Field(default_factory=list)
    points: list[GapPoint] = Field(default_factory=list)
    binds: str | None = None
    summary: str = ""


class HostFix(BaseModel):
    """One actionable audit check (all its subjects), with the commands and the exact revert."""

    id: str
    severity: str | None
    fix_kind: str | None
    title: str
    subjects: list[str] = Field(default_factory=list)
    commands: list[str] = Field(default_factory=list)
    revert: list[str] = Field(default_factory=list)
    note: str | None = None
    evidence: list[str] = Field(default_factory=list)


class PlanItem(BaseModel):
    """A lever the facts selected, with the chain of facts that selected it."""

    id: str
    tier: str
    title: str
    actions: list[str] = Field(default_factory=list)
    selected_by: list[str] = Field(default_factory=list)
    facts: list[str] = Field(default_factory=list)
    effect: str | None = None
    gain: tuple[float, float] | None = None
    metric: str | None = None
    effort_h: float | None = None
    score: float | None = None
    risk: str | None = None
    verify: str | None = None
    undo: str | None = None
    source: str = ""
    why: str | None = None
    priority: str | None = None
    #: The change ``infergap tune`` makes to try it on this engine: ``set`` words, ``drop`` flags,
    #: ``target`` metric (None: the lever is no command-line change, or a value it needs is unknown).
    tune: dict[str, Any] | None = None
    #: What ``infergap tune`` measured for this lever on this host, engine version and model.
    measured: str | None = None


class Tried(BaseModel):
    """A lever ``infergap tune`` tried on the same host, engine version and model that did not
    help: its measurement, so that it is not proposed again blindly."""

    id: str
    title: str
    setting: str
    verdict: str
    measurement: str
    workload: str
    tune_run: int | None = None
    created_at: str = ""


class Unknown(BaseModel):
    """A fact the plan lacked, the levers it would decide, and the command that finds it out.
    ``question``: the fact in words (:data:`infergap.plan.signals.FACT_WORDS`); ``decides_titles``:
    the titles of the levers in ``decides`` (their ids), in the same order."""

    fact: str
    question: str = ""
    decides: list[str] = Field(default_factory=list)
    decides_titles: list[str] = Field(default_factory=list)
    command: str


#: What a stage's ``status`` may say: whether it ran, never whether what it found is good.
#: ``ran`` (to its end), ``partial`` (not all of it: a sweep that ended early, an audit
#: investigator that errored; what it measured is kept), ``skipped`` (an input it needs is
#: missing), ``failed`` (tried and errored); for inputs of ``infergap plan``: ``given``,
#: ``missing``, ``from log``. What a stage that ran found is its ``verdict``.
STAGE_STATUSES = ("ran", "partial", "skipped", "failed", "given", "missing", "from log")


class Stage(BaseModel):
    """An input stage: whether it ran (``status``, one of :data:`STAGE_STATUSES`), what it found
    when it did (``verdict``: the audit's counts, the bench's standing against its failure
    budget; None for a stage that only computes or reads), and the particulars (``detail``)."""

    name: str
    status: str
    verdict: str | None = None
    detail: str | None = None

    @property
    def tone(self) -> str:
        """``actionable`` for a failed stage, ``unknown`` for one that did not run to its end,
        else empty (running is not a verdict)."""
        return "actionable" if self.status == "failed" else "unknown" if self.status in ("partial", "skipped", "missing") else ""

    @property
    def verdict_tone(self) -> str:
        """``actionable`` for a verdict of failures or P0/P1 findings, ``ok`` for a bench within its
        failure budget, else empty."""
        v = self.verdict or ""
        if v.startswith(("failed", "degraded")) or re.search(r"\bP[01] [1-9]", v):
            return "actionable"
        return "ok" if v.startswith("ok") else ""

    def text(self, sep: str = ": ") -> str:
        """One line: ``name: status — verdict (detail)``."""
        return f"{self.name}{sep}{self.status}" + (f" — {self.verdict}" if self.verdict else "") + (f" ({self.detail})" if self.detail else "")


class Plan(BaseModel):
    """The plan (``"schema": "infergap.plan/1"``)."""

    schema_: str = Field(SCHEMA, alias="schema")
    created: str
    infergap_version: str = __version__
    stages: list[Stage] = Field(default_factory=list)
    facts: dict[str, Fact] = Field(default_factory=dict)
    gap: Gap = Field(default_factory=Gap)
    host_fixes: list[HostFix] = Field(default_factory=list)
    levers: list[PlanItem] = Field(default_factory=list)
    wont_help: list[PlanItem] = Field(default_factory=list)
    #: Levers tried by ``infergap tune`` on this key that did not help ("tried — won't help").
    tried: list[Tried] = Field(default_factory=list)
    #: Levers ``infergap tune`` measured helping on this key that the facts at hand do not select
    #: (a ``--try`` change, a host fix, a lever whose signal this plan lacks): kept with their gain.
    helped: list[Tried] = Field(default_factory=list)
    unknowns: list[Unknown] = Field(default_factory=list)
    top_actions: list[str] = Field(default_factory=list)
    #: Why the verify commands do not name the server this run reached (None when they do, or
    #: when no server was reached).
    url_note: str | None = None
    #: Where the engine logs given were written, when that is not known to be the server the
    #: plan names (None: no log, no server URL, or every log names that server's host).
    log_note: str | None = None
    ranking: str = RANKING

    model_config = {"populate_by_name": True}

    def failure_lines(self) -> list[str]:
        """The bench's failed requests in words (empty when none failed): the error rate with its
        evidence, then the most likely cause. Reports print these before anything else."""
        f = self.facts.get("load.error_rate")
        if f is None or not f.value:
            return []
        out = [f"{f.value:.1%} of the bench's requests failed — {f.source}"]
        cause = self.facts.get("load.error_cause")
        if cause is not None:
            out.append(f"most likely cause: {cause.value}")
        return out

    def tier(self, name: str) -> list[PlanItem]:
        """Selected levers of one tier, in rank order."""
        return [x for x in self.levers if x.tier == name]

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON document."""
        return self.model_dump(mode="json", by_alias=True)


# -- gap -----------------------------------------------------------------------------------------

def _tps(p: PointResult) -> float | None:
    s = p.summary.get("output_throughput_tps")
    return s.median if s is not None else None


def _batched_bound(rl: dict[str, Any], c: int) -> tuple[float | None, str | None, str | None]:
    pts = sorted(rl.get("batched") or [], key=lambda b: b["batch"])
    for b in pts:
        if b["batch"] == c:
            return b["tok_s"], b["bound"], None
    lo = [b for b in pts if b["batch"] < c]
    hi = [b for b in pts if b["batch"] > c]
    if lo and hi:
        a, b = lo[-1], hi[0]
        t = (math.log(c) - math.log(a["batch"])) / (math.log(b["batch"]) - math.log(a["batch"]))
        v = math.exp(math.log(a["tok_s"]) + t * (math.log(b["tok_s"]) - math.log(a["tok_s"])))
        return v, a["bound"] if a["bound"] == b["bound"] else f"{a['bound']}→{b['bound']}", f"interpolated between batch {a['batch']} and {b['batch']}"
    return None, None, "outside the roofline's batch range"


def build_gap(roofline: dict[str, Any] | None, bench: BenchResult | None) -> Gap:
    """Measured vs bound at each concurrency; which bound binds (batch 1: the per-GPU bound's parts;
    batches: memory or compute from the roofline's batched model)."""
    gap = Gap()
    single = {b["name"]: b for b in (roofline or {}).get("single_stream") or []}
    every = [p for p in (bench.points if bench else []) if p.mode == "concurrency" and p.concurrency and _tps(p) is not None]
    pts = sorted([p for p in every if completed(p) and getattr(p, "valid", True)], key=lambda p: p.concurrency)
    dead = [p.label for p in every if not completed(p)]
    pg = single.get("per_gpu")
    if pg:
        comm = pg.get("collectives_s") or 0.0
        t = pg["time_per_token_s"]
        gap.binds = (f"batch 1: memory bandwidth of the busiest rank ({(t - comm) * 1e3:.2f} ms reading {pg['bytes_per_token'] / 1e9:.2f} GB) "
                     f"+ collectives ({comm * 1e3:.2f} ms, {comm / t:.0%} of the step)")
    for p in pts:
        m = _tps(p)
        gp = GapPoint(concurrency=p.concurrency, measured_tok_s=m)
        if p.concurrency == 1 and single:
            tight = min(single.values(), key=lambda b: b["tok_s"])
            gp.bound_tok_s, gp.bound, gp.binds = tight["tok_s"], tight["name"], "memory + collectives" if tight.get("collectives_s") else "memory"
            for b in sorted(single.values(), key=lambda b: -b["tok_s"]):
                gap.headline.append({"bound": b["name"], "label": b["label"], "bound_tok_s": b["tok_s"], "measured_tok_s": m, "ratio": m / b["tok_s"]})
        elif roofline:
            v, binds, note = _batched_bound(roofline, p.concurrency)
            gp.bound_tok_s, gp.bound, gp.binds, gp.note = v, "batched" if v else None, binds, note
        if gp.bound_tok_s:
            gp.ratio = m / gp.bound_tok_s
        if p.client_bound:
            gp.note = ((gp.note + "; ") if gp.note else "") + "client-bound: not the server's throughput"
        gap.points.append(gp)
    if gap.headline:
        agg = next((h for h in gap.headline if h["bound"] == "aggregate"), gap.headline[0])
        tight = gap.headline[-1]
        gap.summary = (f"batch 1: {agg['measured_tok_s']:.2f} tok/s is {agg['ratio']:.1%} of the aggregate bound "
                       f"({agg['bound_tok_s']:.1f} tok/s) and {tight['ratio']:.1%} of the tightest bound, {tight['label']} ({tight['bound_tok_s']:.1f} tok/s)")
        if agg["ratio"] > 1.05:
            gap.summary += " — above the bound: the roofline's model or GPUs are not what the server runs (check --model / --gpu)"
    elif gap.points and roofline:
        best = max((g for g in gap.points if g.ratio), key=lambda g: g.ratio, default=None)
        if best:
            gap.summary = f"best point c={best.concurrency}: {best.measured_tok_s:.1f} tok/s is {best.ratio:.1%} of the bound at that batch"
    elif gap.points:
        gap.summary = "no roofline: the measured points cannot be compared with a bound"
    elif bench is not None and bench.points and not any(getattr(p, "valid", True) for p in bench.points):
        gap.summary = "no valid point: every point of the sweep failed more requests than the failure budget allows"
    if dead:
        gap.summary = ((gap.summary + "; ") if gap.summary else "") + f"no request completed at {', '.join(dead)}: no throughput to compare there"
    return gap


# -- host fixes ----------------------------------------------------------------------------------

def build_host_fixes(audit: AuditReport | None) -> list[HostFix]:
    """Actionable audit findings grouped by check id, runtime first, P0 first inside each kind."""
    groups: dict[str, HostFix] = {}
    for f in audit.findings if audit is not None else []:
        if f.status != Status.actionable or f.id.startswith(("engine.", "server.")):
            continue  # the serving engine's own settings are levers, not host fixes
        h = groups.get(f.id)
        sev, kind = (f.severity.value if f.severity else None), (f.fix_kind.value if f.fix_kind else None)
        if h is None:
            h = groups[f.id] = HostFix(id=f.id, severity=sev, fix_kind=kind, title=f.title,
                                       note=f.remedy.note if f.remedy else None)
        elif _SEV_ORDER.get(sev or "", 9) < _SEV_ORDER.get(h.severity or "", 9):
            h.severity = sev
        if f.subject:
            h.subjects.append(f.subject)
        cmds = (f.remedy.commands or f.remedy.persist) if f.remedy else []
        h.commands += [c for c in cmds if c not in h.commands]
        h.revert += [c for c in (f.remedy.revert if f.remedy else []) if c not in h.revert]
        h.evidence += [f"{e.source}: {e.value}" for e in f.evidence[:2] if f"{e.source}: {e.value}" not in h.evidence][:4]
    out = list(groups.values())
    for h in out:
        if len(h.subjects) > 1:
            s0 = h.subjects[0]
            h.title = h.title.replace(f"GPU {s0}: ", "").replace(s0, "").strip(" :") + f" ({len(h.subjects)} devices)"
    out.sort(key=lambda h: (_FIX_ORDER.get(h.fix_kind or "", 9), _SEV_ORDER.get(h.severity or "", 9), h.id))
    return out


# -- levers --------------------------------------------------------------------------------------

def _pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


#: What the verify commands name when the plan does not know the address of the server its
#: evidence describes: the reader fills it in (letters only, so the
#: command stays one shell word without quotes).
URL_PLACEHOLDER = "http://SERVER:PORT"


def is_local_url(url: str) -> bool:
    """True when ``url`` names this machine: a loopback address, ``localhost``, ``0.0.0.0`` or
    this machine's host name."""
    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return False
    if host in ("localhost", "0.0.0.0", socket.gethostname().lower()) or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def this_machine() -> set[str]:
    """Names of this machine, lower case: its host name (and the name's first label) and the
    addresses the kernel's routing table marks local (``/proc/net/fib_trie``, ``/32 host LOCAL``;
    nothing when that file cannot be read). No name lookup: nothing here can wait on a network."""
    name = socket.gethostname().lower()
    out = {name, name.split(".")[0], "localhost", "127.0.0.1", "::1"}
    try:
        from pathlib import Path

        lines = Path("/proc/net/fib_trie").read_text(errors="replace").splitlines()
    except OSError:
        return out
    for prev, line in zip(lines, lines[1:]):
        if line.strip() == "/32 host LOCAL":
            out.add(prev.strip().removeprefix("|-- ").strip())
    return out


def log_hosts(engine_logs: list[tuple[str, EngineLogFacts]] | None, url: str | None) -> tuple[str | None, str | None]:
    """Whether the engine logs come from the server at ``url``: ``(note, elsewhere)``.

    A log names its host through NCCL's or Ray's line prefixes
    (:attr:`~infergap.parsers.engine_log.EngineLogFacts.hosts`). A log whose hosts include the
    URL's host (this machine's names and addresses, :func:`this_machine`, for a local URL) is that
    server's; a log that names only other hosts is another machine's: the note says so and, for a
    local URL, ``elsewhere`` is the reason :func:`verify_url` takes. A log that names no host is
    read as the server's, as before, and the note says that this is not known. ``(None, None)``
    without logs or without a URL."""
    if not engine_logs or not url:
        return None, None

    try:
        uh = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return None, None
    local = is_local_url(url)
    targets = this_machine() if local else {uh}
    short = {t.split(".")[0] for t in targets if not t.replace(".", "").isdigit() and ":" not in t}
    unknown, other = [], []
    for label, f in engine_logs:
        hosts = list(getattr(f, "hosts", None) or [])
        if not hosts:
            unknown.append(label)
        elif not any(h.lower() in targets or h.lower().split(".")[0] in short for h in hosts):
            other.append(f"{label} (written on {', '.join(hosts)})")
    notes, elsewhere = [], None
    if other:
        where = "this machine" if local else uh
        notes.append(f"the engine log(s) {'; '.join(other)} name another host than {where}: their flags and counters "
                     f"describe another server than the one at {url} (a container has a host name and address of its "
                     "own: check which server wrote them before acting on them)")
        if local:
            elsewhere = f"the engine log(s) {'; '.join(other)} name another host"
    if unknown:
        notes.append(f"the engine log(s) {', '.join(unknown)} do not name the host they were written on: their flags and "
                     f"counters are read as those of the server at {url}, which holds only if they come from it")
    return ("; ".join(notes) or None), elsewhere


def verify_url(server: ServerConfig | None, bench: BenchResult | None, elsewhere: str | None) -> tuple[str | None, str | None]:
    """The server URL the verify commands name, and why it is not the one this run reached (or
    None). The URL is the live ``server``'s, else the ``bench`` result's (a bench file names the
    server it measured). When ``elsewhere`` says the evidence describes another machine and that
    URL is this machine's own (:func:`is_local_url`), the server on this machine is not the one the
    evidence describes: :data:`URL_PLACEHOLDER` instead. None: no URL known."""
    url = server.url if server is not None and getattr(server, "url", None) else (bench.environment.url if bench is not None else None)
    if url and not shellcmd.valid("url", url):  # a bench file is input: its URL is data, never shell
        return URL_PLACEHOLDER, f"the verify commands name {URL_PLACEHOLDER}: {shellcmd.BadValue(url, 'url')}"
    if url and elsewhere and is_local_url(url):
        return URL_PLACEHOLDER, (f"the verify commands name {URL_PLACEHOLDER}, the server the evidence describes, not {url}, "
                                 f"which would reach this machine: {elsewhere}")
    return url, None


def _params(facts: dict[str, Fact], url: str | None) -> dict[str, Any]:
    v = {k: f.value for k, f in facts.items()}
    seen = [x for x in (v.get("load.running_max"), v.get("load.max_concurrency")) if isinstance(x, int)]
    tp = v.get("par.tp") or v.get("gpu.count") or 1
    tp = tp if isinstance(tp, int) and not isinstance(tp, bool) and tp > 0 else 1
    gpus = v.get("gpu.count") if isinstance(v.get("gpu.count"), int) else tp
    ub = v.get("server.ubatch")
    # The URL is one quoted shell word (verify_url let only a valid URL or the placeholder through);
    # the numbers are integers or a letter the reader fills in.
    out = {"n": _pow2(max(seen)) if seen else "N", "tp": tp, "dp": max(1, gpus // 2), "url": shlex.quote(url) if url else "URL",
           "ubatch": ub if isinstance(ub, int) and not isinstance(ub, bool) else "N", "procs": _client_procs(v.get("client.cpus"))}
    out.update(_slots(v))
    out.update(_flag_params(v))
    return out


def _flag_params(v: dict[str, Any]) -> dict[str, Any]:
    """The serving process's judged values for the lever texts: a number, or a backend name of
    letters, digits and ``_`` (anything else read from a command line is not repeated)."""
    chunk, frac, attn = v.get("server.prefill_chunk"), v.get("server.mem_fraction"), v.get("server.attention_backend")
    return {"prefill_chunk": chunk if isinstance(chunk, int) and not isinstance(chunk, bool) else "N",
            "mem_fraction": f"{frac:g}" if isinstance(frac, float) else "N",
            "attention_backend": attn if isinstance(attn, str) and re.fullmatch(r"[a-z0-9_]{1,40}", attn) else "N"}


def _client_procs(cpus: Any) -> int:
    """Client processes for a re-run: one per core the client had (``client.cpus``), 2 to 4
    (4 when the count is unknown): more processes than cores share them and help nothing."""
    return max(2, min(4, cpus)) if isinstance(cpus, int) and not isinstance(cpus, bool) else 4


#: Most slots the plan proposes at once: past this llama.cpp's per-step host work (sampling every
#: slot, ggml-org/llama.cpp#27050) grows faster than the batch helps; measure before going higher.
MAX_SLOTS = 64


def _slots(v: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp slot sizing from the KV budget (``server.kv_slots_max``), not from the sweep:
    the largest power of two the budget holds at the current per-slot context, at most
    :data:`MAX_SLOTS`."""
    now, ctx, most = v.get("server.n_slots"), v.get("server.slot_context"), v.get("server.kv_slots_max")
    need = v.get("load.context_needed")
    need_slot = _pow2(int(need * 1.25)) if isinstance(need, int) and need > 0 else "C"
    base = {"ctx_need": need_slot, "ctx_need_total": need_slot * now if isinstance(need_slot, int) and isinstance(now, int) else "slots × C"}
    if not isinstance(ctx, int) or not isinstance(most, int) or most < 1:
        return {**base, "slots": "N", "ctx": ctx or "C", "ctx_total": "N×C", "slots_now": now or 1,
                "slots_why": "size N from the GPU memory left after the weights: each slot needs C tokens of KV cache"}
    p = 1
    while p * 2 <= min(most, MAX_SLOTS):
        p *= 2
    if isinstance(now, int) and p <= now:
        p = min(most, now * 2)
    why = f"the KV budget holds {most} slots of {ctx} tokens; {p} is a power of two ≤ {min(most, MAX_SLOTS)}"
    seen = v.get("load.max_concurrency")
    if v.get("server.kv_slots_assumed") and isinstance(seen, int) and _pow2(seen) < p:
        p = max(_pow2(seen), now or 1)
        why = (f"the GPU memory is assumed ({v.get('gpu.name') or 'the GPU named with --gpu'}, not found by an audit): "
               f"{p} slots, no more than the sweep's c={seen} showed; measure before going higher")
    return {**base, "slots": p, "ctx": ctx, "ctx_total": p * ctx, "slots_now": now or 1, "slots_why": why}


def _actions(lv: Lever, facts: dict[str, Fact], params: dict[str, Any]) -> list[str]:
    eng = facts.get("engine.name")
    ver = facts.get("engine.version")
    out: list[str] = []
    names = {"sglang": "SGLang", "vllm": "vLLM", "llama.cpp": "llama.cpp", "llama-cpp-python": "llama-cpp-python"}
    for e, variants in lv.engines.items():
        if eng is not None and eng.value != e:
            continue
        for var in variants:
            if ver is not None and eng is not None and not var.matches(str(ver.value)):
                continue
            rng = "" if var.versions in (">=0", "") else f" {var.versions.replace(',', ' and ')}"
            label = f"{names.get(e, e)}{rng}" + (f" (server reports {ver.value})" if ver is not None and eng is not None else "")
            text = var.set.format_map(params)
            if var.upgrade_to:  # the upgrade is the first step: said first, not after the flag
                text = f"upgrade to {var.upgrade_to} first, then {text}"
            out.append(f"{label}: {text}" + (f" — {var.note}" if var.note else ""))
    return out


def gather(audit: AuditReport | None = None, roofline: dict[str, Any] | None = None, bench: BenchResult | None = None,
           server: ServerConfig | None = None, log_configs: list[ServerConfig] | None = None,
           engine_logs: list[tuple[str, EngineLogFacts]] | None = None,
           process: ProcessEvidence | None = None, process_cpu: dict[str, Any] | None = None) -> dict[str, Fact]:
    """All facts from the given inputs. Precedence for a fact several inputs give: the serving
    process (``process``, a :class:`~infergap.parsers.process.ProcessEvidence`, with
    ``process_cpu``, its CPU use during the sweep), the live server, then engine logs, then the
    audit, then the roofline (which only assumes a TP). A GPU the server cannot see comes first
    in the returned order (from its log, its process or the sweep), then the bench's error facts; the behaviour facts
    (:mod:`infergap.plan.behaviour`) follow the bench's."""
    facts: dict[str, Fact] = {}
    gpu_absent_from_logs(facts, engine_logs or [])  # first: a server without its GPU explains everything after
    if bench is not None:  # then: a plan built on failed requests must say so before anything else
        from_bench_errors(facts, bench)
    if process is not None:
        from_process(facts, process, process_cpu)
    if server is not None and server.reachable is not False:
        from_server(facts, server)
    for cfg in log_configs or []:
        from_server(facts, cfg)
    from_engine_logs(facts, engine_logs or [])
    if audit is not None:
        from_audit(facts, audit)
    if roofline is not None:
        from_roofline(facts, roofline)
    if bench is not None:
        from_bench(facts, bench, roofline)
    if process is not None and roofline is not None:
        from_process(facts, process, process_cpu)  # again: flags judged against the model's layers
    from_behaviour(facts, bench, roofline)
    derive(facts)
    if "server.gpu_visible" in facts:  # from the process or the sweep: still the first fact
        facts = {"server.gpu_visible": facts["server.gpu_visible"], **facts}
    return facts


def _tune_change(lv: Lever, facts: dict[str, Fact], params: dict[str, Any]) -> dict[str, Any] | None:
    """The command-line change that tries ``lv`` on the server's engine and version (the first
    variant with ``args`` or ``drop`` whose range holds the version), placeholders filled; None
    when the engine is unknown, the lever changes no flag, or a value it needs is unknown (a
    placeholder left as letters, such as ``N``)."""
    eng, ver = facts.get("engine.name"), facts.get("engine.version")
    if eng is None:
        return None
    for var in lv.engines.get(str(eng.value), []):
        if not (var.args or var.drop) or (ver is not None and not var.matches(str(ver.value))):
            continue
        words = [w.format_map(params) for w in var.args]
        if any(w != a and not w.lstrip("-").replace(".", "").isdigit() for w, a in zip(words, var.args)):
            return None  # a placeholder the facts could not fill
        return {"set": words, "drop": list(var.drop), "target": lv.target}
    return None


def _tried(lever_id: str, title: str, e: dict[str, Any]) -> Tried:
    return Tried(id=lever_id, title=title, setting=str(e.get("setting") or ""), verdict=e["verdict"], measurement=_measurement(e),
                 workload=str(e.get("workload") or ""), tune_run=e.get("run_id"), created_at=str(e.get("created_at") or "")[:19])


def apply_experiments(plan: Plan, experiments: list[dict[str, Any]] | None, titles: dict[str, str] | None = None) -> None:
    """Read what ``infergap tune`` measured (ledger rows of the same host, engine, version and
    model, newest first; :meth:`infergap.ledger.Ledger.experiments`): the newest verdict of each
    lever counts. A selected lever or host fix (``fix:CHECK``) that did not help (hurts, no effect
    within noise, refused) leaves its list for :attr:`Plan.tried` with its measurement; a selected
    one that helped keeps its place and says its measured gain. A lever measured but not selected
    (a ``--try`` change, a lever whose signal this plan lacks) is listed all the same: under
    :attr:`Plan.tried`, or under :attr:`Plan.helped` when it helped. ``titles``: lever id → title."""
    newest: dict[str, dict[str, Any]] = {}
    for e in experiments or []:
        if e.get("verdict") in ("helps", "hurts", "no effect within noise", "refused"):
            newest.setdefault(str(e.get("lever")), e)
    keep = []
    for x in plan.levers:
        e = newest.pop(x.id, None)
        if e is None:
            keep.append(x)
        elif e["verdict"] == "helps":
            x.measured = f"tried by infergap tune (run {e.get('run_id')}): helps — {_measurement(e)}"
            keep.append(x)
        else:
            plan.tried.append(_tried(x.id, x.title, e))
    plan.levers = keep
    fixes = []
    for h in plan.host_fixes:
        e = newest.pop(f"fix:{h.id}", None)
        if e is not None and e["verdict"] != "helps":
            plan.tried.append(_tried(f"fix:{h.id}", h.title, e))
            continue
        if e is not None:
            h.note = ((h.note + "; ") if h.note else "") + f"tried by infergap tune (run {e.get('run_id')}): helps — {_measurement(e)}"
        fixes.append(h)
    plan.host_fixes = fixes
    for lid, e in newest.items():
        title = (titles or {}).get(lid) or (f"host fix {lid[4:]}" if lid.startswith("fix:") else f"change {e.get('setting')}")
        (plan.helped if e["verdict"] == "helps" else plan.tried).append(_tried(lid, title, e))


def _measurement(e: dict[str, Any]) -> str:
    """One experiment's numbers in words: metric, level, both medians, change and noise."""
    j = (e.get("payload") or {}).get("judgement") or {}
    a, b = (j.get("baseline") or {}).get("median"), (j.get("variant") or {}).get("median")
    if e.get("verdict") == "refused":
        return f"the server did not start with {e.get('setting')}: {(e.get('payload') or {}).get('refused') or 'refused'}"
    parts = [f"{j.get('metric', e.get('metric'))}" + (f" at {j['level']}" if j.get("level") else "")]
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        parts.append(f"{a:.4g} → {b:.4g}")
    if isinstance(j.get("change_pct"), (int, float)):
        noise = j.get("noise_pct")
        parts.append(f"{j['change_pct']:+.1f} %" + (f" (noise ±{noise:.1f} %)" if isinstance(noise, (int, float)) else ""))
        if isinstance(noise, (int, float)) and noise > abs(j["change_pct"]) and e.get("verdict") != "helps":
            parts.append("the noise was larger than the change: tune again on a quieter machine to decide")
    return ", ".join(parts) + f", workload {e.get('workload')}"


def build_plan(audit: AuditReport | dict[str, Any] | None = None, roofline: RooflineResult | dict[str, Any] | None = None,
               bench: BenchResult | None = None, server: ServerConfig | None = None,
               engine_logs: list[tuple[str, EngineLogFacts]] | None = None, catalog: list[Lever] | None = None,
               stages: list[Stage] | None = None, facts: dict[str, Fact] | None = None, elsewhere: str | None = None,
               process: ProcessEvidence | None = None, process_cpu: dict[str, Any] | None = None,
               experiments: list[dict[str, Any]] | None = None) -> Plan:
    """Synthesize the plan from any subset of the inputs.

    ``audit``: an :class:`~infergap.synthesis.AuditReport` or its JSON dict (``infergap.audit/1``,
    validated into the report here, once: a bad one raises :class:`~infergap.errors.UserError`);
    ``roofline``: a :class:`~infergap.roofline.RooflineResult` or its JSON dict
    (``infergap.roofline/1``); ``bench``: a :class:`~infergap.bench.BenchResult`; ``server``: a
    :class:`~infergap.server.ServerConfig` (live); ``engine_logs``: (label, ``EngineLogFacts``)
    pairs of SGLang/vLLM logs, whose startup arguments also fill the server facts when there is no
    live server; ``catalog``: levers (default: the shipped catalog); ``facts``: use these facts
    instead of gathering them (for tests that remove one); ``elsewhere``: why the audit's evidence
    describes another machine than this one (a paste or snapshot of another host), so that the
    verify commands do not name a server on this machine as the one to re-measure
    (:func:`verify_url`); ``process``: the serving process read from this machine
    (:class:`~infergap.parsers.process.ProcessEvidence`) and ``process_cpu`` its CPU use during
    the sweep (:func:`~infergap.snapshot.process.cpu_since`); ``experiments``: what ``infergap
    tune`` measured on the same host, engine version and model (:func:`apply_experiments`).
    Never raises for missing inputs: what they would have decided becomes an unknown.
    """
    a = audit if audit is None or isinstance(audit, AuditReport) else validate(AuditReport, audit, "audit")
    r = roofline.to_json_dict() if hasattr(roofline, "to_json_dict") else roofline
    log_cfgs = []
    if engine_logs:
        from infergap.server import server_config_from_log

        log_cfgs = [server_config_from_log(f, label) for label, f in engine_logs]
    if facts is None:
        facts = gather(audit=a, roofline=r, bench=bench, server=server, log_configs=log_cfgs, engine_logs=engine_logs,
                       process=process, process_cpu=process_cpu)
    catalog = catalog if catalog is not None else load_catalog()
    log_note, log_elsewhere = log_hosts(engine_logs, server.url if server is not None and getattr(server, "url", None)
                                        else (bench.environment.url if bench is not None else None))
    url, url_note = verify_url(server, bench, elsewhere or log_elsewhere)
    params = _params(facts, url)
    plan = Plan(created=datetime.now(timezone.utc).isoformat(timespec="seconds"), facts=facts, stages=list(stages or []),
                url_note=url_note, log_note=log_note)
    if not stages:
        plan.stages = [Stage(name=n, status="given" if x is not None else "missing")
                       for n, x in (("audit", a), ("roofline", r), ("bench", bench), ("server", server or (log_cfgs or None)))]
        if server is None and log_cfgs:
            plan.stages[-1] = Stage(name="server", status="from log", detail=", ".join(lab for lab, _ in engine_logs or []))
    plan.gap = build_gap(r, bench)
    present = facts.get("finding.gpu.present")
    if r and plan.gap.summary and present is not None and present.value == "not_applicable":
        hw = r.get("hardware") or {}
        plan.gap.summary += (f" — but the audit found no NVIDIA GPU on the audited host: the bound is for "
                             f"{hw.get('count', '?')} × {hw.get('label') or hw.get('gpu') or 'the GPU named with --gpu'}, "
                             "so if the server runs there, this ratio is not its efficiency")
    eff = facts.get("regime.batch1_eff_measured_bw")
    bw = facts.get("gpu.measured_bw_GBps")
    if eff is not None and bw is not None and plan.gap.summary:
        plan.gap.summary += f"; {eff.value:.1%} of the bound at the {bw.value / 1000:.2f} TB/s this host's audit measured"
    qk, wt = facts.get("regime.quant_kernel_bound"), facts.get("model.weight_type")
    if qk is not None and qk.value is True and wt is not None and plan.gap.summary:
        plan.gap.summary += (f"; kernel-bound for {str(wt.value).upper()}: its decode kernels, not the memory bandwidth, "
                             "the host or the flags, set the batch-1 pace (see will not help)")
    plan.host_fixes = build_host_fixes(a)
    unknown = _select(plan, catalog, facts, params)
    apply_experiments(plan, experiments, {lv.id: lv.title for lv in catalog})
    plan.levers.sort(key=lambda x: (_SEV_ORDER.get(x.priority or "", 9), not _follows_knee(x), TIER_ORDER[x.tier],
                                    -(x.score or 0.0), x.id))
    given = {n for n, x in (("audit", a), ("roofline", r), ("bench", bench), ("server", server), ("logs", engine_logs),
                            ("process", process)) if x}
    if server is not None and getattr(server, "reachable", None) is False:
        given.add("server-unreachable")
    titles = {lv.id: lv.title for lv in catalog}
    plan.unknowns = [Unknown(fact=k, question=fact_words(k), decides=v, decides_titles=[titles.get(i, i) for i in v],
                             command=how_to_find(k, given)) for k, v in sorted(unknown.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
    plan.top_actions = _top(plan)
    if not any(URL_PLACEHOLDER in (x.verify or "") for x in plan.levers + plan.wont_help):
        plan.url_note = None  # no command names a server: nothing to say about which one
    return plan


def _select(plan: Plan, catalog: list[Lever], facts: dict[str, Fact], params: dict[str, Any]) -> dict[str, list[str]]:
    """Evaluate every lever of ``catalog`` over ``facts``: the selected ones go into ``plan.levers``
    or ``plan.wont_help``; returns fact → the levers its absence left undecided."""
    unknown: dict[str, list[str]] = {}
    eng = facts.get("engine.name")
    for lv in catalog:
        if eng is not None and lv.engines and eng.value not in lv.engines:
            continue  # another engine's lever (its flags, and the facts it needs, mean nothing here)
        if any(r not in facts for r in lv.requires):
            continue  # weighed only with a fact these inputs do not give (levers on the behaviour stand for it)
        o = evaluate(lv.when, facts)
        if o.value is None:
            if lv.tier != "wont_help":
                for m in dict.fromkeys(o.missing):
                    unknown.setdefault(m, []).append(lv.id)
            continue
        if not o.value:
            continue
        used = [t for t in o.used if t.held]
        item = PlanItem(id=lv.id, tier=lv.tier, title=lv.title, actions=_actions(lv, facts, params),
                        selected_by=[t.text() for t in used], facts=list(dict.fromkeys(t.fact for t in used)),
                        effect=lv.effect, gain=lv.gain, metric=lv.metric, effort_h=lv.effort_h, score=lv.score(), risk=lv.risk,
                        verify=lv.verify.format_map(params) if lv.verify else None, undo=lv.undo, source=lv.source, why=lv.why,
                        priority=lv.priority, tune=_tune_change(lv, facts, params))
        (plan.wont_help if lv.tier == "wont_help" else plan.levers).append(item)
    return unknown


def _follows_knee(x: PlanItem) -> bool:
    """True when the sweep's knee cause is among the facts that selected lever ``x``."""
    return KNEE_FACT in x.facts


def _top(plan: Plan, n: int = 5) -> list[str]:
    def fix(h: HostFix) -> str:
        cmd = h.commands[0] if h.commands else (h.note or "see the audit")
        return f"[host {h.severity} {h.fix_kind}] {h.title}: {cmd}"

    def lever(x: PlanItem) -> str:
        pri = f"{x.priority} " if x.priority else ""
        first = x.actions[0] if x.actions else x.verify
        after = " after an upgrade" if x.actions and ": upgrade to " in first else ""
        return f"[{pri}{x.tier.replace('_', ' ')}{after}] {x.title}: {first}"

    seq = [fix(h) for h in plan.host_fixes if h.severity == "P0"]
    seq += [lever(x) for x in plan.levers if x.priority == "P0"]
    seq += [lever(x) for x in plan.levers if x.priority == "P1"]
    seq += [lever(x) for x in plan.levers if not x.priority and _follows_knee(x)]
    seq += [lever(x) for x in plan.tier("flag_flip") if not x.priority and not _follows_knee(x)]
    seq += [fix(h) for h in plan.host_fixes if h.severity == "P1" and h.fix_kind == "runtime"]
    seq += [lever(x) for x in plan.tier("small_change") + plan.tier("engineering") if not x.priority and not _follows_knee(x)]
    return seq[:n]
