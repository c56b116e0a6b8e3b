"""SLO capacity search: the highest load whose latency percentiles meet every SLO.

``--slo ttft_p99=2s,tpot_p99=80ms[,e2e_p99=…]`` states bounds on percentiles of per-request
latencies; ``--search rate|concurrency`` looks for the highest request rate (open loop) or
concurrency (closed loop) that meets them all:

1. **Bracketing**: start at the first ``--request-rate``/``--concurrency`` value (or 1) and double
   while probes pass (halve while they fail) until one load passes and the next fails.
2. **Bisection** between the highest passing and lowest failing load (geometric midpoint for
   rates, integer midpoint for concurrency) until they are within :data:`REL_TOL` of each other
   or :data:`MAX_PROBES` probes were run.

Each probe is one sweep point run ``--trials`` times. A probe **passes only if every trial
passes**: with the spread over trials taken into account, a load that meets the SLO in its median
trial but not in its worst does not count. A trial passes when each bounded percentile is at or
under its bound and at most :data:`MAX_ERROR_RATE` of its requests failed (a server that fails
requests is not meeting an SLO however fast the rest are).

A rate probe must also be **long enough to show a queue**: a server slower than the offered rate
falls behind by a queue that grows with time, so a TTFT (or E2E) bound of B seconds can only be
broken after at least B seconds of arrivals, and nothing settles before the arrivals span a few
request times. A probe whose arrivals span (requests / rate) is shorter than the largest TTFT/E2E
bound, or than :data:`MIN_SPAN_REQUESTS` median E2E times, proves nothing about that rate: it
fails as *too short* and, when it is what stops the search, the binding constraint is the probe
length, not the server (raise ``--num-prompts`` or ``--duration``). Without this, 30 requests at
30,000 req/s arrive in 1 ms, every one is answered within the bound, and any rate "passes".

The capacity reported is the highest passing load; its **confidence** says how tight the
bracket is and how close the worst trial came to the binding bound; the **binding SLO** is the
bound the lowest failing load broke by the widest margin.
"""

from __future__ import annotations

import math
import re
from typing import Callable, Literal

from pydantic import BaseModel, Field

from infergap.errors import UserError

REL_TOL = 0.10
"""Bisection stops when the failing load is within 10 % of the passing one."""
MAX_PROBES = 16
MAX_ERROR_RATE = 0.01
"""A trial with more than 1 % failed requests fails the SLO (the same budget as the bench's)."""
MAX_DOUBLINGS = 16
MIN_SPAN_REQUESTS = 2.0
"""A rate probe's arrivals must span at least this many median E2E times (steady state needs the
first requests to finish while later ones still arrive: Little's law holds only past that)."""
PROBE_LENGTH = "probe length"

_KEY = re.compile(r"^(ttft|tpot|itl|e2e)_p(50|90|95|99)$")
_DUR = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(us|ms|s)?\s*$")


def parse_duration_ms(text: str, what: str) -> float:
    """``2s`` → 2000.0, ``50ms`` → 50.0, ``250us`` → 0.25, bare numbers are ms. Raises UserError
    naming ``what`` for anything else."""
    m = _DUR.match(text)
    if not m:
        raise UserError(f"{what} {text!r}: expected a duration like 2s, 50ms or 250us")
    v = float(m.group(1))
    return v * {"us": 1e-3, "ms": 1.0, "s": 1e3, None: 1.0}[m.group(2)]


class SLOTarget(BaseModel):
    """One bound: percentile ``pct`` of per-request ``metric`` (ms) at or under ``bound_ms``."""

    metric: Literal["ttft", "tpot", "itl", "e2e"]
    pct: int
    bound_ms: float

    @property
    def name(self) -> str:
        return f"{self.metric}_p{self.pct}"


def parse_targets(text: str) -> list[SLOTarget]:
    """``ttft_p99=2s,tpot_p99=80ms`` → targets. Plain ``ttft=2s`` keys are not targets (they are
    per-request goodput bounds, :func:`infergap.cli.bench.parse_slo`). Raises UserError naming the
    bad part."""
    out: list[SLOTarget] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, _, v = part.partition("=")
        key = k.strip().lower()
        m = _KEY.match(key)
        if m is None:
            if re.match(r"^(ttft|tpot|itl|e2e)_p", key):
                raise UserError(f"--slo {text!r}: {key!r} is not a percentile bound (p50, p90, p95 or p99)")
            continue
        if any(t.name == key for t in out):
            raise UserError(f"--slo {text!r}: {key} is given twice")
        out.append(SLOTarget(metric=m.group(1), pct=int(m.group(2)), bound_ms=parse_duration_ms(v, f"--slo {k.strip()}")))
    return out


class Probe(BaseModel):
    """One probe of the search: its load, whether every trial passed, and per target the worst
    trial's value (ms) with the spread of that value over the trials (%)."""

    load: float
    passed: bool
    worst_ms: dict[str, float | None] = Field(default_factory=dict)
    spread_pct: dict[str, float | None] = Field(default_factory=dict)
    error_rate: float = 0.0
    client_bound: bool = False
    #: The arrivals spanned less time than a queue needs to break a bound (see the module doc).
    too_short: bool = False
    reason: str = ""


class Capacity(BaseModel):
    """The search's answer. ``capacity`` is the highest load that passed (``None`` when none
    did); ``upper`` the lowest that failed (``None`` when the search stopped before any failed);
    ``binding`` the SLO that bound; ``confidence`` ``high``/``medium``/``low`` with ``detail``."""

    mode: Literal["rate", "concurrency"]
    targets: list[SLOTarget]
    capacity: float | None = None
    upper: float | None = None
    binding: str | None = None
    confidence: str = "low"
    detail: str = ""
    probes: list[Probe] = Field(default_factory=list)

    def line(self) -> str:
        """One line for the report's head."""
        unit = " req/s" if self.mode == "rate" else " concurrent requests"
        bounds = ", ".join(f"{t.name} ≤ {t.bound_ms:g} ms" for t in self.targets)
        if self.capacity is None:
            return f"SLO capacity: no load tried met {bounds} ({self.detail})"
        if self.binding == PROBE_LENGTH:  # the load above was not failed: it could not be judged
            return (f"SLO capacity: at least {self.capacity:g}{unit} meets {bounds}; at {self.upper:g} the probes "
                    f"were too short to judge, so the search is bound by the {PROBE_LENGTH}, not by an SLO; "
                    f"confidence {self.confidence} ({self.detail})")
        up = f", fails at {self.upper:g}" if self.upper is not None else ", no failing load found"
        bind = f"; binding SLO: {self.binding}" if self.binding else ""
        return (f"SLO capacity: {self.capacity:g}{unit} meets {bounds}{up}{bind}; "
                f"confidence {self.confidence} ({self.detail})")


def _pct(stats, pct: int) -> float | None:
    return getattr(stats, f"p{pct}", None)


def judge(point, targets: list[SLOTarget]) -> Probe:
    """Judge one measured point (a :class:`~infergap.bench.results.PointResult`) against the
    targets: passes only when every trial meets every bound and the error budget."""
    load = point.request_rate if point.mode == "rate" else point.concurrency
    pr = Probe(load=float(load), passed=bool(point.trials), client_bound=point.client_bound)
    reasons = []
    if not point.trials:
        reasons.append(point.error or "no trial completed")
    for t in targets:
        vals = [_pct(getattr(tr, f"{t.metric}_ms"), t.pct) for tr in point.trials]
        have = [v for v in vals if v is not None]
        if len(have) < len(vals) or not have:
            pr.passed = False
            pr.worst_ms[t.name] = max(have) if have else None
            reasons.append(f"{t.name} not measured in every trial")
            continue
        worst = max(have)
        med = sorted(have)[len(have) // 2]
        pr.worst_ms[t.name] = worst
        pr.spread_pct[t.name] = (max(have) - min(have)) / med * 100 if med else None
        if worst > t.bound_ms:
            pr.passed = False
            reasons.append(f"{t.name} {worst:.0f} ms > {t.bound_ms:g} ms in the worst of {len(have)} trial(s)")
    short = _too_short(point, targets)
    if short:
        pr.passed, pr.too_short = False, True
        reasons.append(short)
    reqs = sum(tr.requests for tr in point.trials)
    failed = sum(tr.failed for tr in point.trials)
    pr.error_rate = failed / reqs if reqs else 0.0
    if pr.error_rate > MAX_ERROR_RATE:
        pr.passed = False
        reasons.append(f"{failed} of {reqs} requests failed")
    pr.reason = "; ".join(reasons) or "all bounds met in every trial"
    return pr


def _too_short(point, targets: list[SLOTarget]) -> str | None:
    """Why a rate probe is too short to judge (``None`` when long enough, or not a rate probe).

    Arrival span of a trial = requests / offered rate (s); needed = the largest TTFT/E2E bound (s)
    and :data:`MIN_SPAN_REQUESTS` × the trial's median E2E (s), whichever is larger."""
    rate = point.request_rate if point.mode == "rate" else None
    if not rate or not point.trials:
        return None
    queue_bound_s = max((t.bound_ms / 1e3 for t in targets if t.metric in ("ttft", "e2e")), default=0.0)
    for tr in point.trials:
        span = tr.requests / rate
        e2e_med_s = (tr.e2e_ms.p50 or 0.0) / 1e3
        need = max(queue_bound_s, MIN_SPAN_REQUESTS * e2e_med_s)
        if span < need:
            why = (f"the largest TTFT/E2E bound ({queue_bound_s:g} s)" if need == queue_bound_s
                   else f"{MIN_SPAN_REQUESTS:g} median request times ({e2e_med_s:.2g} s each)")
            return (f"too short to judge: {tr.requests} requests at {rate:g}/s arrive within {span:.3g} s, "
                    f"less than {why}; a queue cannot show in that time (raise --num-prompts to "
                    f"≥ {math.ceil(need * rate)} or use --duration; a trace replay needs a trace of that many requests)")
    return None


class Search:
    """Iterates the loads to probe; after each yielded load the caller measures the point and
    appends it to ``points`` (the list passed in), which the next step reads. When iteration
    ends, :attr:`result` holds the :class:`Capacity`.

    ``make_spec(load)`` builds the caller's load spec; ``start`` is the first load; ``integer``
    for concurrency (loads are whole numbers ≥ 1)."""

    def __init__(self, mode: str, targets: list[SLOTarget], points: list, make_spec: Callable,
                 start: float = 1.0, max_load: float | None = None):
        if not targets:
            raise UserError("--search needs --slo with percentile bounds, e.g. --slo ttft_p99=2s,tpot_p99=80ms")
        self.mode = mode
        self.integer = mode == "concurrency"
        self.targets = targets
        self.points = points
        self.make_spec = make_spec
        self.start = max(1.0, start) if self.integer else start
        self.max_load = max_load or (65536 if self.integer else 1e6)
        self.result = Capacity(mode=mode, targets=targets)
        #: Why the caller closed the iteration before it ended (set before ``close()``).
        self.stopped_by = "stopped early"

    def _round(self, x: float) -> float:
        return float(max(1, round(x))) if self.integer else float(f"{x:.3g}")

    def _probe(self, load: float):
        n = len(self.points)
        yield self.make_spec(load)
        if len(self.points) == n:  # the caller stopped (interrupted) without a measurement
            return None
        pr = judge(self.points[-1], self.targets)
        self.result.probes.append(pr)
        return pr

    def _next(self, load: float, lo: float | None, hi: float | None) -> float | None:
        """The next load: double (no failure yet), halve (no pass yet), else bisect; ``None`` when
        the bracket is tight enough or cannot move."""
        if hi is None:
            nxt = self._round(load * 2)
            return nxt if nxt <= self.max_load and nxt != load else None
        if lo is None:
            nxt = self._round(load / 2)
            return nxt if nxt != load and (self.integer or nxt >= 1e-3) else None
        if hi / lo <= 1 + REL_TOL or (self.integer and hi - lo <= 1):
            return None
        mid = self._round(math.sqrt(lo * hi) if not self.integer else (lo + hi) / 2)
        return None if mid in (lo, hi) else mid

    def __iter__(self):
        lo = hi = lo_probe = hi_probe = None
        load: float | None = self._round(self.start)
        steps = 0
        while load is not None and len(self.result.probes) < MAX_PROBES and steps < MAX_PROBES + 2 * MAX_DOUBLINGS:
            steps += 1
            try:
                pr = yield from self._probe(load)
            except GeneratorExit:  # the caller stopped the search: the capacity is what was proven so far
                self._finish(lo, hi, lo_probe, hi_probe, self.stopped_by)
                raise
            if pr is None:
                return self._finish(lo, hi, lo_probe, hi_probe, "interrupted")
            if pr.passed and (lo is None or load > lo):
                lo, lo_probe = load, pr
            elif not pr.passed and (hi is None or load < hi):
                hi, hi_probe = load, pr
            load = self._next(load, lo, hi)
        self._finish(lo, hi, lo_probe, hi_probe, None)

    def _finish(self, lo, hi, lo_probe: Probe | None, hi_probe: Probe | None, stopped: str | None) -> None:
        r = self.result
        r.capacity, r.upper = lo, hi
        if hi_probe is not None:
            ratios = {t.name: (hi_probe.worst_ms.get(t.name) or 0.0) / t.bound_ms for t in self.targets}
            over = {k: v for k, v in ratios.items() if v > 1}
            if over:
                r.binding = max(over, key=over.get)
            elif hi_probe.error_rate > MAX_ERROR_RATE:
                r.binding = f"error budget ({hi_probe.error_rate * 100:.1f} % failed)"
            elif hi_probe.too_short:
                r.binding = PROBE_LENGTH
        if lo is None:
            r.confidence = "low"
            r.detail = stopped or (hi_probe.reason if hi_probe else "no probe ran")
            return
        trials = len(self.points[0].trials) if self.points else 0
        margin = ""
        tight = False
        if lo_probe is not None and r.binding in {t.name for t in self.targets}:
            t = next(t for t in self.targets if t.name == r.binding)
            w = lo_probe.worst_ms.get(t.name)
            if w is not None:
                margin = f"; at {lo:g} the worst trial's {t.name} is {w:.0f} ms of {t.bound_ms:g} ms"
        if hi is not None:
            gap = (hi - lo) / lo
            tight = gap <= REL_TOL + 1e-9 or (self.integer and hi - lo <= 1)
            r.detail = f"bracket {lo:g}–{hi:g} (±{gap * 50:.0f} %), {trials} trial(s) per probe{margin}"
        else:
            r.detail = f"every load up to {lo:g} passed; the search stopped before one failed{margin}"
        if stopped:
            r.detail += f"; {stopped}"
        cb = [p for p in r.probes if p.client_bound and p.load in (lo, hi)]
        if cb:
            r.detail += "; the client was the limit at " + " and ".join(f"{p.load:g}" for p in cb) + \
                ": the capacity may be the client's, not the server's"
        spread = max((v for v in (lo_probe.spread_pct.values() if lo_probe else []) if v is not None), default=0.0)
        if r.binding == PROBE_LENGTH:
            r.detail += (f"; every probe above {lo:g} was too short to show a queue: the server's capacity "
                         "may be higher, this is the most these probes can prove")
        if r.binding == PROBE_LENGTH:
            r.confidence = "low"
        elif hi is not None and tight and trials >= 3 and spread <= 10 and not stopped and not cb:
            r.confidence = "high"
        elif hi is not None and trials >= 2:
            r.confidence = "medium"
        else:
            r.confidence = "low"
