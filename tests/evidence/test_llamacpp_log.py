"""llama.cpp's llama-server log as evidence: recognised, parsed, and used by the plan."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from infergap.parsers.llamacpp_log import parse_llamacpp_log
from infergap.evidence.recognize import scan_file
from infergap.plan import build_plan
from infergap.plan.inputs import engine_logs_from_files

ROOT = Path(__file__).resolve().parents[2]
EV = ROOT / "tests" / "fixtures" / "evidence"
GPU = ROOT / "tests" / "fixtures" / "real-gpu" / "h200-llama-server"


def _h200_log(tmp_path: Path, case: str) -> Path:
    p = tmp_path / f"{case}.log"
    p.write_bytes(gzip.decompress((GPU / case / "server.log.gz").read_bytes()))
    return p


def test_public_and_h200_logs_are_recognised(tmp_path):
    for f in (EV / "llamacpp-6787-offload-none.log", EV / "llamacpp-12171-offload-all.log", _h200_log(tmp_path, "ngl16")):
        parts, unknown = scan_file(f)
        assert [p.kind for p in parts] == ["llamacpp_log"] and not unknown, f.name


def test_offload_flash_attention_and_context_from_older_logs():
    none = parse_llamacpp_log((EV / "llamacpp-6787-offload-none.log").read_text().splitlines())
    assert (none.args["offloaded_layers"], none.args["model_layers"], none.args["n_ctx"]) == (0, 33, 512)
    full = parse_llamacpp_log((EV / "llamacpp-12171-offload-all.log").read_text().splitlines())
    assert (full.args["offloaded_layers"], full.args["model_layers"], full.args["flash_attn"], full.args["n_ctx_slot"]) == (49, 49, "on", 512)


def test_slots_and_context_from_a_current_log(tmp_path):
    f = parse_llamacpp_log(_h200_log(tmp_path, "kv-fits").read_text().splitlines())
    # -c 2048 with 16 slots: llama.cpp raised it to 16 × 256 (its smallest slot) and said so
    assert (f.args["n_slots"], f.args["n_ctx_slot"], f.args["n_ctx"], f.args["ctx_rounded_to"]) == (16, 256, 4096, 4096)
    assert f.args["kv_unified"] is False and f.args["graphs_reused_max"] > 1000
    # this release prints no offload line at its default verbosity: unknown, not "all on the GPU"
    assert "offloaded_layers" not in f.args


def test_a_log_with_layers_on_the_cpu_makes_offload_the_first_action():
    logs = engine_logs_from_files([EV / "llamacpp-6787-offload-none.log"])
    rl = json.loads((GPU / "healthy" / "roofline.json").read_text())
    plan = build_plan(roofline=rl, engine_logs=logs)
    assert plan.facts["server.weights_on_gpu"].value is False
    assert "offloaded 0/33 layers" in plan.facts["server.weights_on_gpu"].source
    assert plan.levers[0].id == "llamacpp.offload_all" and plan.top_actions[0].startswith("[P0")
    ok = build_plan(roofline=rl, engine_logs=engine_logs_from_files([EV / "llamacpp-12171-offload-all.log"]))
    assert ok.facts["server.weights_on_gpu"].value is True and "llamacpp.offload_all" not in [x.id for x in ok.levers]
