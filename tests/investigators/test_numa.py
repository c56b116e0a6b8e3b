"""numa investigator: kernel.numa_balancing and numa.gpu_affinity, one input at a time."""

from __future__ import annotations

from tests.investigators.memsnap import TWO_NODES, MemorySnapshot, audit_ids, one

SYSCTL = "/proc/sys/kernel/numa_balancing"


def test_numa_balancing_on_two_nodes_is_p1_with_exact_revert() -> None:
    f = one(audit_ids(MemorySnapshot({**TWO_NODES, SYSCTL: "1\n"}), "numa"), "kernel.numa_balancing")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "runtime")
    assert f.evidence[0].source == "files/proc/sys/kernel/numa_balancing" and f.evidence[0].value == "1"
    assert f.remedy.commands == ["sysctl -w kernel.numa_balancing=0"]
    assert f.remedy.revert[0] == "sysctl -w kernel.numa_balancing=1"  # then the persisted line is removed


def test_numa_balancing_off_is_ok_and_cites_the_file() -> None:
    f = one(audit_ids(MemorySnapshot({**TWO_NODES, SYSCTL: "0\n"}), "numa"), "kernel.numa_balancing")
    assert f.status == "ok"
    assert [e.source for e in f.evidence] == ["files/proc/sys/kernel/numa_balancing"]


def test_numa_balancing_from_sysctl_a_when_procfs_is_absent() -> None:
    snap = MemorySnapshot(TWO_NODES, cmds={"sysctl_all": "kernel.numa_balancing = 1\nvm.swappiness = 60\n"})
    f = one(audit_ids(snap, "numa"), "kernel.numa_balancing")
    assert f.status == "actionable" and f.evidence[0].source == "cmds/sysctl_all.out"


def test_numa_balancing_one_node_is_not_applicable() -> None:
    snap = MemorySnapshot({"/sys/devices/system/node/node0/cpulist": "0-1\n", SYSCTL: "1\n"})
    assert one(audit_ids(snap, "numa"), "kernel.numa_balancing").status == "not_applicable"


def test_numa_balancing_missing_is_unknown_never_ok() -> None:
    f = one(audit_ids(MemorySnapshot(TWO_NODES), "numa"), "kernel.numa_balancing")
    assert f.status == "unknown" and "numa_balancing" in (f.impact or "")


SEED = "seed-8x-rtxpro6000"


def _seed_gpus(numa_node: str | None = None) -> dict[str, str]:
    from tests.investigators.memsnap import host_files

    files = host_files(SEED, "/sys/bus/pci/devices/")
    if numa_node is not None:
        files = {k: (numa_node if k.endswith("/numa_node") else v) for k, v in files.items()}
    return files


def test_gpu_affinity_over_two_nodes_is_reported_ok_with_each_gpus_node() -> None:
    f = one(audit_ids(MemorySnapshot({**TWO_NODES, **_seed_gpus()}), "numa"), "numa.gpu_affinity")
    assert f.status == "ok" and f.title == "GPUs spread over NUMA nodes (node 0: 4 GPU(s); node 1: 4 GPU(s))"
    assert (f.evidence[0].source, f.evidence[0].value) == ("files/sys/bus/pci/devices/0000:01:00.0/numa_node", "0000:01:00.0: node 0")
    assert f.details["gpu_numa_node"]["0000:81:00.0"] == 1


def test_gpu_without_numa_node_on_two_nodes_is_p2_bios() -> None:
    f = one(audit_ids(MemorySnapshot({**TWO_NODES, **_seed_gpus("-1\n")}), "numa"), "numa.gpu_affinity")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P2", "bios")


def test_gpu_affinity_without_node_layout_is_unknown_and_one_node_not_applicable() -> None:
    f = one(audit_ids(MemorySnapshot(_seed_gpus()), "numa"), "numa.gpu_affinity")
    assert f.status == "unknown" and "/sys/devices/system/node" in (f.impact or "")
    one_node = {"/sys/devices/system/node/node0/cpulist": "0-63\n"}
    assert one(audit_ids(MemorySnapshot({**one_node, **_seed_gpus()}), "numa"), "numa.gpu_affinity").status == "not_applicable"
    assert "numa.gpu_affinity" not in audit_ids(MemorySnapshot(TWO_NODES), "numa")  # no GPU: nothing to place


# -- a pasted topo -m alone: GPU placement across NUMA nodes ----------------------------------

def test_pasted_topo_with_gpus_across_sockets_through_sys_is_p2() -> None:
    """NCCL#667's matrix: GPU0-1 on node 0, GPU2-3 on node 1, every pair across them SYS: a TP
    group of all four all-reduces over the socket link."""
    from tests.investigators.memsnap import audit_ids, one, pasted

    f = one(audit_ids(pasted("topo-667-pxb-pix.txt"), "numa"), "numa.gpu_affinity")
    assert (f.status, f.severity) == ("actionable", "P2") and "4 pair(s)" in f.title
    assert f.evidence[0].value == "NUMA Affinity: node 0: GPU0, GPU1; node 1: GPU2, GPU3" and f.evidence[1].value == "GPU0-GPU2: SYS"


def test_pasted_topo_with_nvlink_across_nodes_is_ok() -> None:
    """vLLM#13855's DGX: two NUMA regions, every pair NV18: nothing crosses the socket link."""
    from tests.investigators.memsnap import audit_ids, one, pasted

    f = one(audit_ids(pasted("topo-vllm13855-glued-nic.txt"), "numa"), "numa.gpu_affinity")
    assert f.status == "ok" and "NVLink" in f.title
