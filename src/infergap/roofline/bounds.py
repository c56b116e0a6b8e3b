"""Roofline bounds of a model on a set of GPUs: single-stream decode (aggregate and per-GPU),
tensor-parallel collectives, batched decode, prefill, and KV-cache capacity.

Formulas (sources: kipply, "Transformer Inference Arithmetic" (2022); the NCCL ring all-reduce
cost model t = α + 2(n−1)/n · M/β (NCCL docs, "Performance"); SGLang's DeepSeek/GLM model code for
which linears are replicated under TP (``ReplicatedLinear``: fused q_a/kv_a projection, MoE gate,
NSA indexer); vLLM/SGLang custom all-reduce, disabled on more than two PCIe-only GPUs):

- aggregate single-stream:   tok/s = n · BW / (active weight bytes + KV bytes read)
- per-GPU single-stream:     t = max_rank(weight bytes + KV bytes) / BW + Σ collectives
- collectives per token:     2 per layer (attention output, FFN output) + 1 logits gather, each
                             α + 2(n−1)/n · B·H·2 bytes / β
- experts touched per layer: E · (1 − (1 − k/E)^B)
- batched step:              t(B) = max(bytes(B)/BW, FLOPs(B)/F) + comm(B)
- prefill:                   FLOPs ≈ 2·N_active·P + Σ_layers pairs·2·nh·(d_qk + d_v)
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from infergap.errors import UserError
from infergap.roofline.hardware import Hardware
from infergap.roofline.model import ModelSpec, Tensor
from infergap.roofline.precision import bytes_per_param, compute_precision

SCHEMA = "infergap.roofline/1"

#: All-reduce latency α per interconnect, µs. The low end of each range is used (a bound):
#: NCCL over PCIe 20–25 µs; custom all-reduce kernels 5–8 µs (vLLM/SGLang enable them on NVLink
#: or on exactly two PCIe GPUs); NVLink custom all-reduce ≈ 3–5 µs.
ALLREDUCE_US = {"pcie-nccl": 20.0, "pcie-custom": 5.0, "nvlink": 4.0}
ALLREDUCE_RANGE = {"pcie-nccl": "20–25 µs", "pcie-custom": "5–8 µs", "nvlink": "3–5 µs"}

#: Bytes per activation element exchanged by collectives (bf16).
ACT_BYTES = 2


class Parallel(BaseModel):
    """How the model is split: tensor parallel ``tp``, expert parallel ``ep`` (inside the TP
    group, as SGLang's ``--ep-size``: each rank holds E/ep experts, each split over tp/ep)."""

    tp: int = 1
    ep: int = 1


class Workload(BaseModel):
    """What is asked: decode ``context`` tokens, ``batches`` sizes, a ``prompt_len`` prefill,
    ``mem_fraction`` of GPU memory for weights + KV, ``mfu`` of peak FLOP/s reachable,
    ``allreduce_us`` to replace the per-interconnect latency, ``measured_tok_s`` to compare."""

    context: int = 1024
    batches: list[int] = Field(default_factory=lambda: [1, 8, 32, 64, 128, 256])
    prompt_len: int = 1024
    mem_fraction: float = 0.9
    mfu: float = 1.0
    allreduce_us: float | None = None
    measured_tok_s: float | None = None


class Bound(BaseModel):
    """One single-stream decode bound: tok/s, its time per token split into parts, the bytes
    read per token (per GPU for the per-GPU bound), the formula and its assumptions."""

    name: Literal["aggregate", "per_gpu", "per_gpu_memory"]
    label: str
    tok_s: float
    time_per_token_s: float
    bytes_per_token: float
    gpus: int
    formula: str
    assumptions: list[str]
    components_B: dict[str, float] = Field(default_factory=dict)
    collectives_s: float = 0.0


class Collectives(BaseModel):
    """The TP collective term of one decode step at batch 1."""

    interconnect: str
    latency_us: float
    latency_basis: str
    link_GBps: float
    per_token: int
    time_s: float


class BatchPoint(BaseModel):
    """One batch size of batched decode (per TP group; ``tok_s`` counts every replica)."""

    batch: int
    experts_touched: float | None
    bytes_per_step: float
    t_memory_s: float
    t_compute_s: float
    t_comm_s: float
    step_s: float
    tok_s: float
    tok_s_per_seq: float
    bound: Literal["memory", "compute"]
    fits_kv: bool


class Prefill(BaseModel):
    """Lower bound of the prefill (time to first token, without queueing) of one prompt."""

    prompt_len: int
    flops: float
    t_compute_s: float
    t_memory_s: float
    t_comm_s: float
    ttft_s: float
    tok_s: float


class MemoryFit(BaseModel):
    """Weights and KV cache per GPU at ``context``; ``max_seqs`` per TP group and in total."""

    memory_per_gpu_B: int
    memory_source: str
    usable_B: float
    weights_per_gpu_B: float
    kv_per_seq_per_gpu_B: float
    kv_budget_B: float
    context: int
    max_seqs_per_replica: int
    max_seqs: int
    fits: bool
    message: str


class Efficiency(BaseModel):
    """A measured throughput as a fraction of one bound."""

    bound: str
    bound_tok_s: float
    measured_tok_s: float
    ratio: float


class RooflineResult(BaseModel):
    """Everything :func:`bounds` computes; serialised with ``"schema": "infergap.roofline/1"``."""

    model_config = ConfigDict(populate_by_name=True)

    schema_: str = Field(SCHEMA, alias="schema")
    model: dict[str, Any]
    hardware: dict[str, Any]
    parallel: dict[str, int]
    workload: Workload
    single_stream: list[Bound]
    collectives: Collectives
    batched: list[BatchPoint]
    crossover_batch: int | None
    crossover_batch_weights_only: int | None = None
    prefill: Prefill
    memory: MemoryFit
    efficiency: list[Efficiency] = Field(default_factory=list)
    per_gpu_explanation: str = ""
    assumptions: list[str] = Field(default_factory=list)

    def bound(self, name: str) -> Bound:
        """The single-stream bound called ``name`` (``aggregate`` | ``per_gpu`` | ``per_gpu_memory``)."""
        for b in self.single_stream:
            if b.name == name:
                return b
        raise KeyError(name)

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON form (``schema`` key first)."""
        return self.model_dump(mode="json", by_alias=True)


# -- small formulas ------------------------------------------------------------------------------


def experts_touched(n_experts: int, top_k: int, batch: float) -> float:
    """Expected distinct experts a MoE layer reads for ``batch`` tokens routed uniformly to
    ``top_k`` of ``n_experts``: E·(1 − (1 − k/E)^B). 256 experts, top-8: 8 at B=1, ≈102 at 16."""
    if n_experts <= 0 or batch <= 0:
        return 0.0
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** batch)


def expected_max_experts_per_rank(n_experts: int, top_k: int, ep: int) -> float:
    """Expected largest number of one token's ``top_k`` experts (chosen uniformly without
    replacement) that land on one of ``ep`` ranks holding E/ep experts each: the rank that sets
    the pace at batch 1 under expert parallelism. Exact, by counting selections with at most m
    experts per rank (product of generating functions Σ_j C(g, j)·x^j)."""
    if ep <= 1:
        return float(top_k)
    g = n_experts // ep
    total = math.comb(n_experts, top_k)
    expect = 0.0
    prev = 0.0
    for m in range(0, top_k + 1):
        poly = [1]
        for _ in range(ep):
            nxt = [0] * (len(poly) + m)
            for i, a in enumerate(poly):
                if a:
                    for j in range(0, min(m, g) + 1):
                        if i + j <= top_k:
                            nxt[i + j] += a * math.comb(g, j)
            poly = nxt[: top_k + 1]
        cdf = (poly[top_k] if len(poly) > top_k else 0) / total
        expect += m * (cdf - prev)
        prev = cdf
    return expect


def collective_time_s(n: int, message_B: float, latency_us: float, link_GBps: float) -> float:
    """Ring all-reduce of ``message_B`` bytes over ``n`` ranks: α + 2(n−1)/n · M/β (0 for n = 1)."""
    if n <= 1:
        return 0.0
    return latency_us * 1e-6 + 2 * (n - 1) / n * message_B / (link_GBps * 1e9)


def causal_pairs(tokens: int, window: int | None = None) -> float:
    """(query, key) pairs of causal attention over ``tokens``: Σ_i min(i, window)."""
    if window is None or tokens <= window:
        return tokens * (tokens + 1) / 2
    return window * (window + 1) / 2 + (tokens - window) * window


# -- the model ---------------------------------------------------------------------------------


def _shard(t: Tensor, model: ModelSpec, tp: int) -> int:
    if t.shard in ("tp", "vocab"):
        return tp
    if t.shard == "kv_heads":
        return min(tp, model.kv_heads)
    return 1


class _Ctx:
    """Per-rank accounting for one (model, hardware, parallel) triple."""

    def __init__(self, model: ModelSpec, hw: Hardware, par: Parallel, wl: Workload) -> None:
        self.m, self.hw, self.par, self.wl = model, hw, par, wl
        self.tp, self.ep = par.tp, par.ep
        self.moe_tp = par.tp // par.ep
        self.emax1 = expected_max_experts_per_rank(model.n_experts, model.top_k, par.ep) if model.is_moe else 0.0

    def experts_per_rank(self, batch: float) -> float:
        """Experts one rank reads per MoE layer: its share of the touched experts, at least the
        batch-1 expected maximum (load imbalance beyond batch 1 is not modelled)."""
        m = self.m
        if not m.is_moe:
            return 0.0
        mean = (m.n_experts / self.ep) * (1.0 - (1.0 - m.top_k / m.n_experts) ** batch)
        return max(mean, self.emax1) if batch >= 1 else mean

    def weight_bytes_rank(self, batch: float, *, skip_dsa_query: bool = False) -> dict[str, float]:
        """Weight bytes one rank reads per decode step of ``batch`` tokens, by group."""
        out: dict[str, float] = {}
        per_rank_experts = self.experts_per_rank(batch)
        for t in self.m.tensors:
            if t.group == "embedding" or (skip_dsa_query and t.dsa_query):
                continue
            if t.group == "experts":
                b = per_rank_experts * t.bytes / t.n_experts / self.moe_tp
            else:
                b = t.bytes / _shard(t, self.m, self.tp)
            out[t.group] = out.get(t.group, 0.0) + b
        return out

    def stored_bytes_rank(self) -> float:
        """Weight bytes one rank holds (every expert it owns, its shard of everything else)."""
        total = 0.0
        for t in self.m.tensors:
            if not t.stored:
                continue
            if t.group == "experts":
                total += t.bytes / self.ep / self.moe_tp
            else:
                total += t.bytes / _shard(t, self.m, self.tp)
        return total

    def step_flops(self, batch: int, context: int) -> list[tuple[float, str]]:
        """(FLOPs, compute precision) of one rank for a decode step of ``batch`` sequences."""
        m = self.m
        out: list[tuple[float, str]] = []
        for t in m.tensors:
            if t.group in ("embedding", "other"):
                continue
            if t.group == "experts":
                f = 2 * batch * m.top_k * (t.params / t.n_experts) / self.tp
            else:
                f = 2 * batch * t.params / _shard(t, m, self.tp)
            out.append((f, compute_precision(t.fmt)))
        heads_rank = m.heads / self.tp
        attn = 0.0
        for k in m.layer_kinds:
            n = context if k.window is None else min(context, k.window)
            if m.attention == "mla":
                keys = min(n, m.index_topk) if m.dsa and m.index_topk else n
                kvl, rope = m.kv_lora_rank or 0, m.qk_rope_head_dim or 0
                attn += 2 * batch * keys * heads_rank * ((kvl + rope) + kvl)  # absorbed MLA
                if m.dsa and context > (m.index_topk or 0):
                    attn += 2 * batch * n * (m.index_heads or 0) * (m.index_head_dim or 0)
            else:
                attn += 2 * batch * n * heads_rank * (m.head_dim + m.v_head_dim)
        out.append((attn, "bf16"))
        return out

    def t_compute(self, flops: list[tuple[float, str]]) -> float:
        return sum(f / (self.hw.flops_per_s(p) * self.wl.mfu) for f, p in flops)

    # -- collectives --
    def interconnect(self) -> tuple[str, float, str]:
        if self.hw.gpu.nvlink_GBps:
            key = "nvlink"
        elif self.tp == 2:
            key = "pcie-custom"
        else:
            key = "pcie-nccl"
        if self.wl.allreduce_us is not None:
            return key, self.wl.allreduce_us, "--allreduce-us"
        basis = {
            "nvlink": "NVLink custom all-reduce",
            "pcie-custom": "custom all-reduce kernel on 2 PCIe GPUs",
            "pcie-nccl": "NCCL ring over PCIe (custom all-reduce is disabled on more than 2 PCIe-only GPUs)",
        }[key]
        return key, ALLREDUCE_US[key], f"{basis}, low end of {ALLREDUCE_RANGE[key]}"

    def comm_s(self, tokens: int) -> tuple[float, int]:
        """Collective time of one step carrying ``tokens`` tokens, and the number of collectives."""
        if self.tp <= 1:
            return 0.0, 0
        _, alpha, _ = self.interconnect()
        beta = self.hw.link_GBps
        H = self.m.hidden
        t, count = 0.0, 0
        for k in self.m.layer_kinds:
            t += collective_time_s(self.tp, tokens * H * ACT_BYTES, alpha, beta)  # attention output
            count += 1
            if k.moe and self.ep > 1:
                a2a = alpha * 1e-6 + (self.ep - 1) / self.ep * tokens * self.m.top_k * H * ACT_BYTES / (beta * 1e9)
                t += 2 * a2a  # dispatch + combine
                count += 2
            else:
                t += collective_time_s(self.tp, tokens * H * ACT_BYTES, alpha, beta)
                count += 1
        # vocab-parallel lm_head: gather the logits shards (fp32)
        t += alpha * 1e-6 + (self.tp - 1) / self.tp * tokens * self.m.vocab * 4 / (beta * 1e9)
        count += 1
        return t, count


def _validate(model: ModelSpec, hw: Hardware, par: Parallel, wl: Workload) -> None:
    tp, ep = par.tp, par.ep
    if tp < 1 or ep < 1:
        raise UserError(f"--tp {tp} --ep {ep}: both must be at least 1")
    if tp > hw.count:
        raise UserError(f"--tp {tp}: more than the {hw.count} GPU(s) given by --gpus")
    if hw.count % tp:
        raise UserError(f"--gpus {hw.count} is not a multiple of --tp {tp}")
    if model.heads % tp:
        raise UserError(f"--tp {tp} does not divide the model's {model.heads} attention heads ({model.name})")
    if model.attention != "mla" and tp > model.kv_heads and tp % model.kv_heads:
        raise UserError(f"--tp {tp}: not a multiple of the model's {model.kv_heads} KV heads")
    if tp % ep:
        raise UserError(f"--ep {ep} must divide --tp {tp} (experts are split by EP inside the TP group)")
    if ep > 1 and not model.is_moe:
        raise UserError(f"--ep {ep}: {model.name} has no experts")
    if model.is_moe and model.n_experts % ep:
        raise UserError(f"--ep {ep} does not divide the model's {model.n_experts} experts")
    if wl.context < 1 or wl.prompt_len < 1:
        raise UserError("--context and --prompt-len must be at least 1 token")
    if not wl.batches or min(wl.batches) < 1:
        raise UserError("--batch: sizes must be at least 1")
    if not 0 < wl.mem_fraction <= 1:
        raise UserError(f"--mem-fraction {wl.mem_fraction}: must be in (0, 1]")
    if not 0 < wl.mfu <= 1:
        raise UserError(f"--mfu {wl.mfu}: must be in (0, 1]")
    if wl.measured_tok_s is not None and not wl.measured_tok_s > 0:
        raise UserError(f"--measured {wl.measured_tok_s}: must be > 0 tok/s")


def _gb(x: float) -> str:
    if abs(x) < 1e9:
        return f"{x / 1e6:.1f} MB"
    return f"{x / 1e9:.2f} GB"


def _aggregate(c: _Ctx) -> tuple[Bound, dict[str, float]]:
    """The optimistic single-stream bound: the TP group's bytes per token spread evenly over its
    GPUs, no collectives. Returns the bound and its bytes per token by tensor group."""
    m, hw, tp, ctx = c.m, c.hw, c.tp, c.wl.context
    bw = hw.bandwidth_GBps * 1e9
    skip_q = m.dsa and ctx <= (m.index_topk or 0)
    agg_parts: dict[str, float] = {}
    for t in m.tensors:
        if t.group == "embedding" or (skip_q and t.dsa_query):
            continue
        b = t.bytes * (m.top_k / t.n_experts if t.group == "experts" else 1.0)
        agg_parts[t.group] = agg_parts.get(t.group, 0.0) + b
    agg_parts["kv_cache"] = m.kv_read_bytes(ctx, 1, optimistic=True)
    agg_bytes = sum(agg_parts.values())
    agg_t = agg_bytes / (tp * bw)
    agg_assume = [
        f"{tp} GPU(s) of the TP group each read 1/{tp} of the bytes, perfectly balanced, at {hw.bandwidth_GBps:.0f} GB/s ({hw.ceiling})",
        "no collectives, no kernel launch or scheduling overhead",
        "the input embedding is a lookup (not read); lm_head is read in full",
    ]
    if m.is_moe:
        agg_assume.append(f"MoE: {m.top_k} of {m.n_experts} routed experts per MoE layer ({m.moe_layers} layers) plus shared experts")
    if m.dsa:
        if skip_q:
            q_b = sum(t.bytes for t in m.tensors if t.dsa_query)
            agg_assume.append(
                f"DSA: context {ctx} <= index_topk {m.index_topk}, so the indexer's query side "
                f"(wq_b, weights_proj: {_gb(q_b)}) is skipped; past {m.index_topk} tokens it is read"
            )
        else:
            agg_assume.append(f"DSA: attention reads {m.index_topk} of {ctx} latent entries; the indexer scores every key")
    agg_assume.append(f"KV cache {m.kv_format}, {ctx} tokens of context")
    aggregate = Bound(
        name="aggregate",
        label="aggregate (optimistic)",
        tok_s=1.0 / agg_t,
        time_per_token_s=agg_t,
        bytes_per_token=agg_bytes,
        gpus=tp,
        formula=f"n·BW / bytes_per_token = {tp} × {hw.bandwidth_GBps:.0f} GB/s / {_gb(agg_bytes)}",
        assumptions=agg_assume,
        components_B=agg_parts,
    )
    return aggregate, agg_parts


def _per_gpu(c: _Ctx) -> tuple[Bound, Bound, Collectives]:
    """The strict single-stream bounds: the busiest rank's bytes (memory only), then plus the
    collectives of one token; and the collectives' accounting."""
    m, hw, tp, parallel, ctx = c.m, c.hw, c.tp, c.par, c.wl.context
    bw = hw.bandwidth_GBps * 1e9
    parts = c.weight_bytes_rank(1)
    parts["kv_cache"] = m.kv_read_bytes(ctx, tp, optimistic=False)
    rank_bytes = sum(parts.values())
    t_mem = rank_bytes / bw
    comm1, n_coll = c.comm_s(1)
    key, alpha, basis = c.interconnect()
    repl = [t for t in m.tensors if t.shard == "replicated" and t.group not in ("embedding", "other")]
    repl_b = sum(t.bytes for t in repl)
    repl_names = sorted({t.name.split(".", 3)[-1] if t.layer is not None else t.name for t in repl})
    per_assume = [
        f"the busiest rank's bytes at {hw.bandwidth_GBps:.0f} GB/s; replicated tensors are read in full on every rank",
    ]
    if tp > 1 and repl:
        per_assume.append(f"replicated under TP ({_gb(repl_b)} per rank): {', '.join(repl_names)}")
    if m.attention == "mla" and tp > 1:
        per_assume.append("MLA latent KV is replicated on every rank (no data-parallel attention)")
    elif m.attention != "mla" and tp > m.kv_heads:
        per_assume.append(f"GQA: {m.kv_heads} KV heads over {tp} ranks, so KV heads are replicated")
    if m.is_moe:
        if parallel.ep > 1:
            per_assume.append(
                f"EP {parallel.ep}: the rank holding the most of a token's {m.top_k} experts sets the pace "
                f"(expected {c.emax1:.2f} experts, each split over {c.moe_tp})"
            )
        else:
            per_assume.append(f"experts split over {tp} ranks (TP MoE): each rank reads 1/{tp} of each of the {m.top_k} experts")
    if m.dsa:
        per_assume.append("DSA indexer runs every step (as SGLang's CUDA-graph decode does)")
    if tp > 1:
        per_assume.append(f"{n_coll} collectives per token × α = {alpha:g} µs ({basis}), plus 2(n−1)/n·M/β at {hw.link_GBps:.0f} GB/s")
    per_gpu_mem = Bound(
        name="per_gpu_memory",
        label=f"per-GPU TP{tp}, memory only",
        tok_s=1.0 / t_mem,
        time_per_token_s=t_mem,
        bytes_per_token=rank_bytes,
        gpus=tp,
        formula=f"BW / bytes_per_rank = {hw.bandwidth_GBps:.0f} GB/s / {_gb(rank_bytes)}",
        assumptions=per_assume[:-1] if tp > 1 else per_assume,
        components_B=parts,
    )
    per_gpu = Bound(
        name="per_gpu",
        label=f"per-GPU TP{tp} + collectives",
        tok_s=1.0 / (t_mem + comm1),
        time_per_token_s=t_mem + comm1,
        bytes_per_token=rank_bytes,
        gpus=tp,
        formula=(
            f"1 / (bytes_per_rank / BW + collectives) = 1 / ({t_mem * 1e3:.3f} ms + {comm1 * 1e3:.3f} ms)"
        ),
        assumptions=per_assume,
        components_B=parts,
        collectives_s=comm1,
    )
    collectives = Collectives(
        interconnect=key if tp > 1 else "none",
        latency_us=alpha if tp > 1 else 0.0,
        latency_basis=basis if tp > 1 else "single GPU: no collectives",
        link_GBps=hw.link_GBps,
        per_token=n_coll,
        time_s=comm1,
    )
    return per_gpu_mem, per_gpu, collectives


def _memory_fit(c: _Ctx) -> MemoryFit:
    """Weights per GPU against usable memory, and how many sequences of the context the KV
    budget left over holds per TP group and in all."""
    m, hw, tp, wl = c.m, c.hw, c.tp, c.wl
    ctx, replicas = wl.context, hw.count // tp
    stored = c.stored_bytes_rank()
    usable = wl.mem_fraction * hw.memory_B
    kv_seq = m.kv_stored_bytes(ctx, tp)
    budget = usable - stored
    per_replica = int(budget // kv_seq) if budget > 0 and kv_seq > 0 else 0
    fits = per_replica >= 1
    if stored > usable:
        msg = (
            f"does not fit: weights need {_gb(stored)} per GPU, usable {_gb(usable)} "
            f"({wl.mem_fraction:g} of {_gb(hw.memory_B)}) on {hw.count} × {hw.gpu.id} at TP{tp}"
        )
    elif not fits:
        msg = (
            f"does not fit: after {_gb(stored)} of weights, {_gb(budget)} per GPU is left for KV, "
            f"less than one {ctx}-token sequence ({_gb(kv_seq)})"
        )
    else:
        msg = (
            f"weights {_gb(stored)} per GPU; KV budget {_gb(budget)} holds {per_replica} sequence(s) of "
            f"{ctx} tokens per TP group ({per_replica * replicas} on {replicas} replica(s))"
        )
    return MemoryFit(
        memory_per_gpu_B=hw.memory_B,
        memory_source=hw.memory_source,
        usable_B=usable,
        weights_per_gpu_B=stored,
        kv_per_seq_per_gpu_B=kv_seq,
        kv_budget_B=budget,
        context=ctx,
        max_seqs_per_replica=per_replica,
        max_seqs=per_replica * replicas,
        fits=fits,
        message=msg,
    )


def _step(c: _Ctx, batch: int, context: int) -> tuple[float, float, float, float]:
    """One decode step of ``batch`` sequences at ``context``: (bytes read per rank, memory time,
    compute time, collective time), times in seconds."""
    bw = c.hw.bandwidth_GBps * 1e9
    wb = sum(c.weight_bytes_rank(batch).values())
    byts = wb + batch * c.m.kv_read_bytes(context, c.tp, optimistic=False)
    return byts, byts / bw, c.t_compute(c.step_flops(batch, context)), c.comm_s(batch)[0]


def _crossover(c: _Ctx, context: int) -> int | None:
    """Smallest batch whose step is compute-bound at ``context`` (None up to 2^20)."""
    _, tm, tc, _ = _step(c, 1, context)
    if tc >= tm:
        return 1
    lo, hi = 1, 2
    while True:
        _, tm, tc, _ = _step(c, hi, context)
        if tc >= tm:
            break
        if hi >= 1 << 20:
            return None
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        _, tm, tc, _ = _step(c, mid, context)
        if tc >= tm:
            hi = mid
        else:
            lo = mid
    return hi


def _batched(c: _Ctx, per_replica: int) -> list[BatchPoint]:
    """Decode steps at each batch size of the workload: memory, compute and collective time,
    whichever binds, and whether the KV budget (``per_replica`` sequences) holds the batch."""
    m, replicas = c.m, c.hw.count // c.tp
    out: list[BatchPoint] = []
    for b in sorted(set(c.wl.batches)):
        byts, tm, tc, tcomm = _step(c, b, c.wl.context)
        st = max(tm, tc) + tcomm
        out.append(
            BatchPoint(
                batch=b,
                experts_touched=experts_touched(m.n_experts, m.top_k, b) if m.is_moe else None,
                bytes_per_step=byts,
                t_memory_s=tm,
                t_compute_s=tc,
                t_comm_s=tcomm,
                step_s=st,
                tok_s=b * replicas / st,
                tok_s_per_seq=1.0 / st,
                bound="compute" if tc > tm else "memory",
                fits_kv=b <= per_replica,
            )
        )
    return out


def _prefill(c: _Ctx) -> Prefill:
    """Prefill of one prompt: linear-layer and causal-attention FLOPs against the weights and KV
    written, plus collectives; TTFT is the larger of compute and memory time plus collectives."""
    m, tp = c.m, c.tp
    bw = c.hw.bandwidth_GBps * 1e9
    P = c.wl.prompt_len
    pf: list[tuple[float, str]] = []
    for t in m.tensors:
        if t.group in ("embedding", "other"):
            continue
        if t.group == "experts":
            f = 2 * P * m.top_k * (t.params / t.n_experts) / tp
        else:
            f = 2 * P * t.params / _shard(t, m, tp)
        pf.append((f, compute_precision(t.fmt)))
    attn = 0.0
    for k in m.layer_kinds:
        if m.dsa:
            attn += 2 * causal_pairs(P, m.index_topk) * (m.heads / tp) * (m.head_dim + m.v_head_dim)
            if P > (m.index_topk or 0):
                attn += 2 * causal_pairs(P) * (m.index_heads or 0) * (m.index_head_dim or 0)
        else:
            attn += 2 * causal_pairs(P, k.window) * (m.heads / tp) * (m.head_dim + m.v_head_dim)
    pf.append((attn, "bf16"))
    pf_flops = sum(f for f, _ in pf)
    pf_tc = c.t_compute(pf)
    pf_tm = (sum(c.weight_bytes_rank(P).values()) + m.kv_stored_bytes(P, tp)) / bw
    pf_comm = c.comm_s(P)[0]
    ttft = max(pf_tc, pf_tm) + pf_comm
    return Prefill(prompt_len=P, flops=pf_flops * tp, t_compute_s=pf_tc, t_memory_s=pf_tm, t_comm_s=pf_comm, ttft_s=ttft, tok_s=P / ttft)


def _explain_per_gpu(c: _Ctx, aggregate: Bound, per_gpu: Bound, collectives: Collectives) -> str:
    """Why the per-GPU bound is below the aggregate under TP: the extra bytes per rank by group
    and the collectives' wait ('' at TP1)."""
    tp = c.tp
    if tp <= 1:
        return ""
    agg_parts, parts = aggregate.components_B, per_gpu.components_B
    rank_bytes = per_gpu.bytes_per_token
    share = aggregate.bytes_per_token / tp
    extra = rank_bytes - share
    top = sorted(
        ((g, parts.get(g, 0.0) - agg_parts.get(g, 0.0) / tp) for g in parts),
        key=lambda kv: kv[1],
        reverse=True,
    )
    why = ", ".join(f"{g} +{_gb(v)}" for g, v in top if v > 0.01e9)
    return (
        f"per-GPU TP{tp} is {aggregate.tok_s / per_gpu.tok_s:.2f}× below the aggregate: each rank reads "
        f"{_gb(rank_bytes)} per token instead of an even 1/{tp} share of {_gb(share)} "
        f"(+{_gb(extra)}: {why or 'none'}), then waits {collectives.time_s * 1e3:.2f} ms on {collectives.per_token} collectives"
    )


def _assumptions(c: _Ctx) -> list[str]:
    """The assumptions every bound of the result shares (ceilings, precision source, parallelism)."""
    m, hw, wl, parallel = c.m, c.hw, c.wl, c.par
    replicas = hw.count // c.tp
    out = [
        f"bandwidth ceiling: {hw.ceiling_note}; source: "
        + (hw.gpu.measured.source if hw.ceiling == "measured" and hw.gpu.measured else hw.gpu.source),
        f"compute ceiling: dense tensor TFLOPS {', '.join(f'{k} {v:g}' for k, v in hw.tflops.items())} × MFU {wl.mfu:g}",
        f"precision from {m.precision_source}",
        "no pipeline parallelism; one decode stream runs on one TP group" + (f"; {replicas} data-parallel replicas for batches" if replicas > 1 else ""),
        "batched decode: experts touched E·(1−(1−k/E)^B) with uniform routing; weights read once per step",
        *m.notes,
    ]
    if parallel.ep > 1:
        out.append("expert-parallel all-to-all: α + (ep−1)/ep · B·k·H·2 bytes / β, dispatch and combine")
    return out


def _model_summary(m: ModelSpec) -> dict[str, Any]:
    """The model block of the roofline document."""
    return {
        "name": m.name,
        "source": m.source,
        "model_type": m.model_type,
        "attention": m.attention + ("+dsa" if m.dsa else ""),
        "layers": m.layers,
        "moe_layers": m.moe_layers,
        "hidden": m.hidden,
        "experts": m.n_experts,
        "top_k": m.top_k,
        "mtp_layers": m.mtp_layers,
        "total_params": m.total_params(),
        "active_params": m.active_params(),
        "active_params_incl_embedding": m.active_params(True),
        "precision": m.precision,
        "precision_source": m.precision_source,
        "stored_bytes": sum(t.bytes for t in m.tensors if t.stored),
        "bytes_per_param": {g: bytes_per_param(f) for g, f in m.precision.items() if "/" not in f},
    }


def _hardware_summary(hw: Hardware) -> dict[str, Any]:
    """The hardware block of the roofline document."""
    return {
        "gpu": hw.gpu.id,
        "label": hw.gpu.label,
        "count": hw.count,
        "from_host": hw.from_host,
        "bandwidth_GBps": hw.bandwidth_GBps,
        "datasheet_bandwidth_GBps": hw.gpu.bandwidth_GBps,
        "measured_bandwidth_GBps": hw.gpu.measured.bandwidth_GBps if hw.gpu.measured else None,
        "ceiling": hw.ceiling,
        "ceiling_note": hw.ceiling_note,
        "tflops": hw.tflops,
        "memory_B": hw.memory_B,
        "memory_source": hw.memory_source,
        "nvlink_GBps": hw.gpu.nvlink_GBps,
        "link_GBps": hw.link_GBps,
        "source": hw.gpu.source,
    }


def bounds(model: ModelSpec, hardware: Hardware, parallel: Parallel, workload: Workload | None = None) -> RooflineResult:
    """Compute every bound of ``model`` on ``hardware`` split as ``parallel`` for ``workload``.

    Stages: single stream (aggregate, per-GPU memory, per-GPU + collectives), memory fit, batched
    decode with the compute crossover, prefill, and the efficiency of a measured figure.

    Raises :class:`UserError` when the split is impossible (TP not dividing the heads or the GPU
    count, EP not dividing TP or the experts). A model that does not fit in memory still gets its
    bandwidth bounds; ``memory.fits`` is False and ``memory.message`` gives the numbers.
    """
    wl = workload or Workload()
    _validate(model, hardware, parallel, wl)
    c = _Ctx(model, hardware, parallel, wl)
    aggregate, _ = _aggregate(c)
    per_gpu_mem, per_gpu, collectives = _per_gpu(c)
    memory = _memory_fit(c)
    eff = [
        Efficiency(bound=b.name, bound_tok_s=b.tok_s, measured_tok_s=wl.measured_tok_s, ratio=wl.measured_tok_s / b.tok_s)
        for b in (aggregate, per_gpu_mem, per_gpu)
    ] if wl.measured_tok_s is not None else []
    return RooflineResult(
        model=_model_summary(model),
        hardware=_hardware_summary(hardware),
        parallel={"tp": parallel.tp, "ep": parallel.ep, "gpus": hardware.count, "replicas": hardware.count // parallel.tp},
        workload=wl,
        single_stream=[aggregate, per_gpu_mem, per_gpu],
        collectives=collectives,
        batched=_batched(c, memory.max_seqs_per_replica),
        crossover_batch=_crossover(c, wl.context),
        crossover_batch_weights_only=_crossover(c, 0),
        prefill=_prefill(c),
        memory=memory,
        efficiency=eff,
        per_gpu_explanation=_explain_per_gpu(c, aggregate, per_gpu, collectives),
        assumptions=_assumptions(c),
    )
