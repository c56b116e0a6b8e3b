"""``infergap roofline``: the theoretical maximum of a model on a host, per tensor precision."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from infergap.cli import validate as v
from infergap.cli.base import app, emit_report, fail
from infergap.cli.options import Fmt, db_option, format_option, output_option, snapshot_option


class Ceiling(str, Enum):
    datasheet = "datasheet"
    measured = "measured"


@app.command()
def roofline(
    model: str = typer.Option(..., "--model", "-m", help="config.json path, its directory, a GGUF file (its header gives each tensor's type), or a built-in name (glm-5, glm-5-nvfp4, deepseek-v3, llama-3.1-8b, ...)."),
    gpu: str = typer.Option("auto", "--gpu", help="GPU name or alias (h200, rtx-pro-6000-server, a100-80gb, ...) or 'auto' for the host's GPUs."),
    gpus: int = typer.Option(None, "--gpus", parser=v.gpu_count, metavar="N", help="Number of GPUs (default: the host's count with --gpu auto, else --tp)."),
    tp: int = typer.Option(None, "--tp", parser=v.gpu_count, metavar="N", help="Tensor-parallel size (default: all GPUs)."),
    ep: int = typer.Option(1, "--ep", parser=v.gpu_count, metavar="N", help="Expert-parallel size inside the TP group."),
    context: int = typer.Option(1024, "--context", parser=v.tokens, metavar="TOKENS", help="Context length in tokens for decode and KV capacity."),
    batch: list = typer.Option("1,8,32,64,128,256", "--batch", parser=v.number_list(integer=True, ge=1, le=1_000_000), metavar="N,N,...", help="Batch sizes for batched decode, comma-separated."),
    prompt_len: int = typer.Option(1024, "--prompt-len", parser=v.tokens, metavar="TOKENS", help="Prompt length in tokens for the prefill bound."),
    mem_fraction: float = typer.Option(0.9, "--mem-fraction", parser=v.fraction, metavar="F", help="Fraction of GPU memory for weights plus KV cache (0 < F <= 1)."),
    mfu: float = typer.Option(1.0, "--mfu", parser=v.fraction, metavar="F", help="Fraction of peak FLOP/s assumed reachable (0 < F <= 1)."),
    measured: float = typer.Option(None, "--measured", parser=v.number(gt=0, le=1e9), metavar="TOK_S", help="Measured single-stream tok/s: print its efficiency against each bound."),
    weights: str = typer.Option(None, "--weights", help="Precision of every weight group (bf16, fp8, fp8-block, nvfp4, mxfp4, int4-g128)."),
    attention: str = typer.Option(None, "--attention", help="Precision of attention projections (and DSA indexer)."),
    experts: str = typer.Option(None, "--experts", help="Precision of routed experts."),
    shared_experts: str = typer.Option(None, "--shared-experts", help="Precision of shared experts."),
    dense_ffn: str = typer.Option(None, "--dense-ffn", help="Precision of dense FFN layers."),
    router: str = typer.Option(None, "--router", help="Precision of the MoE router."),
    lm_head: str = typer.Option(None, "--lm-head", help="Precision of lm_head."),
    kv: str = typer.Option(None, "--kv", help="KV-cache precision (bf16, fp16, fp8)."),
    ceiling: Ceiling = typer.Option(Ceiling.datasheet, "--ceiling", case_sensitive=False, help="datasheet peaks, or figures measured on real hardware where the GPU table has them."),
    bandwidth_efficiency: float = typer.Option(None, "--bandwidth-efficiency", parser=v.fraction, metavar="F", help="Scale the bandwidth ceiling by F (0 < F <= 1)."),
    measured_bandwidth: float = typer.Option(None, "--measured-bandwidth", parser=v.number(gt=0, le=1e6), metavar="GB_S", help="Use this per-GPU bandwidth in GB/s instead of the datasheet."),
    allreduce_us: float = typer.Option(None, "--allreduce-us", parser=v.number(ge=0, le=1e6, cap_reason="one second"), metavar="US", help="All-reduce latency in µs (default by interconnect)."),
    snapshot: Path = snapshot_option("Read the host's GPUs from this snapshot (with --gpu auto)."),
    fmt: Fmt = format_option(Fmt.text),
    output: Path = output_option(),
    db: Path | None = db_option(),
) -> None:
    """Bound a model's tok/s on a host: single-stream (aggregate and per-GPU), batched, prefill, KV capacity."""
    from infergap.errors import UserError
    from infergap.roofline import Parallel, Workload, bounds, host_gpus, load_hardware, load_model
    from infergap.roofline.render import render_markdown, render_text
    from infergap.snapshot import SnapshotError, open_snapshot

    overrides = {k: x for k, x in (("weights", weights), ("attention", attention), ("experts", experts),
                                   ("shared_experts", shared_experts), ("dense_ffn", dense_ffn), ("router", router),
                                   ("lm_head", lm_head), ("kv", kv)) if x}
    auto = gpu.strip().lower() == "auto"
    try:
        spec = load_model(model, overrides)
        if snapshot is not None and not auto:
            raise UserError("--snapshot is read only with --gpu auto")
        snap = open_snapshot(str(snapshot) if snapshot else None) if auto else None
        try:
            hw = load_hardware(gpu, gpus if gpus is not None else (None if auto else (tp or 1)),
                               host=host_gpus(snap) if snap is not None else None, ceiling=ceiling.value,
                               bandwidth_efficiency=bandwidth_efficiency, measured_bandwidth_GBps=measured_bandwidth)
            ledger_host = _snapshot_host(snap) if snapshot is not None else None
        finally:
            if snap is not None:
                snap.close()
        workload = Workload(context=context, batches=batch, prompt_len=prompt_len, mem_fraction=mem_fraction, mfu=mfu,
                            allreduce_us=allreduce_us, measured_tok_s=measured)
        result = bounds(spec, hw, Parallel(tp=tp or hw.count, ep=ep), workload)
    except (UserError, SnapshotError) as e:
        raise fail(str(e))

    from infergap.guard import dumps

    emit_report("roofline", fmt, output, json=lambda: dumps(result.to_json_dict(), indent=2) + "\n",
                md=lambda: render_markdown(result), text=lambda **kw: render_text(result, **kw),
                payload=result.to_json_dict, host=ledger_host,
                db=db, inputs=[snapshot, Path(model) if Path(model).exists() else None])


def _snapshot_host(snap: object) -> dict | None:
    """The host a snapshot describes, summarised as ``audit`` summarises it
    (:func:`infergap.synthesis.host_summary`), so the ledger files a roofline of a snapshot under
    the same host id as an audit of it (a roofline of this machine, whatever GPU it names, under
    this machine's id). None when the summary cannot be made (then this machine's id)."""
    from infergap.facts import Facts
    from infergap.synthesis import host_summary

    try:
        return host_summary(snap, Facts(snap))
    except Exception:  # noqa: BLE001 - bad evidence costs the ledger's host id, never the report
        return None
