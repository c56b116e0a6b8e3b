"""Parsed log facts shared by the investigators, parsed once per snapshot and evidence part.

Investigators run in parallel; two of them may ask for the same 200 MB log. The first one
parses it (streaming), the other waits for that result instead of parsing it again.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

from infergap.parsers.engine_log import EngineLogFacts, parse_engine_log
from infergap.parsers.nccl import NcclLogFacts, parse_nccl_log

_LOCK = threading.Lock()
_CACHE: "weakref.WeakKeyDictionary[Any, tuple[dict[tuple, Any], dict[tuple, threading.Lock]]]" = weakref.WeakKeyDictionary()


def _memo(snap: Any, key: tuple, fn: Callable[[], Any]) -> Any:
    """``fn()`` computed once per (snapshot, key); concurrent callers of the same key wait for it."""
    with _LOCK:
        try:
            values, locks = _CACHE.setdefault(snap, ({}, {}))
        except TypeError:  # not weak-referenceable: no cache
            return fn()
        if key in values:
            return values[key]
        lock = locks.setdefault(key, threading.Lock())
    with lock:
        if key not in values:
            values[key] = fn()
        return values[key]


def _parts(snap: Any, kind: str) -> list[Any]:
    getter = getattr(snap, "evidence_parts", None)
    return list(getter(kind)) if getter is not None else []


def nccl_logs(snap: Any) -> list[tuple[Any, NcclLogFacts]]:
    """(part, facts) for every evidence part carrying NCCL lines (NCCL logs, and engine logs
    with NCCL lines interleaved), skipping parts without any NCCL line."""
    out = []
    for part in _parts(snap, "nccl_log"):
        facts = _memo(snap, ("nccl", str(part.path), part.start, part.end), lambda p=part: parse_nccl_log(p.iter_lines()))
        if facts.nccl_lines:
            out.append((part, facts))
    return out


def engine_logs(snap: Any) -> list[tuple[Any, EngineLogFacts]]:
    """(part, facts) for every SGLang, vLLM or llama.cpp log part."""
    out = []
    for part in _parts(snap, "engine_log"):
        if part.kind == "llamacpp_log":
            from infergap.parsers.llamacpp_log import parse_llamacpp_log

            out.append((part, _memo(snap, ("llamacpp", str(part.path), part.start, part.end), lambda p=part: parse_llamacpp_log(p.iter_lines()))))
            continue
        facts = _memo(snap, ("engine", str(part.path), part.start, part.end), lambda p=part: parse_engine_log(p.iter_lines()))
        if facts.engine is None:
            facts.engine = "sglang" if part.kind == "sglang_log" else "vllm" if part.kind == "vllm_log" else None
        out.append((part, facts))
    return out
