"""The verdict rules of ``infergap tune`` on values whose effect is known, the launch command split
into words and edited with llama.cpp's flag table, and a real process started from a command whose
arguments hold shell syntax (``;``, ``$( )``): it receives them as text, nothing runs them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from infergap.errors import UserError
from infergap.tune.launch import Refused, Server, apply_change, parse_change, parse_launch
from infergap.tune.verdict import MIN_EFFECT_PCT, judge

LLAMA = Path(__file__).resolve().parents[2] / "build" / "llama.cpp" / "bin" / "llama-server"


def test_a_change_outside_both_ranges_by_more_than_their_sum_is_called():
    assert judge("throughput", [100, 101, 99], [130, 131, 129]).verdict == "helps"
    assert judge("throughput", [100, 101, 99], [70, 71, 69]).verdict == "hurts"
    # lower is better for latencies
    j = judge("ttft", [100, 101, 99], [70, 71, 69])
    assert j.verdict == "helps" and j.change_pct == pytest.approx(-30.0) and j.noise_pct == pytest.approx(4.0)


def test_overlapping_ranges_tiny_changes_and_single_runs_are_not_called():
    # medians outside each other's range, but the difference (5) is below the ranges together (4 + 4)
    assert judge("throughput", [98, 102], [103, 107]).verdict == "no effect within noise"
    # well outside narrow ranges, but below the floor
    small = 1 + (MIN_EFFECT_PCT / 2) / 100
    assert judge("throughput", [100.0, 100.01], [100 * small, 100 * small + 0.01]).verdict == "no effect within noise"
    j = judge("tpot", [10.0], [20.0])
    assert j.verdict == "not measured" and "at least 2" in j.reason


def test_flags_are_replaced_in_every_spelling_and_switches_removed():
    base = parse_launch(f"{LLAMA} -m m.gguf -np 1 --no-kv-offload -ub=16 --port 9001 --host 0.0.0.0")
    assert base.engine == "llama.cpp"
    assert apply_change(base, parse_change("--parallel 8")).argv[1:] == [
        "-m", "m.gguf", "--no-kv-offload", "-ub=16", "--port", "9001", "--host", "0.0.0.0", "--parallel", "8"]
    assert "--no-kv-offload" not in apply_change(base, parse_change("without --no-kv-offload")).argv
    assert "-ub=16" not in apply_change(base, parse_change("--ubatch-size 8")).argv
    with pytest.raises(UserError, match="starts with a flag"):
        parse_change("8 --parallel")
    with pytest.raises(UserError, match="not found"):
        parse_launch("no-such-program-here --port 1")


@pytest.mark.skipif(not LLAMA.exists(), reason="no llama-server binary")
def test_a_try_is_the_catalog_lever_only_when_it_is_that_change():
    from infergap.tune.run import recognise

    base = parse_launch(f"{LLAMA} -m m.gguf -np 1")
    assert recognise("--parallel 8", base) == ("llamacpp.parallel", "throughput")
    assert recognise("without --no-kv-offload", base) == ("llamacpp.kv_offload", "throughput")
    # the catalog's ubatch lever raises -ub to 512: -ub 8 is another change, judged on TTFT as asked
    assert recognise("ttft: -ub 8", base) == ("try:-ub 8", "ttft")


def test_shell_syntax_in_an_argument_reaches_the_program_as_text(tmp_path):
    out, hit = tmp_path / "argv.txt", tmp_path / "pwned"
    prog = "import sys, pathlib; pathlib.Path(sys.argv[1]).write_text(repr(sys.argv[2:]))"
    text = f"{sys.executable} -c '{prog}' {out} 'a; touch {hit}' '$(touch {hit})' \"`touch {hit}`\" '|' '&&'"
    launch = parse_launch(text)
    srv = Server(launch, "http://127.0.0.1:9", tmp_path / "server.log")
    with pytest.raises(Refused, match="exited with status 0"):
        srv.start(timeout_s=30)
    assert out.read_text() == repr([f"a; touch {hit}", f"$(touch {hit})", f"`touch {hit}`", "|", "&&"])
    assert not hit.exists()


VLLM = Path(__file__).resolve().parents[2] / "build" / "vllm" / "bin"


@pytest.mark.skipif(not (VLLM / "vllm").exists(), reason="no vLLM environment (build/vllm)")
@pytest.mark.parametrize("head", ["vllm serve /m", "python -m vllm.entrypoints.openai.api_server --model /m"])
def test_a_vllm_command_is_recognised_and_edited_with_vllms_flags(head):
    from infergap.tune.launch import address
    from infergap.tune.run import recognise

    base = parse_launch(f"{VLLM}/{head} --max-num-seqs 2 --port 8001 --enforce-eager")
    assert base.engine == "vllm" and address(base) == ("127.0.0.1", 8001)
    assert apply_change(base, parse_change("--max-num-seqs 8")).argv[-4:] == ["8001", "--enforce-eager", "--max-num-seqs", "8"]
    assert "--enforce-eager" not in apply_change(base, parse_change("without --enforce-eager")).argv
    # dropping --enforce-eager is the catalog's CUDA-graph lever on vLLM; a bare --max-num-seqs value is a try
    assert recognise("without --enforce-eager", base) == ("cuda_graph.enable", "throughput")
    assert recognise("--max-num-seqs 8", base)[0] == "try:--max-num-seqs 8"
