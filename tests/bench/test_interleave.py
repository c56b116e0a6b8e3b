"""A/B interleaving (``bench/shapes/interleave.py``) over :func:`infergap.bench.runner.run_trial`,
against two real stub servers on 127.0.0.1 standing for two configurations: a fast one and one
pacing its tokens ten times slower. The trials alternate A B A B, each arm's trials merge into one
point, and the comparison the tuner makes sees the slow arm as slower."""

from __future__ import annotations

import json
import urllib.request

import pytest

from infergap.bench.compare import compare_metric
from infergap.bench.results import BenchSettings
from infergap.bench.runner import SweepProgress, run_trial
from infergap.bench.shapes import interleave

pytestmark = pytest.mark.slow


def _served(url: str) -> int:
    return json.loads(urllib.request.urlopen(url + "/stats", timeout=5).read())["requests"]


def test_two_configurations_alternate_and_merge_per_arm(stub_server):
    fast = stub_server("--itl-ms", "1", "--tokens", "8")
    slow = stub_server("--itl-ms", "15", "--tokens", "8")
    settings = BenchSettings(concurrency=[2], num_prompts=6, trials=3, warmup=1, input_len=8, output_len=8)
    ran: list[tuple[str, int]] = []

    def arm(name: str, url: str):
        def one(k: int):
            ran.append((name, k))
            return run_trial(url, None, settings, trial=k)
        return one

    out = interleave({"A": arm("A", fast.url), "B": arm("B", slow.url)}, rounds=2)
    assert ran == [("A", 0), ("B", 1), ("A", 2), ("B", 3)] and out.error is None
    assert [name for name, _ in out.runs] == ["A", "B", "A", "B"]
    for k, (_, p) in enumerate(out.runs):  # each run is one trial of the same point, numbered as in a sweep
        assert p.label == "c=2" and [t.trial for t in p.trials] == [k + 1] and p.requests == 6 and p.valid
    a, b = out.points["A"], out.points["B"]
    assert [t.trial for t in a.trials] == [1, 2] and a.requests == 12 and a.completed == 12 and a.valid
    assert b.requests == 12 and set(a.summary) == set(out.runs[0][1].summary)
    # each server saw its own arm's requests only: twice the probe's, a warm-up request and 6
    assert _served(fast.url) == _served(slow.url) and (_served(fast.url) - 2 * (1 + 6)) % 2 == 0
    assert _served(fast.url) > 2 * (1 + 6)
    change = compare_metric("output_throughput_tps", a.summary["output_throughput_tps"], b.summary["output_throughput_tps"])
    assert change.change_pct is not None and change.change_pct < -50, change
    assert settings.salt, "the salt drawn by the first trial is kept for the others"
    with pytest.raises(ValueError, match="point 3 is not among the settings' 1 load point"):
        run_trial(fast.url, None, settings, point=3)


def test_a_server_dying_during_a_trial_ends_the_interleaving(stub_server):
    """Configuration B's server is killed after the first answer of B's second trial: that trial's
    point says the server stopped answering, and no trial runs after it."""
    a_srv = stub_server("--itl-ms", "1", "--tokens", "8")
    b_srv = stub_server("--itl-ms", "5", "--tokens", "8")
    settings = BenchSettings(concurrency=[1], num_prompts=12, trials=1, warmup=0, input_len=8, output_len=8)
    calls: list[int] = []

    def kill_b(rec) -> None:
        if b_srv.proc.poll() is None:
            b_srv.proc.kill()
            b_srv.proc.wait(timeout=30)

    def arm_a(k):
        calls.append(k)
        return run_trial(a_srv.url, None, settings, trial=k)

    def arm_b(k):
        calls.append(k)
        return run_trial(b_srv.url, None, settings, trial=k,
                         progress=SweepProgress(request_done=kill_b) if k == 3 else None)

    out = interleave({"A": arm_a, "B": arm_b}, rounds=3)
    assert calls == [0, 1, 2, 3], calls
    assert out.error and out.error.startswith("B, trial 4: server stopped answering"), out.error
    assert out.points["A"].requests == 24 and out.points["A"].valid
    b = out.points["B"]
    assert b.error and [t.trial for t in b.trials] == [1, 2] and b.trials[0].completed == 12
    assert b.trials[1].completed < 12


def test_refusals():
    with pytest.raises(ValueError, match="two arms"):
        interleave({"A": lambda k: None}, rounds=2)
    with pytest.raises(ValueError, match="a round"):
        interleave({"A": lambda k: None, "B": lambda k: None}, rounds=0)
