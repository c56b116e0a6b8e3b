"""parsers/trtllm_log.py: TensorRT-LLM and Triton logs from public reports."""

from __future__ import annotations

from infergap.parsers.trtllm_log import is_trtllm_line, parse_trtllm_log
from tests.parsers.inputs import lines


def test_the_kv_cache_triton_loaded_is_read() -> None:
    """tutorials#150: Triton loads the TensorRT-LLM model with a 78.30 GiB paged KV cache of 3,731,744 tokens."""
    f = parse_trtllm_log(lines("triton-tutorials150-trtllm-loaded.log"))
    assert (f.engine, f.kv_tokens, f.args["kv_cache_GiB"], f.oom_lines) == ("tensorrt_llm", 3731744, 78.3, 0)
    assert all(is_trtllm_line(x) for x in lines("triton-tutorials150-trtllm-loaded.log"))


def test_an_out_of_memory_error_wrapped_inside_a_triton_line_is_counted() -> None:
    """TensorRT-LLM#260: Triton's glog ``E…`` line carries TensorRT-LLM's ``cudaMallocAsync … out of
    memory``, wrapped onto the next line as pasted; the backtrace frames are no log lines."""
    ls = lines("trtllm-260-triton-oom.log")
    f = parse_trtllm_log(ls)
    assert f.oom_lines == 1 and f.oom_examples[0].startswith("ream->get()): out of memory")
    assert [is_trtllm_line(x) for x in ls[:5]] == [True, True, True, False, False]


def test_model_limits_defaults_and_versions() -> None:
    """Lines of tensorrtllm_backend#456 and #396 (the model's limits, a default it fell back to, the engine size)."""
    f = parse_trtllm_log(["[TensorRT-LLM][INFO] Max tokens in paged KV cache: 117760. Allocating 54022635520 bytes.",
                          "[TensorRT-LLM][WARNING] kv_cache_free_gpu_mem_fraction is not specified, will use default value of 0.9 or max_tokens_in_paged_kv_cache",
                          "[TensorRT-LLM][INFO] TRTGptModel maxBatchSize: 1", "[TensorRT-LLM][INFO] Loaded engine size: 3404 MiB"])
    assert f.kv_tokens == 117760
    assert f.args == {"kv_cache_free_gpu_mem_fraction": "0.9 (default)", "maxBatchSize": 1, "engine_size_MiB": 3404}


def test_tensorrt_builder_lines_are_read_and_tactic_skips_are_no_oom() -> None:
    """ultralytics#22271: ``[TRT] [W]`` lines; the skips are counted apart from out-of-memory lines."""
    ls = lines("ultralytics-22271-trt-tactic-skip.log")
    f = parse_trtllm_log(ls)
    assert all(is_trtllm_line(x) for x in ls) and (f.tactic_memory_skips, f.oom_lines) == (5, 0)
    assert is_trtllm_line("[03/28/2024-14:47:50] [I] [TRT] [MemUsageChange] Init cuBLAS/cuBLASLt: CPU +6, GPU +10, now: CPU 825, GPU 1296 (MiB)")
