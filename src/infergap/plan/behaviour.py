"""Facts from the shape of what was measured, held against the bounds: the diagnosis that still
stands when the serving process cannot be read (a remote server).

Rules and thresholds (stated so a reader can disagree):

- **Throughput falls as load rises** (``load.tps_falling``): at a concurrency inside the server's
  slots (or anywhere, when the slot count is unknown) output tok/s is below :data:`FALL_SHARE` of
  the best a lower concurrency reached. A batched decode step costs about the same as a batch-1
  step while it is memory-bound, so more requests in the batch never make fewer tokens per
  second; when they do, every step pays a per-request cost that grows with the batch: the KV
  cache read from host memory (llama.cpp ``--no-kv-offload``), KV thrashing, preemption storms.
  Past the slots, queueing can cost a little throughput (the healthy H200 run lost 14 % at twice
  its slots, ``tests/fixtures/real-gpu/h200-llama-server/healthy-quick``), hence the margin.
  A client-bound point is left out: its throughput is the client's, not the server's.
- **Tail against median** (``load.queueing_tail``): p99/p50 of TTFT at least :data:`TAIL_RATIO`
  at a concurrency of at least 4 that the slots hold, with prompts and outputs of equal lengths
  (``len_spread`` 0): every request could start at once, so a long tail is requests waiting for
  the batch in flight to finish — what continuous batching removes (llama.cpp
  ``--no-cont-batching``).
- **Prefill against its bound** (``regime.prefill_eff``): prompt tokens / median TTFT at c=1
  against the roofline's prefill bound at that prompt length, for prompts of at least
  :data:`PREFILL_MIN_TOKENS` tokens (shorter ones are dominated by the first decode step and the
  HTTP round trip). The bound at the bench's length L from the roofline's at P tokens:
  max(t_compute·L/P, t_memory) + t_comm (compute grows with the tokens, the weights are read once).
  Below :data:`PREFILL_SLOW` is ``regime.prefill_slow``: micro-batches too small (llama.cpp
  ``-ub``/``-b``), chunked prefill too small, no flash attention.
- **GPU memory against weights + KV** (``load.kv_on_gpu``): with the weights resident (≥ 95 % of
  their bytes in use), less than the weights plus :data:`KV_PRESENT_SHARE` of the KV cache the
  configuration implies (KV bytes per token × total context) means the KV cache lives elsewhere.
  Judged only when that cache is at least :data:`KV_MIN_B` bytes (smaller ones hide in the
  compute buffers' noise).
- **The GPU not used at all** (``server.gpu_visible`` False): the GPU busy at most
  :data:`GPU_IDLE_PCT` % at every point and less than :data:`GPU_UNUSED_SHARE` of the weights' bytes
  in GPU memory: the server runs without the GPU (hidden by ``CUDA_VISIBLE_DEVICES``, a CPU build),
  not with some layers off it (those leave the rest resident and the GPU partly busy: the H200 run
  at ``-ngl 16`` held 11 GB and was 4-7 % busy; the run with ``CUDA_VISIBLE_DEVICES=`` held 0.6 GB
  and was 0 % busy).
- **Quantized weights that buy little** (``regime.quant_kernel_bound``): weights of a quantized
  type read at less than :data:`~infergap.plan.signals.LATENCY_BOUND_EFF` of the memory bound at
  batch 1: fewer bytes did not buy proportionally more speed, so the decode kernels for that
  type — not memory bandwidth, the host or the flags — set the pace. On the lent H200 llama.cpp
  read F16 at 65.7 % of the bound and Q8_0 at 42.8 % (half the bytes bought ×1.22; llama-bench tg128,
  ``tests/fixtures/real-gpu/h200-llama-process/q8/llama-bench-q8_0.json``: 251.8 tok/s); through the
  HTTP server at c=1 that Q8_0 model ran at 31.2 % of its bound, the F16 one at 58 %.
"""

from __future__ import annotations

from typing import Any

from infergap.plan.conditions import Fact
from infergap.plan.signals import LATENCY_BOUND_EFF, WEIGHTS_ON_GPU, _med, _put, _tps, completed

FALL_SHARE = 0.75
TAIL_RATIO = 4.0
TAIL_MIN_C = 4
PREFILL_MIN_TOKENS = 512
PREFILL_SLOW = 0.15
KV_PRESENT_SHARE = 0.5
KV_MIN_B = 1 << 30
GPU_IDLE_PCT = 1.0
GPU_UNUSED_SHARE = 0.1
#: Weight types that are not quantized (``model.quant`` as the roofline names them).
UNQUANTIZED = ("f32", "f16", "bf16", "fp16", "fp32", "float16", "bfloat16", "float32")


def _points(bench: Any) -> list[Any]:
    return sorted([p for p in bench.points if p.mode == "concurrency" and p.concurrency and _tps(p) is not None
                   and getattr(p, "valid", True) and completed(p)], key=lambda p: p.concurrency)


def tps_falling(facts: dict[str, Fact], pts: list[Any]) -> None:
    """``load.tps_falling`` (and ``load.tps_fall_share``): see the module docstring."""
    n = facts.get("server.n_slots")
    slots = n.value if n is not None and isinstance(n.value, int) and n.value >= 1 else None
    judged = [p for p in pts if (slots is None or p.concurrency <= slots) and not getattr(p, "client_bound", False)]
    if len(judged) < 2:
        return
    curve = " → ".join(f"{_tps(p):.0f}" for p in judged)
    at = "/".join(str(p.concurrency) for p in judged)
    worst = None
    for i, p in enumerate(judged[1:], 1):
        best = max(judged[:i], key=_tps)
        share = _tps(p) / max(_tps(best), 1e-9)
        if worst is None or share < worst[0]:
            worst = (share, p, best)
    share, p, best = worst
    within = f" (all within the {slots} slot(s))" if slots else ""
    src = (f"bench: output tok/s {curve} at c={at}{within}; c={p.concurrency} reached {share:.0%} of c={best.concurrency}'s "
           f"{_tps(best):.0f} tok/s (< {FALL_SHARE:.0%} is falling)")
    _put(facts, "load.tps_falling", share < FALL_SHARE, src)
    _put(facts, "load.tps_fall_share", round(share, 3), src)


def queueing_tail(facts: dict[str, Fact], bench: Any, pts: list[Any]) -> None:
    """``load.ttft_tail_ratio`` and ``load.queueing_tail``: see the module docstring."""
    s = bench.settings
    if getattr(s, "len_spread", 0.0) not in (0, 0.0, None):
        return
    n = facts.get("server.n_slots")
    slots = n.value if n is not None and isinstance(n.value, int) else None
    cand = [p for p in pts if p.concurrency >= TAIL_MIN_C and (slots is None or p.concurrency <= slots)
            and _med(p, "ttft_p50_ms") and _med(p, "ttft_p99_ms") is not None]
    if not cand:
        return
    p = cand[-1]
    p50, p99 = _med(p, "ttft_p50_ms"), _med(p, "ttft_p99_ms")
    ratio = p99 / max(p50, 1e-9)
    src = (f"bench c={p.concurrency}" + (f" ({slots} slots)" if slots else "") +
           f", equal lengths ({s.input_len} → {s.output_len} tokens): TTFT p99 {p99:.0f} ms vs p50 {p50:.0f} ms "
           f"(×{ratio:.1f}; ≥ ×{TAIL_RATIO:g} is requests waiting for the batch in flight)")
    _put(facts, "load.ttft_tail_ratio", round(ratio, 2), src)
    _put(facts, "load.queueing_tail", ratio >= TAIL_RATIO, src)


def prefill_bound_s(prefill: dict[str, Any], tokens: int) -> float | None:
    """The roofline's prefill bound (s) scaled to ``tokens`` prompt tokens: compute scales with
    the tokens, the weights are read once (module docstring). None without a usable bound.

    >>> prefill_bound_s({"prompt_len": 1024, "t_compute_s": 0.016, "t_memory_s": 0.004, "t_comm_s": 0.0}, 2048)
    0.032
    """
    P = prefill.get("prompt_len")
    tc, tm = prefill.get("t_compute_s"), prefill.get("t_memory_s")
    if not P or tc is None or tm is None:
        return None
    return max(tc * tokens / P, tm) + (prefill.get("t_comm_s") or 0.0)


def prefill_rate(facts: dict[str, Fact], bench: Any, pts: list[Any], roofline: dict[str, Any] | None) -> None:
    """``regime.prefill_eff`` and ``regime.prefill_slow``: see the module docstring."""
    pf = (roofline or {}).get("prefill")
    c1 = next((p for p in pts if p.concurrency == 1), None)
    L = getattr(bench.settings, "input_len", None)
    if not pf or c1 is None or not L or _med(c1, "ttft_p50_ms") is None:
        return
    if L < PREFILL_MIN_TOKENS:
        return
    bound = prefill_bound_s(pf, L)
    if not bound:
        return
    ttft_s = _med(c1, "ttft_p50_ms") / 1e3
    eff = bound / max(ttft_s, 1e-9)
    src = (f"bench c=1: {L} prompt tokens in a median TTFT of {ttft_s * 1e3:.0f} ms = {L / ttft_s:,.0f} tok/s vs the "
           f"roofline's prefill bound {L / bound:,.0f} tok/s at {L} tokens ({eff:.1%}; < {PREFILL_SLOW:.0%} is slow)")
    _put(facts, "regime.prefill_eff", round(eff, 4), src)
    _put(facts, "regime.prefill_slow", eff < PREFILL_SLOW, src)


def kv_on_gpu(facts: dict[str, Fact]) -> None:
    """``load.kv_on_gpu`` and ``load.kv_implied_B``: see the module docstring."""
    used_f = facts.get("proc.gpu_memory_B") or facts.get("load.gpu_mem_used_B")
    wb, kvt, ctx = facts.get("model.weight_bytes"), facts.get("model.kv_bytes_per_token"), facts.get("server.total_context")
    if used_f is None or not used_f.value or wb is None or kvt is None or ctx is None or not isinstance(ctx.value, int):
        return
    kv = kvt.value * ctx.value
    used, w = used_f.value, wb.value
    if kv < KV_MIN_B or used < WEIGHTS_ON_GPU * w:
        return
    on = used >= w + KV_PRESENT_SHARE * kv
    src = (f"{used_f.source}: {used / 2**30:.1f} GiB in use vs {w / 2**30:.1f} GiB of weights + {kv / 2**30:.1f} GiB of KV cache "
           f"({kvt.value / 1024:.0f} KiB per token × {ctx.value} tokens [{ctx.source}])" +
           ("" if on else f": less than half of that KV cache is in GPU memory — it lives elsewhere (host memory)"))
    _put(facts, "load.kv_implied_B", int(kv), src)
    _put(facts, "load.kv_on_gpu", on, src)


def gpu_unused(facts: dict[str, Fact]) -> None:
    """``server.gpu_visible`` False when the sweep never used the GPU: see the module docstring."""
    util, used, wb = facts.get("load.util_by_c"), facts.get("load.gpu_mem_used_B"), facts.get("model.weight_bytes")
    if util is None or used is None or wb is None or not util.value or not wb.value:
        return
    busy = max(util.value.values())
    if busy <= GPU_IDLE_PCT and used.value < GPU_UNUSED_SHARE * wb.value:
        _put(facts, "server.gpu_visible", False,
             f"bench telemetry: GPU busy at most {busy:.0f} % at c={'/'.join(map(str, util.value))} and {used.value / 1e9:.1f} GB "
             f"in GPU memory vs {wb.value / 1e9:.1f} GB of weights [{wb.source}]: the server does not use the GPU")


def quant_kernel_bound(facts: dict[str, Fact]) -> None:
    """``regime.quant_kernel_bound`` and ``model.weight_type``: see the module docstring."""
    q, eff = facts.get("model.quant"), facts.get("regime.batch1_eff")
    if q is None or eff is None or not isinstance(q.value, str):
        return
    t = q.value.lower()
    _put(facts, "model.weight_type", q.value, q.source)
    if t in UNQUANTIZED:
        return
    held = eff.value < LATENCY_BOUND_EFF
    _put(facts, "regime.quant_kernel_bound", held,
         f"{eff.source}: {eff.value:.1%} of the memory bound with {q.value} weights [{q.source}]" +
         (f" (< {LATENCY_BOUND_EFF:.0%}: kernel-bound for {q.value.upper()} — fewer bytes per weight did not buy the speed "
          f"they should; the {q.value.upper()} decode kernels set the pace)" if held else ""))


def from_behaviour(facts: dict[str, Fact], bench: Any, roofline: dict[str, Any] | None) -> None:
    """Every behaviour fact the sweep and the roofline support (none without a bench)."""
    if bench is not None:
        pts = _points(bench)
        if pts:
            tps_falling(facts, pts)
            queueing_tail(facts, bench, pts)
            prefill_rate(facts, bench, pts, roofline)
    gpu_unused(facts)
    kv_on_gpu(facts)
    quant_kernel_bound(facts)
