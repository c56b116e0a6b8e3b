"""The doctor's report: one self-contained HTML page (jinja2; CSS and SVG plots inline, no external
resource of any kind) and its Markdown counterpart.

Sections: summary (efficiency gap, top five actions, stages), triaged audit, roofline with its
assumptions, sweep table and plots, plan by tier, what will not help, unknowns, and the raw
evidence of every finding (collapsible). Responsive CSS for phones; a print stylesheet that
expands every collapsed block.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING, Any

import jinja2

from infergap.bench.metrics import likely_cause
from infergap.plan import TIER_LABEL, Plan
from infergap.render import plots
from infergap.render.bench import tail_cell
from infergap.render.plan import render_markdown

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.bench.results import BenchResult
    from infergap.roofline.bounds import RooflineResult
    from infergap.server import ServerConfig
    from infergap.synthesis import AuditReport


def _env() -> jinja2.Environment:
    text = (resources.files("infergap") / "data" / "templates" / "report.html.j2").read_text(encoding="utf-8")
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["pct"] = lambda v, d=1: "–" if v is None else f"{v * 100:.{d}f} %"
    env.filters["num"] = lambda v, d=1: "–" if v is None else f"{v:,.{d}f}"
    env.globals["TIER_LABEL"] = TIER_LABEL
    env.globals["tmpl"] = env.from_string(text)
    return env


def _sweep_rows(bench: BenchResult | None) -> list[dict[str, Any]]:
    rows = []
    for p in bench.points if bench is not None else []:
        def m(k: str) -> float | None:
            s = p.summary.get(k)
            return s.median if s is not None else None

        rows.append({"label": p.label, "trials": len(p.trials), "out": m("output_throughput_tps"), "total": m("total_throughput_tps"),
                     "rps": m("request_throughput_rps"), "ttft50": m("ttft_p50_ms"), "ttft99": tail_cell(p, "ttft_p99_ms"),
                     "tpot50": m("tpot_p50_ms"), "tpot99": tail_cell(p, "tpot_p99_ms"), "itl50": m("itl_p50_ms"),
                     "client_bound": p.client_bound, "unstable": p.unstable, "error": p.error,
                     "mode": p.mode, "concurrency": p.concurrency, "valid": p.valid, "invalid_reason": p.invalid_reason,
                     "requests": p.requests, "completed": p.completed, "failed": p.failed, "retried": p.retried,
                     "error_rate": p.error_rate, "cause": likely_cause(p.errors) if p.failed else None,
                     "errors": ", ".join(f"{k} ×{v}" for k, v in p.errors.items()), "few": p.few_samples,
                     "min_completed": p.min_completed,
                     "spread": (p.summary.get("output_throughput_tps").spread_pct if p.summary.get("output_throughput_tps") else None)})
    return rows


def _engine_rows(bench: BenchResult | None) -> list[dict[str, Any]]:
    """Per point: the engine's metrics beside the GPU telemetry of the same windows, and why."""
    rows = []
    for p in bench.points if bench is not None else []:
        e = p.engine if p.engine is not None and p.engine.available else None
        t = p.telemetry if p.telemetry is not None and p.telemetry.available else None
        utils = [g.util_pct_mean for g in t.gpus if g.util_pct_mean is not None] if t else []
        power = [g.power_W_mean for g in t.gpus if g.power_W_mean is not None] if t else []
        rows.append({"label": p.label, "engine": e.engine if e else None,
                     "running": e.running_mean if e else None, "running_max": e.running_max if e else None,
                     "waiting": e.waiting_max if e else None,
                     "kv": (e.kv_usage_max if e.kv_usage_max is not None else
                            (e.tokens_max / e.slot_ctx if e.tokens_max and e.slot_ctx else None)) if e else None,
                     "preempt": e.preemptions if e else None, "hits": e.prefix_hit_rate if e else None,
                     "util": sum(utils) / len(utils) if utils else None, "power": sum(power) if power else None,
                     "why": p.explanation.line if p.explanation else None,
                     "knee": bool(p.explanation and p.explanation.knee)})
    return rows


def render_html(plan: Plan, *, audit: AuditReport | None = None, roofline: RooflineResult | dict[str, Any] | None = None,
                bench: BenchResult | None = None, server: ServerConfig | None = None,
                duration_s: float | None = None) -> str:
    """The report page as one HTML string (UTF-8, self-contained)."""
    rl = roofline.to_json_dict() if hasattr(roofline, "to_json_dict") else roofline
    groups: dict[str, list[Any]] = {}
    for f in audit.findings if audit is not None else []:
        groups.setdefault(f.status.value, []).append(f)
    env = _env()
    return env.globals["tmpl"].render(
        plan=plan, audit=audit, groups=groups, rl=rl, bench=bench, server=server, duration_s=duration_s,
        sweep=_sweep_rows(bench), engine_rows=_engine_rows(bench),
        capacity=bench.capacity.line() if bench is not None and bench.capacity is not None else None,
        engine_reason=next((p.engine.reason for p in (bench.points if bench else []) if p.engine and not p.engine.available), None),
        plot_tput=plots.throughput_plot(bench, rl), tput_caption=plots.throughput_caption(rl),
        plot_lat=plots.latency_plot(bench),
        plot_gpu=plots.gpu_plot(bench),
        telemetry_reason=next((p.telemetry.reason for p in (bench.points if bench else []) if p.telemetry and not p.telemetry.available), None),
    )


def render_report_markdown(plan: Plan, audit: AuditReport | None = None,
                           roofline: RooflineResult | dict[str, Any] | None = None, bench: BenchResult | None = None) -> str:
    """Markdown of the whole run: the plan, then the audit, the roofline and the sweep."""
    parts = [render_markdown(plan)]
    if audit is not None:
        from infergap.render.audit import render_md

        parts.append(render_md(audit))
    if roofline is not None and hasattr(roofline, "single_stream"):
        from infergap.roofline.render import render_markdown as rl_md

        parts.append(rl_md(roofline))
    if bench is not None:
        from infergap.render.bench import to_markdown

        parts.append(to_markdown(bench))
    return "\n\n".join(parts)
