"""Log facts: each log part of the evidence (NCCL, engine, kernel logs) parsed once per snapshot
and part, shared by the investigators through :class:`infergap.facts.Facts` (``nccl_logs``,
``engine_logs``, ``kernel_logs``).

Investigators run in parallel; two of them may ask for the same 200 MB log. The first one
parses it (streaming), the other waits for that result instead of parsing it again.
"""

from __future__ import annotations

import importlib
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable

from infergap.evidence.signatures import SignatureHit, scan_lines
from infergap.messages import match_lines
from infergap.parsers.dmesg import parse_dmesg
from infergap.parsers.engine_log import EngineLogFacts
from infergap.parsers.nccl import NcclLogFacts, parse_nccl_log
from infergap.snapshot.sources import RECORDS

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.evidence.recognize import EvidencePart
    from infergap.snapshot.core import Snapshot

_LOCK = threading.Lock()
_CACHE: "weakref.WeakKeyDictionary[Any, tuple[dict[tuple, Any], dict[tuple, threading.Lock]]]" = weakref.WeakKeyDictionary()


def memo_part(snap: Snapshot, key: tuple, fn: Callable[[], Any]) -> Any:
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


def _parts(snap: Snapshot, kind: str) -> list[Any]:
    getter = getattr(snap, "evidence_parts", None)
    return list(getter(kind)) if getter is not None else []


def nccl_logs(snap: Snapshot) -> list[tuple[EvidencePart, NcclLogFacts]]:
    """(part, facts) for every evidence part carrying NCCL lines (NCCL logs, and engine logs
    with NCCL lines interleaved), skipping parts without any NCCL line."""
    out = []
    for part in _parts(snap, "nccl_log"):
        facts = memo_part(snap, ("nccl", str(part.path), part.start, part.end), lambda p=part: parse_nccl_log(p.iter_lines()))
        if facts.nccl_lines:
            out.append((part, facts))
    return out


def parsed(snap: Snapshot, kind: str) -> list[tuple[EvidencePart, Any]]:
    """(part, what the kind's parser made of it) for every evidence part serving ``kind``: the
    parser its source record names (:data:`infergap.snapshot.sources.RECORDS`), given the part's
    lines or its text as the record's ``reads`` says, once per snapshot and part."""
    rec = RECORDS[kind]
    fn = _parser(rec.parser or "")
    feed = (lambda p: fn(p.text())) if rec.reads == "text" else (lambda p: fn(p.iter_lines()))
    return [(part, memo_part(snap, (kind, str(part.path), part.start, part.end), lambda p=part: feed(p))) for part in _parts(snap, kind)]


def _parser(name: str) -> Callable[..., Any]:
    """The function ``module:function`` names."""
    mod, _, fn = name.partition(":")
    return getattr(importlib.import_module(mod), fn)


def engine_logs(snap: Snapshot) -> list[tuple[EvidencePart, EngineLogFacts]]:
    """(part, facts) for every engine's log part (the records of family ``engine``: SGLang, vLLM,
    llama.cpp, Ollama, TensorRT-LLM …), each read by its record's parser."""
    out = []
    for part in _parts(snap, "engine_log"):
        fn = _parser(RECORDS[part.kind].parser or "")
        facts = memo_part(snap, (part.kind, str(part.path), part.start, part.end), lambda p=part, fn=fn: fn(p.iter_lines()))
        if facts.engine is None:  # SGLang's and vLLM's parser reads both; the part's kind names the engine
            facts.engine = part.kind.removesuffix("_log")
        out.append((part, facts))
    return out


def kernel_logs(snap: Snapshot) -> list[tuple[Any, Any]]:
    """(part, :class:`~infergap.parsers.dmesg.DmesgFacts`) for every pasted kernel log part."""
    return [(part, memo_part(snap, ("dmesg", str(part.path), part.start, part.end), lambda p=part: parse_dmesg(p.iter_lines())))
            for part in _parts(snap, "dmesg")]


class LogDomain:
    """Log accessors of :class:`infergap.facts.Facts`: the parsed log parts of the evidence (each
    parsed once per snapshot, shared by every investigator), and the evidence parts themselves."""

    snap: Snapshot

    def nccl_logs(self) -> list[tuple[EvidencePart, NcclLogFacts]]:
        """(part, :class:`~infergap.parsers.nccl.NcclLogFacts`) of every part with NCCL lines."""
        return nccl_logs(self.snap)

    def engine_logs(self) -> list[tuple[EvidencePart, EngineLogFacts]]:
        """(part, :class:`~infergap.parsers.engine_log.EngineLogFacts`) of every engine log part."""
        return engine_logs(self.snap)

    def kernel_logs(self) -> list[tuple[Any, Any]]:
        """(part, :class:`~infergap.parsers.dmesg.DmesgFacts`) of every pasted kernel log part."""
        return kernel_logs(self.snap)

    def p2p_bandwidth_runs(self) -> list[tuple[Any, Any]]:
        """(part, :class:`~infergap.parsers.cuda_samples.P2pBandwidthRun`) of every pasted
        ``p2pBandwidthLatencyTest`` output."""
        return parsed(self.snap, "p2p_bandwidth")

    def described_pods(self) -> list[tuple[Any, Any]]:
        """(part, :class:`~infergap.parsers.k8s_pod.PodDescription`) of every pasted ``kubectl describe pod``."""
        return parsed(self.snap, "k8s_pod")

    def nvbandwidth_runs(self) -> list[tuple[Any, Any]]:
        """(part, :class:`~infergap.parsers.nvbandwidth.NvbandwidthRun`) of every pasted
        ``nvbandwidth`` output."""
        return parsed(self.snap, "nvbandwidth")

    def nccl_tests_runs(self) -> list[tuple[Any, Any]]:
        """(part, :class:`~infergap.parsers.nccl.NcclTestsRun`) of every pasted nccl-tests output."""
        return parsed(self.snap, "nccl_tests")

    def ray_logs(self) -> list[tuple[Any, Any]]:
        """(part, :class:`~infergap.parsers.ray_log.RayLogFacts`) of every pasted Ray log."""
        return parsed(self.snap, "ray_log")

    def device_plugin_logs(self) -> list[tuple[Any, Any]]:
        """(part, :class:`~infergap.parsers.k8s_log.DevicePluginFacts`) of every pasted NVIDIA
        Kubernetes device plugin log."""
        return parsed(self.snap, "k8s_device_plugin")

    def mig_instances(self) -> list[tuple[Any, list[dict[str, Any]]]]:
        """(part, instances of :func:`~infergap.parsers.nvsmi.parse_mig_instances`) of every
        pasted ``nvidia-smi mig -lgi`` / ``-lci`` output that lists at least one instance."""
        return [(part, rows) for part, rows in parsed(self.snap, "nvsmi_mig") if rows]

    def parsed(self, kind: str) -> list[tuple[Any, Any]]:
        """(part, what its parser read) of every evidence part of ``kind``: the one accessor of a
        kind no other fact joins (its source record names the parser, :func:`parsed`)."""
        return parsed(self.snap, kind)

    def evidence_parts(self, kind: str) -> list[Any]:
        """The recognised evidence parts serving ``kind`` (none without pasted evidence)."""
        return _parts(self.snap, kind)

    def all_parts(self) -> list[Any]:
        """Every recognised evidence part, in file order (none without pasted evidence)."""
        return list(getattr(self.snap, "parts", []) or [])

    def pasted(self) -> bool:
        """Whether the input carries pasted evidence (an evidence overlay)."""
        return getattr(self.snap, "unrecognized", None) is not None

    def unrecognized(self) -> list[Any]:
        """The evidence files (or stretches) no recogniser could place, with why."""
        getter = getattr(self.snap, "unrecognized", None)
        return list(getter()) if getter is not None else []

    def with_host(self) -> bool:
        """Whether pasted evidence comes with a host (a live host or a snapshot under it)."""
        return getattr(self.snap, "base", None) is not None

    def message_matches(self) -> list[tuple[Any, list[Any]]]:
        """(part, its :class:`~infergap.messages.MessageMatch` list) for every recognised evidence
        part: the message catalogs (``data/messages``) matched on every line, once per part."""
        return [(p, memo_part(self.snap, ("messages", str(p.path), p.start, p.end),
                              lambda p=p: match_lines(p.iter_lines(), p.first_line)))
                for p in self.all_parts()]

    def signature_hits(self, part: EvidencePart) -> dict[str, SignatureHit]:
        """The failure signatures (``data/signatures.yaml``) matched in one evidence part, by
        signature id, scanned once per snapshot and part."""
        return memo_part(self.snap, ("sig", str(part.path), part.start, part.end), lambda: scan_lines(part.iter_lines()))

    def memo(self, key: tuple, fn: Any) -> Any:
        """``fn()`` computed once per snapshot and ``key`` (shared by every reader of the input)."""
        return memo_part(self.snap, key, fn)
