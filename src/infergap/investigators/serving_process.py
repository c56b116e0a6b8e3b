"""The serving process a snapshot kept (``infergap collect --url``, or every known engine
listening on the host): its command line read with the engine's own argument table, its
environment's GPU variables.

Severity model: a ``CUDA_VISIBLE_DEVICES`` that hides every GPU from the server on a host with
GPUs is actionable (P0: the server runs on the CPU); otherwise the process is reported ok with
the judged flags and where each value came from (given, or the source's default) — the plan
weighs them against the measurements.
"""

from __future__ import annotations

from infergap.checks import finding
from infergap.findings import Finding, Status, ev
from infergap.investigators.base import facts_of

NAME = "serving_process"
#: Values of CUDA_VISIBLE_DEVICES that hide every GPU (CUDA C Programming Guide, "CUDA
#: Environment Variables": an empty list or an invalid index makes no device visible).
HIDDEN = ("", "-1", "none", "void", "nodevfiles")
#: The flags reported per engine (the ones the plan judges; llama.cpp as ``llamacpp``).
REPORTED = {"llamacpp": ("--gpu-layers", "--kv-offload", "--cont-batching", "--ubatch-size", "--batch-size", "--parallel", "--flash-attn"),
            "vllm": ("--tensor-parallel-size", "--max-num-seqs", "--gpu-memory-utilization", "--max-num-batched-tokens",
                     "--kv-cache-dtype", "--enforce-eager"),
            "sglang": ("--tp-size", "--max-running-requests", "--mem-fraction-static", "--chunked-prefill-size",
                       "--attention-backend", "--kv-cache-dtype")}


def _one(p_ev, parsed, gpus: int | None) -> Finding:
    src = f"probes/process.json (pid {p_ev.pid}, {p_ev.url})"
    subject = f"pid {p_ev.pid} ({p_ev.url})"
    evidence = [ev(src, " ".join(p_ev.argv)[:400] or "(no command line)")]
    for name in REPORTED.get(parsed.engine.replace(".", ""), ()) if parsed else ():
        given = parsed.given.get(name)
        evidence.append(ev(src, f"{name} = {parsed.value(name)!r} ({given if given else 'not given: default'})"))
    cvd = p_ev.env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        evidence.append(ev(src, f"CUDA_VISIBLE_DEVICES={cvd!r}"))
    if cvd is not None and cvd.strip().lower() in HIDDEN and gpus:
        return finding("server.process", Status.actionable, subject=subject, evidence_=evidence,
                       title=f"The serving process hides every GPU (CUDA_VISIBLE_DEVICES={cvd!r}) on a host with {gpus}",
                       impact="The server runs on the CPU: tens of times slower than on its GPU.")
    engine = parsed.engine if parsed else "an unknown engine"
    return finding("server.process", Status.ok, subject=subject, evidence_=evidence,
                   title=f"Serving process of {engine} read: {len(parsed.given) if parsed else 0} option(s) given")


def investigate(ctx: object) -> list[Finding]:
    """One finding per serving process the snapshot kept; none when it kept none."""
    facts = facts_of(ctx)
    procs = facts.serving_processes()
    gpus = len(facts.gpus()) if procs else 0
    return [_one(p, parsed, gpus) for p, parsed in procs]
