"""parsers/ollama_log.py: Ollama server logs from public reports."""

from __future__ import annotations

from infergap.parsers.ollama_log import is_ollama_line, parse_ollama_log
from tests.parsers.inputs import lines


def test_the_schedulers_offload_line_is_read() -> None:
    """ollama#9181: 44 of 81 layers on four 22 GiB GPUs, 127.4 GiB needed for the full model."""
    f = parse_ollama_log(lines("ollama-9181-partial-offload.log"))
    assert f.engine == "ollama" and f.lines == 5
    assert {k: f.args[k] for k in ("offloaded_layers", "model_layers", "memory_available_GiB", "memory_required_full_GiB",
                                   "memory_required_kv_GiB", "library")} == {
        "offloaded_layers": 44, "model_layers": 81, "memory_available_GiB": 88.0, "memory_required_full_GiB": 127.4,
        "memory_required_kv_GiB": 19.5, "library": "cuda"}


def test_discovery_lines_and_the_cpu_fallback() -> None:
    """The discovery lines of Ollama's discover/types.go and discover/gpu.go, as its logs print them."""
    f = parse_ollama_log(['time=2024-08-01T10:00:00.000Z level=INFO source=types.go:105 msg="inference compute" id=GPU-0 '
                          'library=cuda compute=8.6 driver=12.4 name="NVIDIA GeForce RTX 3090" total="23.7 GiB" available="23.4 GiB"'])
    assert (f.args["gpu_name"], f.args["compute_capability"], f.args.get("no_gpu")) == ("NVIDIA GeForce RTX 3090", "8.6", None)
    f = parse_ollama_log(['time=2024-08-01T10:00:00.000Z level=INFO source=gpu.go:347 msg="no compatible GPUs were discovered"'])
    assert f.args["no_gpu"] is True
    assert not is_ollama_line("INFO 05-01 12:00:00 [api_server.py:1] vLLM API server version 0.8.5")


def test_a_record_wrapped_over_lines_is_read_whole():
    """ollama#9181's answer quotes the scheduler line wrapped over six lines (continuations start with
    blanks): the layers and memory figures on the continuation lines are read as the record's."""
    from infergap.parsers.ollama_log import parse_ollama_log

    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "fixtures" / "evidence" / "ollama-9181-wrapped-offload.log"
    lines = src.read_text().splitlines()
    f = parse_ollama_log(lines)
    assert (f.args["offloaded_layers"], f.args["model_layers"], f.args["memory_required_kv_GiB"]) == (44, 81, 19.5)
    assert f.lines == len(lines)
