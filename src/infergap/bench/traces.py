"""Request traces with timestamps: the Mooncake trace JSONL and the Azure LLM inference trace CSV.

- **Mooncake** (``kvcache-ai/Mooncake``, ``FAST25-release/traces/*.jsonl``): one JSON object per
  line with ``timestamp`` (ms since the first request), ``input_length``, ``output_length`` and
  ``hash_ids``: the remapped hashes of the prompt's 512-token blocks, where equal ids in two
  requests mean the same prefix block (the trace's README; the 512-token block is the size the
  trace was hashed with). Prompts are rebuilt so that equal hash ids give equal text.
- **Azure** (``Azure/AzurePublicDataset``, ``data/AzureLLMInferenceTrace_{code,conv}.csv``):
  ``TIMESTAMP`` (a date-time), ``ContextTokens``, ``GeneratedTokens``; no prefix information.

A trace becomes a list of :class:`TraceRequest` (arrival offset in seconds from the first
request, input and output tokens, block hash ids). ``time_scale`` multiplies every offset (0.5
replays twice as fast); ``max_duration_s`` keeps the arrivals within that many seconds after
scaling; ``token_scale`` multiplies the token lengths and the block size (a CPU test server cannot
take 87k-token prompts; 0.01 keeps the shape).
"""

from __future__ import annotations

import csv
import json
import math
import random
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from infergap.bench.datasets import _WORDS, Prompt
from infergap.errors import UserError

MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per hash block of the Mooncake traces (their README and the FAST '25 paper's setup)."""

TRACE_KINDS = ("mooncake", "azure")


@dataclass(slots=True)
class TraceRequest:
    """One request of a trace: arrival ``offset_s`` after the first, token lengths, block hashes."""

    offset_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: list[int] = field(default_factory=list)


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"{what} {path}: cannot read ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise UserError(f"{what} {path}: not text (not UTF-8)") from None


def read_mooncake(path: str | Path) -> list[TraceRequest]:
    """Parse a Mooncake trace JSONL file. Raises UserError naming the file and line on a line that
    is not a JSON object with numeric ``timestamp``/``input_length``/``output_length``."""
    p = Path(path)
    out: list[TraceRequest] = []
    for n, line in enumerate(_read_text(p, "mooncake trace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            ts, i, o = float(d["timestamp"]), int(d["input_length"]), int(d["output_length"])
            hashes = [int(h) for h in d.get("hash_ids") or []]
        except (ValueError, TypeError, KeyError, RecursionError) as e:
            raise UserError(f"mooncake trace {p}: line {n} is not a trace record "
                            f"(timestamp, input_length, output_length, hash_ids): {type(e).__name__} {e}") from None
        if i < 1 or o < 0 or ts < 0:
            raise UserError(f"mooncake trace {p}: line {n} has a negative time or an empty prompt")
        out.append(TraceRequest(ts / 1000.0, i, o, hashes))
    return _normalise(out, p)


def read_azure(path: str | Path) -> list[TraceRequest]:
    """Parse an Azure LLM inference trace CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``).
    Raises UserError naming the file and row when the header or a row does not fit."""
    p = Path(path)
    rows = csv.reader(_read_text(p, "azure trace").splitlines())
    header = next(rows, None)
    want = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
    if header is None or [h.strip() for h in header[:3]] != want:
        raise UserError(f"azure trace {p}: expected the header {','.join(want)}, got {','.join(header or [])!r}")
    out: list[TraceRequest] = []
    t0 = None
    for n, row in enumerate(rows, 2):
        if not row:
            continue
        try:
            t = _azure_time(row[0])
            i, o = int(row[1]), int(row[2])
        except (ValueError, IndexError) as e:
            raise UserError(f"azure trace {p}: row {n} is not TIMESTAMP,ContextTokens,GeneratedTokens ({e})") from None
        t0 = t if t0 is None else t0
        out.append(TraceRequest(t - t0, max(i, 1), max(o, 0)))
    return _normalise(out, p)


def _azure_time(text: str) -> float:
    """``2023-11-16 18:15:46.6805900`` (seven fractional digits) → POSIX seconds."""
    text = text.strip()
    head, _, frac = text.partition(".")
    base = datetime.strptime(head, "%Y-%m-%d %H:%M:%S").timestamp()
    return base + (float("0." + frac) if frac else 0.0)


def _normalise(reqs: list[TraceRequest], p: Path) -> list[TraceRequest]:
    if not reqs:
        raise UserError(f"trace {p}: no requests")
    reqs.sort(key=lambda r: r.offset_s)
    first = reqs[0].offset_s
    for r in reqs:
        r.offset_s -= first
    return reqs


def load(kind: str, path: str | Path) -> list[TraceRequest]:
    """Read a trace of ``kind`` (``mooncake`` or ``azure``)."""
    if kind == "mooncake":
        return read_mooncake(path)
    if kind == "azure":
        return read_azure(path)
    raise UserError(f"trace kind {kind!r}: expected one of {', '.join(TRACE_KINDS)}")


def select(reqs: list[TraceRequest], *, time_scale: float = 1.0,
           max_duration_s: float | None = None) -> list[TraceRequest]:
    """The requests whose scaled arrival (``offset × time_scale``) falls within ``max_duration_s``,
    with scaled offsets. Raises UserError for a non-positive scale."""
    if time_scale <= 0:
        raise UserError(f"--time-scale {time_scale:g}: must be positive")
    out = [TraceRequest(r.offset_s * time_scale, r.input_tokens, r.output_tokens, r.hash_ids) for r in reqs]
    if max_duration_s is not None:
        out = [r for r in out if r.offset_s <= max_duration_s]
    if not out:
        raise UserError(f"--max-duration {max_duration_s:g}: no trace request arrives that early")
    return out


def mean_rate(reqs: list[TraceRequest]) -> float | None:
    """Arrivals per second over the trace's span ((n − 1) / span); ``None`` for one instant."""
    span = reqs[-1].offset_s - reqs[0].offset_s
    return (len(reqs) - 1) / span if span > 0 and len(reqs) > 1 else None


def rescale_to_rate(reqs: list[TraceRequest], rate: float) -> list[float]:
    """Arrival offsets compressed or stretched so that the mean arrival rate is ``rate`` req/s,
    keeping the trace's shape (bursts stay bursts). A trace whose requests all arrive at once
    keeps its offsets (zero)."""
    native = mean_rate(reqs)
    f = native / rate if native else 1.0
    return [r.offset_s * f for r in reqs]


def _block_text(salt: str, h: int, n: int) -> str:
    rng = random.Random(f"{salt}/{h}")
    return " ".join(rng.choices(_WORDS, k=n))


def prompts(reqs: list[TraceRequest], *, salt: str, token_scale: float = 1.0,
            block_tokens: int = MOONCAKE_BLOCK_TOKENS, min_output: int = 1) -> list[Prompt]:
    """Prompts for the trace's requests: input and output lengths × ``token_scale``; a request with
    hash ids is the concatenation of one text block per id (block size ``block_tokens ×
    token_scale``, the last block cut to the input length), so requests that share leading hash
    ids share that prefix text exactly and a prefix cache can reuse it. Without hash ids the
    prompt is unique to the request. All prompts of one call start with ``salt``."""
    if token_scale <= 0:
        raise UserError(f"--token-scale {token_scale:g}: must be positive")
    block = max(1, round(block_tokens * token_scale))
    out = []
    for k, r in enumerate(reqs):
        n_in = max(1, round(r.input_tokens * token_scale))
        n_out = max(min_output, round(r.output_tokens * token_scale))
        if r.hash_ids:
            parts, left = [], n_in
            for h in r.hash_ids[: math.ceil(n_in / block)]:
                take = min(block, left)
                # A cut last block is its own text: a shorter tail is not a prefix hit of a whole block.
                parts.append(_block_text(salt, h, take) if take == block else _block_text(f"{salt}~{k}", h, take))
                left -= take
            if left > 0:  # more tokens than the hash ids cover: a unique tail
                parts.append(_block_text(f"{salt}#{k}", -1, left))
            text = f"{salt} " + " ".join(parts)
            tag = f"h{r.hash_ids[0]}"
        else:
            text = f"{salt}{k}: " + _block_text(f"{salt}#{k}", -1, max(n_in - 1, 1))
            tag = None
        out.append(Prompt(text, n_in, n_out, tag=tag))
    return out


def shared_prefix_fraction(reqs: list[TraceRequest]) -> float | None:
    """The share of prompt blocks that an earlier request already had at the same position (the
    trace's ideal prefix-cache hit rate with an unbounded cache); ``None`` without hash ids."""
    seen: set[tuple[int, ...]] = set()
    hits = total = 0
    for r in reqs:
        if not r.hash_ids:
            continue
        for j in range(len(r.hash_ids)):
            key = tuple(r.hash_ids[: j + 1])
            total += 1
            if key in seen:
                hits += 1
            else:
                seen.add(key)
    return hits / total if total else None
