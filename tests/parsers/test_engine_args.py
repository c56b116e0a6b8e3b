"""llama.cpp's argument table mined from its source (tools/mine_llamacpp_args.py over common/arg.cpp
and common/common.h) and the command-line parser built on it; the table against the real
``llama-server --help`` of the same release when the binary is here."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from infergap.parsers.engine_args import SCRUBBED, canonical, parse_argv, table
from tests.bench.bench_helpers import llama_server_bin

#: The flags the plan judges, with the default the source gives for llama-server.
JUDGED = {"--kv-offload": True, "--cont-batching": True, "--ubatch-size": 512, "--batch-size": 2048,
          "--parallel": -1, "--gpu-layers": -1, "--flash-attn": "LLAMA_FLASH_ATTN_TYPE_AUTO", "--cache-type-k": "GGML_TYPE_F16"}


def test_the_table_is_mined_with_its_provenance():
    t = table("llama.cpp")
    assert "llama-cpp-python 0.3.36" in t["source"] and t["mined_by"] == "tools/mine_llamacpp_args.py"
    assert len(t["options"]) > 300
    p = parse_argv(["llama-server"], {})
    for name, default in JUDGED.items():
        assert p.value(name) == default, name
        assert not p.is_given(name)


@pytest.mark.parametrize("argv, name, value, written", [
    (["-nkvo"], "--kv-offload", False, "-nkvo"),
    (["--no-kv-offload"], "-kvo", False, "--no-kv-offload"),
    (["-nocb"], "--cont-batching", False, "-nocb"),
    (["-ub", "8"], "--ubatch-size", 8, "-ub"),
    (["--ubatch-size=32", "-b", "32"], "-ub", 32, "--ubatch-size"),
    (["-np", "1"], "--parallel", 1, "-np"),
    (["-ngl", "99"], "--n-gpu-layers", "99", "-ngl"),
    (["-fa", "off"], "--flash-attn", "off", "-fa"),
    (["--metrics"], "--metrics", True, "--metrics"),
])
def test_every_spelling_lands_on_one_name(argv, name, value, written):
    p = parse_argv(["/opt/llama.cpp/build/bin/llama-server", "-m", "x.gguf", *argv], {})
    assert p.engine == "llama.cpp" and p.value(name) == value
    assert p.given[canonical("llama.cpp", name)] == written
    assert p.unknown == []


def test_the_environment_counts_when_the_flag_is_not_given():
    p = parse_argv(["llama-server", "-ub", "64"], {"LLAMA_ARG_UBATCH": "16", "LLAMA_ARG_KV_OFFLOAD": "0",
                                                   "LLAMA_API_KEY": "k-123"})
    assert p.value("-ub") == 64  # the command line wins
    assert p.value("--kv-offload") is False and p.given["--kv-offload"] == "env LLAMA_ARG_KV_OFFLOAD"
    assert p.value("--api-key") == SCRUBBED


def test_secrets_and_unknown_words_are_not_kept():
    p = parse_argv(["llama-server", "--api-key", "s3cr3t", "--no-such-flag", "--hf-token=abc"], {})
    assert p.value("--api-key") == SCRUBBED and "s3cr3t" not in repr(p)
    assert p.unknown == ["--no-such-flag"] and p.value("--hf-token") == SCRUBBED and "abc" not in repr(p.values)


BIN = llama_server_bin()
HELP = Path(__file__).resolve().parents[1] / "fixtures" / "real-gpu" / "h200-llama-process" / "llama-server-help.txt"
_NAME = re.compile(r"(?<![\w-])-{1,2}[a-zA-Z][\w.-]{0,60}")


def help_names(text: str) -> set[str]:
    """Option names in the option column of ``--help`` lines (a line that starts with a dash)."""
    return {n for line in text.splitlines() if line.startswith("-")
            for n in _NAME.findall(re.split(r"\s{2,}(?=[a-z(])", line, maxsplit=1)[0])}


def check_help(text: str) -> None:
    names = help_names(text)
    assert len(names) > 300, text[:500]
    known = {n for o in table("llama.cpp")["options"] for n in o["names"] + o["negated"]}
    assert not sorted(names - known), sorted(names - known)
    lines = {n: line for line in text.splitlines() if line.startswith("-") for n in help_names(line)}
    assert "default: 512" in lines["--ubatch-size"] and "default: 2048" in lines["--batch-size"]
    assert "default: -1, -1 = auto" in lines["--parallel"]
    after = text[text.index("--no-kv-offload"):][:300]
    assert "default: enabled" in after
    assert "default: enabled" in text[text.index("--no-cont-batching"):][:300]


def test_the_table_knows_every_option_of_the_real_help():
    """``llama-server --help`` of the CUDA build of the same source on the H200 (kept as a fixture):
    every option it prints is in the table, and the judged ones print the defaults the table holds."""
    check_help(HELP.read_text())


@pytest.mark.skipif(BIN is None, reason="no llama-server (.ci/run builds it at build/llama.cpp/bin)")
def test_the_table_knows_every_option_of_this_build():
    out = subprocess.run([str(BIN), "--help"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    check_help(out.stdout + out.stderr)


# -- vLLM and SGLang (tools/mine_engine_args.py) ---------------------------------------------------

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "engine-args"
#: The judged flags and the defaults their sources give (None: the engine decides at start-up).
JUDGED_VLLM = {"--max-num-seqs": None, "--enforce-eager": False, "--gpu-memory-utilization": 0.92, "--kv-cache-dtype": "auto",
               "--max-num-batched-tokens": None, "--enable-chunked-prefill": None, "--tensor-parallel-size": 1}
JUDGED_SGLANG = {"--mem-fraction-static": None, "--chunked-prefill-size": None, "--attention-backend": None,
                 "--max-running-requests": None, "--tp-size": 1}
_OPT_LINE = re.compile(r"^  (-[^\s,]+(?: [^\s,]+)?(?:, -[^\s,]+(?: [^\s,]+)?)*)")


def argparse_help_names(text: str) -> set[str]:
    """Option names of an argparse ``--help`` (the lines of its option column: two spaces, a dash)."""
    out = set()
    for line in text.splitlines():
        m = _OPT_LINE.match(line)
        if m:
            out.update(part.split(" ")[0] for part in m.group(1).split(", "))
    return out - {"-h", "--help"}


@pytest.mark.parametrize("engine, help_file, judged, tag", [
    ("vllm", "vllm-0.32.0-serve-help.txt", JUDGED_VLLM, "v0.32.0"),
    ("sglang", "sglang-0.5.23-parser-help.txt", JUDGED_SGLANG, "v0.5.23"),
])
def test_the_mined_table_is_the_help_of_the_release(engine, help_file, judged, tag):
    """Every option the release's ``--help`` prints (fixtures/engine-args/ABOUT.md) is in the table and nothing else is; the judged
    flags carry their source's default."""
    t = table(engine)
    assert t["tag"] == tag and t["mined_by"] == "tools/mine_engine_args.py"
    names = argparse_help_names((FIX / help_file).read_text())
    known = {n for o in t["options"] if not o["hidden"] for n in o["names"] + o["negated"]}
    assert len(names) > 250 and names == known, (sorted(names - known)[:20], sorted(known - names)[:20])
    p = parse_argv(["vllm", "serve"] if engine == "vllm" else ["python3", "-m", "sglang.launch_server"], {})
    for name, default in judged.items():
        assert p.value(name) == default and not p.is_given(name), name


def test_vllm_command_lines_are_read_as_vllm_reads_them():
    p = parse_argv(["/venv/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m", "--max_num_seqs=2",
                    "--enforce-eager", "--api-key", "s3cr3t", "-tp", "2", "--no-enable-chunked-prefill", "--kv-cache-dtype", "fp8"], {})
    assert (p.engine, p.value("--max-num-seqs"), p.value("--enforce-eager"), p.value("--tensor-parallel-size")) == ("vllm", 2, True, 2)
    assert p.value("--enable-chunked-prefill") is False and p.given["--enable-chunked-prefill"] == "--no-enable-chunked-prefill"
    assert p.value("--kv-cache-dtype") == "fp8" and "s3cr3t" not in repr(p) and p.unknown == []
    s = parse_argv(["sglang", "serve", "--model-path", "/m", "--tp", "2", "--mem-fraction-static", "0.6"], {})
    assert (s.engine, s.value("--tp-size"), s.value("--mem-fraction-static"), s.given["--tp-size"]) == ("sglang", 2, 0.6, "--tp")


@pytest.mark.slow
def test_the_vllm_table_is_the_help_of_the_vllm_here():
    """The real vLLM of build/vllm prints the help the table was mined from (one interpreter start)."""
    from tests.vllm.vllm_support import vllm_python

    exe = vllm_python()
    if exe is None:
        pytest.skip("no vLLM environment (.ci/run installs it into build/vllm)")
    out = subprocess.run([str(exe), "-m", "vllm.entrypoints.openai.api_server", "--help=all"], capture_output=True, text=True,
                         timeout=400, stdin=subprocess.DEVNULL, env={"VLLM_NO_USAGE_STATS": "1", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    known = {n for o in table("vllm")["options"] if not o["hidden"] for n in o["names"] + o["negated"]}
    assert argparse_help_names(out.stdout) == known
