"""``infergap roofline`` end to end: the seed command, the H200 capture, JSON, and bad input."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infergap.cli import app

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "tests" / "fixtures" / "hosts" / "h200-1gpu"
runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, ["roofline", *args])


def test_seed_command_prints_bounds_assumptions_and_efficiency():
    r = run("--model", "glm-5-nvfp4", "--gpu", "rtx-pro-6000-server", "--gpus", "8", "--tp", "8", "--measured", "10.36")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "aggregate (optimistic)" in out and "per-GPU TP8 + collectives" in out
    assert "n·BW / bytes_per_token = 8 × 1597 GB/s" in out
    assert "Why the per-GPU bound is lower" in out
    assert "157 collectives per token × α = 20 µs" in out
    line = next(x for x in out.splitlines() if "aggregate (optimistic)" in x and "%" in x)
    pct = float(line.split("│")[-2].strip().rstrip(" %"))
    assert pct == pytest.approx(100 * 10.36 / 309, rel=0.05)


def test_gpu_auto_from_h200_snapshot_json():
    r = run("--model", "llama-3.1-8b", "--gpu", "auto", "--snapshot", str(H200), "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["schema"] == "infergap.roofline/1"
    assert data["hardware"]["gpu"] == "h200" and data["hardware"]["count"] == 1
    assert data["hardware"]["from_host"] == "1 x NVIDIA H200"
    assert data["hardware"]["memory_B"] == 143771 * 1024 * 1024
    assert data["parallel"] == {"tp": 1, "ep": 1, "gpus": 1, "replicas": 1}
    names = [b["name"] for b in data["single_stream"]]
    assert names == ["aggregate", "per_gpu_memory", "per_gpu"]


def test_markdown_and_output_file(tmp_path):
    out = tmp_path / "r.md"
    r = run("--model", "mixtral-8x7b", "--gpu", "h100", "--gpus", "2", "--format", "md", "--output", str(out), "--batch", "1,4")
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert text.startswith("# Roofline: mixtral-8x7b on 2 × NVIDIA H100 SXM5 80GB, TP2")
    assert "| batch | experts touched per layer |" in text


def test_precision_flags_change_bytes():
    base = json.loads(run("--model", "llama-3.1-8b", "--gpu", "h200", "--format", "json").stdout)
    fp8 = json.loads(run("--model", "llama-3.1-8b", "--gpu", "h200", "--format", "json", "--weights", "fp8").stdout)
    assert fp8["model"]["precision"]["dense_ffn"] == "fp8"
    assert fp8["single_stream"][0]["tok_s"] > 1.8 * base["single_stream"][0]["tok_s"]


@pytest.mark.parametrize("args,message", [
    (["--model", "llama-3.1-8b", "--gpu", "h2000"], "unknown GPU; closest: h200"),
    (["--model", "llama-3.1-8b", "--gpu", "NVIDIA H100 80GB HBM3x"], "closest: NVIDIA H100 80GB HBM3"),
    (["--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "3", "--tp", "3"], "--tp 3 does not divide the model's 32 attention heads"),
    (["--model", "lama-3.1-8b", "--gpu", "h100"], "did you mean llama-3.1-8b"),
    (["--model", "llama-3.1-8b", "--gpu", "h100", "--weights", "fp5"], "unknown format"),
    (["--model", "llama-3.1-8b", "--gpu", "h100", "--batch", "1,x"], "--batch 1,x"),
    (["--model", "llama-3.1-8b", "--gpu", "auto", "--snapshot", "/nonexistent/snap"], "no such file"),
    (["--model", "llama-3.1-8b", "--gpu", "auto", "--snapshot", str(H200), "--gpus", "4"], "the host has only 1 NVIDIA H200"),
])
def test_bad_input_is_one_error_line(args, message):
    r = run(*args)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("infergap: error: ")
    assert message in lines[0]


def test_config_missing_fields(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"hidden_size": 4096, "num_hidden_layers": 32}))
    r = run("--model", str(p), "--gpu", "h100")
    assert r.exit_code == 2
    assert r.stderr.strip() == f"infergap: error: {p}: missing required fields num_attention_heads, vocab_size"
    p.write_text("{not json")
    r = run("--model", str(p), "--gpu", "h100")
    assert r.exit_code == 2 and "not valid JSON" in r.stderr


def test_model_that_does_not_fit_says_so_with_numbers():
    r = run("--model", "llama-3.1-70b", "--gpu", "rtx-4090", "--format", "json")
    assert r.exit_code == 0
    mem = json.loads(r.stdout)["memory"]
    assert mem["fits"] is False and mem["message"].startswith("does not fit: weights need")
    r = run("--model", "llama-3.1-70b", "--gpu", "rtx-4090")
    assert "does not fit" in r.stdout


def test_console_script_error_exit_status():
    """The real entry point (python -m infergap) turns bad input into exit 2 and one line."""
    p = subprocess.run([sys.executable, "-m", "infergap", "roofline", "--model", "llama-3.1-8b", "--gpu", "nope-gpu"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT,
                       env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 2
    assert p.stderr.startswith("infergap: error: --gpu nope-gpu: unknown GPU") and p.stderr.count("\n") == 1


def test_binary_model_is_one_error_line(tmp_path):
    """A binary file given as --model (weights, not a config) is one line naming it, not a traceback."""
    blob = tmp_path / "weights.bin"
    blob.write_bytes(b"\x80\x04\x95garbage\xff")
    r = run("--model", str(blob), "--gpu", "h100")
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"infergap: error: config {blob}: ") and "UTF-8" in lines[0]


def test_a_per_gpu_figure_above_the_aggregate_says_why():
    """GLM-5 at TP8 printed the indexer's bytes as 122.7 MB for all GPUs and 1.46 GB per GPU with
    no word: such a cell is marked and a note names the cause (query side read every step and
    replicated; the latent KV replicated). A model where no group exceeds it gets no mark."""
    for fmt in ("text", "md"):
        r = run("--model", "glm-5", "--gpu", "h200", "--tp", "8", "-f", fmt)
        assert r.exit_code == 0, r.output
        rows = [x.replace("\\_", "_") for x in r.stdout.splitlines() if "†" in x and ("indexer" in x or "cache" in x)]
        assert len(rows) == 2, r.stdout
        joined = re.sub(r"\n +(?![-\s|])", " ", r.stdout)  # a note's continuation lines (fitted to 100 columns)
        notes = [x.strip().replace("\\_", "_") for x in joined.splitlines() if x.strip().replace("\\_", "_").startswith(("- indexer: ", "- kv_cache: "))]
        assert len(notes) == 2 and "index_topk" in notes[0] and "replicated" in notes[1], notes
        assert "bytes per GPU above the aggregate" in r.stdout
    r = run("--model", "llama-3.1-8b", "--gpu", "h200", "--tp", "8")
    assert r.exit_code == 0 and "†" not in r.stdout
    doc = json.loads(run("--model", "glm-5", "--gpu", "h200", "--tp", "8", "-f", "json").stdout)
    per, agg = (next(b for b in doc["single_stream"] if b["name"] == n)["components_B"] for n in ("per_gpu", "aggregate"))
    assert per["indexer"] > agg["indexer"]  # the figures themselves are unchanged: only explained


def test_piped_text_tables_fit_100_columns_one_line_per_row(tmp_path):
    """Written to a file (or a pipe) the MoE batched-decode table, ten columns, is drawn within
    the report's 100 columns: every row stays one line, instead of being wrapped as prose with
    its last cells on a continuation line."""
    out = tmp_path / "r.txt"
    r = run("--model", "glm-5-nvfp4", "--gpu", "rtx-pro-6000-server", "--gpus", "8", "--tp", "8", "--output", str(out))
    assert r.exit_code == 0, r.output
    lines = out.read_text().splitlines()
    assert max(len(x) for x in lines) <= 100
    start = next(i for i, x in enumerate(lines) if x.startswith("Batched decode"))
    table = lines[start + 1:lines.index("", start)]
    rows = [x for x in table if x.startswith("│")]
    assert [x.split("│")[1].strip() for x in rows] == ["1", "8", "32", "64", "128", "256"]
    assert all(x.endswith("│") and x.count("│") == 11 for x in rows), rows
    assert all(x[0] in "┏┃┡│└" for x in table), table


def test_table_width_is_the_report_width():
    from infergap.render.fit import WIDTH
    from infergap.roofline.render import TABLE_WIDTH

    assert TABLE_WIDTH == WIDTH
