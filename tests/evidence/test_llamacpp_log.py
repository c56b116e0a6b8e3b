"""llama.cpp's llama-server log as evidence: recognised and used by the plan (parsing:
tests/parsers/test_llamacpp_log.py)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

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


def test_a_log_with_layers_on_the_cpu_makes_offload_the_first_action():
    logs = engine_logs_from_files([EV / "llamacpp-6787-offload-none.log"])
    rl = json.loads((GPU / "healthy" / "roofline.json").read_text())
    plan = build_plan(roofline=rl, engine_logs=logs)
    assert plan.facts["server.weights_on_gpu"].value is False
    assert "offloaded 0/33 layers" in plan.facts["server.weights_on_gpu"].source
    assert plan.levers[0].id == "llamacpp.offload_all" and plan.top_actions[0].startswith("[P0")
    ok = build_plan(roofline=rl, engine_logs=engine_logs_from_files([EV / "llamacpp-12171-offload-all.log"]))
    assert ok.facts["server.weights_on_gpu"].value is True and "llamacpp.offload_all" not in [x.id for x in ok.levers]
