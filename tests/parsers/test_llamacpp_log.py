"""The llama-server log parser on public logs (ggml-org/llama.cpp#6787, #12171) and on logs of
the H200 runs in tests/fixtures/real-gpu."""

from __future__ import annotations

import gzip
from pathlib import Path

from infergap.parsers.llamacpp_log import is_llamacpp_line, parse_llamacpp_log
from tests.parsers.inputs import EVIDENCE as EV
from tests.parsers.inputs import lines

GPU = EV.parent / "real-gpu" / "h200-llama-server"


def _h200_log(tmp_path: Path, case: str) -> Path:
    p = tmp_path / f"{case}.log"
    p.write_bytes(gzip.decompress((GPU / case / "server.log.gz").read_bytes()))
    return p


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


def test_engine_fields_follow_the_args():
    f = parse_llamacpp_log(lines("llamacpp-12171-offload-all.log"))
    assert f.engine == "llama.cpp" and f.attention_backends == ["flash_attn"]


def test_lines_of_a_public_log_are_told_as_llamacpp():
    body = [ln for ln in lines("llamacpp-12171-offload-all.log") if ln.strip()]
    assert (sum(map(is_llamacpp_line, body)), len(body)) == (15, 16)
