"""What the real one-H200 llama-server runs say, asserted from their files
(tests/fixtures/real-gpu/h200-llama-server; ABOUT.md there says how each was made).

Every misconfigured server's cause must be the plan's first action — from the stage JSON through
the current code, and (for the runs made with it) in the plan the doctor wrote on the GPU machine;
the healthy server's plan must carry no P0/P1 and nothing another engine or an MoE model would need.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from infergap.bench import load_result
from infergap.plan import build_plan
from infergap.server import ServerConfig

D = Path(__file__).resolve().parents[1] / "fixtures" / "real-gpu" / "h200-llama-server"

#: case → the lever that names its cause. Cases ending in -quick, kv-cut and kv-refuse were run by
#: the doctor as it is now; the others by the doctor before these diagnoses existed.
CAUSES = {
    "ngl16": "llamacpp.offload_all", "ngl16-quick": "llamacpp.offload_all",
    "p1": "llamacpp.parallel", "p1-quick": "llamacpp.parallel",
    "kv-cut": "llamacpp.context_size", "kv-refuse": "llamacpp.context_size",
}
FOREIGN = ("cuda_graph", "moe", "sglang", "vllm", "dp_attention", "ep_", "mtp", "transformers", "allreduce", "nccl")


def _plan(case: str):
    d = D / case
    return build_plan(audit=json.loads((d / "audit.json").read_text()), roofline=json.loads((d / "roofline.json").read_text()),
                      bench=load_result(d / "bench.json"), server=ServerConfig.model_validate_json((d / "server.json").read_text()))


@pytest.mark.parametrize("case", sorted(CAUSES))
def test_each_misconfiguration_is_the_first_action(case):
    plan = _plan(case)
    assert plan.levers and plan.levers[0].id == CAUSES[case]
    first = plan.top_actions[0]
    assert first.startswith("[P0" if CAUSES[case] != "llamacpp.parallel" else "[P1")
    want = {"llamacpp.offload_all": "-ngl 999", "llamacpp.parallel": "--parallel 64", "llamacpp.context_size": "--ctx-size 8192 --parallel 16"}
    assert want[CAUSES[case]] in first


@pytest.mark.parametrize("case", ["ngl16-quick", "p1-quick", "kv-cut", "kv-refuse"])
def test_the_doctor_on_the_gpu_machine_said_so_first(case):
    """The plan.json the doctor wrote there, not a re-computation."""
    plan = json.loads((D / case / "plan.json").read_text())
    assert plan["levers"][0]["id"] == CAUSES[case]
    assert CAUSES[case].split(".")[1].split("_")[0] in plan["levers"][0]["id"]
    assert (D / case / "doctor.txt").read_text().splitlines()[2].startswith(" 1. [P")


def test_weights_off_the_gpu_are_found_from_memory_in_use():
    f = _plan("ngl16").facts
    assert f["server.weights_on_gpu"].value is False
    assert f["load.gpu_mem_used_B"].value < 0.75 * f["model.weight_bytes"].value  # 11.3 GB of 16.1 GB
    assert _plan("healthy").facts["server.weights_on_gpu"].value is True


def test_one_slot_is_sized_from_the_kv_budget_not_the_sweep():
    plan = _plan("p1")
    assert plan.facts["server.kv_slots_max"].value == 222  # 120 GB / (128 KiB × 4096 tokens)
    assert "--parallel 64 --ctx-size 262144" in plan.levers[0].actions[0]
    assert plan.facts["load.max_concurrency"].value == 16  # what the sweep reached: not the advice


def test_context_too_small_refused_and_cut():
    refuse, cut = _plan("kv-refuse").facts, _plan("kv-cut").facts
    assert refuse["load.context_refused"].value == 128 and refuse["load.request_tokens_max"].value in (286, 287)  # the salt makes some prompts a token longer
    assert cut["load.truncated_share"].value == 1.0 and cut["load.context_refused"].value == 0
    # a refused run has no throughput: the gap says so instead of "0 tok/s is 0 % of the bound"
    assert "no request completed" in _plan("kv-refuse").gap.summary
    assert not _plan("kv-refuse").gap.points


def test_healthy_server_has_no_false_p0_p1_and_nothing_foreign():
    for case in ("healthy", "healthy-quick"):
        plan = _plan(case)
        assert not [x.id for x in plan.levers if x.priority in ("P0", "P1")]
        assert not [h.id for h in plan.host_fixes if h.severity in ("P0", "P1")]
        named = [x.id for x in plan.levers + plan.wont_help] + [u.fact for u in plan.unknowns]
        named += [lv for u in plan.unknowns for lv in u.decides]
        assert not [n for n in named if any(w in n for w in FOREIGN)], named
        assert "throttled" not in json.dumps(plan.gap.model_dump())
        # every lever decided by the run's own facts, but what only the serving process tells (these
        # runs did not read it): whether its CPU side is the limit, which the host-bound lever needs
        assert [u.fact for u in plan.unknowns] == ["proc.cpu_saturated"], [u.fact for u in plan.unknowns]
        assert plan.unknowns[0].decides == ["llamacpp.host_bound"]


def test_healthy_server_saturation_and_host_bound_are_named():
    f = _plan("healthy").facts
    assert f["load.slots_saturated"].value is True  # c=16 → 64: TTFT ×9.7, tok/s ×1.24
    assert f["regime.host_bound"].value is True  # GPU busy 38 % with all 16 slots occupied
    assert f["regime.batch1_eff_measured_bw"].value == pytest.approx(0.63, abs=0.01)  # vs the 4.16 TB/s the audit measured
    assert f["regime.batch1_eff"].value == pytest.approx(0.547, abs=0.005)  # vs the 4.8 TB/s datasheet
    # the GPU idle with every slot busy is not enough for the host-bound lever: it needs a server
    # thread that ran flat out (the serving process, not read in this run)
    assert [x.id for x in _plan("healthy").levers] == ["llamacpp.more_slots"]


def test_throttle_reason_shown_only_below_full_clocks():
    from infergap.render.bench import telemetry_line

    p = next(p for p in load_result(D / "healthy" / "bench.json").points if p.concurrency == 16)
    g = p.telemetry.gpus[0]
    assert g.throttle_reasons == ["sw_power_cap"] and g.sm_clock_MHz_mean > 0.99 * g.sm_clock_MHz_max_rated
    assert "throttled" not in telemetry_line(p.telemetry)


def test_introspection_of_the_real_server():
    s = ServerConfig.model_validate_json((D / "healthy" / "server.json").read_text())
    assert (s.engine, s.n_slots, s.slot_context, s.total_context) == ("llama.cpp", 16, 2048, 32768)
    assert (s.model_type, s.n_params, s.model_bytes, s.train_context) == ("F16", 8030261248, 16061054976, 131072)
    assert s.metrics_enabled is True and s.speculative is False
    off = ServerConfig.model_validate_json((D / "nometrics" / "server.json").read_text())
    assert off.metrics_enabled is False and off.errors == []


def test_introspection_parses_the_raw_answers():
    """The endpoints' own bodies, as curl saved them, through the parser (no server)."""
    from infergap.server import _apply, finish

    cfg = ServerConfig()
    for name, path in (("raw-props.txt", "/props"), ("raw-slots.txt", "/slots"), ("raw-metrics.txt", "/metrics"), ("raw-v1-models.txt", "/v1/models")):
        body, _, status = (D / "kv-fits" / name).read_text().rstrip("\n").rpartition("\n")
        assert status == "200"
        _apply(cfg, path, None if path == "/metrics" else json.loads(body), body)
    finish(cfg)
    assert (cfg.n_slots, cfg.slot_context, cfg.total_context) == (16, 256, 4096)  # -c 2048 rounded up to 16 × 256


def test_server_log_is_kept_and_readable():
    text = gzip.decompress((D / "healthy" / "server.log.gz").read_bytes()).decode()
    assert "n_slots = 16, n_ctx_slot = 2048" in text


def test_gguf_roofline_matches_the_file():
    from infergap.roofline.gguf import GGUFHeader
    from infergap.roofline.model import model_from_gguf

    h = GGUFHeader.from_json(json.loads((D / "gguf-header.json").read_text()), "llama-3.1-8b.gguf")
    spec = model_from_gguf(h)
    stored = sum(t.bytes for t in spec.tensors if t.stored)
    assert stored == h.tensor_bytes == h.size - h.data_offset
    assert abs(stored - h.size) / h.size < 0.01
    assert (spec.layers, spec.kv_heads, spec.vocab, spec.precision["dense_ffn"]) == (32, 8, 128256, "f16")


def test_the_gpu_vm_is_not_a_container():
    from infergap.audit import run_audit
    from infergap.evidence.overlay import open_with_evidence

    snap = open_with_evidence(str(D / "snapshot.tar.gz"), [], host=False)
    try:
        a = run_audit(snap)
    finally:
        snap.close()
    det = a.get("container.detect")[0]
    assert det.status.value == "ok" and "/.dockerenv present" in json.dumps(a.to_json()["findings"])
    assert a.host.container is None and a.host.virtualization == "hypervisor flag"


def test_requests_waiting_in_the_engine_mark_the_slots_saturated():
    """llamacpp:requests_deferred read during the sweep decides it when the sweep never went past the slots."""
    from infergap.plan.conditions import Fact
    from infergap.plan.signals import derive

    f = {"server.n_slots": Fact(value=4, source="GET /props"),
         "load.waiting_max": Fact(value=3, source="engine /metrics (llama.cpp) during the sweep, largest at c=4")}
    derive(f)
    assert f["load.slots_saturated"].value is True and "3 request(s) waiting" in f["load.slots_saturated"].source
    f = {"server.n_slots": Fact(value=4, source="GET /props"), "load.waiting_max": Fact(value=0, source="engine /metrics")}
    derive(f)
    assert "load.slots_saturated" not in f


def test_slots_are_sized_only_from_hardware_the_audit_found():
    """The one-slot H200 run's plan, with the GPU taken from the audit: on a host whose audit
    found no GPU the H200 named for the roofline sized ``--parallel 64 --ctx-size 262144``."""
    d = D / "p1"
    audit, rl = json.loads((d / "audit.json").read_text()), json.loads((d / "roofline.json").read_text())
    bench, server = load_result(d / "bench.json"), ServerConfig.model_validate_json((d / "server.json").read_text())
    audit["host"]["gpus"] = []
    rl["hardware"]["memory_source"] = "datasheet"  # what `roofline --gpu h200` gives on a host without one
    none = build_plan(audit=audit, roofline=rl, bench=bench, server=server)
    assert "server.kv_slots_max" not in none.facts
    assert not any("--parallel 64" in a for lv in none.levers for a in lv.actions), [lv.actions for lv in none.levers]
    # Without an audit the GPU is assumed: said so, and no more slots than the sweep reached (c=16).
    bare = build_plan(roofline=rl, bench=bench, server=server)
    assert bare.facts["server.kv_slots_assumed"].value is True and "assumed" in bare.facts["server.kv_slots_max"].source
    act = next(a for lv in bare.levers if lv.id == "llamacpp.parallel" for a in lv.actions)
    assert "--parallel 16 " in act and "assumed" in act and "c=16" in act, act
