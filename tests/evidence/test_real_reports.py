"""Each public report's pasted text yields the findings it supports (see the fixtures' ABOUT.md)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.evidence.evidence_data import FIX
from infergap.evidence import EvidenceSnapshot
from infergap.facts import Facts
from infergap.investigators import engine_log, nccl_log, runtime, server_config
from infergap.investigators.base import Context

# file -> [(check id, status, severity or None, words the title must contain)]
EXPECT = {
    "nccl-1817-shm-8gpu.log": [("nccl.transport", "actionable", "P1", "shared memory")],
    "nccl-1232-two-nodes.log": [("nccl.transport", "actionable", "P1", "shared memory")],
    "nccl-952-multinode-ipc.log": [("nccl.transport", "ok", None, "P2P/IPC")],
    "nccl-1537-gdr-disabled.log": [("nccl.gdr", "actionable", "P0", "mlx5_0"), ("nccl.env", "ok", None, "NCCL_IB_HCA")],
    "nccl-1676-gdr-peermem.log": [("nccl.gdr", "actionable", "P1", "mlx5_2")],
    "nccl-2225-p2p-disabled.log": [("nccl.p2p", "actionable", "P1", "6 GPU pair")],
    "nccl-287-rtx5090-socket.log": [("nccl.version", "actionable", "P0", "2.25.1"), ("nccl.transport", "unknown", None, "no channel lines")],
    "vllm-13719-custom-ar.log": [("allreduce.custom", "expected", None, "PCIe-only")],
    "vllm-17619-moe-default.log": [("engine.moe_config", "actionable", "P2", "untuned")],
    "vllm-17768-moe-ansi.log": [("engine.moe_config", "actionable", "P2", "untuned")],
    "vllm-32347-oneline.log": [("engine.moe_config", "actionable", "P2", "untuned")],
    "vllm-15036-engine-config.log": [("engine.config", "ok", None, "0.8.0rc2.dev9+g6eaf1e5c")],
    "vllm-24162-nondefault.log": [("engine.config", "ok", None, "0.10.2.dev378")],
    "sglang-13023-decode-no-graph.log": [("engine.cuda_graph", "actionable", "P1", "2 of 8 decode batches")],
    "sglang-fastrl4-spec-no-graph.log": [("engine.cuda_graph", "actionable", "P1", "2 of 2 decode batches")],
    "sglang-26248-kv-full.log": [("engine.kv_pressure", "actionable", "P2", "100%"), ("engine.cuda_graph", "ok", None, "All 3")],
    "sglang-6778-token-usage.log": [("engine.kv_pressure", "actionable", "P2", "96%")],  # and no engine.cuda_graph claim
    "sglang-9856-server-args-wrapped.log": [("engine.config", "ok", None, "SGLang")],
    "sglang-1362-server-args.log": [("engine.config", "ok", None, "SGLang")],
    "sglang-11716-capture.log": [("engine.config", "ok", None, "SGLang")],
    "sglang-19003-moe-config.log": [("engine.moe_config", "actionable", "P2", "untuned")],
}


def findings_for(*paths, base=None, server=None):
    """The findings of the log readers over the pasted files, and ``nccl.env`` of ``runtime``
    (its owner, which reads the variables a log echoes)."""
    snap = EvidenceSnapshot(base, list(paths))
    ctx = Context(snap=snap, facts=Facts(snap), server=server)
    found = [f for m in (nccl_log, engine_log, server_config) for f in m.investigate(ctx)]
    return found + [f for f in runtime.investigate(ctx) if f.id == "nccl.env" and f.subject]


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_report_yields_its_findings(name):
    found = findings_for(FIX / name)
    by_id = {f.id: f for f in found}
    for check, status, severity, words in EXPECT[name]:
        assert check in by_id, f"{name}: no {check} in {[f.id for f in found]}"
        f = by_id[check]
        assert f.status.value == status, (name, f.title)
        assert (f.severity.value if f.severity else None) == severity, (name, f.title)
        assert words in f.title or any(words in e.value for e in f.evidence), (name, f.title)
        assert f.subject.split("#")[0] == f"evidence/{name}"
        assert f.evidence and all(e.source.startswith("evidence/") for e in f.evidence if e.source not in ("host", "load", "cmds/nvsmi_p2p.out"))


def test_intra_host_shm_only_on_first_node():
    (t,) = [f for f in findings_for(FIX / "nccl-1232-two-nodes.log") if f.id == "nccl.transport"]
    assert [e.value for e in t.evidence if "->" in e.value] == ["2[1] -> 0[0] via SHM/direct/direct (2 channel(s))"]


def test_engine_facts_from_wrapped_and_cut_lines():
    from infergap.facts.logs import engine_logs

    def facts(name):
        ((_, f),) = engine_logs(EvidenceSnapshot(None, [FIX / name]))
        return f

    f = facts("sglang-9856-server-args-wrapped.log")
    assert (f.args["tp_size"], f.args["mem_fraction_static"], f.args["chunked_prefill_size"], f.args["skip_tokenizer_init"]) == (8, 0.9, 16384, False)
    f = facts("vllm-15036-engine-config.log")
    assert f.args["tensor_parallel_size"] == 4 and max(f.cuda_graph_bs) == 256 and min(f.cuda_graph_bs) == 72
    f = facts("sglang-11716-capture.log")
    assert f.kv_tokens == 2795207 and f.cuda_graph_bs[-1] == 512 and len(f.cuda_graph_bs) == 52
    f = facts("vllm-17768-moe-ansi.log")
    assert f.moe_default_configs == ["E=128,N=8192,device_name=NVIDIA_RTX_6000_Ada_Generation.json", "E=16,N=1024,device_name=NVIDIA_H200.json"]


def test_server_config_from_log_is_sourced():
    from infergap.facts.logs import engine_logs
    from infergap.server import server_config_from_log

    ((part, f),) = engine_logs(EvidenceSnapshot(None, [FIX / "sglang-9856-server-args-wrapped.log"]))
    cfg = server_config_from_log(f, part.label)
    assert (cfg.engine, cfg.tp_size, cfg.mem_fraction, cfg.chunked_prefill_size, cfg.model) == ("sglang", 8, 0.9, 16384, "/models/DeepSeek-R1-0528")
    assert cfg.sources["tp_size"] == "evidence/sglang-9856-server-args-wrapped.log"


def test_shm_expected_across_sockets(tmp_path):
    """SHM between GPUs that nvidia-smi topo -m shows on different sockets (SYS) is NCCL's default."""
    log = tmp_path / "nccl.log"
    # the 1232 report's intra-node pair is GPU1 -> GPU0; place them across sockets with the 667 topology
    log.write_text("\n".join(ln for ln in (FIX / "nccl-1232-two-nodes.log").read_text().splitlines() if "SHM" in ln) + "\n")
    topo = tmp_path / "topo.txt"
    topo.write_text((FIX / "topo-667-pxb-pix.txt").read_text().replace("GPU1\tPXB", "GPU1\tSYS").replace("GPU0\t X \tPXB", "GPU0\t X \tSYS"))
    (t,) = [f for f in findings_for(log, topo) if f.id == "nccl.transport"]
    assert t.status.value == "expected"


@pytest.mark.parametrize("name,kind", [("collect-env-tp3d66.txt", "collect_env"), ("dmesg-gpuburn1-xid79.txt", "dmesg"),
                                       ("lspci-torchipc17-plx.txt", "lspci"), ("lspci-tree-club3090-859.txt", "lspci_tree"),
                                       ("nvcc-risc0-2449.txt", "nvcc"), ("nvsmi-libc6shim14-rtx5070.txt", "nvsmi"),
                                       ("lspci-jan183-lnksta-downgraded.txt", "lspci_vvv")])
def test_real_outputs_recognised(name, kind):
    snap = EvidenceSnapshot(None, [FIX / name])
    assert [p.kind for p in snap.parts] == [kind] and not snap.unrecognized()


def test_collect_env_answers_pip_list():
    from infergap.parsers.host import parse_pip_list

    snap = EvidenceSnapshot(None, [FIX / "collect-env-tp3d66.txt"])
    pkgs = parse_pip_list(snap.cmd("pip_list").stdout)
    assert pkgs["torch"] == "1.1.0" and pkgs["torchvision"] == "0.2.0" and len(pkgs) == 9


def test_lspci_and_nvcc_answer_their_commands():
    snap = EvidenceSnapshot(None, [FIX / "lspci-torchipc17-plx.txt", FIX / "nvcc-risc0-2449.txt", FIX / "lspci-tree-club3090-859.txt"])
    assert snap.cmd("lspci").stdout.count("PEX 8747") == 11
    assert "release 12.5, V12.5.82" in snap.cmd("nvcc").stdout
    assert snap.cmd("lspci_tree").stdout.startswith("-[0000:00]-+-00.0")


def test_kernel_log_findings():
    from infergap.investigators import evidence_files

    found = {f.id: f for f in evidence_files.investigate(SimpleNamespace(snap=EvidenceSnapshot(None, [FIX / "dmesg-gpuburn1-xid79.txt"])))}
    assert found["gpu.xid"].severity.value == "P0" and "79" in found["gpu.xid"].title
    assert found["pcie.aer"].severity.value == "P0" and "Uncorrected (Fatal) ×1" in found["pcie.aer"].title


def test_old_decode_lines_make_no_cuda_graph_claim():
    found = {f.id for f in findings_for(FIX / "sglang-6778-token-usage.log")}
    assert "engine.cuda_graph" not in found and "engine.kv_pressure" in found
