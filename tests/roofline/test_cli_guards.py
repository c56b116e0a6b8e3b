"""``infergap roofline``: parallel sizes below 1 are refused, and a model that does not fit says
so at the top of the report (while JSON keeps ``memory.fits`` false)."""

import json

import pytest
from typer.testing import CliRunner

from infergap.cli import app

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, ["roofline", *args])


@pytest.mark.parametrize("args,msg", [
    (["--tp", "0"], "--tp 0: must be at least 1"),
    (["--tp", "0", "--gpus", "8"], "--tp 0: must be at least 1"),
    (["--tp", "-1"], "--tp -1: must be at least 1"),
    (["--ep", "0"], "--ep 0: must be at least 1"),
    (["--gpus", "0", "--tp", "1"], "--gpus 0: must be at least 1"),
])
def test_parallel_below_one_refused(args, msg):
    r = run("--model", "llama-3.1-8b", "--gpu", "h200", *args)
    assert r.exit_code == 2, r.output
    assert r.stderr.strip() == f"infergap: error: {msg}"
    assert r.stdout == ""


@pytest.mark.parametrize("fmt", ["text", "md"])
def test_does_not_fit_warned_first(fmt):
    r = run("--model", "deepseek-v3", "--gpu", "h200", "--format", fmt)
    assert r.exit_code == 0, r.output
    first = r.stdout.splitlines()[0]
    assert "WARNING: the model does not fit" in first and "673" in first


def test_fits_has_no_warning_and_json_keeps_fits_false():
    r = run("--model", "llama-3.1-8b", "--gpu", "h200")
    assert r.exit_code == 0 and "WARNING" not in r.stdout
    j = json.loads(run("--model", "deepseek-v3", "--gpu", "h200", "--format", "json").stdout)
    assert j["memory"]["fits"] is False
    assert json.loads(run("--model", "llama-3.1-8b", "--gpu", "h200", "--format", "json").stdout)["memory"]["fits"] is True
