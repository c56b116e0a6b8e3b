"""The SGLang/vLLM log parser on public logs (tests/fixtures/evidence, each in ABOUT.md)."""

from __future__ import annotations

from infergap.parsers.engine_log import RULES, parse_engine_log
from tests.parsers.inputs import lines


def test_sglang_decode_batches_without_cuda_graph():
    f = parse_engine_log(lines("sglang-13023-decode-no-graph.log"))
    assert f.engine == "sglang" and f.lines == 8
    assert (f.decode_batches, f.decode_graph_known, f.decode_no_graph) == (8, 8, 2)
    assert (f.max_running, f.max_running_graph, f.min_running_no_graph) == (46, 28, 36)
    assert (f.max_token_usage, f.gen_throughput_max, f.max_queue) == (0.19, 1447.08, 0)
    assert f.first_no_graph_line is not None and f.first_no_graph_line.startswith("[2025-11-11 04:06:27] Decode batch, #running-req: 46")


def test_sglang_server_args():
    f = parse_engine_log(lines("sglang-1362-server-args.log"))
    assert f.engine == "sglang" and len(f.args) == 22


def test_vllm_default_moe_config_names_the_missing_file():
    f = parse_engine_log(lines("vllm-17619-moe-default.log"))
    assert f.moe_default_count == 1
    assert f.moe_default_configs == ["E=16,N=1536,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,block_shape=[128,128"]


def test_vllm_custom_allreduce_reason():
    f = parse_engine_log(lines("vllm-13719-custom-ar.log"))
    assert f.custom_ar_disabled == ["it's not supported on more than two PCIe-only GPU"]


def test_nccl_lines_in_an_engine_log_are_left_to_the_nccl_parser():
    f = parse_engine_log(lines("nccl-1232-two-nodes.log"))
    assert f.lines == 16 and f.engine is None and f.args == {} and f.decode_batches == 0
    assert any("NCCL INFO" in r.words for r in RULES)
    assert f.hosts == ["host-a", "host-b"]  # only the host names of their prefixes are kept
