"""Which option combinations a sweep can run is decided by ``BenchSettings`` itself, so every caller
gets the same refusals: the command line (one line, exit 2, before any request), the doctor's
bench stage (a failed stage naming the value, no request sent) and a library caller (the tuner)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from bench_helpers import run_bench
from pydantic import ValidationError

from infergap.bench.results import DEFAULT_LEVELS, BenchSettings
from infergap.bench.slo import parse_targets
from infergap.doctor import DoctorResult, _bench_stage, _Run
from infergap.errors import UserError

TARGETS = parse_targets("ttft_p99=2s")


@pytest.mark.parametrize("fields, message", [
    (dict(num_prompts=4, duration_s=1.0), "--num-prompts and --duration: give one, not both"),
    (dict(client_procs=2, duration_s=1.0), "--client-procs above 1 needs a request count"),
    (dict(client_procs=2, dataset="multi-turn:3"), "--client-procs above 1 needs a request count"),
    (dict(search="rate", request_rate=[1.0]), "--search needs --slo with percentile bounds"),
    (dict(dataset="multi-turn:3", request_rate=[2.0]), "--dataset multi-turn runs conversations in a closed loop"),
    (dict(dataset="multi-turn:3", search="rate", slo_targets=TARGETS), "--dataset multi-turn runs conversations"),
    (dict(request_rate=[2.0], concurrency=[1, 2]), "--concurrency with --request-rate (or a trace) is one cap"),
    (dict(dataset="mooncake:t.jsonl", concurrency=[1, 2]), "--concurrency with --request-rate (or a trace) is one cap"),
    (dict(search="concurrency", slo_targets=TARGETS, request_rate=[1.0]), "--search concurrency is a closed-loop search"),
    (dict(search="concurrency", slo_targets=TARGETS, dataset="azure:t.csv"), "--search concurrency is a closed-loop search"),
    (dict(dataset="shared-prefix:4x"), "--dataset shared-prefix:4x: '4x' is not key=value"),
    (dict(dataset="bogus"), "--dataset 'bogus': expected random, sharegpt:FILE"),
    (dict(trials=0), "bench settings: trials: Input should be greater than or equal to 1"),
    (dict(concurrency=[4, 0]), "bench settings: concurrency.1: Input should be greater than or equal to 1"),
    (dict(max_error_rate=2.0), "bench settings: max_error_rate: Input should be less than or equal to 1"),
])
def test_a_combination_no_sweep_can_run_is_refused_in_one_line(fields, message):
    with pytest.raises(ValidationError):
        BenchSettings(**fields)
    with pytest.raises(UserError) as e:
        BenchSettings.checked(**fields)
    assert str(e.value).startswith(message), str(e.value)
    assert "\n" not in str(e.value) and "pydantic" not in str(e.value)


@pytest.mark.parametrize("fields, levels", [
    ({}, list(DEFAULT_LEVELS)),
    (dict(concurrency=[3]), [3]),
    (dict(request_rate=[2.0]), []),
    (dict(request_rate=[2.0], concurrency=[8]), [8]),
    (dict(dataset="mooncake:t.jsonl"), []),
    (dict(search="concurrency", slo_targets=TARGETS), []),
    (dict(dataset="multi-turn:3,think=0s"), list(DEFAULT_LEVELS)),
])
def test_the_closed_loop_levels_default_only_when_nothing_else_sets_the_load(fields, levels):
    assert BenchSettings(**fields).concurrency == levels


def test_the_command_line_refuses_before_any_request_with_one_line(tmp_path):
    """A port nobody listens on: a refusal from the settings comes before the probe would fail."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = run_bench("--url", f"http://127.0.0.1:{port}", "--num-prompts", "4", "--duration", "1", timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines == ["infergap: error: --num-prompts and --duration: give one, not both"], r.stderr
    r = run_bench("--url", f"http://127.0.0.1:{port}", "--dataset", "multi-turn:2", "--request-rate", "1", timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        "infergap: error: --dataset multi-turn runs conversations in a closed loop: use --concurrency, not a rate"]


def test_the_doctor_gets_the_same_checks(tmp_path: Path):
    """The doctor builds its settings itself: a value the settings refuse fails its bench stage
    with that one line, and no request is attempted (the port is closed; a probe would say so)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    said: list[tuple[str, str]] = []
    run = _Run(tmp_path, DoctorResult(), lambda name, text: said.append((name, text)), [])
    settings = {"concurrency": [1, 2], "trials": 0, "warmup": 1, "input_len": 8, "output_len": 8, "num_prompts": 4}
    assert _bench_stage(run, f"http://127.0.0.1:{port}", None, settings, 0.01, False) is None
    st = run.res.stages[-1]
    assert st.name == "bench" and st.status == "failed"
    assert st.detail == "bench settings: trials: Input should be greater than or equal to 1", st.detail
