"""Prompts for the load: seeded synthetic prompts and ShareGPT-format files. Nothing is downloaded.

Synthetic prompts are words drawn from a fixed list of short common English words, each of which
is a single token in the BPE vocabularies of Llama, Qwen and GPT tokenizers, so the word count
approximates the token count; with ``--tokenizer`` the count is exact (the prompt is trimmed or
grown until the tokenizer agrees). A per-run *salt* starts every prompt, so that a prefix cache
cannot serve a repeated run from the previous one's cache (the reference reports up to +86 %
inflation without it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from infergap.errors import UserError
from infergap.guard import read_json

_WORDS = (
    "the of and to in is was for on as with by at from his an were are which this be or has had "
    "not but one all they their its also new first more after who other two been may time would "
    "some when there into over only years most many made such these then under three used while "
    "where each him well about can well part work city year both during world later state second "
    "four since life high way long same five small group area name three house great school war "
    "game water day man through end film early west back head light north river south play home "
    "power order line best land point side form music team book field road show open change party"
).split()


@dataclass(slots=True)
class Prompt:
    """One request's prompt text, its estimated input tokens and the max_tokens to ask for.

    ``messages`` (chat only) replaces the single user message with a whole conversation (the
    multi-turn workload); ``tag`` names the prompt's place in a workload (``g3`` prefix group,
    ``t2`` turn) for per-workload statistics."""

    text: str
    input_tokens: int
    output_tokens: int
    messages: list | None = None
    tag: str | None = None


def _lengths(rng: random.Random, mean: int, spread: float) -> int:
    if spread <= 0:
        return max(1, mean)
    lo, hi = max(1, round(mean * (1 - spread))), max(1, round(mean * (1 + spread)))
    return rng.randint(lo, hi)


def synthetic(n: int, input_len: int, output_len: int, *, spread: float = 0.0, seed: int = 0,
              salt: str = "", tokenizer=None) -> list[Prompt]:
    """``n`` seeded prompts: input length uniform in ``input_len × (1 ± spread)`` tokens, output
    length uniform in ``output_len × (1 ± spread)``. The salt (a short string) prefixes each
    prompt together with its index so that no two prompts of a run share more than a few tokens.
    ``tokenizer`` (optional) is a callable ``str -> int`` giving the exact token count."""
    if n < 0 or input_len < 1 or output_len < 1:
        raise UserError(f"lengths must be positive (input {input_len}, output {output_len})")
    if not 0 <= spread < 1:
        raise UserError(f"--len-spread {spread}: must be in [0, 1)")
    rng = random.Random(seed)
    out = []
    for i in range(n):
        n_in = _lengths(rng, input_len, spread)
        n_out = _lengths(rng, output_len, spread)
        head = f"{salt}{i}:" if salt else f"{i}:"
        body = rng.choices(_WORDS, k=max(n_in - 1, 1))
        text = head + " " + " ".join(body)
        count = n_in
        if tokenizer is not None:
            count = tokenizer(text)
            while count > n_in + 8 and len(body) > 1:  # coarse trim
                body = body[:-max(1, (count - n_in) // 2)]
                text = head + " " + " ".join(body)
                count = tokenizer(text)
            text, count = _fine_size(rng, head, body, text, count, n_in, tokenizer)
        out.append(Prompt(text, count, n_out))
    return out


#: Calls the fine sizing may make for one prompt before keeping the closest one: words of one or
#: two tokens reach the exact count in a few steps, words of six byte tokens may never (each call
#: is an HTTP request when the server's /tokenize counts; it was up to 4·n + 64 per prompt).
MAX_FINE_CALLS = 48


def _fine_size(rng: random.Random, head: str, body: list[str], text: str, count: int, n_in: int, tokenizer) -> tuple[str, int]:
    """One word at a time until ``tokenizer`` counts exactly ``n_in``, at most
    :data:`MAX_FINE_CALLS` calls; then the closest text seen is kept."""
    best = (abs(count - n_in), text, count)
    for _ in range(MAX_FINE_CALLS):
        if count == n_in:
            break
        if count > n_in and len(body) > 1:
            body.pop()
        else:
            body.append(rng.choice(_WORDS))
        text = head + " " + " ".join(body)
        count = tokenizer(text)
        best = min(best, (abs(count - n_in), text, count))
    return (text, count) if count == n_in else (best[1], best[2])


def sharegpt(path: str | Path, n: int, *, output_len: int | None = None, seed: int = 0,
             salt: str = "") -> list[Prompt]:
    """Up to ``n`` prompts from a ShareGPT-format JSON file (a list of ``{"conversations": [{"from":
    "human", "value": ...}, {"from": "gpt", "value": ...}, ...]}``): the first human turn is the
    prompt; the reply's length (≈ 4 characters per token) is the output length unless
    ``output_len`` is given. Shuffled with ``seed``; cycled when the file has fewer than ``n``.

    Raises UserError naming the file when it is missing, not JSON or not in that shape.
    """
    p = Path(path)
    raw = read_json(p, "dataset")
    if not isinstance(raw, list):
        raise UserError(f"dataset {p}: expected a JSON list of conversations, got {type(raw).__name__}")
    items: list[tuple[str, int]] = []
    for k, conv in enumerate(raw):
        turns = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(turns, list):
            raise UserError(f"dataset {p}: entry {k} has no 'conversations' list (ShareGPT format expected)")
        human = next((t.get("value") for t in turns if isinstance(t, dict) and t.get("from") in ("human", "user")), None)
        reply = next((t.get("value") for t in turns if isinstance(t, dict) and t.get("from") in ("gpt", "assistant")), None)
        if not isinstance(human, str) or not human.strip():
            continue
        out_len = output_len or (max(1, len(reply) // 4) if isinstance(reply, str) and reply else 128)
        items.append((human, out_len))
    if not items:
        raise UserError(f"dataset {p}: no conversation with a human turn")
    random.Random(seed).shuffle(items)
    prompts = []
    for i in range(n):
        text, out_len = items[i % len(items)]
        if salt:
            text = f"{salt}{i}: {text}"
        prompts.append(Prompt(text, max(1, len(text) // 4), out_len))
    return prompts
