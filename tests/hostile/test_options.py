"""Hostile command-line values: every numeric option is checked at the edge (finite, in range,
whole where it must be) and a bad value is one line on stderr naming the option, exit status 2,
before anything runs: no traceback, no parser or validation-library wording, nothing on stdout.

The bench cases name an address nothing listens on: the values must be refused before the
server would be contacted.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import HOSTS, run_cli

NOWHERE = "http://127.0.0.1:9"
#: Wording of the parsing and validation libraries that must never reach the user.
LIBRARY_WORDING = ("Traceback", "Input should", "Value error", "validation error", "Invalid value for",
                   "is not one of", "pydantic", "click", "typer")


def refused(r, option: str, *words: str) -> str:
    """Assert ``r`` is a one-line refusal naming ``option`` (and ``words``), short even for a
    huge value; return the line."""
    err = r.stderr.strip()
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], err[-2000:])
    lines = [ln for ln in err.splitlines() if not ln.startswith("infergap: warning:")]
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("infergap: error: ") and option in line, line
    assert len(line) < 300, line
    for w in words:
        assert w in line, (w, line)
    for w in LIBRARY_WORDING:
        assert w.lower() not in err.lower(), (w, err)
    assert r.stdout == ""
    return line


@pytest.mark.parametrize("args,option,words", [
    (["--timeout", "0"], "--timeout 0", ["greater than 0"]),
    (["--timeout", "-1"], "--timeout -1", ["greater than 0"]),
    (["--timeout", "nan"], "--timeout nan", ["finite"]),
    (["--timeout", "inf"], "--timeout inf", ["finite"]),
    (["--timeout", "1e9"], "--timeout 1e9", ["at most 86400"]),
    (["--duration", "nan"], "--duration nan", ["finite"]),
    (["--duration", "0"], "--duration 0", ["greater than 0"]),
    (["--request-rate", "inf"], "--request-rate inf", ["finite"]),
    (["--request-rate", "nan"], "--request-rate nan", ["finite"]),
    (["--request-rate", "1,nan,4"], "--request-rate 1,nan,4", ["nan", "finite"]),
    (["--request-rate", "-2"], "--request-rate -2", ["at least 0.001"]),
    (["--request-rate", "1e-9"], "--request-rate 1e-9", ["at least 0.001"]),  # was accepted: a silent run of years
    (["--request-rate", "1,,2"], "--request-rate 1,,2", ["empty value"]),  # ran 2 points
    (["--slo", "ttft_p99=2s,ttft_p99=3s"], "--slo", ["ttft_p99 is given twice"]),
    (["--slo", "ttft_p100=2s", "--search", "rate"], "--slo", ["ttft_p100", "not a percentile bound"]),
    (["--slo", "ttft=2s,bogus=1s"], "--slo", ["'bogus=1s' is not a bound"]),
    (["--num-prompts", "1e8"], "--num-prompts 1e8", ["at most 100000", "--duration"]),
    (["--num-prompts", "0"], "--num-prompts 0", ["at least 1"]),
    (["--num-prompts", "2.5"], "--num-prompts 2.5", ["whole number"]),
    (["--concurrency", "1,0"], "--concurrency 1,0", ["at least 1"]),
    (["--concurrency", "abc"], "--concurrency abc", ["whole number"]),
    (["--concurrency", "1e9"], "--concurrency 1e9", ["at most"]),
    (["--input-len", "-5"], "--input-len -5", ["at least 1"]),
    (["--output-len", "nan"], "--output-len nan", ["finite"]),
    (["--len-spread", "1"], "--len-spread 1", ["less than 1"]),
    (["--trials", "0"], "--trials 0", ["at least 1"]),
    (["--warmup", "-1"], "--warmup -1", ["at least 0"]),
    (["--seed", "x"], "--seed x", ["whole number"]),
    (["--api", "grpc"], "--api grpc", ["chat or completions"]),
    (["--arrival", "burst"], "--arrival burst", ["poisson or constant"]),
    (["--search", "fast"], "--search fast", ["rate or concurrency"]),
    (["--time-scale", "0"], "--time-scale 0", ["greater than 0"]),
    (["--max-duration", "nan"], "--max-duration nan", ["finite"]),
])
def test_bench_numbers(args, option, words):
    refused(run_cli("bench", "--url", NOWHERE, *args, timeout=60), option, *words)


@pytest.mark.parametrize("args,option,words", [
    (["--allreduce-us", "-1000"], "--allreduce-us -1000", ["at least 0"]),
    (["--allreduce-us", "nan"], "--allreduce-us nan", ["finite"]),
    (["--measured", "inf"], "--measured inf", ["finite"]),
    (["--measured", "0"], "--measured 0", ["greater than 0"]),
    (["--measured", "-3"], "--measured -3", ["greater than 0"]),
    (["--mem-fraction", "1.5"], "--mem-fraction 1.5", ["at most 1"]),
    (["--mfu", "nan"], "--mfu nan", ["finite"]),
    (["--bandwidth-efficiency", "0"], "--bandwidth-efficiency 0", ["greater than 0"]),
    (["--measured-bandwidth", "inf"], "--measured-bandwidth inf", ["finite"]),
    (["--context", "0"], "--context 0", ["at least 1"]),
    (["--context", "1e12"], "--context 1e12", ["at most"]),
    (["--prompt-len", "x"], "--prompt-len x", ["whole number"]),
    (["--batch", "1,-8"], "--batch 1,-8", ["-8", "at least 1"]),
    (["--batch", ","], "--batch ,", ["comma-separated"]),
    (["--tp", "0"], "--tp 0", ["at least 1"]),
    (["--gpus", "1.5"], "--gpus 1.5", ["whole number"]),
])
def test_roofline_numbers(args, option, words):
    refused(run_cli("roofline", "-m", "llama-3.1-8b", "--gpu", "h200", *args), option, *words)


def test_roofline_edges_are_accepted():
    """The bounds are the real ones: zero all-reduce latency and whole numbers written as 1e3 work."""
    r = run_cli("roofline", "-m", "llama-3.1-8b", "--gpu", "h200", "--allreduce-us", "0", "--context", "1e3",
                "--measured", "100", "-f", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["workload"]["context"] == 1000


@pytest.mark.parametrize("args,option,words", [
    (["history", "--limit", "0"], "--limit 0", ["at least 1"]),
    (["history", "--limit", "-1"], "--limit -1", ["at least 1"]),
    (["history", "--limit", "nan"], "--limit nan", ["finite"]),
    (["history", "--limit", "9" * 5000], "--limit 9999", ["at most 1000000"]),
    (["compare", "1", "7" * 5000], "run id 7777", ["no such run"]),
    (["compare", "12345678901234567890123", "1"], "run id 12345678901234567890123", ["no such run"]),
    (["compare", "1", "0"], "run id 0", ["no such run"]),
    (["compare", "1", "1.5"], "run id 1.5", ["expected"]),
    (["fix", "--revert", "99999999999999999999999"], "run id 99999999999999999999999", ["no such run"]),
    (["fix", "--concurrency", "0"], "--concurrency 0", ["at least 1"]),
    (["fix", "--trials", "1"], "--trials 1", ["at least 2"]),
    (["doctor", "--url", NOWHERE, "--gpus", "0"], "--gpus 0", ["at least 1"]),
    (["fleet", "audit", "--snapshots", "x", "--tolerance", "nan"], "--tolerance nan", ["finite"]),
    (["fleet", "audit", "--snapshots", "x", "--tolerance", "2"], "--tolerance 2", ["at most 0.9"]),
    (["fleet", "audit", "--snapshots", "x", "--timeout", "0"], "--timeout 0", ["at least 1"]),
    (["fleet", "audit", "--snapshots", "x", "--workers", "-1"], "--workers -1", ["at least 0"]),
])
def test_other_commands(args, option, words, tmp_path):
    refused(run_cli(*args, "--db", str(tmp_path / "ledger.sqlite3")), option, *words)


def test_compare_of_a_large_id_that_fits_is_no_such_run(tmp_path):
    r = run_cli("compare", "9223372036854775807", "last", "--db", str(tmp_path / "ledger.sqlite3"))
    line = refused(r, "9223372036854775807")
    assert "no run" in line


def test_fix_only_with_an_unknown_check_id_lists_the_valid_ones(tmp_path):
    audit = tmp_path / "audit.json"
    r = run_cli("audit", "-s", str(HOSTS / "seed-8x-rtxpro6000"), "-f", "json", "-o", str(audit), "--db", str(tmp_path / "db"))
    assert r.returncode == 0, r.stderr
    r = run_cli("fix", "--audit", str(audit), "--only", "pcie.max_read_requets", "--db", str(tmp_path / "db"))
    line = refused(r, "--only pcie.max_read_requets", "unknown check id")
    assert "pcie.max_read_request" in line and "kernel.numa_balancing" in line  # the actionable ids are listed
    ok = run_cli("fix", "--audit", str(audit), "--only", "pcie.max_read_request", "--db", str(tmp_path / "db"))
    assert ok.returncode == 0 and "pcie.max_read_request" in ok.stdout, ok.stderr


def test_bad_choices_and_types_use_our_words():
    """Enumerations and types: one line in the project's words, the valid values listed."""
    line = refused(run_cli("audit", "--no-host", "--fail-on", "P7"), "--fail-on P7", "P0, P1 or P2")
    assert "'" not in line
    refused(run_cli("roofline", "-m", "llama-3.1-8b", "--gpu", "h200", "--format", "xml"), "--format xml", "text, json or md")
    refused(run_cli("history", "--format", "md"), "--format md", "text or json")
    refused(run_cli("bench"), "--url", "bench", "required")


def test_every_numeric_option_goes_through_the_shared_validators():
    """An int or float option of any command (nested ones too) is parsed by infergap.cli.validate,
    so that NaN, infinities, out-of-range values and library wording cannot get through."""
    import typing

    import typer

    from infergap.cli import app

    def walk(prefix, group):
        for name, cmd in getattr(group, "commands", {}).items():
            yield f"{prefix}{name}", cmd
            yield from walk(f"{prefix}{name} ", cmd)

    unchecked = []
    for name, cmd in walk("", typer.main.get_command(app)):
        for p in getattr(cmd, "params", []):
            td = getattr(p, "type_descriptor", None)
            if td is None:
                continue
            ann = td.annotation
            args = [a for a in typing.get_args(ann) if a is not type(None)] or [ann]
            numeric = any(a in (int, float) for a in args)
            parser = getattr(td.parameter_info, "parser", None)
            if numeric and getattr(parser, "__module__", None) != "infergap.cli.validate":
                unchecked.append(f"{name} {p.opts[0] if p.opts else p.name}")
    assert not unchecked, ("numeric options without a parser from infergap.cli.validate (use e.g. "
                           f"parser=validate.number(gt=0, le=...)): {unchecked}")


@pytest.mark.parametrize("url,problem", [
    ("http://[::1", "not a valid URL (Invalid IPv6 URL)"),
    ("http://exa mple:80", "a URL cannot contain blanks or control characters"),
    ("http://127.0.0.1:99999", "not a valid URL (Port out of range 0-65535)"),
    ("http://127.0.0.1:9/v1\nX: y", "a URL cannot contain blanks or control characters"),
    ("ftp://example", "expected http://HOST:PORT or https://HOST:PORT"),
])
@pytest.mark.parametrize("command", ["bench", "audit", "plan"])
def test_a_malformed_url_is_one_line_before_any_request(command, url, problem):
    """--url is checked where it is read (bench ended in a ValueError or http.client.InvalidURL
    traceback; a newline in the URL went into the message raw)."""
    r = run_cli(command, "--url", url, timeout=60)
    shown = url.replace("\n", "\\n")
    assert r.returncode == 2 and r.stderr.strip() == f"infergap: error: --url {shown}: {problem}", r.stderr


@pytest.mark.parametrize("kind,words", [("missing", ["cannot read"]), ("directory", ["cannot read"]),
                                        ("empty", ["not an infergap.bench/1 result"]), ("binary", ["not UTF-8"])])
def test_a_bench_baseline_that_cannot_be_used_is_named_as_the_option(kind, words, tmp_path):
    p = tmp_path / kind
    if kind == "directory":
        p.mkdir()
    elif kind == "empty":
        p.write_bytes(b"")
    elif kind == "binary":
        p.write_bytes(bytes(range(128, 256)) * 8)
    refused(run_cli("bench", "--url", "http://127.0.0.1:9", "--baseline", str(p), "--db", str(tmp_path / "l.db")),
            f"--baseline {p}", *words)
