"""Versions of the serving stack and the GPUs' architectures, from every source an audit has:
the host's facts (driver, pip list, torch probe) and pasted evidence (``python -m sglang.check_env``,
PyTorch's ``collect_env``, ``pip`` listings, NCCL's ``NCCL version 2.x.y+cudaX.Y`` line, the
version a vLLM or SGLang server log states, device names in nccl-tests' headers and ``nvidia-smi``).

The versions are checked against the catalog of known issues
(:mod:`infergap.evidence.signatures`). GPU architectures are only what the input says: a compute
capability printed by ``check_env`` or the torch probe, or a product name whose architecture is
public (GeForce RTX 50 series and RTX PRO Blackwell are sm_120: NVIDIA's "CUDA GPUs" compute
capability table, https://developer.nvidia.com/cuda-gpus).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from infergap.checks import finding
from infergap.evidence.signatures import checked_against, version_issues
from infergap.facts.logs import engine_logs
from infergap.findings import SEVERITY_ORDER, Remedy, Status, ev
from infergap.gpudata import sm_of

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.facts import Facts
    from infergap.snapshot.core import Snapshot

_CHECK_ENV = {
    "driver": re.compile(r"^\s*(?:CUDA Driver Version|Nvidia driver version|NVIDIA driver version|Driver Version)\s*:\s*(\d+\.\d+(?:\.\d+)?)", re.I),
    "torch": re.compile(r"^\s*(?:PyTorch|PyTorch version|torch)\s*:\s*(\d+\.\d+\.\d+\S*)"),
    "sglang": re.compile(r"^\s*sglang\s*:\s*(\d+\.\d+\.\d+\S*)"),
    "vllm": re.compile(r"^\s*(?:vllm|vLLM Version)\s*:\s*v?(\d+\.\d+\.\d+\S*)"),
    "cuda": re.compile(r"^\s*(?:CUDA runtime version|CUDA used to build PyTorch)\s*:\s*(\d+\.\d+)"),
    "nccl": re.compile(r"^\s*(?:NCCL|nccl)\s*:\s*(\d+\.\d+\.\d+)"),
}
_CAP = re.compile(r"Compute Capability:\s*(\d+)\.(\d+)")
_NCCL_VER = re.compile(r"NCCL version[\s:：]*(\d+\.\d+\.\d+)(?:\+cuda(\d+\.\d+))?")
_PIP_NCCL = {"nvidia-nccl-cu12": "nvidia-nccl-cu12", "nvidia-nccl-cu11": "nvidia-nccl-cu11", "nvidia-nccl-cu13": "nvidia-nccl-cu13"}


@dataclass
class StackVersions:
    """Component → (version, evidence source); ``gpu_sm`` the compute capabilities (``120``) seen,
    ``gpu_names`` the product names seen."""

    versions: dict[str, tuple[str, str]] = field(default_factory=dict)
    gpu_sm: set[int] = field(default_factory=set)
    gpu_names: list[str] = field(default_factory=list)

    def add(self, component: str, version: str | None, source: str) -> None:
        """Record ``component`` at ``version`` unless already known (earlier sources win)."""
        if version and component not in self.versions:
            self.versions[component] = (version.strip(), source)

    def add_gpu_name(self, name: str) -> None:
        """Record a GPU product name and the architecture it implies."""
        name = name.strip()
        if name and name not in self.gpu_names and len(self.gpu_names) < 16:
            self.gpu_names.append(name)
        sm = sm_of(name)  # the GPU data (gpus.yaml), not a name table of our own
        if sm is not None:
            self.gpu_sm.add(sm)


def _from_text(sv: StackVersions, text: str, source: str) -> None:
    for line in text.splitlines():
        for comp, rx in _CHECK_ENV.items():
            m = rx.match(line)
            if m:
                sv.add(comp, m.group(1), source)
        m = _CAP.search(line)
        if m:
            sv.gpu_sm.add(int(m.group(1)) * 10 + int(m.group(2)))
        if "NVIDIA" in line or "GeForce" in line:
            g = re.search(r"(?:GPU [\d,]+:|device\s+\d+ \[[^\]]*\])\s*(NVIDIA [^(\n]+?|GeForce [^(\n]+?|Tesla [^(\n]+?)\s*(?:\(UUID.*)?$", line)
            if g:
                sv.add_gpu_name(g.group(1))
        m = _NCCL_VER.search(line)
        if m:
            sv.add("nccl", m.group(1), source)
            sv.add("nccl_cuda", m.group(2), source)
        if line.lstrip().startswith(("[pip", "[conda")) or "==" in line:
            pm = re.search(r"\b(nvidia-nccl-cu1[123])(?:==|\s+)(\d[\w.]*)", line)
            if pm:
                sv.add(_PIP_NCCL[pm.group(1)], pm.group(2), source)
                sv.add("nccl", pm.group(2), source)


def stack_versions(snap: Snapshot, facts: Facts | None = None) -> StackVersions:
    """Every version and GPU architecture the host facts and the pasted evidence give.

    ``snap`` is any snapshot (evidence parts are read when it has ``evidence_parts``); ``facts`` a
    :class:`infergap.facts.Facts` or None. Never raises for bad input.
    """
    sv = StackVersions()
    if facts is not None:
        try:
            dv = facts.driver_version()
            if dv:
                sv.add("driver", dv.value, dv.source)
            t = facts.torch_info()
            if t:
                sv.add("torch", str(t.get("torch") or ""), facts.src("torch"))
                sv.add("cuda", str(t.get("cuda") or ""), facts.src("torch"))
                nv = t.get("nccl")
                if nv:
                    sv.add("nccl", ".".join(str(x) for x in nv) if isinstance(nv, (list, tuple)) else str(nv), facts.src("torch"))
            pk = facts.pip_packages()
            if pk:
                pkgs, src = pk
                for name in ("torch", "vllm", "sglang"):
                    if pkgs.get(name):
                        sv.add(name, pkgs[name], src)
                for name, comp in _PIP_NCCL.items():
                    if pkgs.get(name):
                        sv.add(comp, pkgs[name], src)
                        sv.add("nccl", pkgs[name], src)
            for g in facts.gpus():
                if g.name:
                    sv.add_gpu_name(g.name)
                cap = getattr(g, "cuda_capability", None)
                if cap and re.fullmatch(r"\d+\.\d+", str(cap)):
                    a, b = str(cap).split(".")
                    sv.gpu_sm.add(int(a) * 10 + int(b))
        except Exception:  # facts of a broken snapshot: the evidence below still counts
            pass
    getter = getattr(snap, "evidence_parts", None)
    if getter is not None:
        seen: set[int] = set()
        for kind in ("check_env", "collect_env", "nccl_log", "nvsmi", "nvsmi_q", "pip_freeze", "pip_text", "fragment", "traceback"):
            for part in getter(kind):
                if id(part) not in seen:
                    seen.add(id(part))
                    _from_text(sv, part.text(limit_bytes=2 * 1024 * 1024), part.label)
        _from_engine_logs(sv, snap)
    return sv


def _from_engine_logs(sv: StackVersions, snap: Snapshot) -> None:
    """The version a vLLM or SGLang server log states (``vLLM API server version 0.6.1``,
    ``sglang==0.4.6``), read by the engine-log parser: checked like one from ``pip``."""
    for part, f in engine_logs(snap):
        if getattr(f, "engine", None) in ("vllm", "sglang") and getattr(f, "version", None):
            sv.add(f.engine, str(f.version).lstrip("v"), part.label)


def memo_versions(facts: Facts) -> StackVersions:
    """:func:`stack_versions` of the facts' input, computed once per snapshot (investigators share it)."""
    return facts.memo(("stack_versions",), lambda: stack_versions(facts.snap, facts))


_LABEL = {"nccl": "NCCL", "nccl_cuda": "NCCL's CUDA build", "driver": "NVIDIA driver", "cuda": "CUDA", "torch": "torch",
          "vllm": "vLLM", "sglang": "SGLang", "nvidia-nccl-cu11": "nvidia-nccl-cu11", "nvidia-nccl-cu12": "nvidia-nccl-cu12"}


def version_finding(check_id: str, checks: list[tuple[str, str]], source: str, subject: str | None,
                    gpu_sm: set[int], extra: list[Any] = (), extra_lines: list[str] = ()) -> Any:
    """The finding of a version check against the catalog of known issues.

    ``checks`` are (component, version) pairs read from ``source``; ``extra`` message signatures
    already matched in the same evidence (their finding id is ``check_id``) with ``extra_lines`` the
    lines that matched. Returns an actionable finding (the worst matching entry's severity, fix and
    revert, every entry's source), ``unknown`` when an entry applies only to GPU architectures the
    input does not show, else ``ok`` naming how many known issues were checked. Never None.
    """
    desc = ", ".join(f"{_LABEL.get(c, c)} {v}" for c, v in checks)
    sure, unsure = list(extra), []
    for comp, ver in checks:
        for sig, certain in version_issues(comp, ver, gpu_sm):
            (sure if certain else unsure).append(sig)
    sure = list({s.id: s for s in sure}.values())
    evs = [ev(source, desc)] if desc else []
    evs += [ev(source, x) for x in list(extra_lines)[:3]]
    if sure:
        worst = min(sure, key=lambda s: SEVERITY_ORDER[s.finding.severity])
        refs: list[str] = []
        for s in sure:
            refs += [r for r in s.sources if r not in refs]
        return finding(check_id, Status.actionable, subject=subject,
                       severity=worst.finding.severity, fix_kind=worst.finding.fix_kind,
                       title=(f"{desc}: " if desc else "") + worst.finding.title, evidence_=evs,
                       impact=" ".join(" ".join(s.why.split()) for s in sure),
                       remedy=Remedy(commands=list(worst.finding.fix), revert=list(worst.finding.revert), note=worst.finding.note),
                       references=refs, details={"signatures": [s.id for s in sure], "versions": dict(checks)})
    if unsure:
        s = unsure[0]
        return finding(check_id, Status.unknown, subject=subject,
                       title=f"{desc}: a known issue applies on some GPUs ({s.finding.title}); which GPUs run it is not in the input",
                       evidence_=evs,
                       impact=" ".join(s.why.split()) + " Run: nvidia-smi --query-gpu=name,compute_cap --format=csv",
                       references=list(s.sources), details={"signatures": [x.id for x in unsure], "versions": dict(checks)})
    n = sum(checked_against(c) for c, _ in checks)
    return finding(check_id, Status.ok, subject=subject,
                   title=f"{desc}: checked against the {n} known-issue entries for these components in signatures.yaml; none applies",
                   evidence_=evs + [ev("signatures.yaml", f"{n} version entries checked")], details={"versions": dict(checks)})
