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
