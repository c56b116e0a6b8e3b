"""runtime investigator: runtime.stack, runtime.torch_arch, nccl.env, runtime.versions (and the ids
of known-bad versions) from the seed host's pip list, torch probe and environment."""

from __future__ import annotations

import json

from tests.investigators.memsnap import MemorySnapshot, audit_ids, host_cmds, host_files, host_text, one, pasted, replaced, statuses

SEED = "seed-8x-rtxpro6000"
H2 = "h200-2gpu-collect"


def _torch(**changes: object) -> str:
    t = json.loads(host_text(SEED, "cmds/torch.out"))
    for k, v in changes.items():
        if v is None:
            t.pop(k)
        else:
            t[k] = v
    return json.dumps(t)


def test_stack_versions_from_pip_list() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(SEED, "pip_list")), "runtime"), "runtime.stack")
    assert f.status == "ok" and f.evidence[0].source == "cmds/pip_list.out"
    assert f.details["versions"]["sglang"] == "0.5.6" and f.details["versions"]["torch"] == "2.9.1+cu130"


def test_stack_not_captured_is_unknown() -> None:
    f = one(audit_ids(MemorySnapshot({}), "runtime"), "runtime.stack")
    assert f.status == "unknown" and "pip list" in f.impact


def test_an_environment_without_serving_packages_is_unknown_not_ok() -> None:
    """The pip list read is that of the `python3` on PATH, not necessarily the server's: finding
    none of the serving packages there was listed as 'confirmed good'."""
    from infergap.investigators.runtime import PACKAGES

    pip = [p for p in json.loads(host_text(SEED, "cmds/pip_list.out")) if p["name"].lower() not in PACKAGES]
    f = one(audit_ids(MemorySnapshot({}, cmds={"pip_list": json.dumps(pip)}), "runtime"), "runtime.stack")
    assert f.status == "unknown" and "another environment" in f.impact and "pip list" in f.impact


def test_torch_arch_covers_sm120_ok_citing_both_sides() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(SEED, "torch", "nvsmi_q")), "runtime"), "runtime.torch_arch")
    assert f.status == "ok" and f.title == "torch is built for the GPUs' compute capability (12.0)"
    assert [e.value for e in f.evidence] == ["arch list: sm_75 sm_80 sm_86 sm_90 sm_100 sm_110 sm_120", "0000:01:00.0: compute capability 12.0"]


def test_torch_without_kernels_for_the_gpu_is_p0() -> None:
    torch = _torch(arch_list=["sm_75", "sm_80", "sm_86", "sm_90"])
    f = one(audit_ids(MemorySnapshot({}, cmds={**host_cmds(SEED, "nvsmi_q"), "torch": torch}), "runtime"), "runtime.torch_arch")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "software") and f.expected_value == "sm_120"


def test_torch_arch_without_the_gpus_capability_is_unknown_not_ok() -> None:
    # A GPU of a model the data does not know (a pasted topo -m) and a torch probe without device properties.
    f = one(audit_ids(pasted("topo-667-pxb-pix.txt", base=MemorySnapshot({}, cmds={"torch": _torch(props=None)})), "runtime"), "runtime.torch_arch")
    assert f.status == "unknown" and "compute capability" in f.title
    # With the probe's device properties the capability is known (12.0) and cited.
    f = one(audit_ids(pasted("topo-667-pxb-pix.txt", base=MemorySnapshot({}, cmds={"torch": _torch()})), "runtime"), "runtime.torch_arch")
    assert f.status == "ok" and f.evidence[1].value == "device properties: compute capability 12.0"


def test_torch_arch_list_missing_is_unknown() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(SEED, "nvsmi_q", "pip_list")), "runtime"), "runtime.torch_arch")
    assert f.status == "unknown" and "get_arch_list" in f.impact


def test_nccl_env_without_disabling_variables_is_ok() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(SEED, "env")), "runtime"), "nccl.env")
    assert f.status == "ok" and [(e.source, e.value) for e in f.evidence] == [("cmds/env.out", "NCCL_IB_HCA=mlx5_0")]
    f = one(audit_ids(MemorySnapshot(host_files(H2, "/etc/nccl.conf")), "runtime"), "nccl.env")
    assert f.status == "ok" and f.evidence[0] .source == "files/etc/nccl.conf" and f.evidence[0].value == "NCCL_NVLS_ENABLE=0"


def test_nccl_p2p_disable_is_p0_with_revert() -> None:
    env = host_text(SEED, "cmds/env.out") + "NCCL_P2P_DISABLE=1\n"
    f = one(audit_ids(MemorySnapshot({}, cmds={"env": env}), "runtime"), "nccl.env")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "runtime") and f.remedy.revert == ["export NCCL_P2P_DISABLE=1"]


def test_nccl_p2p_disable_on_gpus_without_p2p_is_expected() -> None:
    env = host_text(SEED, "cmds/env.out") + "NCCL_P2P_DISABLE=1\n"
    p2p = host_text(SEED, "cmds/nvsmi_p2p.out").replace("\tOK", "\tNS")
    f = one(audit_ids(MemorySnapshot({}, cmds={"env": env, "nvsmi_p2p": p2p}), "runtime"), "nccl.env")
    assert f.status == "expected" and f.severity is None


def test_nccl_ib_disable_with_an_rdma_nic_is_p0() -> None:
    env = host_text(SEED, "cmds/env.out") + "NCCL_IB_DISABLE=1\n"
    f = one(audit_ids(MemorySnapshot(host_files(SEED, "/sys/class/infiniband/"), cmds={"env": env}), "runtime"), "nccl.env")
    assert (f.status, f.severity) == ("actionable", "P0") and "NCCL_IB_DISABLE=1" in f.title
    f = one(audit_ids(MemorySnapshot({}, cmds={"env": env}), "runtime"), "nccl.env")
    assert f.status == "ok"  # no RDMA NIC: nothing to disable


def test_nccl_debug_and_logging_variables_never_degrade() -> None:
    """NCCL_DEBUG=INFO is what the report itself asks for to get a log: never a finding against it."""
    for extra in ("NCCL_DEBUG=INFO", "NCCL_DEBUG=info", "NCCL_DEBUG=TRACE", "NCCL_DEBUG_SUBSYS=INIT,NET",
                  "NCCL_DEBUG_FILE=/tmp/nccl.%h.%p.log"):
        env = host_text(SEED, "cmds/env.out") + extra + "\n"
        f = one(audit_ids(MemorySnapshot({}, cmds={"env": env}), "runtime"), "nccl.env")
        assert f.status == "ok" and extra in [e.value for e in f.evidence], extra


def test_nccl_env_has_one_status_with_a_pasted_log() -> None:
    """The host's environment and a pasted log's echo give nccl.env one status, never ok and actionable at once."""
    from infergap.audit import run_audit

    env = host_text(SEED, "cmds/env.out") + "NCCL_DEBUG=info\n"
    rep = run_audit(pasted("nccl-1357-ib-gdr-two-nodes.log", base=MemorySnapshot({}, cmds={"env": env})), parallel=False)
    assert {f.status.value for f in rep.get("nccl.env")} == {"ok"}
    env = host_text(SEED, "cmds/env.out") + "NCCL_P2P_DISABLE=1\n"
    rep = run_audit(pasted("nccl-1357-ib-gdr-two-nodes.log", base=MemorySnapshot({}, cmds={"env": env})), parallel=False)
    assert {f.status.value for f in rep.get("nccl.env")} == {"actionable"}


def test_nccl_env_not_captured_is_unknown() -> None:
    f = one(audit_ids(MemorySnapshot({}), "runtime"), "nccl.env")
    assert f.status == "unknown" and "/etc/nccl.conf" in f.impact


def test_versions_without_known_issue_are_ok_citing_the_catalog() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(SEED, "torch")), "runtime"), "runtime.versions")
    assert f.status == "ok" and f.evidence[-1].source == "signatures.yaml"


def test_known_bad_sglang_is_p1_and_the_rest_stays_ok() -> None:
    pip = replaced(host_text(SEED, "cmds/pip_list.out"), '"sglang", "version": "0.5.6"', '"sglang", "version": "0.4.4.post1"')
    found = audit_ids(MemorySnapshot({}, cmds={"pip_list": pip}), "runtime")
    assert sorted(statuses(found, "runtime.versions")) == ["actionable", "ok"]
    bad = next(f for f in found["runtime.versions"] if f.status == "actionable")
    assert (bad.severity, bad.fix_kind) == ("P1", "software") and bad.evidence[0].value == "SGLang 0.4.4.post1"


def test_nccl_2_25_on_sm120_is_p0_under_nccl_version() -> None:
    pip = replaced(host_text(SEED, "cmds/pip_list.out"), '"nvidia-nccl-cu13", "version": "2.28.3"', '"nvidia-nccl-cu13", "version": "2.25.1"')
    f = one(audit_ids(MemorySnapshot({}, cmds={**host_cmds(SEED, "nvsmi_q"), "pip_list": pip}), "runtime"), "nccl.version")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "software") and f.evidence[0].value == "NCCL 2.25.1"
