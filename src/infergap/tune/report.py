"""A tune's report: the per-lever table (baseline, variant, change with the noise, verdict), the
best command line, and a self-contained HTML page with the before/after curves of each lever
(inline SVG from :mod:`infergap.render.plots`'s machinery; jinja2 autoescapes every value)."""

from __future__ import annotations

from typing import Any

from infergap.guard import term_safe
from infergap.tune.run import TuneResult


def _num(v: float | None) -> str:
    return "–" if v is None else f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"


def rows(result: TuneResult) -> list[dict[str, str]]:
    """One dict of display cells per lever tried, in the order tried."""
    out = []
    for t in result.trials:
        j = t.judgement
        a, b = j.baseline, j.variant
        change = "–" if j.change_pct is None else f"{j.change_pct:+.1f} %" + (f" ±{j.noise_pct:.1f}" if j.noise_pct is not None else "")
        out.append({"lever": t.lever, "setting": t.setting, "metric": f"{j.metric}" + (f" @ {j.level}" if j.level else ""),
                    "baseline": f"{_num(a.median)} [{_num(a.min)}–{_num(a.max)}] n={len(a.values)}" if a.values else "–",
                    "variant": f"{_num(b.median)} [{_num(b.min)}–{_num(b.max)}] n={len(b.values)}" if b.values else "–",
                    "change": change, "verdict": t.verdict,
                    "why": t.refused or j.reason})
    return out


def _baseline_points(result: TuneResult) -> list[str]:
    """The load levels the baseline's first run measured, one line each (output tok/s, TTFT and TPOT p50)."""
    out = []
    for label, v in (result.baseline_curve or {}).items():
        if v.get("output_tps") is None:
            continue
        out.append(f"  {label}: {_num(v['output_tps'])} output tok/s, TTFT p50 {_num(v.get('ttft_p50_ms'))} ms, "
                   f"TPOT p50 {_num(v.get('tpot_p50_ms'))} ms" + ("" if v.get("valid") else " (not valid)"))
    return out


def render_text(result: TuneResult) -> str:
    """The terminal report: what was tuned, the table, the refused servers' log lines, the best command."""
    lines = [f"tune of {term_safe(result.launch, one_line=True)}",
             f"  {result.engine or 'unknown engine'} {result.engine_version or ''} · model {term_safe(result.model or '?', one_line=True)}"
             f" · host {result.host} · workload {result.workload} · {result.rounds} round(s) of A B"]
    cols = ("lever", "setting", "metric", "baseline", "variant", "change", "verdict")
    table = rows(result)
    width = {c: max([len(c)] + [len(term_safe(r[c], one_line=True)) for r in table]) for c in cols}
    lines.append("")
    lines.append("  ".join(c.ljust(width[c]) for c in cols).rstrip())
    for r in table:
        lines.append("  ".join(term_safe(r[c], one_line=True).ljust(width[c]) for c in cols).rstrip())
    for t in result.trials:
        if t.failed_runs:
            lines.append(f"\n{t.lever}: {len(t.failed_runs)} run(s) gave no value and are not in the verdict:")
            lines += [f"  {term_safe(x, one_line=True)}" for x in t.failed_runs]
        if t.refused:
            lines.append(f"\n{t.lever} refused: {term_safe(t.refused, one_line=True)}; the server's log ends:")
            lines += [f"  | {term_safe(x, one_line=True)}" for x in t.log_tail[-10:]]
    if not table:
        lines.append("(no lever tried: the baseline run did not finish)" if result.baseline_stopped else "(no lever tried)")
    if result.baseline_stopped:
        lines.append(f"\nbaseline {term_safe(result.baseline_stopped, one_line=True)}" +
                     (f"; bench run {result.baseline_run} of the ledger" if result.baseline_run is not None else ""))
        lines += _baseline_points(result)
    lines.append("")
    lines.append("verdicts: change = variant median vs baseline median; ± = both sides' min–max ranges together "
                 "(the noise the change had to clear; infergap.tune.verdict)")
    lines.append(f"best command: {term_safe(result.best or result.launch, one_line=True)}"
                 + ("" if result.best_levers else " (the user's own: no command-line lever helped)"))
    kept = {k["lever"] for k in result.host_kept}
    for lev in result.best_host:
        t = next(x for x in result.trials if x.lever == lev)
        how = "left applied (--keep-best)" if lev in kept else f"reverted; apply it with: infergap fix --only {lev.removeprefix('fix:')} --apply"
        lines.append(f"best host change: {lev}: {term_safe(t.setting, one_line=True)} — {how}")
    for n in result.notes:
        lines.append(f"note: {term_safe(n, one_line=True)}")
    if result.stopped:
        lines.append(f"stopped early: {term_safe(result.stopped, one_line=True)}")
    if result.left_running:
        lr = result.left_running
        lines.append(f"left running: pid {lr['pid']} at {lr['url']}: {term_safe(lr['command'], one_line=True)}")
    return "\n".join(lines) + "\n"


def curve_plot(before: dict[str, Any] | None, after: dict[str, Any] | None, title: str) -> str | None:
    """Output tok/s and TTFT p50 against concurrency, before (the baseline's first run) and after
    (the lever's last variant run); None without two valid curves."""
    from infergap.render import plots

    def pts(c: dict[str, Any] | None) -> list[tuple[int, float, float | None]]:
        return sorted((v["concurrency"], v["output_tps"], v.get("ttft_p50_ms")) for v in (c or {}).values()
                      if v.get("valid") and v.get("concurrency") and v.get("output_tps") is not None)

    a, b = pts(before), pts(after)
    if not a or not b:
        return None
    fig, (ax, ax2) = plots.plt.subplots(1, 2, figsize=(8.0, 3.0))
    for series, lab, style in ((a, "before", "o-"), (b, "after", "s--")):
        ax.plot([x for x, _, _ in series], [y for _, y, _ in series], style, label=lab)
        lat = [(x, t) for x, _, t in series if t is not None]
        ax2.plot([x for x, _ in lat], [t for _, t in lat], style, label=lab)
    for axis, ylabel in ((ax, "output tokens / s"), (ax2, "TTFT p50 (ms)")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("concurrency")
        axis.set_ylabel(ylabel)
        axis.legend(fontsize=7)
    ax.set_title(title[:60], fontsize=8)
    return plots._svg(fig)


_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>infergap tune</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font-family:system-ui,sans-serif;max-width:1200px;margin:1em auto;padding:0 1em}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:4px 6px;text-align:left;font-size:13px;vertical-align:top}
.helps{color:#1a7f37;font-weight:600}.hurts,.refused{color:#cf222e;font-weight:600}svg{max-width:100%;height:auto}
code{background:#f4f4f4;padding:1px 4px;word-break:break-all}pre{white-space:pre-wrap;background:#f8f8f8;padding:6px;font-size:12px}</style>
</head><body><h1>infergap tune</h1>
<p><code>{{ r.launch }}</code><br>{{ r.engine or "unknown engine" }} {{ r.engine_version or "" }} · model {{ r.model or "?" }} ·
host {{ r.host }} · workload {{ r.workload }} · {{ r.rounds }} round(s) of A B</p>
<table><tr>{% for c in cols %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in rows %}<tr>{% for c in cols %}<td{% if c == "verdict" %} class="{{ row[c].split()[0] }}"{% endif %}>{{ row[c] }}</td>{% endfor %}</tr>{% endfor %}
</table>
<p>Best command: <code>{{ r.best or r.launch }}</code>{% if not r.best_levers %} (the user's own: no command-line lever helped){% endif %}</p>
{% for h in r.best_host %}<p>Best host change: {{ h }}{% if h in r.host_kept | map(attribute="lever") | list %} (left applied){% else %} (reverted){% endif %}</p>{% endfor %}
{% for n in r.notes %}<p>Note: {{ n }}</p>{% endfor %}
{% if r.stopped %}<p>Stopped early: {{ r.stopped }}</p>{% endif %}
{% if r.baseline_stopped %}<p>Baseline {{ r.baseline_stopped }}.</p>{% endif %}
{% for t, svg in plots %}<h2>{{ t.lever }}: {{ t.setting }} — {{ t.verdict }}</h2>
{% if svg %}<figure>{{ svg | safe }}<figcaption>Before: the user's command (first run); after: with {{ t.setting }} (last run).</figcaption></figure>{% endif %}
{% if t.refused %}<p>{{ t.refused }}</p><pre>{{ t.log_tail | join("\\n") }}</pre>{% endif %}
{% endfor %}</body></html>
"""


def render_html(result: TuneResult) -> str:
    """The HTML page: header, table, best command, and per lever its before/after curves."""
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    cols = ("lever", "setting", "metric", "baseline", "variant", "change", "verdict", "why")
    plots = [(t, curve_plot(result.baseline_curve, t.curve, f"{t.lever}: {t.setting}")) for t in result.trials]
    return env.from_string(_PAGE).render(r=result, rows=rows(result), cols=cols, plots=plots)


def render_json(result: TuneResult) -> str:
    """The ``infergap.tune/1`` document."""
    from infergap.guard import dumps

    return dumps(result.model_dump(mode="json", by_alias=True), indent=1)
