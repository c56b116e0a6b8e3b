"""container investigator: container.detect, limits.memlock, limits.nofile, container.shm, from the
seed host (an LXC container), the H200 VM capture and a public Kubernetes report of a 64 MB /dev/shm."""

from __future__ import annotations

from tests.investigators.memsnap import MemorySnapshot, audit_ids, host_cmds, host_files, host_text, one, pasted, replaced

SEED = "seed-8x-rtxpro6000"
H200 = "h200-1gpu"
LIMITS = "/proc/self/limits"


def test_lxc_is_detected_as_expected_with_both_signals() -> None:
    snap = MemorySnapshot(host_files(SEED, "/proc/1/environ", "/proc/1/cgroup"), cmds=host_cmds(SEED, "systemd_detect_virt_c"))
    f = one(audit_ids(snap, "container"), "container.detect")
    assert f.status == "expected" and f.title == "Running inside a lxc container"
    assert [(e.source, e.value) for e in f.evidence] == [("cmds/systemd_detect_virt_c.out", "lxc"), ("files/proc/1/environ", "container=lxc")]


def test_not_a_container_is_ok_citing_only_what_was_read() -> None:
    # The H200 VM capture has /proc/1/cgroup but no /proc/1/environ: the ok must not cite environ.
    f = one(audit_ids(MemorySnapshot(host_files(H200, "/proc/1/cgroup")), "container"), "container.detect")
    assert f.status == "ok"
    assert [(e.source, e.value) for e in f.evidence] == [("files/proc/1/cgroup", "0::/")]


def test_container_unknown_without_any_signal() -> None:
    f = one(audit_ids(MemorySnapshot({}), "container"), "container.detect")
    assert f.status == "unknown" and "systemd-detect-virt" in (f.impact or "")


def test_memlock_below_unlimited_is_p2_and_p1_with_an_rdma_nic() -> None:
    f = one(audit_ids(MemorySnapshot(host_files(SEED, LIMITS)), "container"), "limits.memlock")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P2", "runtime")
    assert f.title == "Locked-memory limit is 63.0 GiB, not unlimited" and f.evidence[0].value == "67645734912"
    assert "docker run --ulimit memlock=-1" in f.remedy.commands
    with_nic = MemorySnapshot(host_files(SEED, LIMITS, "/sys/class/infiniband/"))
    f = one(audit_ids(with_nic, "container"), "limits.memlock")
    assert (f.status, f.severity) == ("actionable", "P1") and len(f.evidence) == 2


def test_memlock_unlimited_from_ulimit_is_ok() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(H200, "ulimit")), "container"), "limits.memlock")
    assert f.status == "ok" and (f.evidence[0].source, f.evidence[0].value) == ("cmds/ulimit.out", "unlimited")


def test_nofile_20000_is_p2_and_a_million_is_ok() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(H200, "ulimit")), "container"), "limits.nofile")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P2", "runtime") and f.title == "Open-files limit is 20000"
    f = one(audit_ids(MemorySnapshot(host_files(SEED, LIMITS)), "container"), "limits.nofile")
    assert f.status == "ok" and f.evidence[0].source == "files/proc/self/limits"


def test_limits_missing_are_unknown() -> None:
    found = audit_ids(MemorySnapshot({}), "container")
    assert one(found, "limits.memlock").status == one(found, "limits.nofile").status == "unknown"


def test_shm_large_is_ok_and_64m_is_p1() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(SEED, "df")), "container"), "container.shm")
    assert f.status == "ok" and f.evidence[0].value == "/dev/shm tmpfs size 378G"
    df = replaced(host_text(SEED, "cmds/df.out"), "378G  2.1G  376G   1%", " 64M     0   64M   0%")
    f = one(audit_ids(MemorySnapshot({}, cmds={"df": df}), "container"), "container.shm")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "runtime") and f.title == "/dev/shm is only 64M"
    assert f.remedy.revert == ["mount -o remount,size=64M /dev/shm"]


def test_shm_not_listed_by_df_is_unknown_and_no_df_is_unknown() -> None:
    df = "\n".join(l for l in host_text(SEED, "cmds/df.out").splitlines() if "/dev/shm" not in l) + "\n"
    f = one(audit_ids(MemorySnapshot({}, cmds={"df": df}), "container"), "container.shm")
    assert f.status == "unknown" and f.evidence[0].source == "cmds/df.out"
    assert one(audit_ids(MemorySnapshot({}), "container"), "container.shm").status == "unknown"


def test_pasted_df_cut_before_the_mount_column_is_unknown() -> None:
    # The report pasted `df -h /dev/shm` without its "Mounted on" column: the size alone is not tied to /dev/shm.
    f = one(audit_ids(pasted("vllm-prodstack-276-k8s-shm.txt"), "container"), "container.shm")
    assert f.status == "unknown" and f.evidence[0].source.startswith("evidence/vllm-prodstack-276-k8s-shm.txt")


# -- kubectl describe pod -----------------------------------------------------------------------

def test_a_gpu_pod_without_a_memory_volume_at_dev_shm_is_p1(tmp_path) -> None:
    """k8s-device-plugin#430's pod mounts only its model and the service account: /dev/shm is the
    runtime's 64 MiB. The same pod with an emptyDir of medium Memory at /dev/shm is ok."""
    from tests.investigators.memsnap import audit_ids, one, pasted, pasted_text, replaced
    from tests.parsers.inputs import lines

    f = one(audit_ids(pasted("k8sdp-430-describe-pod-pending.txt"), "container"), "container.shm")
    assert (f.status, f.severity) == ("actionable", "P1") and "triton-server" in f.title
    paste = "\n".join(lines("k8sdp-430-describe-pod-pending.txt"))
    paste = replaced(paste, "      /models from model-repository (rw)", "      /dev/shm from dshm (rw)\n      /models from model-repository (rw)")
    paste = replaced(paste, "Volumes:\n", "Volumes:\n  dshm:\n    Type:       EmptyDir (a temporary directory that shares a pod's lifetime)\n"
                                          "    Medium:     Memory\n    SizeLimit:  16Gi\n")
    ok = one(audit_ids(pasted_text(tmp_path, "pod.txt", paste), "container"), "container.shm")
    assert ok.status == "ok" and "16Gi" in ok.title


def test_a_described_pod_pasted_without_its_prompt_keeps_its_name(tmp_path):
    """k8s-device-plugin#430's describe output without the ``$ kubectl describe pod`` line: the
    part starts at its ``Name:`` line (above the ``Namespace:`` marker), alone or after another
    pasted output, so the finding names the pod instead of ``pod ?``."""
    from tests.investigators.memsnap import audit_ids, one, pasted_text
    from tests.parsers.inputs import lines

    pod = "\n".join(lines("k8sdp-430-describe-pod-pending.txt")[1:])
    assert pod.startswith("Name:")
    numactl = "available: 1 nodes (0)\nnode 0 cpus: 0 1 2 3\nnode 0 size: 64000 MB\nnode 0 free: 1000 MB\n"
    for i, paste in enumerate((pod, numactl + "\n" + pod, "the pod stays Pending:\n" + pod)):
        f = one(audit_ids(pasted_text(tmp_path, f"pod{i}.txt", paste), "container"), "container.shm")
        assert f.status == "actionable" and f.evidence[0].value.startswith(
            "pod triton-inference-server-5b6c7f889c-f54c6, container triton-server"), (i, f.evidence[0].value)


def test_an_inspected_container_given_a_gpu_is_ok() -> None:
    """dockwatch#29: the inspected container's DeviceRequests ask for one nvidia GPU:
    container.gpu_request ok, citing the request."""
    from tests.investigators.memsnap import audit_ids, one, pasted

    f = one(audit_ids(pasted("docker-dockwatch29-device-requests.txt"), "container"), "container.gpu_request")
    assert f.status == "ok" and "driver nvidia, count 1" in f.evidence[0].value
