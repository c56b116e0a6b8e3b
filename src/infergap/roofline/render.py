"""Rendering of a :class:`RooflineResult` as terminal text (rich) or Markdown. JSON is the
result's own ``to_json_dict``."""

from __future__ import annotations

import io

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from infergap.guard import md_escape, safe_console
from infergap.roofline.bounds import RooflineResult

#: Columns a table is drawn within: the width text reports are fitted to (infergap.render.fit.WIDTH,
#: a layer above this one), so that fitting never wraps a table row as prose.
TABLE_WIDTH = 100

_GROUP_ORDER = ("attention", "indexer", "router", "dense_ffn", "shared_experts", "experts", "lm_head", "embedding", "kv_cache", "other")


def _gb(x: float) -> str:
    if abs(x) < 1e9:
        return f"{x / 1e6:.1f} MB"
    return f"{x / 1e9:.2f} GB"


def _ms(x: float) -> str:
    return f"{x * 1e3:.3f}"


def _pct(x: float) -> str:
    return f"{x * 100:.2f} %"


def fit_warning(r: RooflineResult) -> str | None:
    """The line that opens the report when the model does not fit in GPU memory
    (``r.memory.fits`` False): every tok/s below is then a bound for a setup that cannot run."""
    if r.memory.fits:
        return None
    return (f"WARNING: the model does not fit: {r.memory.message.removeprefix('does not fit: ')}. "
            "The figures below are what it would reach if it did; add GPUs (--gpus, --tp) or use a lower precision.")


def _header(r: RooflineResult) -> list[str]:
    m, h, p = r.model, r.hardware, r.parallel
    moe = ""
    if m["experts"]:
        moe = f" ({m['moe_layers']} MoE: {m['top_k']} of {m['experts']} experts)"
    prec = " · ".join(f"{g} {f}" for g, f in m["precision"].items() if g != "other")
    link = f"NVLink {h['nvlink_GBps']:.0f} GB/s" if h["nvlink_GBps"] else "PCIe only (no NVLink)"
    tf = " / ".join(f"{k} {v:g}" for k, v in h["tflops"].items())
    host = f" [from host: {h['from_host']}]" if h["from_host"] else ""
    alt = ""
    if h["measured_bandwidth_GBps"] and h["ceiling"] == "datasheet":
        alt = f"; a measured ceiling exists ({h['measured_bandwidth_GBps']:.0f} GB/s, --ceiling measured)"
    elif h["ceiling"] != "datasheet":
        alt = f"; datasheet {h['datasheet_bandwidth_GBps']:.0f} GB/s"
    return [
        f"{m['name']} on {h['count']} × {h['label']}, TP{p['tp']}" + (f" EP{p['ep']}" if p["ep"] > 1 else "") + host,
        f"model: {m['model_type'] or '?'}, {m['attention']}, {m['layers']} layers{moe}, "
        f"{m['total_params'] / 1e9:.1f}B total / {m['active_params'] / 1e9:.2f}B active params "
        f"({m['active_params_incl_embedding'] / 1e9:.2f}B with the input embedding); {m['source']}",
        f"precision ({m['precision_source']}): {prec}",
        f"GPU: {h['bandwidth_GBps']:.0f} GB/s per GPU, {h['ceiling']} ceiling ({h['ceiling_note']}{alt}); "
        f"{h['memory_B'] / 1e9:.1f} GB ({h['memory_source']}); dense TFLOPS {tf}; {link}",
    ]


def _shown(r: RooflineResult) -> list:
    """The single-stream bounds worth showing: on one GPU the three coincide."""
    if r.parallel["tp"] == 1:
        b = r.bound("aggregate").model_copy(update={"label": "single GPU"})
        return [b]
    return list(r.single_stream)


def _tables(r: RooflineResult) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, columns, rows) of every table, shared by the text and Markdown forms."""
    out: list[tuple[str, list[str], list[list[str]]]] = []
    meas = r.workload.measured_tok_s
    cols = ["bound", "tok/s", "ms/token", "bytes read per token"]
    if meas is not None:
        cols.append(f"measured {meas:g} tok/s is")
    eff = {e.bound: e for e in r.efficiency}
    rows = []
    for b in _shown(r):
        where = f"{_gb(b.bytes_per_token)} over {b.gpus} GPU(s)" if b.name == "aggregate" else f"{_gb(b.bytes_per_token)} per GPU"
        row = [b.label, f"{b.tok_s:.1f}", _ms(b.time_per_token_s), where]
        if meas is not None:
            row.append(_pct(eff[b.name].ratio))
        rows.append(row)
    out.append((f"Single-stream decode, context {r.workload.context} tokens", cols, rows))

    agg, per = r.bound("aggregate"), r.bound("per_gpu")
    groups = [g for g in _GROUP_ORDER if g in agg.components_B or g in per.components_B]
    prec = r.model["precision"]
    over = set(_over_aggregate(r))
    rows = [
        [g, prec.get(g, prec.get("kv_cache", "")) if g != "kv_cache" else prec.get("kv_cache", ""), _gb(agg.components_B.get(g, 0.0)),
         _gb(per.components_B.get(g, 0.0)) + (" †" if g in over else "")]
        for g in groups
    ]
    out.append(("Bytes read per token by tensor group", ["group", "precision", "aggregate (all GPUs)", "per GPU"], rows))

    moe = bool(r.model["experts"])
    rows = []
    for p in r.batched:
        rows.append(
            [
                str(p.batch),
                *([f"{p.experts_touched:.1f}"] if moe and p.experts_touched is not None else []),
                _ms(p.t_memory_s),
                _ms(p.t_compute_s),
                _ms(p.t_comm_s),
                _ms(p.step_s),
                f"{p.tok_s:.0f}",
                f"{p.tok_s_per_seq:.1f}",
                p.bound,
                "yes" if p.fits_kv else "no",
            ]
        )
    out.append(
        (
            f"Batched decode, context {r.workload.context} (per TP group; tok/s counts {r.parallel['replicas']} replica(s))",
            ["batch", *(["experts touched per layer"] if moe else []), "memory ms", "compute ms", "comm ms", "step ms", "tok/s", "tok/s per seq", "bound", "fits KV"],
            rows,
        )
    )
    return out


#: Why a tensor group's bytes on one GPU can exceed the whole TP group's in the aggregate bound.
_OVER_WHY = {
    "indexer": ("the per-GPU bound reads the DSA indexer's query side (wq_b, weights_proj) every step, as SGLang's "
                "CUDA-graph decode does, and every GPU holds the indexer whole; the optimistic aggregate skips the query "
                "side while the context is at most index_topk"),
    "kv_cache": ("each GPU reads the KV cache of its own heads: with fewer KV heads than GPUs (MLA has one latent) "
                 "the cache is replicated and every GPU reads it whole, while the optimistic aggregate counts it once"),
}


def _over_aggregate(r: RooflineResult) -> dict[str, str]:
    """Tensor group → why its bytes per GPU exceed its aggregate bytes (the table shows both side
    by side; a per-GPU figure above the whole group's reads as an error without this)."""
    agg, per = r.bound("aggregate"), r.bound("per_gpu")
    return {g: _OVER_WHY.get(g, "replicated: every GPU reads it whole, while the optimistic aggregate counts it once")
            for g, b in per.components_B.items() if b > agg.components_B.get(g, 0.0) * 1.001 and b > 0}


def _details(r: RooflineResult) -> list[tuple[str, list[str]]]:
    sections: list[tuple[str, list[str]]] = []
    over = _over_aggregate(r)
    if over:
        sections.append(("† bytes per GPU above the aggregate", [f"{g}: {why}" for g, why in over.items()]))
    for b in _shown(r):
        sections.append((f"{b.label}: {b.tok_s:.1f} tok/s = {b.formula}", b.assumptions))
    if r.per_gpu_explanation:
        sections.append(("Why the per-GPU bound is lower", [r.per_gpu_explanation]))
    c = r.collectives
    if c.per_token:
        sections.append(
            (
                "Collectives per token",
                [
                    f"{c.per_token} per token (2 per layer + logits gather) × α {c.latency_us:g} µs = "
                    f"{c.time_s * 1e3:.3f} ms ({c.interconnect}: {c.latency_basis}; β {c.link_GBps:.0f} GB/s per direction)"
                ],
            )
        )
    cb, cw = r.crossover_batch, r.crossover_batch_weights_only
    ctx = r.workload.context
    items = [
        f"weight GEMMs alone turn compute-bound at batch {cw} (≈ F·bytes_per_param / (2·BW) for a dense model)"
        if cw else "weight GEMMs stay memory-bound up to batch 1,048,576",
        f"with the KV cache at context {ctx}, a decode step turns compute-bound at batch {cb}"
        if cb else f"with the KV cache at context {ctx}, decode stays memory-bound at every batch: attention reads KV bytes as fast as it adds FLOPs",
    ]
    sections.append(("Compute crossover", items))
    pf = r.prefill
    sections.append(
        (
            f"Prefill of {pf.prompt_len} tokens: TTFT ≥ {pf.ttft_s * 1e3:.1f} ms ({pf.tok_s:.0f} tok/s)",
            [
                f"{pf.flops / 1e12:.1f} TFLOP (2·N_active·P + causal attention) → {pf.t_compute_s * 1e3:.2f} ms compute per GPU",
                f"weights and KV write → {pf.t_memory_s * 1e3:.2f} ms memory; collectives {pf.t_comm_s * 1e3:.2f} ms",
            ],
        )
    )
    mem = r.memory
    sections.append(
        (
            f"KV-cache capacity at {mem.context} tokens, mem-fraction {r.workload.mem_fraction:g}",
            [mem.message, f"KV per sequence per GPU {_gb(mem.kv_per_seq_per_gpu_B)}; {mem.memory_per_gpu_B / 1e9:.1f} GB per GPU ({mem.memory_source})"],
        )
    )
    sections.append(("Assumptions", r.assumptions))
    return sections


def render_text(r: RooflineResult, *, color: bool = True, width: int | None = None) -> str:
    """The terminal report (rich tables); ``color=False`` for files. Lines are wrapped at
    ``width`` columns when given (a terminal), never when ``None`` (a file or a pipe); tables are
    drawn at most :data:`TABLE_WIDTH` (100) columns wide, or ``width`` when
    narrower, their headers and cells wrapped inside the columns, so that the fitting of the
    text report (:func:`infergap.cli.fit_report`) never splits a table row as prose."""
    buf = io.StringIO()
    con = safe_console(file=buf, width=width or 1000, force_terminal=color, color_system="standard" if color else None,
                       highlight=False, soft_wrap=width is None)
    lines = _header(r)
    warn = fit_warning(r)
    if warn:
        con.print(f"[bold red]{escape(warn)}[/bold red]" if color else warn, markup=color, soft_wrap=True)
    con.print(Text(lines[0], style="bold" if color else ""), soft_wrap=False)
    for line in lines[1:]:
        con.print(line, markup=False)
    for title, cols, rows in _tables(r):
        t = Table(title=title, title_justify="left", show_lines=False)
        for i, c in enumerate(cols):
            t.add_column(c, justify="left" if i == 0 or c in ("group", "precision", "bound") else "right")
        for row in rows:
            t.add_row(*row)
        con.print()
        con.print(t, width=min(width or TABLE_WIDTH, TABLE_WIDTH))  # a table fits the report: never wrapped as prose later
    for title, items in _details(r):
        con.print()
        con.print(Text(title, style="bold" if color else ""))
        for it in items:
            con.print(f"  - {it}", markup=False)
    return buf.getvalue()


def render_markdown(r: RooflineResult) -> str:
    """The report as Markdown (tables and bullet lists)."""
    lines = _header(r)
    warn = fit_warning(r)
    out = [f"**{md_escape(warn)}**", ""] if warn else []
    out += [f"# Roofline: {md_escape(lines[0])}", "", *[f"- {md_escape(x)}" for x in lines[1:]]]
    for title, cols, rows in _tables(r):
        out += ["", f"## {md_escape(title)}", "", "| " + " | ".join(map(md_escape, cols)) + " |", "|" + "---|" * len(cols)]
        out += ["| " + " | ".join(map(md_escape, row)) + " |" for row in rows]
    for title, items in _details(r):
        out += ["", f"### {md_escape(title)}", ""] + [f"- {md_escape(it)}" for it in items]
    return "\n".join(out) + "\n"
