"""What the plan makes of ``infergap tune``'s experiments read back from a real ledger: a lever the
tune measured but that this plan's facts do not select (a plan of the server alone, with no bench
of its own, as `plan --url` after a tune) is still listed — under "tried — helped" with its gain,
or under "tried — won't help" — instead of being dropped."""

from __future__ import annotations

from infergap.ledger import ExperimentKey, Ledger
from infergap.plan import build_plan
from infergap.render.plan import render_markdown, render_text


def _record(led: Ledger, lever: str, setting: str, verdict: str, a: float, b: float, change: float) -> None:
    run = led.record("tune", {"schema": "infergap.tune/1"}, None, status="done")
    key = ExperimentKey(host="h", engine="llama.cpp", engine_version="b1", model="m.gguf", workload="chat c=16 in=128 out=64 random")
    judgement = {"metric": "output_throughput_tps", "level": "c=16", "baseline": {"median": a}, "variant": {"median": b},
                 "change_pct": change, "noise_pct": 3.0}
    led.record_experiment(run, key, lever=lever, setting=setting, metric="output_throughput_tps", verdict=verdict,
                          change_pct=change, payload={"judgement": judgement})


def test_measured_levers_the_plan_does_not_select_are_listed_with_their_measurement(tmp_path):
    with Ledger(tmp_path / "l.db") as led:
        _record(led, "llamacpp.parallel", "--parallel 16", "helps", 169.7, 606.9, 257.7)
        _record(led, "try:-ub 8", "-ub 8", "hurts", 600.0, 420.0, -30.0)
        _record(led, "fix:net.socket_buffers", "sysctl -w net.core.somaxconn=4096", "no effect within noise", 600.0, 601.0, 0.2)
        rows = led.experiments()
    plan = build_plan(experiments=rows)
    assert [x.id for x in plan.levers] == []  # nothing selected without facts
    (helped,) = plan.helped
    assert helped.id == "llamacpp.parallel" and helped.title and "169.7 → 606.9" in helped.measurement
    assert "+257.7 %" in helped.measurement and "c=16" in helped.measurement
    tried = {t.id: t for t in plan.tried}
    assert set(tried) == {"try:-ub 8", "fix:net.socket_buffers"}
    assert tried["try:-ub 8"].verdict == "hurts" and tried["fix:net.socket_buffers"].title == "host fix net.socket_buffers"
    assert "TRIED — HELPED (1" in render_text(plan, width=200)
    md = render_markdown(plan)
    assert "## Tried — helped" in md and "`--parallel 16`" in md and "## Tried — won't help" in md
