"""The serving engine's own metrics during the sweep, and why the throughput curve bends.

:class:`EngineScraper` reads the server's Prometheus ``/metrics`` once a second in a background
thread while the sweep runs, parses it with ``prometheus_client``'s text-format parser and maps
the engine's series (vLLM, SGLang, llama.cpp; names and sources in
``data/engine_metrics.yaml``) to one vocabulary: requests running and waiting, KV-cache usage,
preemptions, prefix-cache hits. :meth:`EngineScraper.summary` aggregates the samples inside a
point's measured windows, the same windows as the NVML telemetry, so the two stand side by side.

:func:`explain` then gives each point one line from that evidence and marks the *knee*: the first
point where more load stopped turning into throughput. The causes, in the order they are tested
(the first that the evidence supports wins):

1. **KV cache full** — KV usage ≥ 90 % or preemptions during the point (vLLM/SGLang), or a
   sequence reached ≥ 90 % of a slot's context while the point's requests were cut short or
   rejected for context (llama.cpp: ``n_tokens_max`` is the longest sequence since the server
   started, so it needs this point's own evidence beside it), or requests rejected for context
   (the server's own evidence, so it is tested before the client's health);
2. **running limit** — requests waited in the engine's queue while the number running stayed
   below the load (the engine's slot / max-running limit); a strained client is noted in the line;
3. **host-bound** — requests queued while the GPU was less than 60 % busy;
4. **GPU-bound** — the GPU was at least 90 % busy;
5. **client-bound** — the load generator's own evidence (its CPU, its send slip) says it was the
   limit, and no server-side cause above was seen: a client cause never outranks the server's.

Thresholds: 90 % KV usage is where vLLM's documentation says requests "may get preempted"; the
knee gain and the host-bound GPU utilisation are shared with the plan and sourced in
:mod:`infergap.bench.regimes`; a GPU at least 90 % busy is compute-saturated (the same runs).
"""

from __future__ import annotations

import json
import logging
import threading
from functools import lru_cache
from time import perf_counter

from prometheus_client.parser import text_string_to_metric_families

from infergap import datafile
from infergap.bench.regimes import HOST_BOUND_GPU_PCT, KNEE_GAIN
from infergap.bench.results import EngineSummary as EngineSummary  # the schema, kept importable from here
from infergap.bench.results import Explanation as Explanation
from infergap.httpsafe import get

log = logging.getLogger(__name__)

SCRAPE_INTERVAL_S = 1.0
SCRAPE_TIMEOUT_S = 2.0
MAX_BODY = 8 * 2**20

KV_FULL = 0.90
GPU_BUSY_PCT = 90.0


@lru_cache(maxsize=1)
def catalog() -> dict:
    """The engine → series table of ``data/engine_metrics.yaml``."""
    return datafile.packaged("engine_metrics.yaml")["engines"]


def parse(text: str) -> tuple[str | None, dict[str, float]]:
    """Parse a Prometheus text exposition into ``(engine, {key: value})`` with the vocabulary of
    the module docstring. Counts and counters are summed over label sets; ratios (``kv_usage``,
    ``cache_hit_rate``) take the largest. ``engine`` is ``None`` when no known series is present.
    Raises ValueError when the text is not Prometheus format."""
    values: dict[str, list[float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            values.setdefault(s.name, []).append(float(s.value))
    for engine, spec in catalog().items():
        if not any(name.startswith(spec["detect"]) for name in values):
            continue
        out: dict[str, float] = {}
        for key, names in spec["series"].items():
            for name in names:
                if name in values:
                    v = values[name]
                    out[key] = max(v) if key in ("kv_usage", "cache_hit_rate") else sum(v)
                    break
        return engine, out
    return None, {}


class EngineScraper:
    """Scrapes ``{base}/metrics`` every ``interval_s`` in a daemon thread between :meth:`start`
    and :meth:`stop` (each request bounded by ``SCRAPE_TIMEOUT_S``). A server without the
    endpoint, or with one that is not Prometheus text, leaves ``available`` False with the
    reason; a scrape that fails mid-run is skipped and counted in ``errors``."""

    def __init__(self, base: str, interval_s: float = SCRAPE_INTERVAL_S):
        self.base = base.rstrip("/")
        self.interval_s = interval_s
        self.available = False
        self.reason: str | None = None
        self.engine: str | None = None
        self.errors = 0
        self.props: dict = {}
        self._samples: list[tuple[float, dict[str, float]]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _get(self, path: str) -> tuple[int, str]:
        """(status, body) of GET base+path within SCRAPE_TIMEOUT_S in all (not per read: a server
        dripping its header must not hold the scraper), no redirect, at most MAX_BODY bytes."""
        status, body = get(self.base + path, timeout_s=SCRAPE_TIMEOUT_S, max_bytes=MAX_BODY, headers={"Accept": "text/plain"})
        return status, body.decode("utf-8", "replace") if status < 400 else ""

    def scrape(self) -> bool:
        """Take one sample now; False (and ``errors`` + 1) when it failed."""
        t = perf_counter()
        try:
            status, body = self._get("/metrics")
            if status != 200:
                raise ValueError(f"HTTP {status}")
            engine, vals = parse(body)
        except (OSError, ValueError) as e:
            self.errors += 1
            self.reason = self.reason or f"{self.base}/metrics: {type(e).__name__}: {e}"[:200]
            return False
        if engine is None:
            self.reason = f"{self.base}/metrics has none of the vLLM, SGLang or llama.cpp series"
            return False
        self.engine = engine
        with self._lock:
            self._samples.append((t, vals))
        return True

    def start(self) -> "EngineScraper":
        if self.scrape():
            self.available = True
            self.reason = None
            if self.engine == "llamacpp":
                self._read_props()
            self._thread = threading.Thread(target=self._run, name="infergap-metrics", daemon=True)
            self._thread.start()
        elif self.reason and ("HTTP 404" in self.reason or "HTTP 501" in self.reason):
            self.reason = (f"{self.base}/metrics not served (llama-server needs --metrics, SGLang "
                           f"--enable-metrics; vLLM serves it by default)")
        return self

    def _read_props(self) -> None:
        try:
            status, body = self._get("/props")
            d = json.loads(body) if status == 200 else {}
        except (OSError, ValueError, RecursionError):
            return
        if isinstance(d, dict):
            gen = d.get("default_generation_settings") or {}
            self.props = {"slots": d.get("total_slots"), "slot_ctx": gen.get("n_ctx") if isinstance(gen, dict) else None}

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.scrape()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=SCRAPE_TIMEOUT_S + 1)

    def summary(self, windows: list[tuple[float, float]]) -> EngineSummary:
        """Aggregate the samples inside ``windows`` ((start, end) perf_counter s). Gauges: mean
        and largest sample in the windows (the sample nearest a window when none fell inside);
        counters: growth from the last sample before each window to the first after it; the
        running maximum ``tokens_max``: its value in the first sample after each window."""
        if not self.available:
            return EngineSummary(available=False, reason=self.reason or "no /metrics")
        with self._lock:
            samples = list(self._samples)
        inside: list[dict[str, float]] = []
        deltas: dict[str, float] = {}
        longest: list[float] = []  # llama.cpp's running maximum, read just after each window
        for a, b in windows:
            win = [v for t, v in samples if a <= t <= b]
            if not win and samples:
                mid = (a + b) / 2
                win = [min(samples, key=lambda s: abs(s[0] - mid))[1]]
            inside += win
            before = [v for t, v in samples if t <= a] or [samples[0][1]] if samples else []
            after = [v for t, v in samples if t >= b] or [samples[-1][1]] if samples else []
            if after and "tokens_max" in after[0]:
                longest.append(after[0]["tokens_max"])
            if before and after:
                for key in ("preemptions", "prefix_queries", "prefix_hits", "prompt_tokens", "cached_tokens"):
                    if key in after[0] and key in before[-1]:
                        deltas[key] = deltas.get(key, 0.0) + max(0.0, after[0][key] - before[-1][key])

        def col(key):
            vals = [v[key] for v in inside if key in v]
            return (sum(vals) / len(vals), max(vals)) if vals else (None, None)

        s = EngineSummary(available=True, engine=self.engine, samples=len(inside),
                          slots=self.props.get("slots"), slot_ctx=self.props.get("slot_ctx"))
        s.running_mean, s.running_max = col("running")
        s.waiting_mean, s.waiting_max = col("waiting")
        s.kv_usage_mean, s.kv_usage_max = col("kv_usage")
        s.tokens_max = max([v for v in (col("tokens_max")[1], *longest) if v is not None], default=None)
        s.preemptions = deltas.get("preemptions")
        if deltas.get("prefix_queries"):
            s.prefix_hit_rate = deltas.get("prefix_hits", 0.0) / deltas["prefix_queries"]
        elif "cached_tokens" in deltas and "prompt_tokens" in deltas:
            # whether the engine's prompt-token counter includes the cached tokens is stated per
            # engine in data/engine_metrics.yaml (llama.cpp's does not)
            cached = deltas["cached_tokens"]
            whole = deltas["prompt_tokens"]
            if not catalog()[self.engine].get("prompt_tokens_include_cached", True):
                whole += cached
            if whole > 0:
                s.prompt_tokens, s.cached_tokens = whole, cached
                s.prefix_hit_rate = cached / whole
        else:
            s.prefix_hit_rate = col("cache_hit_rate")[0]
        return s


# ----------------------------------------------------------------------------- why the curve bends


def _load(p) -> float | None:
    return p.concurrency if p.mode == "concurrency" else p.request_rate


def _tps(p) -> float | None:
    s = p.summary.get("output_throughput_tps")
    return s.median if s is not None else None


def _gpu(p) -> tuple[float | None, float | None]:
    t = p.telemetry
    if t is None or not t.available or not t.gpus:
        return None, None
    utils = [g.util_pct_mean for g in t.gpus if g.util_pct_mean is not None]
    power = [g.power_W_mean for g in t.gpus if g.power_W_mean is not None]
    return (sum(utils) / len(utils) if utils else None), (sum(power) if power else None)


def _context_errors(p) -> int:
    n = 0
    for t in p.trials:
        if any("context" in e.lower() for e in t.error_examples):
            n += sum(v for k, v in t.errors.items() if k.startswith("http_4"))
    return n


def cause_of(p) -> Explanation:
    """The evidence-backed reason for point ``p``'s behaviour (not yet whether it is the knee)."""
    lab = p.label
    e = p.engine if p.engine is not None and p.engine.available else None
    util, power = _gpu(p)
    ctx_err = _context_errors(p)
    if e is not None:
        if (e.kv_usage_max is not None and e.kv_usage_max >= KV_FULL) or (e.preemptions or 0) > 0:
            kv = f"KV cache {e.kv_usage_max * 100:.0f} %" if e.kv_usage_max is not None else "KV cache full"
            return Explanation(cause="kv", line=f"{kv} and {e.preemptions or 0:.0f} preemptions at {lab}: "
                               f"requests are evicted and recomputed; the KV cache, not compute, is the limit")
        cut = sum(t.truncated for t in p.trials)
        if e.tokens_max and e.slot_ctx and e.tokens_max >= KV_FULL * e.slot_ctx and (cut or ctx_err):
            done = sum(t.completed for t in p.trials)
            extra = (f"; {cut} of {done} completed requests cut short" if cut else "") + \
                    (f"; {ctx_err} requests rejected for context" if ctx_err else "")
            return Explanation(cause="kv", line=f"KV cache full at {lab}: a sequence reached {e.tokens_max:.0f} of the "
                               f"{e.slot_ctx} tokens one slot holds (n_ctx per slot){extra}")
    if ctx_err:
        return Explanation(cause="kv", line=f"KV cache full at {lab}: {ctx_err} requests rejected for exceeding the context")
    why = "; ".join(next((t.client.reasons for t in p.trials if t.client.client_bound), [])) or "client health"
    load = _load(p)
    if e is not None and e.waiting_max and e.waiting_max > 0 and e.running_max is not None \
            and (p.mode == "rate" or load is None or e.running_max < load):
        limit = f"all {e.slots} slots" if e.slots and e.running_max >= e.slots else "the engine's limit"
        line = f"{e.running_max:.0f} running ({limit}), {e.waiting_max:.0f} waiting"
        if util is not None and util < HOST_BOUND_GPU_PCT:
            line += f"; GPU only {util:.0f} % busy{f' at {power:.0f} W' if power else ''}: the engine is host-bound too"
        if p.client_bound:
            line += f" (the client was strained too — {why} — but the server's queue is the cause)"
        return Explanation(cause="running_limit", line=line)
    if util is not None and util < HOST_BOUND_GPU_PCT and e is not None and (e.waiting_max or 0) > 0:
        return Explanation(cause="host", line=f"GPU at {util:.0f} % utilisation{f' and {power:.0f} W' if power else ''} "
                           f"while requests queued at {lab}: the engine is host-bound")
    if util is not None and util >= GPU_BUSY_PCT:
        return Explanation(cause="gpu", line=f"GPU {util:.0f} % busy{f' at {power:.0f} W' if power else ''} at {lab}: the GPU is the limit")
    if p.client_bound:
        return Explanation(cause="client", line=f"client-bound at {lab}: the client, not the server, is the limit ({why})")
    if e is not None:
        return Explanation(cause="scaling", line=f"{e.running_mean or 0:.1f} running on average, "
                           f"{e.waiting_max or 0:.0f} waiting at most")
    return Explanation(cause="unknown", line="no engine metrics"
                       + (f" ({p.engine.reason})" if p.engine is not None and p.engine.reason else ""))


def explain(points: list) -> list[Explanation | None]:
    """One :class:`Explanation` per point that ran (``None`` for one without trials), in the order
    given. A point is the knee when, against the previous point of higher throughput's load, less
    than :data:`KNEE_GAIN` of the extra load became throughput; only the first such point is the
    knee. A knee whose cause is ``scaling``/``unknown`` says the curve flattened without evidence."""
    order = sorted([p for p in points if _tps(p) is not None and _load(p)], key=_load)
    out: dict[int, Explanation] = {id(p): cause_of(p) for p in points if p.trials}
    knee_found = False
    for prev, cur in zip(order, order[1:]):
        lg = _load(cur) / _load(prev) - 1
        tg = _tps(cur) / _tps(prev) - 1 if _tps(prev) else 0.0
        if lg > 0 and tg < KNEE_GAIN * lg and not knee_found:
            ex = out[id(cur)]
            ex.knee = True
            knee_found = True
            why = " and no metric says why" if ex.cause in ("scaling", "unknown") else ""
            ex.line = (f"throughput flattened at {cur.label} ({_tps(prev):.1f} → {_tps(cur):.1f} tok/s for "
                       f"×{lg + 1:.1f} load){why}: " + ex.line)
    return [out.get(id(p)) for p in points]
