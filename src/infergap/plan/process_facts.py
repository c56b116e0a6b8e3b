"""Facts from the serving process itself (:class:`~infergap.parsers.process.ProcessEvidence`):
its environment, its flags parsed with the engine's own argument table
(:mod:`infergap.parsers.engine_args`), its threads' CPU use during the sweep, its GPU memory.

Each fact names the process and the flag or variable it was read from, or the source default
when the flag was not given (``--kv-offload`` = yes: default of ``common/arg.cpp`` …). Thresholds:
a server thread is saturated when it ran at least :data:`THREAD_SATURATED` of the sweep's wall
time (one core's worth: the engine's loop, not the GPU, then paces the steps — when the GPU
also idled with every slot busy); a micro-batch below :data:`SMALL_UBATCH` tokens makes prompt
processing run in many small GPU steps (llama.cpp ``common/common.h``: ``n_ubatch`` 512 by
default, "must be >=32 to use BLAS").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infergap.parsers.engine_args import ParsedArgs, canonical, parse_argv
from infergap.plan.conditions import Fact
from infergap.plan.signals import _put

if TYPE_CHECKING:  # annotations only: no import at run time
    from infergap.parsers.process import ProcessEvidence

THREAD_SATURATED = 0.9
SMALL_UBATCH = 128
#: Values of CUDA_VISIBLE_DEVICES that hide every GPU (CUDA C Programming Guide, "CUDA
#: Environment Variables": an empty list or an invalid index makes no device visible).
HIDDEN = ("", "-1", "none", "void", "nodevfiles")


def _src(proc: ProcessEvidence, what: str) -> str:
    return f"serving process pid {proc.pid} ({proc.url}): {what}"


def _gpu_env(facts: dict[str, Fact], proc: ProcessEvidence) -> None:
    if "CUDA_VISIBLE_DEVICES" in proc.env:
        v = proc.env["CUDA_VISIBLE_DEVICES"]
        hidden = v.strip().lower() in HIDDEN
        _put(facts, "proc.cuda_visible_devices", v, _src(proc, f"environment CUDA_VISIBLE_DEVICES={v!r}"))
        if hidden:
            _put(facts, "server.gpu_visible", False,
                 _src(proc, f"environment CUDA_VISIBLE_DEVICES={v!r} hides every GPU from the server"))
        else:
            _put(facts, "proc.gpus_visible", len([x for x in v.split(",") if x.strip()]),
                 _src(proc, f"environment CUDA_VISIBLE_DEVICES={v!r}"))
    if proc.gpu_memory_B is not None:
        _put(facts, "proc.gpu_memory_B", proc.gpu_memory_B,
             _src(proc, f"{proc.gpu_memory_B / 2**30:.1f} GiB of GPU memory (NVML, this process)" +
                  (f"; {proc.gpu_note}" if proc.gpu_note else "")))


def _flag(p: ParsedArgs, proc: ProcessEvidence, name: str) -> tuple[Any, str]:
    """(value, where it came from) of option ``name``: as given, or the source's default."""
    v = p.value(name)
    key = canonical(p.engine, name)
    given = p.given.get(key)
    if given:
        return v, _src(proc, f"{given} {v}" if given.startswith("env ") or not isinstance(v, bool) else given)
    return v, _src(proc, f"{key} not given: default {v!r} [{p.source}]")


def _llamacpp(facts: dict[str, Fact], p: ParsedArgs, proc: ProcessEvidence) -> None:
    kvo, s = _flag(p, proc, "--kv-offload")
    if isinstance(kvo, bool):
        _put(facts, "server.kv_offload", kvo, s)
    cb, s = _flag(p, proc, "--cont-batching")
    if isinstance(cb, bool):
        _put(facts, "server.cont_batching", cb, s)
    for name, fact in (("--ubatch-size", "server.ubatch"), ("--batch-size", "server.batch"), ("--parallel", "server.parallel_flag"),
                       ("--threads", "server.threads")):
        v, s = _flag(p, proc, name)
        if isinstance(v, int):
            _put(facts, fact, v, s)
    ub = facts.get("server.ubatch")
    if ub is not None:
        _put(facts, "server.ubatch_small", ub.value < SMALL_UBATCH, ub.source + f" (< {SMALL_UBATCH} is small)")
    fa, s = _flag(p, proc, "--flash-attn")
    if isinstance(fa, str):
        _put(facts, "server.flash_attn", {"LLAMA_FLASH_ATTN_TYPE_AUTO": "auto"}.get(fa, fa.lower()), s)
    ngl, s = _flag(p, proc, "--gpu-layers")
    if ngl is not None:
        _put(facts, "server.ngl", str(ngl), s)
        _ngl_all(facts, ngl, s)


def _ngl_all(facts: dict[str, Fact], ngl: Any, s: str) -> None:
    """``server.ngl_all``: whether ``-ngl`` covers every layer. llama.cpp counts the output layer
    too ("offloaded 33/33 layers" for 32 blocks), so all is blocks + 1 when only the model's
    block count is known."""
    log_layers, blocks = facts.get("server.model_layers"), facts.get("model.layers")
    need, where = ((log_layers.value, log_layers.source) if log_layers is not None else
                   (blocks.value + 1, f"{blocks.value} blocks + the output layer [{blocks.source}]") if blocks is not None else (None, ""))
    text = str(ngl)
    n = -2 if text == "all" else -1 if text == "auto" else int(text) if text.lstrip("-").isdigit() else None
    if n is not None and n <= -2:
        _put(facts, "server.ngl_all", True, s)
    elif n is not None and n >= 0 and isinstance(need, int):
        _put(facts, "server.ngl_all", n >= need, s + f" ({'≥' if n >= need else '<'} {need} layers: {where})")


#: A prefill chunk (vLLM ``--max-num-batched-tokens``, SGLang ``--chunked-prefill-size``) below
#: this many tokens splits every prompt into steps too small to fill a GPU (vLLM docs, "Optimization
#: and Tuning", Chunked Prefill: "for optimal throughput, we recommend setting max_num_batched_tokens
#: > 8192 especially for smaller models on large GPUs"; its smallest default is 2048).
SMALL_CHUNK = 512
#: A memory fraction (vLLM ``--gpu-memory-utilization``, SGLang ``--mem-fraction-static``) below
#: this leaves most of the GPU's memory unused by weights + KV cache (vLLM's default is 0.92 in
#: ``vllm/config/cache.py`` v0.32.0; SGLang sizes it per GPU, 0.8-0.9 on 80+ GB parts).
LOW_MEM_FRACTION = 0.6
#: Attention backends that are the engines' portable reference paths, not their fast kernels
#: (SGLang docs, "Attention Backend": torch_native is "the PyTorch native backend" for testing).
SLOW_ATTENTION = ("torch_native",)
#: Per engine: (flag, fact) of the judged options read from the process (values as the table types them).
ENGINE_FLAGS = {
    "vllm": (("--max-num-seqs", "server.max_running_requests"), ("--gpu-memory-utilization", "server.mem_fraction"),
             ("--max-num-batched-tokens", "server.prefill_chunk"), ("--kv-cache-dtype", "server.kv_cache_dtype"),
             ("--tensor-parallel-size", "par.tp"), ("--data-parallel-size", "par.dp"), ("--enforce-eager", "server.enforce_eager"),
             ("--enable-chunked-prefill", "server.chunked_prefill"), ("--attention-backend", "server.attention_backend")),
    "sglang": (("--max-running-requests", "server.max_running_requests"), ("--mem-fraction-static", "server.mem_fraction"),
               ("--chunked-prefill-size", "server.prefill_chunk"), ("--kv-cache-dtype", "server.kv_cache_dtype"),
               ("--tp-size", "par.tp"), ("--dp-size", "par.dp"), ("--disable-cuda-graph", "server.enforce_eager"),
               ("--attention-backend", "server.attention_backend")),
}


def _engine_flags(facts: dict[str, Fact], p: ParsedArgs, proc: ProcessEvidence) -> None:
    """vLLM's and SGLang's judged flags as facts (a flag the engine sizes at start when not given,
    such as ``--max-num-seqs``, is a fact only when given), and the judgements of their values."""
    for flag, fact in ENGINE_FLAGS.get(p.engine, ()):
        if flag not in {o for opt in _table_names(p.engine) for o in opt}:
            continue
        v, s = _flag(p, proc, flag)
        if v is None or (fact.startswith("server.") and fact not in ("server.enforce_eager", "server.kv_cache_dtype")
                         and not p.is_given(flag)):
            continue
        _put(facts, fact, v.lower() if fact == "server.kv_cache_dtype" and isinstance(v, str) else v, s)
    chunk, frac, attn = facts.get("server.prefill_chunk"), facts.get("server.mem_fraction"), facts.get("server.attention_backend")
    if chunk is not None and isinstance(chunk.value, int) and chunk.value > 0:
        _put(facts, "server.prefill_chunk_small", chunk.value < SMALL_CHUNK, chunk.source + f" (< {SMALL_CHUNK} tokens is small)")
    if frac is not None and isinstance(frac.value, float):
        _put(facts, "server.mem_fraction_low", frac.value < LOW_MEM_FRACTION, frac.source + f" (< {LOW_MEM_FRACTION} is low)")
    if attn is not None and isinstance(attn.value, str):
        _put(facts, "server.attention_slow", attn.value.lower() in SLOW_ATTENTION, attn.source + f" ({', '.join(SLOW_ATTENTION)}: reference path)")


def _table_names(engine: str) -> list[list[str]]:
    from infergap.parsers.engine_args import table

    return [o["names"] for o in table(engine)["options"]]


def thread_facts(facts: dict[str, Fact], proc: ProcessEvidence, cpu: dict[str, Any] | None) -> None:
    """``proc.busiest_thread_share`` and ``proc.cpu_saturated`` from the CPU the process used
    during the sweep (:func:`infergap.snapshot.process.cpu_since`)."""
    if not cpu:
        return
    share = cpu.get("busiest_share")
    if share is None:
        return
    s = _src(proc, f"during the sweep ({cpu['wall_s']:.0f} s) the process used {cpu['process_cores']:.2f} cores; its busiest thread "
                   f"({cpu.get('busiest_name') or cpu.get('busiest_thread')}) ran {share:.0%} of the time "
                   f"(≥ {THREAD_SATURATED:.0%} is saturated) [/proc/{proc.pid}/task/*/stat]")
    _put(facts, "proc.busiest_thread_share", share, s)
    _put(facts, "proc.cpu_saturated", share >= THREAD_SATURATED, s)


def from_process(facts: dict[str, Fact], proc: ProcessEvidence, cpu: dict[str, Any] | None = None) -> ParsedArgs | None:
    """Facts from the serving process ``proc`` (and ``cpu``, its use during the sweep); returns
    the parsed flags (None when the engine has no argument table)."""
    _put(facts, "proc.read", True, _src(proc, " ".join(proc.argv)[:600] or "(no command line readable)"))
    _gpu_env(facts, proc)
    if proc.cpus_allowed is not None:
        _put(facts, "proc.cpus_allowed", proc.cpus_allowed_count, _src(proc, f"Cpus_allowed_list {proc.cpus_allowed} "
                                                                           f"of {proc.host_cpus} CPUs [/proc/{proc.pid}/status]"))
    if proc.cgroup.get("cpu.max") and proc.cgroup["cpu.max"].split()[0] != "max":
        q, _, period = proc.cgroup["cpu.max"].partition(" ")
        if q.isdigit() and period.strip().isdigit():
            _put(facts, "proc.cgroup_cpus", round(int(q) / int(period), 2), _src(proc, f"cgroup cpu.max {proc.cgroup['cpu.max']}"))
    thread_facts(facts, proc, cpu)
    p = parse_argv(proc.argv, proc.env)
    if p is None:
        return None
    _put(facts, "engine.name", p.engine, _src(proc, f"command line {proc.argv[0]}"))
    if p.engine == "llama.cpp":
        _llamacpp(facts, p, proc)
    else:
        _engine_flags(facts, p, proc)
    return p
