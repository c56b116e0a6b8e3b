"""What the real one-H200 run said, asserted from its files (tests/fixtures/real-gpu/h200-transformers)."""

from __future__ import annotations

import json
from pathlib import Path


from infergap.bench import compare_bench, load_result
from infergap.plan import build_plan
from infergap.roofline.bounds import RooflineResult
from infergap.synthesis import AuditReport

D = Path(__file__).resolve().parents[1] / "fixtures" / "real-gpu" / "h200-transformers"


def _json(name):
    return json.loads((D / name).read_text())


def test_audit_of_the_gpu_host():
    a = AuditReport.model_validate(_json("audit.json"))
    assert a.host.gpu_summary == "1 × NVIDIA H200"
    assert all(i.error is None for i in a.investigators)
    assert a.get("pcie.max_read_request", "0000:00:06.0")[0].status.value == "ok"


def test_roofline_of_the_served_model():
    r = RooflineResult.model_validate(_json("roofline.json"))
    agg = next(b for b in r.single_stream if b.name == "aggregate")
    # 8.03 B bf16 parameters minus the input embedding, plus KV: ~15.1 GB read per token at 4.8 TB/s
    assert 14.5e9 < agg.bytes_per_token < 15.5e9
    assert 300 < agg.tok_s < 330


def test_bench_telemetry_and_efficiency():
    b = load_result(D / "bench.json")
    c1 = next(p for p in b.points if p.concurrency == 1)
    t = c1.telemetry.gpus[0]
    assert t.name == "NVIDIA H200" and t.samples > 5
    assert t.power_W_mean < 0.5 * t.power_limit_W  # far below the 700 W limit: the GPU is starved
    plan = _json("plan.json")
    head = plan["gap"]["headline"][0]
    assert head["bound"] == "aggregate" and 0.05 < head["ratio"] < 0.2


def test_plan_blamed_the_engine_and_its_first_lever_helped():
    plan = build_plan(audit=_json("audit.json"), roofline=_json("roofline.json"), bench=load_result(D / "bench.json"),
                      server=_server())
    ids = [l.id for l in plan.levers]
    assert ids[0] == "transformers.continuous_batching" and "engine.production_server" in ids
    cmp = compare_bench(load_result(D / "bench-default.json"), load_result(D / "bench-cb.json"))
    by = {p.label: {m.metric: m for m in p.metrics} for p in cmp.points}
    assert by["c=16"]["output_throughput_tps"].verdict == "better"
    assert by["c=16"]["output_throughput_tps"].b.median > 4 * by["c=16"]["output_throughput_tps"].a.median
    # batch 1 does not change: continuous batching is not what costs the single stream
    assert by["c=1"]["output_throughput_tps"].verdict == "within noise"


def _server():
    from infergap.server import ServerConfig

    return ServerConfig.model_validate(_json("server.json"))


