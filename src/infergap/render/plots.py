"""Plots of a run as inline SVG text (matplotlib, Agg backend): throughput vs concurrency with the
roofline drawn, latency vs throughput, GPU power and SM clock under load. No external resources:
text is drawn as paths and the SVG carries no DOCTYPE or metadata links."""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.bench.results import BenchResult, PointResult

plt.rcParams.update({"svg.fonttype": "path", "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    plt.close(fig)
    text = buf.getvalue()
    text = re.sub(r"<\?xml[^>]*\?>\s*", "", text)
    text = re.sub(r"<!DOCTYPE[^>]*>\s*", "", text)
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    return re.sub(r'<svg ([^>]*?)width="[^"]*" height="[^"]*"', r'<svg \1', text, count=1)  # scale with the page


def _pts(bench: BenchResult | None) -> list[PointResult]:
    return sorted([p for p in bench.points if p.mode == "concurrency" and p.concurrency and getattr(p, "valid", True)
                   and p.summary.get("output_throughput_tps")
                   and p.summary["output_throughput_tps"].median is not None], key=lambda p: p.concurrency)


def throughput_bounds(roofline: dict[str, Any] | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The roofline bounds :func:`throughput_plot` draws: the batched decode bounds (by batch) and
    the batch-1 single-stream bounds; both empty when the roofline did not run or computed none."""
    if not roofline:
        return [], []
    return sorted(roofline.get("batched") or [], key=lambda q: q["batch"]), list(roofline.get("single_stream") or [])


def throughput_caption(roofline: dict[str, Any] | None) -> str:
    """The caption of :func:`throughput_plot`: names only the lines the plot has."""
    batched, single = throughput_bounds(roofline)
    bounds = [w for w, have in (("the roofline's batched bound", batched), ("the batch-1 bounds", single)) if have]
    s = "Measured output tok/s (median, min–max over trials) against concurrency"
    if bounds:
        return f"{s}, against {' and '.join(bounds)}."
    return f"{s}; no roofline bound to compare with (the roofline did not run or computed none)."


def throughput_plot(bench: BenchResult | None, roofline: dict[str, Any] | None) -> str | None:
    """Output tok/s against concurrency (median, min–max over trials), with the roofline's batched
    bound and the batch-1 single-stream bounds."""
    pts = _pts(bench) if bench is not None else []
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    xs = [p.concurrency for p in pts]
    s = [p.summary["output_throughput_tps"] for p in pts]
    ys = [x.median for x in s]
    err = [[y - (x.min if x.min is not None else y) for x, y in zip(s, ys)], [(x.max if x.max is not None else y) - y for x, y in zip(s, ys)]]
    ax.errorbar(xs, ys, yerr=err, marker="o", color="#1f77b4", label="measured output tok/s", capsize=3)
    batched, single = throughput_bounds(roofline)
    if batched:
        ax.plot([q["batch"] for q in batched], [q["tok_s"] for q in batched], "--", color="#d62728", label="roofline (batched decode)")
    for q in single:
        ax.plot([1], [q["tok_s"]], marker="_", markersize=18, mew=2, linestyle="none",
                color={"aggregate": "#ff7f0e", "per_gpu_memory": "#9467bd", "per_gpu": "#2ca02c"}.get(q["name"], "#7f7f7f"),
                label=f"batch-1 {q['label']}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_ylabel("output tokens / s")
    ax.set_title("Throughput vs concurrency" + (", against the roofline" if batched or single else " (no roofline bound)"))
    ax.legend(fontsize=7, loc="best")
    return _svg(fig)


def latency_plot(bench: BenchResult | None) -> str | None:
    """TPOT and TTFT (p50, p99) against output tok/s; each point labelled with its concurrency."""
    pts = _pts(bench) if bench is not None else []
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    xs = [p.summary["output_throughput_tps"].median for p in pts]

    def med(p: Any, k: str) -> float | None:
        v = p.summary.get(k)
        return v.median if v is not None else None

    for key, lab, style in (("tpot_p50_ms", "TPOT p50", "o-"), ("tpot_p99_ms", "TPOT p99", "o:"), ("ttft_p50_ms", "TTFT p50", "s-"), ("ttft_p99_ms", "TTFT p99", "s:")):
        ys = [med(p, key) for p in pts]
        if any(y is not None for y in ys):
            ax.plot([x for x, y in zip(xs, ys) if y is not None], [y for y in ys if y is not None], style, label=lab)
    for p, x in zip(pts, xs):
        y = med(p, "tpot_p50_ms")
        if y is not None:
            ax.annotate(f"c={p.concurrency}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_yscale("log")
    ax.set_xlabel("output tokens / s")
    ax.set_ylabel("latency (ms)")
    ax.set_title("Latency vs throughput")
    ax.legend(fontsize=7)
    return _svg(fig)


def gpu_plot(bench: BenchResult | None) -> str | None:
    """Mean GPU power (and the limit) and SM clock per load point; None without telemetry."""
    pts = [p for p in (_pts(bench) if bench is not None else []) if p.telemetry and p.telemetry.available and p.telemetry.gpus]
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    xs = [p.concurrency for p in pts]

    def mean(vals: list[float | None]) -> float | None:
        v = [x for x in vals if x is not None]
        return sum(v) / len(v) if v else None

    pw = [mean([g.power_W_mean for g in p.telemetry.gpus]) for p in pts]
    lim = [mean([g.power_limit_W for g in p.telemetry.gpus]) for p in pts]
    ax.plot(xs, pw, "o-", color="#d62728", label="power (mean of GPUs)")
    if any(v is not None for v in lim):
        ax.plot(xs, lim, ":", color="#d62728", label="power limit")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency")
    ax.set_ylabel("W")
    clk = [mean([g.sm_clock_MHz_mean for g in p.telemetry.gpus]) for p in pts]
    if any(v is not None for v in clk):
        ax2 = ax.twinx()
        ax2.plot(xs, clk, "s--", color="#1f77b4", label="SM clock")
        ax2.set_ylabel("MHz")
        ax2.legend(fontsize=7, loc="lower right")
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title("GPU power and clock under load")
    return _svg(fig)
