"""Parser, metrics and comparison on real stream samples (captured from llama-cpp-python and
transformers serve in this repository's tests) — no server needed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from infergap.bench.client import SSEParser, split_url
from infergap.bench.compare import compare_bench
from infergap.bench.metrics import RequestRecord, summarize_trials, trial_metrics
from infergap.bench.results import BenchEnvironment, BenchResult, BenchSettings, PointResult

# transformers serve 5.x, 5 tokens: role-only first chunk, bundled content, usage on the last
# chunk and no [DONE] line.
TF_STREAM = (
    b'data: {"id":"57ff","choices":[{"delta":{"role":"assistant"},"index":0}],"created":1795983684,'
    b'"model":"/tmp/tf/model","object":"chat.completion.chunk","system_fingerprint":""}\n\n'
    b'data: {"id":"57ff","choices":[{"delta":{"content":"\xef\xbf\xbd be"},"index":0}],"created":1795983684,'
    b'"model":"/tmp/tf/model","object":"chat.completion.chunk","system_fingerprint":""}\n\n'
    b'data: {"id":"57ff","choices":[{"delta":{"content":"\xcb\x99"},"index":0}],"created":1795983684,'
    b'"model":"/tmp/tf/model","object":"chat.completion.chunk","system_fingerprint":""}\n\n'
    b'data: {"id":"57ff","choices":[{"delta":{},"index":0,"finish_reason":"length"}],"created":1795983684,'
    b'"model":"/tmp/tf/model","object":"chat.completion.chunk","system_fingerprint":"","usage":'
    b'{"completion_tokens":5,"prompt_tokens":21,"total_tokens":26}}\n\n'
)
# llama-cpp-python 0.3, chat: empty-content deltas for bytes held back, [DONE], no usage.
LLAMA_STREAM = (
    b'data: {"id": "chatcmpl-b9", "model": "tiny.gguf", "created": 1795983591, "object": "chat.completion.chunk", '
    b'"choices": [{"index": 0, "delta": {"role": "assistant"}, "logprobs": null, "finish_reason": null}]}\r\n\r\n'
    b'data: {"id": "chatcmpl-b9", "model": "tiny.gguf", "created": 1795983591, "object": "chat.completion.chunk", '
    b'"choices": [{"index": 0, "delta": {"content": "r"}, "logprobs": null, "finish_reason": null}]}\r\n\r\n'
    b'data: {"id": "chatcmpl-b9", "model": "tiny.gguf", "created": 1795983591, "object": "chat.completion.chunk", '
    b'"choices": [{"index": 0, "delta": {"content": ""}, "logprobs": null, "finish_reason": null}]}\r\n\r\n'
    b'data: {"id": "chatcmpl-b9", "model": "tiny.gguf", "created": 1795983591, "object": "chat.completion.chunk", '
    b'"choices": [{"index": 0, "delta": {"content": " at"}, "logprobs": null, "finish_reason": null}]}\r\n\r\n'
    b'data: {"id": "chatcmpl-b9", "model": "tiny.gguf", "created": 1795983591, "object": "chat.completion.chunk", '
    b'"choices": [{"index": 0, "delta": {}, "logprobs": null, "finish_reason": "length"}]}\r\n\r\n'
    b'data: [DONE]\r\n\r\n'
)


def _parse(stream: bytes, cuts: list[int]) -> RequestRecord:
    rec = RequestRecord(intended=0.0, start=0.0)
    p = SSEParser(rec, chat=True)
    prev = 0
    for i, c in enumerate(sorted(set(cuts)) + [len(stream)]):
        if c > prev:
            p.feed(stream[prev:c], float(i + 1))
            prev = c
    p.finish()
    rec.first = rec.chunk_times[0] if rec.chunk_times else None
    return rec


def test_role_only_and_empty_deltas_are_not_tokens():
    r = _parse(LLAMA_STREAM, [])
    assert len(r.chunk_times) == 2 and r.ok and r.finish_reason == "length" and r.usage_completion is None
    t = _parse(TF_STREAM, [])
    assert len(t.chunk_times) == 2 and t.ok  # no [DONE], but finish_reason: complete
    assert (t.usage_prompt, t.usage_completion) == (21, 5)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([TF_STREAM, LLAMA_STREAM]), st.lists(st.integers(0, len(LLAMA_STREAM)), max_size=12))
def test_parser_is_independent_of_read_boundaries(stream, cuts):
    whole = _parse(stream, [])
    split = _parse(stream, [c for c in cuts if c < len(stream)])
    assert len(split.chunk_times) == len(whole.chunk_times)
    assert (split.usage_completion, split.finish_reason, split.error) == (whole.usage_completion, whole.finish_reason, None)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_parser_never_raises_on_garbage(data):
    rec = RequestRecord(intended=0.0)
    p = SSEParser(rec, chat=True)
    p.feed(data, 1.0)
    p.finish()
    assert rec.error is None or isinstance(rec.error, str)


def test_stream_cut_before_the_end_is_a_failure_not_a_ttft():
    r = _parse(LLAMA_STREAM[: LLAMA_STREAM.index(b'"length"') - 60], [])
    assert r.error == "incomplete_stream"
    m = trial_metrics(1, [r])
    assert m.failed == 1 and m.ttft_ms.n == 0 and m.output_tokens == 0


def test_metrics_itl_is_normalised_per_token_and_intended_latency_includes_queueing():
    # Usage says 5 tokens arrived in 2 chunks 40 ms apart: each gap covers 2.5 tokens -> 16 ms.
    rec = RequestRecord(intended=0.0, start=0.5, chunk_times=[0.6, 0.64], end=0.65, usage_completion=5,
                        usage_prompt=21, max_tokens=5, finish_reason="length")
    rec.first = 0.6
    m = trial_metrics(1, [rec])
    assert abs(m.itl_ms.p50 - 16.0) < 1e-6
    assert abs(m.ttft_ms.p50 - 100.0) < 1e-6 and abs(m.ttft_from_intended_ms.p50 - 600.0) < 1e-6
    assert abs(m.tpot_ms.p50 - 50.0 / 4) < 1e-6
    assert m.output_token_source == {"usage": 1} and m.truncated == 0 and m.count_disagreements == 0


def _result(values: list[float]) -> BenchResult:
    trials = []
    for i, v in enumerate(values):
        rec = RequestRecord(intended=0.0, start=0.0, chunk_times=[0.1, 0.2], end=1.0 / v, usage_completion=10,
                            usage_prompt=1, finish_reason="length")
        rec.first = 0.1
        trials.append(trial_metrics(i + 1, [rec], window_start=0.0, window_end=1.0 / v))
    summary, unstable = summarize_trials(trials)
    p = PointResult(mode="concurrency", concurrency=4, trials=trials, summary=summary,
                    unstable=bool(unstable), unstable_metrics=unstable)
    return BenchResult(infergap_version="t", started_at="t", settings=BenchSettings(concurrency=[4]),
                       environment=BenchEnvironment(url="u", endpoint="e", model="m"), points=[p])


def test_compare_refuses_changes_inside_the_spread():
    a = _result([1.0, 1.1, 1.2])
    assert compare_bench(a, _result([1.05, 1.15, 1.25])).points[0].metrics[0].verdict == "within noise"
    up = compare_bench(a, _result([2.0, 2.1, 2.2])).points[0].metrics[0]
    assert up.metric == "output_throughput_tps" and up.verdict == "better" and up.change_pct > 80
    down = compare_bench(_result([2.0, 2.1, 2.2]), a).points[0].metrics[0]
    assert down.verdict == "worse"
    one = compare_bench(_result([1.0]), _result([2.0])).points[0]
    assert one.metrics[0].verdict == "within noise" and one.notes


def test_a_difference_inside_the_runs_own_spread_is_noise_whatever_its_size():
    """Two runs of one server on a busy host: the baseline's trials went 10, 40, 12 tok/s, the
    new run's 38, 42, 45. The medians (12 → 42, +250 %) lie outside each other's ranges, which
    was called "better"; but the baseline's own trials already differ by 30 tok/s, so a 30 tok/s
    difference between the runs is what the noise makes."""
    c = compare_bench(_result([10.0, 40.0, 12.0]), _result([38.0, 42.0, 45.0])).points[0].metrics[0]
    assert c.change_pct == 250.0 and c.verdict == "within noise" and not c.significant, c
    # Outside both runs' spreads together it is a change, however unsteady each run was.
    far = compare_bench(_result([10.0, 40.0, 12.0]), _result([80.0, 84.0, 90.0])).points[0].metrics[0]
    assert far.verdict == "better" and far.significant, far


def test_unstable_point_is_marked():
    r = _result([1.0, 1.5, 1.0])
    assert r.points[0].unstable and "output_throughput_tps" in r.points[0].unstable_metrics


def test_split_url_accepts_base_v1_and_endpoint():
    for u in ("http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/chat/completions"):
        assert split_url(u) == "http://h:1"
    assert split_url("http://h:1/proxy/v1") == "http://h:1/proxy"


def test_synthetic_prompts_are_token_exact_with_a_local_tokenizer(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from infergap.bench.datasets import _WORDS, synthetic
    from infergap.cli.bench import _load_tokenizer

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([" ".join(_WORDS)] * 20, trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"]))
    tok.save(str(tmp_path / "tokenizer.json"))
    count = _load_tokenizer(str(tmp_path))
    for seed in range(10):  # the first prompt of a seed draws its target length before any word
        target = synthetic(1, 40, 8, spread=0.5, seed=seed, salt="s1.")[0].input_tokens
        p = synthetic(1, 40, 8, spread=0.5, seed=seed, salt="s1.", tokenizer=count)[0]
        assert count(p.text) == p.input_tokens == target
    a = synthetic(5, 40, 8, seed=2, salt="s1.", tokenizer=count)
    b = synthetic(5, 40, 8, seed=2, salt="s2.", tokenizer=count)
    assert all(x.text != y.text for x, y in zip(a, b))  # salted per run: no shared prefix to cache
