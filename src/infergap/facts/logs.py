"""Log facts: each log part of the evidence (NCCL, engine, kernel logs) parsed once per snapshot
and part, shared by the investigators through :class:`infergap.facts.Facts` (``nccl_logs``,
``engine_logs``, ``kernel_logs``).

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


def memo_part(snap: Any, key: tuple, fn: Callable[[], Any]) -> Any:
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
        facts = memo_part(snap, ("nccl", str(part.path), part.start, part.end), lambda p=part: parse_nccl_log(p.iter_lines()))
        if facts.nccl_lines:
            out.append((part, facts))
    return out


def engine_logs(snap: Any) -> list[tuple[Any, EngineLogFacts]]:
    """(part, facts) for every SGLang, vLLM or llama.cpp log part."""
    out = []
    for part in _parts(snap, "engine_log"):
        if part.kind == "trtllm_log":
            from infergap.parsers.trtllm_log import parse_trtllm_log

            out.append((part, memo_part(snap, ("trtllm", str(part.path), part.start, part.end), lambda p=part: parse_trtllm_log(p.iter_lines()))))
            continue
        if part.kind == "ollama_log":
            from infergap.parsers.ollama_log import parse_ollama_log

            out.append((part, memo_part(snap, ("ollama", str(part.path), part.start, part.end), lambda p=part: parse_ollama_log(p.iter_lines()))))
            continue
        if part.kind == "llamacpp_log":
            from infergap.parsers.llamacpp_log import parse_llamacpp_log

            out.append((part, memo_part(snap, ("llamacpp", str(part.path), part.start, part.end), lambda p=part: parse_llamacpp_log(p.iter_lines()))))
            continue
        facts = memo_part(snap, ("engine", str(part.path), part.start, part.end), lambda p=part: parse_engine_log(p.iter_lines()))
        if facts.engine is None:
            facts.engine = "sglang" if part.kind == "sglang_log" else "vllm" if part.kind == "vllm_log" else None
        out.append((part, facts))
    return out


def kernel_logs(snap: Any) -> list[tuple[Any, Any]]:
    """(part, :class:`~infergap.parsers.dmesg.DmesgFacts`) for every pasted kernel log part."""
    from infergap.parsers.dmesg import parse_dmesg

    return [(part, memo_part(snap, ("dmesg", str(part.path), part.start, part.end), lambda p=part: parse_dmesg(p.iter_lines())))
            for part in _parts(snap, "dmesg")]


class LogDomain:
    """Log accessors of :class:`infergap.facts.Facts`: the parsed log parts of the evidence (each
    parsed once per snapshot, shared by every investigator), and the evidence parts themselves."""

    snap: Any

    def nccl_logs(self) -> list[tuple[Any, NcclLogFacts]]:
        """(part, :class:`~infergap.parsers.nccl.NcclLogFacts`) of every part with NCCL lines."""
        return nccl_logs(self.snap)

    def engine_logs(self) -> list[tuple[Any, EngineLogFacts]]:
        """(part, :class:`~infergap.parsers.engine_log.EngineLogFacts`) of every engine log part."""
        return engine_logs(self.snap)

    def kernel_logs(self) -> list[tuple[Any, Any]]:
        """(part, :class:`~infergap.parsers.dmesg.DmesgFacts`) of every pasted kernel log part."""
        return kernel_logs(self.snap)

    def p2p_bandwidth_runs(self) -> list[tuple[Any, Any]]:
        """(part, :class:`~infergap.parsers.cuda_samples.P2pBandwidthRun`) of every pasted
        ``p2pBandwidthLatencyTest`` output."""
        from infergap.parsers.cuda_samples import parse_p2p_bandwidth

        return [(part, memo_part(self.snap, ("p2pbw", str(part.path), part.start, part.end), lambda p=part: parse_p2p_bandwidth(p.iter_lines())))
                for part in _parts(self.snap, "p2p_bandwidth")]

    def described_pods(self) -> list[tuple[Any, Any]]:
        """(part, :class:`~infergap.parsers.k8s_pod.PodDescription`) of every pasted ``kubectl describe pod``."""
        from infergap.parsers.k8s_pod import parse_describe_pod

        return [(part, memo_part(self.snap, ("pod", str(part.path), part.start, part.end), lambda p=part: parse_describe_pod(p.text())))
                for part in _parts(self.snap, "k8s_pod")]

    def nvbandwidth_runs(self) -> list[tuple[Any, Any]]:
        """(part, :class:`~infergap.parsers.nvbandwidth.NvbandwidthRun`) of every pasted
        ``nvbandwidth`` output."""
        from infergap.parsers.nvbandwidth import parse_nvbandwidth

        return [(part, memo_part(self.snap, ("nvbw", str(part.path), part.start, part.end), lambda p=part: parse_nvbandwidth(p.iter_lines())))
                for part in _parts(self.snap, "nvbandwidth")]

    def nccl_tests_runs(self) -> list[tuple[Any, Any]]:
        """(part, :class:`~infergap.parsers.nccl.NcclTestsRun`) of every pasted nccl-tests output."""
        from infergap.parsers.nccl import parse_nccl_tests

        return [(part, memo_part(self.snap, ("nccltests", str(part.path), part.start, part.end), lambda p=part: parse_nccl_tests(p.iter_lines())))
                for part in _parts(self.snap, "nccl_tests")]

    def ray_logs(self) -> list[tuple[Any, Any]]:
        """(part, :class:`~infergap.parsers.ray_log.RayLogFacts`) of every pasted Ray log."""
        from infergap.parsers.ray_log import parse_ray_log

        return [(part, memo_part(self.snap, ("ray", str(part.path), part.start, part.end), lambda p=part: parse_ray_log(p.iter_lines())))
                for part in _parts(self.snap, "ray_log")]

    def device_plugin_logs(self) -> list[tuple[Any, Any]]:
        """(part, :class:`~infergap.parsers.k8s_log.DevicePluginFacts`) of every pasted NVIDIA
        Kubernetes device plugin log."""
        from infergap.parsers.k8s_log import parse_device_plugin_log

        return [(part, memo_part(self.snap, ("k8sdp", str(part.path), part.start, part.end), lambda p=part: parse_device_plugin_log(p.iter_lines())))
                for part in _parts(self.snap, "k8s_device_plugin")]

    def mig_instances(self) -> list[tuple[Any, list[dict[str, Any]]]]:
        """(part, instances of :func:`~infergap.parsers.nvsmi.parse_mig_instances`) of every
        pasted ``nvidia-smi mig -lgi`` / ``-lci`` output that lists at least one instance."""
        from infergap.parsers.nvsmi import parse_mig_instances

        runs = [(part, memo_part(self.snap, ("mig", str(part.path), part.start, part.end), lambda p=part: parse_mig_instances(p.iter_lines())))
                for part in _parts(self.snap, "nvsmi_mig")]
        return [(part, rows) for part, rows in runs if rows]

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
        from infergap.messages import match_lines

        return [(p, memo_part(self.snap, ("messages", str(p.path), p.start, p.end),
                              lambda p=p: match_lines(p.iter_lines(), p.first_line)))
                for p in self.all_parts()]

    def memo(self, key: tuple, fn: Any) -> Any:
        """``fn()`` computed once per snapshot and ``key`` (shared by every reader of the input)."""
        return memo_part(self.snap, key, fn)
