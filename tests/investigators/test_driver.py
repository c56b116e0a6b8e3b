"""driver investigator: driver.cuda_compat, driver.version and gpu.persistence_mode from the seed
host's /proc/driver/nvidia/version, nvidia-smi -q -x and torch probe, and public pastes."""

from __future__ import annotations

from tests.investigators.memsnap import MemorySnapshot, audit_ids, host_cmds, host_files, one, pasted, pasted_text, replaced, statuses

SEED = "seed-8x-rtxpro6000"
NVVER = "/proc/driver/nvidia/version"


def test_driver_580_supports_torch_cuda_13_ok_citing_both() -> None:
    f = one(audit_ids(MemorySnapshot(host_files(SEED, NVVER), cmds=host_cmds(SEED, "torch")), "driver"), "driver.cuda_compat")
    assert f.status == "ok" and f.title == "Driver 580.95.05 supports the stack's CUDA 13.0"
    assert [(e.source, e.value) for e in f.evidence] == [("files/proc/driver/nvidia/version", "580.95.05"), ("cmds/torch.out", "stack built for CUDA 13.0")]
    assert f.expected_value == ">= 580.65"


def test_stack_cuda_from_the_pip_suffix_when_torch_probe_is_absent() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(SEED, "nvsmi_qx", "pip_list")), "driver"), "driver.cuda_compat")
    assert f.status == "ok" and ("cmds/pip_list.out", "stack built for CUDA 13.0") in [(e.source, e.value) for e in f.evidence]


def test_driver_older_than_the_stacks_cuda_is_p0() -> None:
    ver = replaced(host_files(SEED, NVVER)[NVVER], "580.95.05", "525.60.13")
    f = one(audit_ids(MemorySnapshot({NVVER: ver}, cmds=host_cmds(SEED, "torch")), "driver"), "driver.cuda_compat")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P0", "software")
    assert f.expected_value == ">= 580.65" and "580.65" in f.remedy.note


def test_stack_cuda_unknown_is_unknown_with_the_command() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(SEED, "nvsmi_qx")), "driver"), "driver.cuda_compat")
    assert f.status == "unknown" and "torch.version.cuda" in (f.impact or "")
    assert [e.value for e in f.evidence] == ["580.95.05", "13.0"]


def test_driver_not_captured_is_unknown() -> None:
    found = audit_ids(MemorySnapshot({}, cmds=host_cmds(SEED, "lspci", "torch")), "driver")
    f = one(found, "driver.cuda_compat")
    assert f.status == "unknown" and "/sys/module/nvidia/version" in (f.impact or "")


def test_driver_and_cuda_version_from_the_nvidia_smi_table_header() -> None:
    # The plain `nvidia-smi` table names both in its header: "Driver Version: 580.95.05  CUDA Version: 13.0".
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(SEED, "nvsmi", "torch")), "driver"), "driver.cuda_compat")
    assert f.status == "ok" and f.title == "Driver 580.95.05 supports the stack's CUDA 13.0"
    assert [(e.source, e.value) for e in f.evidence][:2] == [("cmds/nvsmi.out", "580.95.05"), ("cmds/nvsmi.out", "13.0")]


def test_pasted_nvidia_smi_table_driver_is_checked_against_known_issues(tmp_path) -> None:
    # The table is the paste most bug reports carry; a known-bad driver in its header must not go unseen.
    table = replaced(host_cmds(SEED, "nvsmi")["nvsmi"], "580.95.05", "525.85.12")
    found = audit_ids(pasted_text(tmp_path, "nvidia-smi.txt", table), "driver")
    f = one(found, "driver.version")
    assert (f.status, f.severity) == ("actionable", "P1") and "525.85.12" in f.title
    assert f.evidence[0].source.startswith("evidence/nvidia-smi.txt")
    assert one(found, "driver.cuda_compat").evidence[0].value == "525.85.12"


def test_pasted_nvidia_smi_table_with_cuda_na_still_names_the_driver() -> None:
    f = one(audit_ids(pasted("nvsmi-libc6shim14-rtx5070.txt"), "driver"), "driver.cuda_compat")
    assert [e.value for e in f.evidence] == ["575.64.03"] and f.title.startswith("Driver 575.64.03")


def test_driver_and_cuda_version_from_nvidia_smi_q_text() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(SEED, "nvsmi_q", "torch")), "driver"), "driver.cuda_compat")
    assert f.status == "ok" and f.title == "Driver 580.95.05 supports the stack's CUDA 13.0"
    assert [(e.source, e.value) for e in f.evidence][:2] == [("cmds/nvsmi_q.out", "580.95.05"), ("cmds/nvsmi_q.out", "13.0")]


def test_pasted_nvidia_smi_q_text_names_the_driver(tmp_path) -> None:
    snap = pasted_text(tmp_path, "nvidia-smi-q.txt", host_cmds("h200-1gpu", "nvsmi_q")["nvsmi_q"])
    f = one(audit_ids(snap, "driver"), "driver.cuda_compat")
    assert f.evidence[0].value == "580.159.04" and f.evidence[1].value == "13.0"
    assert f.evidence[0].source.startswith("evidence/nvidia-smi-q.txt")


def test_driver_version_checked_against_known_issues() -> None:
    f = one(audit_ids(MemorySnapshot({}, cmds=host_cmds(SEED, "nvsmi_qx")), "driver"), "driver.version")
    assert f.status == "ok" and "none applies" in f.title
    assert [e.source for e in f.evidence] == ["cmds/nvsmi_qx.out", "signatures.yaml"]


def test_pasted_pre_550_driver_is_p2_without_gpu_findings() -> None:
    found = audit_ids(pasted("sglang-1148-check-env-a800.txt"), "driver")
    assert set(found) == {"driver.version"}
    f = found["driver.version"][0]
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P2", "software")
    assert f.evidence[0].value == "NVIDIA driver 525.125.06"


def test_persistence_mode_on_for_every_gpu_is_ok() -> None:
    found = audit_ids(MemorySnapshot({}, cmds=host_cmds(SEED, "nvsmi_q")), "driver")
    assert statuses(found, "gpu.persistence_mode") == ["ok"] * 8
    f = found["gpu.persistence_mode"][0]
    assert (f.subject, f.evidence[0].source, f.evidence[0].value) == ("0000:01:00.0", "cmds/nvsmi_q.out", "Enabled")


def test_persistence_mode_off_is_p1_with_exact_revert() -> None:
    q = replaced(host_cmds("h200-1gpu", "nvsmi_q")["nvsmi_q"], "Persistence Mode                                   : Enabled",
                 "Persistence Mode                                   : Disabled")
    f = one(audit_ids(MemorySnapshot({}, cmds={"nvsmi_q": q}), "driver"), "gpu.persistence_mode")
    assert (f.status, f.severity, f.fix_kind, f.subject) == ("actionable", "P1", "runtime", "0000:00:06.0")
    assert f.remedy.commands == ["nvidia-smi -i 0000:00:06.0 -pm 1"] and f.remedy.revert == ["nvidia-smi -i 0000:00:06.0 -pm 0"]


def test_pasted_nvidia_smi_with_persistence_off() -> None:
    found = audit_ids(pasted("nvsmi-libc6shim14-rtx5070.txt"), "driver")
    f = one(found, "gpu.persistence_mode")
    assert (f.status, f.severity) == ("actionable", "P1") and f.evidence[0].value == "Disabled"


def test_real_pasted_table_of_a_525_driver_before_the_gsp_fix_is_p1() -> None:
    # open-gpu-kernel-modules#446: the plain nvidia-smi table of a host on 525.85.12, a 525 driver
    # before the GSP RPC timeout fix of 525.105.17; only the table's header names the driver.
    found = audit_ids(pasted("open-gpu-446-nvsmi-525-85.txt"), "driver")
    f = one(found, "driver.version")
    assert (f.status, f.severity, f.fix_kind) == ("actionable", "P1", "software")
    assert "525.105.17" in f.title and f.evidence[0].value == "NVIDIA driver 525.85.12"
    assert one(found, "driver.cuda_compat").title.startswith("Driver 525.85.12 (CUDA 12.0):")


def test_cuda_version_of_the_table_header_and_a_header_quoted_alone() -> None:
    from infergap.facts import Facts

    facts = Facts(pasted("open-gpu-446-nvsmi-525-85.txt"))
    assert (facts.driver_version().value, facts.cuda_driver_version().value) == ("525.85.12", "12.0")
    # faster-whisper#1278: the header line alone, inside backticks, below the traceback
    facts = Facts(pasted("fasterwhisper-1278-driver-old.txt"))
    assert (facts.driver_version().value, facts.cuda_driver_version().value) == ("535.183.01", "12.2")
    f = one(audit_ids(pasted("fasterwhisper-1278-driver-old.txt"), "driver"), "driver.version")
    assert (f.status, f.severity) == ("actionable", "P2")


def test_driver_version_from_the_query_gpu_csv() -> None:
    from infergap.facts import Facts

    dv = Facts(MemorySnapshot({}, cmds=host_cmds("h200-1gpu", "nvsmi_csv"))).driver_version()
    assert (dv.value, dv.source) == ("580.159.04", "cmds/nvsmi_csv.out")


def test_container_cli_info_gives_the_driver_and_its_cuda() -> None:
    """nvidia-docker#904: ``nvidia-container-cli info`` alone names driver 390.87 and CUDA 9.1, so
    the driver checks judge it (the image's CUDA is not in the paste: compatibility unknown)."""
    from tests.investigators.memsnap import audit_ids, one, pasted

    found = audit_ids(pasted("nvdocker-904-container-cli-info.txt"), "driver")
    f = one(found, "driver.cuda_compat")
    assert f.status == "unknown" and "390.87" in f.title and "CUDA 9.1" in f.title
    assert one(found, "driver.version").evidence[0].source == "evidence/nvdocker-904-container-cli-info.txt"


def test_a_driver_container_that_could_not_resolve_the_kernel_is_actionable(tmp_path) -> None:
    """gpu-operator#155: the driver pod cannot resolve the CentOS 7 kernel, so no driver is
    installed: driver.install actionable P0; the same log ending in the script's done line is ok."""
    from tests.investigators.memsnap import audit_ids, evidence_text, one, pasted, pasted_text

    f = one(audit_ids(pasted("gpuop-155-driver-kernel-unresolved.log"), "driver"), "driver.install")
    assert (f.status, f.severity) == ("actionable", "P0") and "Could not resolve Linux kernel version" in f.title
    text = evidence_text("gpuop-155-driver-kernel-unresolved.log")
    loaded = text[: text.index("Resolving")] + "Proceeding with Linux kernel version 3.10.0-862.el7.x86_64\nLoading NVIDIA driver kernel modules...\nDone, now waiting for signal\n"
    f = one(audit_ids(pasted_text(tmp_path, "ok.log", loaded), "driver"), "driver.install")
    assert f.status == "ok" and "450.80.02" in f.title
