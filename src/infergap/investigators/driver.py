"""NVIDIA driver and CUDA: driver version vs the CUDA version of the stack; persistence mode.

Minimum drivers per CUDA major (CUDA Toolkit release notes, "CUDA Toolkit and Corresponding
Driver Versions", Linux): CUDA 11.x >= 450.80.02, 12.x >= 525.60.13, 13.x >= 580.65.06.
Persistence: NVIDIA driver docs, "Driver Persistence" (without it every new CUDA context
re-initialises the GPU, seconds each time).
"""

from __future__ import annotations

import re

from infergap import checks
from infergap.evidence.versions import memo_versions, version_finding
from infergap.findings import Action, Finding, Remedy, Status
from infergap.investigators.base import Context, evidence, finding, unknown

NAME = "driver"
#: CUDA major version -> minimum Linux driver (major, minor), from the catalog entry.
MIN_DRIVER = {int(k): (int(v.split(".")[0]), int(v.split(".")[1]))
              for k, v in checks.get("driver.cuda_compat").tables["min_driver_by_cuda_major"].items()}


def _ver(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", s)[:3])


def _stack_cuda(ctx: Context) -> tuple[str, str] | None:
    """CUDA version the Python stack was built for: torch's CUDA build, else a '+cuXYZ' pip suffix."""
    t = ctx.facts.torch_info()
    if t and t.get("cuda"):
        return str(t["cuda"]), ctx.facts.src("torch")
    pk = ctx.facts.pip_packages()
    if pk and "torch" in pk[0]:
        m = re.search(r"\+cu(\d+)(\d)$", pk[0]["torch"])
        if m:
            return f"{m.group(1)}.{m.group(2)}", pk[1]
    return None


def _cuda_compat(ctx: Context) -> Finding:
    cid = "driver.cuda_compat"
    dv = ctx.facts.driver_version()
    if dv is None:
        return unknown(cid, "NVIDIA driver version: not captured", "Needs /sys/module/nvidia/version, NVML or nvidia-smi.")
    cv = ctx.facts.cuda_driver_version()
    stack = _stack_cuda(ctx)
    evs = evidence(dv, cv, stack and (stack[1], f"stack built for CUDA {stack[0]}"))
    if stack is None:
        return unknown(cid, f"Driver {dv.value}" + (f" (CUDA {cv.value})" if cv else "") + ": the CUDA the serving stack was built for is not captured",
                       "Compatibility needs the stack's CUDA build: python -c 'import torch; print(torch.version.cuda)' "
                       "(or pip list of the serving environment).", evidence_=evs)
    major = _ver(stack[0])[0]
    need = MIN_DRIVER.get(major)
    have = _ver(dv.value)
    too_old = need is not None and have[:2] < need
    if cv is not None and _ver(cv.value)[:2] < _ver(stack[0])[:2]:
        too_old = True
    if too_old:
        return finding(cid, Status.actionable, f"Driver {dv.value} is older than CUDA {stack[0]} needs",
                       evidence_=evs,
                       expected_value=f">= {need[0]}.{need[1]}" if need else f"CUDA >= {stack[0]}",
                       impact="The stack's CUDA runtime is newer than the driver supports: CUDA fails to initialise or runs through forward-compatibility libraries only.",
                       remedy=Remedy(note=f"Install an NVIDIA driver >= {need[0]}.{need[1]} (or a torch build for an older CUDA)." if need else "Upgrade the NVIDIA driver."),
                       references=["CUDA Toolkit release notes: Toolkit and corresponding driver versions"])
    return finding(cid, Status.ok, f"Driver {dv.value} supports the stack's CUDA {stack[0]}", evidence_=evs,
                   expected_value=f">= {need[0]}.{need[1]}" if need else None)


def _persistence(ctx: Context) -> list[Finding]:
    out = []
    for g in ctx.facts.gpus():
        cid = "gpu.persistence_mode"
        if g.persistence_mode is None:
            out.append(unknown(cid, f"GPU {g.bdf}: persistence mode not captured", "Needs NVML or nvidia-smi.", subject=g.bdf))
        elif g.persistence_mode:
            out.append(finding(cid, Status.ok, f"GPU {g.bdf}: persistence mode on", subject=g.bdf, evidence_=evidence((g.sources[-1], "Enabled")), expected_value="Enabled"))
        else:
            out.append(finding(cid, Status.actionable, f"GPU {g.bdf}: persistence mode off", subject=g.bdf, evidence_=evidence((g.sources[-1], "Disabled")), expected_value="Enabled",
                               impact="Without persistence the driver tears the GPU down when the last client exits; every new process (engine restart, health check, benchmark) pays seconds of initialisation.",
                               remedy=checks.remedy(None, commands=[("persistence_set", {"bdf": g.bdf, "mode": "1"})], persist=["systemctl enable --now nvidia-persistenced"], revert=[("persistence_set", {"bdf": g.bdf, "mode": "0"})],
                                             actions=[Action(type="nvidia_persistence", target=g.bdf, value="1", previous="0")], host_controlled=ctx.in_container),
                               references=["NVIDIA driver documentation: Driver Persistence"]))
    return out


def _known_issues(ctx: Context) -> Finding | None:
    """``driver.version``: the driver version (host facts or pasted ``nvidia-smi``, ``collect_env``,
    ``sglang.check_env``) checked against the known-bad driver versions of ``signatures.yaml``."""
    sv = memo_versions(ctx.facts)
    if "driver" not in sv.versions:
        return None
    ver, src = sv.versions["driver"]
    return version_finding("driver.version", [("driver", ver)], src, None, sv.gpu_sm)


def _install(ctx: Context) -> list[Finding]:
    """driver.install from each pasted GPU Operator driver container log: a failure line is
    actionable P0 (the node gets no driver, so no GPU for any pod), ``Done, now waiting for
    signal`` is ok (the container's ``nvidia-driver`` script loaded the modules)."""
    out = []
    for part, f in ctx.facts.parsed("gpu_operator_driver"):
        what = f"driver {f.driver or '?'} for kernel {f.kernel or '?'}"
        if f.failure is not None:
            out.append(finding("driver.install", Status.actionable, f"The GPU Operator's driver container failed: {f.failure}", subject=part.label,
                               evidence_=evidence(*((part.label, f.evidence[k]) for k in ("start", "failure") if k in f.evidence)),
                               expected_value="Done, now waiting for signal",
                               impact=f"The {what} was not installed: the node loads no NVIDIA module, the device plugin finds no GPU and every pod "
                                      "asking for nvidia.com/gpu stays Pending (the container restarts in CrashLoopBackOff).",
                               remedy=Remedy(commands=["uname -r   # on the node: the kernel the driver must be built for",
                                                       "kubectl -n gpu-operator logs <nvidia-driver-daemonset pod> --previous"],
                                             note="'Could not resolve Linux kernel version': the driver image's package repositories have no headers "
                                                  "for this kernel; use a precompiled driver image for it, a kernel the distribution still ships, "
                                                  "or install the driver on the host and set driver.enabled=false."),
                               references=["https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/troubleshooting.html",
                                           "https://github.com/NVIDIA/gpu-operator/issues/155"]))
        elif f.done:
            out.append(finding("driver.install", Status.ok, f"The GPU Operator's driver container loaded the {what}", subject=part.label,
                               evidence_=evidence((part.label, f.evidence["done"]))))
    return out


def investigate(ctx: Context) -> list[Finding]:
    """driver.cuda_compat, driver.version, gpu.persistence_mode (per GPU), driver.install (a
    pasted GPU Operator driver container log). Without an NVIDIA GPU or driver on the host, only
    ``driver.version`` of a driver named in pasted evidence, and driver.install."""
    known = _known_issues(ctx)
    if not ctx.facts.gpus() and ctx.facts.driver_version() is None:
        return ([known] if known else []) + _install(ctx)
    return [f for f in (_cuda_compat(ctx), known) if f is not None] + _persistence(ctx) + _install(ctx)
