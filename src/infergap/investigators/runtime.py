"""The serving stack: torch / sglang / vllm / flashinfer / NCCL versions, torch's CUDA arch list
against the GPUs' compute capability, and NCCL environment variables.

Sources: ``torch.cuda.get_arch_list()`` (a build without the GPU's ``sm_XY`` falls back to PTX JIT
of a lower ``compute_XY`` or fails: PyTorch "CUDA semantics" / NVIDIA CUDA compatibility guide);
NCCL environment variables (NCCL documentation "Environment Variables").
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from infergap import checks
from infergap.evidence.signatures import version_issues
from infergap.evidence.versions import memo_versions, version_finding
from infergap.findings import Finding, Remedy, Severity, Status, ev
from infergap.investigators.base import Context, evidence, finding, unknown

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.facts import Facts
    from infergap.parsers.nccl import NcclLogFacts

NAME = "runtime"
PACKAGES = ("torch", "sglang", "vllm", "flashinfer-python", "flashinfer", "nvidia-nccl-cu12", "nvidia-nccl-cu13", "transformers", "triton", "llama-cpp-python", "text-generation-server")


def _stack(ctx: Context) -> Finding:
    pk = ctx.facts.pip_packages()
    t = ctx.facts.torch_info()
    if pk is None and t is None:
        return unknown("runtime.stack", "Python serving stack: not captured", "Needs pip list of the serving environment (or the torch probe of infergap collect).")
    found = {}
    if pk:
        found = {p: pk[0][p] for p in PACKAGES if p in pk[0]}
    if t and t.get("torch"):
        found.setdefault("torch", t["torch"])
    if t and t.get("nccl"):
        found["nccl (torch)"] = t["nccl"]
    env = ctx.facts.env() or {}
    if env.get("NCCL_VERSION"):
        found["nccl (image)"] = env["NCCL_VERSION"]
    src = pk[1] if pk else ctx.facts.src("torch")
    if not found:  # the environment read is not the server's: nothing is known of the stack
        return unknown("runtime.stack", "Python serving stack: no serving package in the environment read",
                       f"{src} lists none of {', '.join(PACKAGES[:3])}: the server runs in another environment "
                       "(a venv, a conda env or a container). Run `python -m pip list` with the server's Python, "
                       "or `infergap collect` inside its container.",
                       evidence_=evidence((src, "no serving package listed")))
    desc = ", ".join(f"{k} {v}" for k, v in found.items())
    return finding("runtime.stack", Status.ok, f"Serving stack: {desc}", evidence_=evidence((src, desc)), details={"versions": found})


def _arch(ctx: Context) -> Finding | None:
    gpus = ctx.facts.gpus()
    if not gpus:
        return None
    t = ctx.facts.torch_info()
    caps = sorted({g.cuda_capability for g in gpus if g.cuda_capability})
    cap_src = [(g.sources[-1], f"{g.bdf}: compute capability {g.cuda_capability}") for g in gpus if g.cuda_capability][:1]
    if not caps and t and t.get("props"):  # the torch probe's device properties name the capability too
        m = re.findall(r"major=(\d+), minor=(\d+)", " ".join(t["props"]))
        caps = sorted({f"{a}.{b}" for a, b in m})
        cap_src = [(ctx.facts.src("torch"), "device properties: compute capability " + ", ".join(caps))] if caps else []
    if not t or not t.get("arch_list"):
        return unknown("runtime.torch_arch", "torch's CUDA arch list: not captured",
                       "The torch probe (run by infergap collect) records torch.cuda.get_arch_list(); GPU compute capability: " + (", ".join(caps) or "unknown") + ".")
    archs = t["arch_list"]
    evs = evidence((ctx.facts.src("torch"), "arch list: " + " ".join(archs)), *cap_src)
    if not caps:
        return unknown("runtime.torch_arch", "torch's CUDA arch list captured; the GPUs' compute capability is not",
                       "Needs the compute capability: nvidia-smi --query-gpu=compute_cap --format=csv, or nvidia-smi -q (the product name).", evidence_=evs)
    missing = []
    for cap in caps:
        num = cap.replace(".", "")
        have_sm = any(re.fullmatch(rf"sm_{num}[af]?", a) for a in archs)
        if not have_sm:
            missing.append(cap)
    if missing:
        return finding("runtime.torch_arch", Status.actionable, f"torch has no kernels built for compute capability {', '.join(missing)}",
                       evidence_=evs, expected_value=" ".join(f"sm_{c.replace('.', '')}" for c in missing),
                       impact="Without native SASS for the GPU, kernels JIT-compile from PTX of an older architecture (slow start, missing architecture-specific instructions) or fail with 'no kernel image is available'.",
                       remedy=Remedy(note="Install a torch build whose arch list includes the GPU (e.g. a cu12.8+/cu13 wheel for SM120), and rebuild custom kernels for it."))
    return finding("runtime.torch_arch", Status.ok, f"torch is built for the GPUs' compute capability ({', '.join(caps)})", evidence_=evs)


_NCCL_ENV = checks.get("nccl.env")
#: NCCL variables that disable or restrict a transport: name -> (value that does it, what it does).
#: NCCL_IB_DISABLE is judged apart (only with an RDMA NIC present).
BAD_NCCL = {k: (v, _NCCL_ENV.text(f"set {k}")) for k, v in _NCCL_ENV.tables["disabling_variables"].items() if k != "NCCL_IB_DISABLE"}


def _nccl_env(ctx: Context) -> Finding | None:
    env = ctx.facts.env()
    conf = ctx.facts.value("/etc/nccl.conf")
    if env is None and conf is None:
        return unknown("nccl.env", "NCCL environment: not captured", "Needs the environment of the serving process (cmds/env.out) or /etc/nccl.conf.")
    allv = dict(env or {})
    if conf:
        for line in conf.value.splitlines():
            k, sep, v = line.partition("=")
            if sep and not k.strip().startswith("#"):
                allv.setdefault(k.strip(), v.strip())
    nccl = {k: v for k, v in allv.items() if k.startswith("NCCL_")}
    bad = []
    for k, (val, why) in BAD_NCCL.items():
        if nccl.get(k, "").upper() == val:
            bad.append((k, nccl[k], why))
    if nccl.get("NCCL_IB_DISABLE") == "1" and ctx.facts.rdma_devices():
        bad.append(("NCCL_IB_DISABLE", "1", _NCCL_ENV.text("set NCCL_IB_DISABLE")))
    ifn = nccl.get("NCCL_SOCKET_IFNAME", "")
    if ifn and re.match(r"^(=)?(lo|docker)", ifn):
        bad.append(("NCCL_SOCKET_IFNAME", ifn, "Sockets bound to loopback/docker bridge: multi-node traffic cannot leave the host."))
    src = ctx.facts.src("env") if env is not None else "files/etc/nccl.conf"
    evs = evidence(*[(src, f"{k}={v}") for k, v in nccl.items()]) or evidence((src, "no NCCL_* variables set"))
    if bad:
        p2p = ctx.facts.p2p()
        if all(k == "NCCL_P2P_DISABLE" for k, _, _ in bad) and p2p and all(v in ("CNS", "GNS", "NS") for v in p2p.values()):
            return finding("nccl.env", Status.expected, "NCCL_P2P_DISABLE=1 on GPUs that report no P2P support", evidence_=evs,
                           impact="nvidia-smi reports P2P unsupported for these pairs (CNS/GNS/NS), so disabling it only avoids NCCL probing.")
        sev = Severity.P0 if any(k in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_P2P_LEVEL", "NCCL_IB_DISABLE") for k, _, _ in bad) else Severity.P2
        return finding("nccl.env", Status.actionable, "NCCL variables that degrade collectives: " + ", ".join(f"{k}={v}" for k, v, _ in bad),
                       severity=sev, evidence_=evs, impact=" ".join(w for _, _, w in bad),
                       remedy=checks.remedy("nccl.env", commands=[("unset", {"name": k}) for k, _, _ in bad],
                                            revert=[("export", {"name": k, "value": v}) for k, v, _ in bad], note="Takes effect when the server restarts."),
                       references=["NCCL documentation: Environment Variables"])
    if _a_log_finds_risky(ctx):  # one check, one status: the log's actionable finding stands alone
        return None
    return finding("nccl.env", Status.ok, "No NCCL variable that disables a transport" + (f" ({len(nccl)} NCCL_* set)" if nccl else ""), evidence_=evs,
                   subject=src if src.startswith("evidence/") else None)  # variables a pasted log or env dump echoes


def _a_log_finds_risky(ctx: Context) -> bool:
    """Whether a pasted NCCL log echoes a variable that disables a transport (its nccl.env is actionable)."""
    for part, f in ctx.facts.nccl_logs():
        x = nccl_env_from_log(part.label, f)
        if x is not None and x.status == Status.actionable:
            return True
    return False


#: Components whose versions are checked here (the driver in driver.py, NCCL logs in nccl_log.py).
VERSION_COMPONENTS = ("torch", "cuda", "vllm", "sglang", "nvidia-nccl-cu11", "nccl")


def _known_versions(ctx: Context, skip: set[str] = frozenset()) -> list[Finding]:
    """The stack's versions (host pip list and torch probe, pasted ``pip``, ``collect_env``,
    ``sglang.check_env``, the version a vLLM or SGLang log states) checked against the known-bad versions of ``signatures.yaml``: one
    finding per finding id a matching entry yields (except ids in ``skip``, already decided from
    the host itself), and ``runtime.versions`` ok for the rest."""
    sv = memo_versions(ctx.facts)
    logged_nccl = bool(ctx.facts.nccl_logs())
    checks = [(c, *sv.versions[c]) for c in VERSION_COMPONENTS if c in sv.versions and not (c == "nccl" and logged_nccl)]
    if not checks:
        return []
    matched: dict[str, list[tuple[str, str, str]]] = {}
    rest = []
    for comp, ver, src in checks:
        ids = {s.finding.id for s, _ in version_issues(comp, ver, sv.gpu_sm)} - set(skip)
        for fid in ids:
            matched.setdefault(fid, []).append((comp, ver, src))
        if not ids:
            rest.append((comp, ver, src))
    out = [version_finding(fid, [(c, v) for c, v, _ in items], items[0][2], None, sv.gpu_sm) for fid, items in matched.items()]
    if rest:
        out.append(version_finding("runtime.versions", [(c, v) for c, v, _ in rest], rest[0][2], None, sv.gpu_sm))
    return out


#: NCCL variables an NCCL log echoes that disable a transport: (value, what it does).
_RISKY_ENV = {k: (v, _NCCL_ENV.text(f"logged {k}")) for k, v in _NCCL_ENV.tables["disabling_variables"].items()}


def nccl_env_from_log(label: str, f: NcclLogFacts, facts: Facts | None = None) -> Finding | None:
    """nccl.env from the variables an NCCL_DEBUG=INFO log echoes (``f`` its
    :class:`~infergap.parsers.nccl.NcclLogFacts`): one that disables a transport is P1; None when
    the log echoes none, or when it is ok and the host's own environment in ``facts`` (a
    :class:`~infergap.facts.Facts`) already gives the check its status (one check, one status)."""
    if not f.env:
        return None
    risky = []
    for k, v in f.env.items():
        rule = _RISKY_ENV.get(k)
        if rule and v.strip().upper() == rule[0] and not (k == "NCCL_IB_DISABLE" and not f.ib_devices):
            risky.append((k, v, rule[1]))
    evidence = [ev(label, f"{k} set by environment to {v}") for k, v in list(f.env.items())[:12]]
    if risky:
        return finding("nccl.env", Status.actionable, subject=label, severity=Severity.P1,
            title="NCCL runs with " + ", ".join(f"{k}={v}" for k, v, _ in risky),
            evidence_=evidence, expected_value="unset unless a documented hardware limit requires it",
            impact="; ".join(f"{k}={v} {why}" for k, v, why in risky) + ". Often left over from debugging a hang whose cause (ACS, IOMMU) was elsewhere.",
            remedy=checks.remedy("nccl.env", commands=[("unset", {"name": k}) for k, _, _ in risky],
                                 revert=[("export", {"name": k, "value": v}) for k, v, _ in risky]))
    if facts is not None and (facts.env() is not None or facts.value("/etc/nccl.conf") is not None):
        return None
    return finding("nccl.env", Status.ok, subject=label,
                   title="NCCL_* variables set: " + ", ".join(sorted(f.env)), evidence_=evidence)


def investigate(ctx: Context) -> list[Finding]:
    """runtime.stack, runtime.torch_arch, nccl.env, runtime.versions (and the findings of
    known-bad versions)."""
    base = [f for f in (_stack(ctx), _arch(ctx), _nccl_env(ctx)) if f is not None]
    return base + _known_versions(ctx, {f.id for f in base})
