"""nccl_log investigator: nccl.transport, nccl.gdr, nccl.p2p, nccl.env, nccl.version, nccl.warnings,
from public NCCL_DEBUG=INFO logs and the NCCL log of the two-H200 capture's --active run."""

from __future__ import annotations

from pathlib import Path

from tests.investigators.memsnap import (MemorySnapshot, audit_ids, evidence_text, host_cmds, host_probe, host_text, one,
                                         pasted, pasted_text)

SEED = "seed-8x-rtxpro6000"
H2 = "h200-2gpu-collect"


def _h200_log(tmp_path: Path, base: MemorySnapshot | None = None) -> dict:
    """The NCCL_DEBUG=INFO log of the all-reduce collect --active ran on the two-H200 VM."""
    return audit_ids(pasted_text(tmp_path, "nccl-h200.log", host_probe(H2, "active")["nccl_log"], base=base), "nccl_log")


def _no_p2p_seed() -> MemorySnapshot:
    """The seed host with its topo -p2p r matrix reading NS (not supported) for every pair."""
    return MemorySnapshot({}, cmds={"nvsmi_p2p": host_text(SEED, "cmds/nvsmi_p2p.out").replace("\tOK", "\tNS")})


def test_p2p_cumem_between_the_h200_pair_is_ok(tmp_path: Path) -> None:
    found = _h200_log(tmp_path)
    f = one(found, "nccl.transport")
    assert f.status == "ok" and f.title == "GPUs of one host use P2P/CUMEM"
    assert f.evidence[0].value == "0[0] -> 1[1] via P2P/CUMEM (24 channel(s))" and f.evidence[0].source == "evidence/nccl-h200.log"


def test_version_without_known_issue_is_ok(tmp_path: Path) -> None:
    f = one(_h200_log(tmp_path), "nccl.version")
    assert f.status == "ok" and f.evidence[0].value == "NCCL 2.28.9, NCCL's CUDA build 13.0" and f.evidence[1].source == "signatures.yaml"


def test_nccl_2_25_on_rtx_5090_is_p0() -> None:
    f = one(audit_ids(pasted("nccl-1637-5090-p2p-disable.log"), "nccl_log"), "nccl.version")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "software") and "NCCL 2.25.1" in f.title


def test_env_echoed_by_nccl_is_ok_unless_it_disables_a_transport(tmp_path: Path) -> None:
    f = one(_h200_log(tmp_path), "nccl.env")
    assert f.status == "ok" and f.evidence[0].value == "NCCL_NVLS_ENABLE set by environment to 0"
    log = host_probe(H2, "active")["nccl_log"].replace("NCCL_NVLS_ENABLE set by environment to 0", "NCCL_P2P_DISABLE set by environment to 1")
    assert log != host_probe(H2, "active")["nccl_log"]
    f = one(audit_ids(pasted_text(tmp_path, "nccl.log", log), "nccl_log"), "nccl.env")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "runtime") and f.remedy.revert == ["export NCCL_P2P_DISABLE=1"]


def test_ib_disable_without_ib_devices_is_not_flagged() -> None:
    f = one(audit_ids(pasted("nccl-451-docker-ib.log"), "nccl_log"), "nccl.env")
    assert f.status == "ok" and "NCCL_IB_DISABLE" in f.title


def test_shm_between_gpus_of_one_host_is_p1() -> None:
    f = one(audit_ids(pasted("nccl-1817-shm-8gpu.log"), "nccl_log"), "nccl.transport")
    # The log alone does not say why P2P is not used: the remedy is the commands that tell, not a firmware change.
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "runtime")
    assert f.evidence[0].value == "0[0] -> 4[4] via SHM/direct/direct (2 channel(s))"
    assert "does not say why" in f.remedy.note


def test_shm_with_p2p_reported_ok_points_at_the_pcie_path() -> None:
    # The driver reports every pair peer-capable (topo -p2p r: OK) and NCCL still uses SHM: ACS or the IOMMU (firmware).
    rows = ["\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7"] + [
        f"GPU{i}" + "".join("\tX" if i == j else "\tOK" for j in range(8)) for i in range(8)]
    base = MemorySnapshot({}, cmds={"nvsmi_p2p": "\n".join(rows) + "\n"})
    f = one(audit_ids(pasted("nccl-1817-shm-8gpu.log", base=base), "nccl_log"), "nccl.transport")
    assert (f.status, f.fix_kind) == ("actionable", "bios") and "peer-capable" in f.remedy.note


def test_shm_across_cpu_sockets_or_without_p2p_is_expected() -> None:
    # On the seed host GPUs 0-3 and 4-7 sit on different sockets (SYS in topo -m): NCCL's SHM default there.
    found = audit_ids(pasted("nccl-1817-shm-8gpu.log", base=MemorySnapshot({}, cmds=host_cmds(SEED, "nvsmi_topo"))), "nccl_log")
    f = one(found, "nccl.transport")
    assert f.status == "expected" and any("different CPU sockets (SYS)" in e.value for e in f.evidence)
    f = one(audit_ids(pasted("nccl-1817-shm-8gpu.log", base=_no_p2p_seed()), "nccl_log"), "nccl.transport")
    assert f.status == "expected" and any("reports NS" in e.value for e in f.evidence)


def test_log_without_channel_lines_is_unknown() -> None:
    f = one(audit_ids(pasted("nccl-1637-5090-p2p-disable.log"), "nccl_log"), "nccl.transport")
    assert f.status == "unknown" and "NCCL_DEBUG=INFO" in f.impact


def test_gdr_disabled_is_p0_between_nodes_and_p1_otherwise() -> None:
    f = one(audit_ids(pasted("nccl-1537-gdr-disabled.log"), "nccl_log"), "nccl.gdr")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "runtime") and "mlx5_0, mlx5_1" in f.title
    f = one(audit_ids(pasted("nccl-1676-gdr-peermem.log"), "nccl_log"), "nccl.gdr")
    assert (f.status, f.severity) == ("actionable", "P1")
    assert f.evidence[0].value == "NET/IB : GPU Direct RDMA Disabled for HCA 'mlx5_0'"


def test_p2p_disabled_is_p1_and_expected_where_the_driver_reports_none() -> None:
    f = one(audit_ids(pasted("nccl-2225-p2p-disabled.log"), "nccl_log"), "nccl.p2p")
    # The log names no GPU model and no P2P matrix: find out first (runtime commands), no firmware change.
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "runtime") and "6 GPU pair(s)" in f.title
    assert not any("setpci" in c for c in f.remedy.commands)
    f = one(audit_ids(pasted("nccl-2225-p2p-disabled.log", base=_no_p2p_seed()), "nccl_log"), "nccl.p2p")
    assert f.status == "expected" and f.evidence[-1].value == "NS"


def test_warnings_are_p1_with_their_lines() -> None:
    f = one(audit_ids(pasted("nccl-328-shm-permission.log"), "nccl_log"), "nccl.warnings")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "software") and f.title == "NCCL printed 2 warning(s)"
    assert [e.value for e in f.evidence] == ["Call to shm_open failed : Permission denied",
                                             "Error while creating shared memory segment nccl-shm-recv-b7948f403864987a-0-3-0 (size 4460544)"]


def test_no_nccl_log_no_finding() -> None:
    assert audit_ids(pasted("sglang-26248-kv-full.log"), "nccl_log") == {}
    assert evidence_text("nccl-952-multinode-ipc.log")  # a multi-node log: only the intra-node pairs are judged
    f = one(audit_ids(pasted("nccl-952-multinode-ipc.log"), "nccl_log"), "nccl.transport")
    assert f.status == "ok" and f.title == "GPUs of one host use P2P/IPC"


def test_p2p_channels_whose_set_up_failed_are_not_ok(tmp_path: Path) -> None:
    """Excerpt of https://github.com/ray-project/ray_lightning/issues/24: NCCL lists a P2P/IPC
    channel, then cannot open the CUDA IPC handle (error 217); the transport must not read ok."""
    log = ("z-pc:909608:910337 [0] NCCL INFO Channel 00 : 0[2d000] -> 1[2e000] via P2P/IPC\n"
           "z-pc:909608:910337 [0] transport/p2p.cc:238 NCCL WARN failed to open CUDA IPC handle : 217 "
           "peer access is not supported between these two devices\n"
           "z-pc:909608:910337 [0] NCCL INFO transport.cc:68 -> 1\n")
    f = one(audit_ids(pasted_text(tmp_path, "ipc.log", log), "nccl_log"), "nccl.transport")
    assert (f.status, f.severity) == ("actionable", "P1")
    assert "failed to open CUDA IPC handle" in f.evidence[-1].value
    ok = one(audit_ids(pasted_text(tmp_path, "fine.log", log.splitlines()[0] + "\n"), "nccl_log"), "nccl.transport")
    assert ok.status == "ok"
