"""The failure-signature catalog (data/signatures.yaml): it loads, every entry is sourced and
yields a check the audit knows, bad catalogs fail with one line, and matching is what it says."""

from __future__ import annotations

import pytest

from infergap import checks
from infergap.errors import UserError
from infergap.evidence.signatures import catalog, in_range, load_catalog, scan_lines, version_issues, xid_signature
from infergap.investigators.evidence_files import SIGNATURE_CHECKS

REQUIRED = ["nccl.shm_create", "nccl.max_shared_mem", "nccl.graph_capture_old_cuda", "nccl.ib_open_failed",
            "nccl.no_libibverbs_multinode", "driver.gsp_timeout", "xid.reset_required", "xid.application",
            "iommu.io_page_fault", "vllm.preemption", "sglang.retract", "nccl.2_25_sm120", "driver.pre550_cumem_graph_memory"]


def test_catalog_holds_the_field_signatures_with_sources():
    cat = catalog()
    ids = {s.id for s in cat.signatures}
    assert set(REQUIRED) <= ids
    known = checks.load()
    for s in cat.signatures:
        assert s.sources and all(u.startswith("https://") for u in s.sources), s.id
        assert s.finding.id in SIGNATURE_CHECKS and s.finding.id in known, s.id
        assert s.why.strip() and s.finding.title.strip(), s.id
    comps = {s.version.component for s in cat.signatures if s.version}
    assert {"nccl", "nccl_cuda", "driver", "torch", "vllm", "sglang"} <= comps


@pytest.mark.parametrize("text,problem", [
    ("signatures: [{id: a, contains: [x], finding: {id: a.b, severity: P0, fix_kind: runtime, title: t}, why: w, sources: []}]", "sources"),
    ("signatures: [{id: a, contains: [x], pattern: '(', finding: {id: a.b, severity: P0, fix_kind: runtime, title: t}, why: w, sources: ['https://x']}]", "signatures.yaml"),
    ("signatures: [{id: a, xid: [{code: 1, name: N, meaning: m, severity: P0, reset: true, action: a, source: 'https://x'}], version: {component: nccl, range: '<2'}, finding: {id: a.b, severity: P0, fix_kind: runtime, title: t}, why: w, sources: ['https://x']}]", "exactly one"),
    # an Xid row without its classification, a finding less severe than its worst Xid, a code classified twice, a plain-http source
    ("signatures: [{id: a, xid: [1], finding: {id: a.b, severity: P0, fix_kind: runtime, title: t}, why: w, sources: ['https://x']}]", "XidCode"),
    ("signatures: [{id: a, xid: [{code: 1, name: N, meaning: m, severity: P0, reset: true, action: a, source: 'https://x'}], finding: {id: a.b, severity: P1, fix_kind: runtime, title: t}, why: w, sources: ['https://x']}]", "worst Xid"),
    ("signatures: [{id: a, xid: [{code: 1, name: N, meaning: m, severity: P0, reset: true, action: a, source: 'https://x'}, {code: 1, name: N, meaning: m, severity: P0, reset: true, action: a, source: 'https://x'}], finding: {id: a.b, severity: P0, fix_kind: runtime, title: t}, why: w, sources: ['https://x']}]", "classified twice"),
    ("signatures: [{id: a, xid: [{code: 1, name: N, meaning: m, severity: P0, reset: true, action: a, source: 'http://x'}], finding: {id: a.b, severity: P0, fix_kind: runtime, title: t}, why: w, sources: ['https://x']}]", "https"),
    ("signatures: [{id: a, version: {component: nccl, range: '~2'}, finding: {id: a.b, severity: P0, fix_kind: runtime, title: t}, why: w, sources: ['https://x']}]", "range"),
    ("signatures: {}", "expected a mapping"),
    ("signatures: [", "not valid YAML"),
])
def test_bad_catalog_is_one_line(tmp_path, text, problem):
    p = tmp_path / "signatures.yaml"
    p.write_text(text)
    with pytest.raises(UserError) as e:
        load_catalog(p)
    assert problem in str(e.value) and "\n" not in str(e.value)


def test_duplicate_id_is_refused(tmp_path):
    entry = "{id: a, contains: [x], finding: {id: a.b, severity: P0, fix_kind: runtime, title: t}, why: w, sources: ['https://x']}"
    p = tmp_path / "s.yaml"
    p.write_text(f"signatures: [{entry}, {entry}]")
    with pytest.raises(UserError, match="appears twice"):
        load_catalog(p)


def test_version_ranges():
    assert in_range("2.25.1", "==2.25") and not in_range("2.26.2", "==2.25")
    assert in_range("2.25.9", "<2.26") and not in_range("2.26.0", "<2.26")
    assert in_range("535.104.05", "<550") and not in_range("550.54.15", "<550")
    assert in_range("11.0", "<11.3") and not in_range("12.8", "<11.3")
    (s, sure), = version_issues("nccl", "2.25.1", {120})
    assert s.id == "nccl.2_25_sm120" and sure
    assert version_issues("nccl", "2.25.1", {90}) == []
    assert [s.id for s, _ in version_issues("sglang", "0.3.3")] == ["sglang.0_3_3_critical_fixes"]
    assert version_issues("sglang", "0.3.3.post1") == [] and version_issues("vllm", "0.6.2") == []
    assert [s.id for s, _ in version_issues("torch", "2.0.0+cu118", {120})] == ["torch.pre27_sm120"]
    (_, sure), = version_issues("nccl", "2.25.1", set())
    assert not sure  # the GPUs are not known: the caller says unknown, not ok


def test_line_matching():
    hits = scan_lines([
        "ubuntu:9621:9688 [3] misc/shmutils.cc:112 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-KWfVyt (size 5967872)",
        "ACSCtl: SrcValid+ TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-",
        "ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-",
        "nvidia-nccl-cu11 2.20.5",
        "Requires: filelock, nvidia-nccl-cu11, sympy",
    ])
    assert hits["nccl.shm_create"].count == 1
    assert hits["pcie.acs_redirect_lines"].count == 1  # SrcValid alone redirects nothing
    assert hits["pip.nvidia_nccl_cu11_listed"].count == 1  # the listing line, not the Requires line
    assert xid_signature(31).finding.severity.value == "P1" and xid_signature(79).finding.severity.value == "P0"
    assert xid_signature(999) is None


def test_xid_rows_classify_the_codes_nvidia_documents():
    """Every Xid row is sourced from NVIDIA's catalog; the codes the field reports most are held
    with the catalog's immediate action (94 restart the application, 95/48/79 a reset, 145 not
    fatal unless its line says so, 149 link-fatal)."""
    rows = {x.code: (s.id, x) for s in catalog().signatures for x in s.xid}
    assert {8, 13, 31, 43, 45, 48, 63, 64, 74, 79, 92, 94, 95, 109, 119, 120, 144, 145, 149, 150, 154} <= set(rows)
    want = {94: ("xid.memory", "P1", False), 95: ("xid.memory", "P0", True), 48: ("xid.memory", "P0", True),
            63: ("xid.memory", "P2", False), 64: ("xid.memory", "P0", True), 79: ("xid.pcie", "P0", True),
            119: ("xid.firmware", "P0", True), 120: ("xid.firmware", "P0", True), 145: ("xid.nvlink", "P1", False),
            149: ("xid.nvlink", "P0", True), 43: ("xid.application", "P2", False), 31: ("xid.application", "P1", False)}
    for code, (kind, sev, reset) in want.items():
        sid, x = rows[code]
        assert (sid, x.severity.value, x.reset) == (kind, sev, reset), code
    assert all(x.source.startswith("https://docs.nvidia.com/deploy/xid-errors/") for _, x in rows.values())
    assert all(rows[c][1].by_message for c in range(144, 151)) and not rows[94][1].by_message


def test_peer_access_error_quoted_in_the_singular_is_matched():
    """https://github.com/efeslab/Nanoflow/issues/22 quotes the CUDA error as '... two device'."""
    hits = scan_lines(["I tried run llama3-70B, raise the error `peer access is not supported between these two device`",
                       "CUDA error 217 at ggml-cuda.cu:6292: peer access is not supported between these two devices",
                       # https://github.com/hiyouga/EasyR1/issues/579, the line cut where the page wrapped it
                       "Cuda failure 217 'peer access is not supported between these"])
    assert hits["cuda.peer_access_unsupported"].count == 3


def test_nccl_info_lines_without_prefix_are_read(tmp_path):
    """NCCL INFO lines pasted without their ``host:pid:tid [dev]`` prefix (people trim it when they
    quote a few lines; the channel lines of https://github.com/vllm-project/vllm/issues/9920, whose
    two Ada GPUs went through SHM until ACS and the IOMMU were turned off) give the transport, and
    the audit reports SHM between the GPUs instead of nothing."""
    from infergap.audit import run_audit
    from infergap.evidence import EvidenceSnapshot
    from infergap.parsers.nccl import parse_nccl_log

    lines = ["NCCL INFO Channel 00 : 1[1] -> 0[0] via SHM/direct/direct",
             "NCCL INFO Channel 01 : 1[1] -> 0[0] via SHM/direct/direct"]
    f = parse_nccl_log(lines)
    assert f.transports == {"SHM": 2}
    p = tmp_path / "channels.log"
    p.write_text("\n".join(lines) + "\n")
    snap = EvidenceSnapshot(None, [p])
    try:
        found = [x for x in run_audit(snap).findings if x.id == "nccl.transport"]
    finally:
        snap.close()
    assert [(x.status.value, x.severity.value if x.severity else None) for x in found] == [("actionable", "P1")]


#: NCCL 2.7.8 between two AWS nodes (ENA NIC ``ens5``, a Docker ``veth``), pasted with ANSI reset
#: remnants in https://github.com/pytorch/pytorch/issues/68893: no RDMA NIC anywhere.
ETHERNET_TWO_NODES = [
    "\x1b[0m ip-172-31-0-137:14605:14673 [0] NCCL INFO Bootstrap : Using [0]ens5:172.31.0.137<0> [1]veth75fa783:fe80::14ad:64ff:fe64:b31e%veth75fa783<0>",
    "\x1b[0m ip-172-31-0-137:14605:14673 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]",
    "\x1b[0m ip-172-31-0-137:14605:14673 [0] NCCL INFO NET/Socket : Using [0]ens5:172.31.0.137<0> [1]veth75fa783:fe80::14ad:64ff:fe64:b31e%veth75fa783<0>",
    "\x1b[0m ip-172-31-0-137:14605:14673 [0] NCCL INFO Using network Socket",
    "\x1b[0m NCCL version 2.7.8+cuda11.1",
    "\x1b[0m ip-172-31-0-137:14605:14688 [0] NCCL INFO Channel 00 : 1[1e0] -> 0[1e0] [receive] via NET/Socket/0",
]


def test_missing_libibverbs_between_ethernet_nodes_is_no_p0(tmp_path):
    """Two nodes joined by plain Ethernet have nothing for libibverbs to open: no P0 'install
    rdma-core'. The same log with an RDMA device NCCL could have used keeps the finding."""
    from types import SimpleNamespace

    from infergap.evidence import EvidenceSnapshot
    from infergap.investigators import evidence_files

    def net(lines):
        p = tmp_path / "nccl.log"
        p.write_text("\n".join(lines) + "\n")
        snap = EvidenceSnapshot(None, [p])
        try:
            return net_findings(snap)
        finally:
            snap.close()

    # no "install rdma-core" on plain Ethernet (the veth in this log is a cause of its own, #68893)
    assert not [f for f in net(ETHERNET_TWO_NODES) if "nccl.no_libibverbs_multinode" in f.details.get("signatures", [])]
    with_hca = ETHERNET_TWO_NODES[:3] + ["ip-172-31-0-137:14605:14673 [0] NCCL INFO NET/Socket : Using [0]ib0:10.0.0.1<0>"] + ETHERNET_TWO_NODES[3:]
    found = net(with_hca)
    assert found and found[0].severity.value == "P0"
    assert "nccl.no_libibverbs_multinode" in found[0].details["signatures"]


def test_shm_permission_is_told_apart_from_a_small_shm():
    """/dev/shm that refuses the serving user (nccl#328) is fixed with its mode, not --shm-size."""
    from types import SimpleNamespace

    from infergap.evidence import EvidenceSnapshot
    from infergap.investigators import evidence_files
    from tests.evidence.evidence_data import FIX

    snap = EvidenceSnapshot(None, [FIX / "nccl-328-shm-permission.log"])
    try:
        shm = [f for f in evidence_files.investigate(SimpleNamespace(snap=snap)) if f.id == "container.shm"]
    finally:
        snap.close()
    assert len(shm) == 1 and "permission denied" in shm[0].title
    assert "chmod 1777 /dev/shm" in shm[0].remedy.commands and not any("--shm-size" in c for c in shm[0].remedy.commands)


def test_xid_45_names_the_nvlink_fault_behind_it():
    """Xid 45 is the driver cleaning up channels; ``caused by previous Xid 149`` names the fault
    (open-gpu-kernel-modules#1150), which the finding reports as an NVLink error."""
    from infergap.parsers.dmesg import parse_dmesg
    from tests.evidence.evidence_data import FIX

    f = parse_dmesg((FIX / "open-gpu-1150-xid45-after-149.log").read_text().splitlines())
    assert {x[0] for x in f.xids} == {45} and f.xid_causes == [149, 145]
    found = [x for x in audit_ids("open-gpu-1150-xid45-after-149.log") if x.id == "gpu.xid"]
    assert len(found) == 1 and found[0].severity.value == "P0" and "NVLink" in found[0].title and "149" in found[0].title


def audit_ids(name):
    """Findings of the evidence investigator for one corpus file."""
    from types import SimpleNamespace

    from infergap.evidence import EvidenceSnapshot
    from infergap.investigators import evidence_files
    from tests.evidence.evidence_data import FIX

    snap = EvidenceSnapshot(None, [FIX / name])
    try:
        return evidence_files.investigate(SimpleNamespace(snap=snap))
    finally:
        snap.close()


def test_acsctl_grep_fragments_count_functions(tmp_path):
    """``lspci -vvv | grep -i acsctl`` pasted tab-indented without device headers (as in
    https://github.com/NVIDIA/nccl/issues/629): recognised, and the finding counts the functions."""
    from types import SimpleNamespace

    from infergap.evidence import EvidenceSnapshot
    from infergap.investigators import evidence_files

    p = tmp_path / "acs.txt"
    p.write_text("\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-\n"
                 "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n"
                 "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n")
    snap = EvidenceSnapshot(None, [p])
    assert not snap.unrecognized()
    (f,) = [x for x in evidence_files.investigate(SimpleNamespace(snap=snap)) if x.id == "pcie.acs"]
    assert f.status.value == "actionable" and "2 PCIe function(s)" in f.title and "no device headers" in f.title


def test_socket_on_one_host_without_rdma_is_not_a_network_finding():
    """``Failed to open libibverbs`` and ``Using network Socket`` on one host with no RDMA NIC
    (nccl-tests#287) are harmless: no nccl.net finding; one ib* interface under NET/Socket is one."""
    from types import SimpleNamespace

    from infergap.evidence import EvidenceSnapshot
    from infergap.investigators import evidence_files
    from tests.evidence.evidence_data import FIX

    def ids(name):
        return {f.status for f in net_findings(EvidenceSnapshot(None, [FIX / name]))}

    assert ids("nccl-287-rtx5090-socket.log") == {"not_applicable"}
    assert ids("sglang-1427-ipoib-socket.log") == {"actionable"}


def test_loopback_socket_is_a_p0_only_when_the_log_spans_nodes(tmp_path):
    """NCCL on lo (127.0.0.1) is fine on one host and unreachable from another one
    (https://github.com/horovod/horovod/issues/584): the newer ``NET/Socket : Using [0]lo:`` form
    and the older ``NET : Using interface lo:`` form both count, but only in a multi-node log."""
    from types import SimpleNamespace

    from infergap.evidence import EvidenceSnapshot
    from infergap.investigators import evidence_files

    def loopback(lines):
        p = tmp_path / "nccl.log"
        p.write_text("\n".join(lines) + "\n")
        snap = EvidenceSnapshot(None, [p])
        try:
            return [f for f in net_findings(snap) if "nccl.socket_loopback_multinode" in f.details.get("signatures", [])]
        finally:
            snap.close()

    assert scan_lines(["host-a:1:2 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>",
                       "host-a:1:2 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to lo",
                       "host-a:1:2 [0] NCCL INFO NET/Socket : Using [0]eth0:192.0.2.1<0> [1]lo0:192.0.2.9<0>"]
                      )["nccl.socket_loopback_multinode"].count == 2  # lo0 is not lo
    one_host = ["host-a:1:2 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>",
                "host-a:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
                "host-a:1:3 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read"]
    assert loopback(one_host) == []
    two_hosts = one_host + ["host-b:7:8 [0] NCCL INFO NET/Socket : Using [0]eth0:192.0.2.2<0>",
                            "host-b:7:8 [0] NCCL INFO Channel 00/0 : 1[0] -> 2[0] [send] via NET/Socket/0"]
    found = loopback(two_hosts)
    assert found and found[0].severity.value == "P0"


def test_kv_too_small_for_max_model_len_and_capture_errors_match_their_kind():
    """The stable part of the message, not the paste's numbers: vLLM V1's start-up check (the
    'models's' typo and the corrected 'model's'), V0's wording
    (https://github.com/vllm-project/vllm/issues/2418), and a broken CUDA-graph capture as NCCL
    and as torch print it (https://github.com/vllm-project/vllm/issues/4432)."""
    hits = scan_lines([
        "ValueError: To serve at least one request with the models's max seq len (131072), (4.11 GiB KV cache is needed, "
        "which is larger than the available KV cache memory (4.0 GiB). Based on the available memory, the estimated maximum model length is 127776.",
        "ValueError: To serve at least one request with the model's max seq len (8192), (1.00 GiB KV cache is needed, "
        "which is larger than the available KV cache memory (0.50 GiB).",
        "ValueError: The model's max seq len (4096) is larger than the maximum number of tokens that can be stored in KV cache (3664).",
        "misc/strongstream.cc:378 NCCL WARN Cuda failure 'operation failed due to a previous error during capture'",
        "RuntimeError: CUDA error: operation failed due to a previous error during capture",
        "INFO: maximum concurrency for 8192 tokens per request: 3.2x",
    ])
    assert hits["vllm.max_model_len_exceeds_kv"].count == 3
    assert hits["cuda.graph_capture_collective_failed"].count == 2
    assert catalog().by_id("vllm.max_model_len_exceeds_kv").finding.id == "engine.kv_pressure"


def test_xid_codes_the_catalog_documents_are_not_unknown():
    """Codes NVIDIA's Xid catalog documents for Ampere and newer are classified with its immediate
    action: the media engines' exceptions (RESTART_APP) stop an application, not the GPU; test and
    injected events and the InfoROM wear limit (IGNORE) are informational; a confidential-computing
    key rotation error (RESTART_VM) stops the GPU until the VM restarts; codes the catalog gives no
    action for stay below P0."""
    from infergap.evidence.signatures import xid_code

    want = {14: ("xid.informational", "P2", False), 106: ("xid.informational", "P2", False), 107: ("xid.informational", "P2", False),
            93: ("xid.informational", "P2", False), 44: ("xid.application", "P2", False), 78: ("xid.vgpu_cc", "P1", False),
            151: ("xid.vgpu_cc", "P0", True), 166: ("xid.vgpu_cc", "P1", False), 170: ("xid.vgpu_cc", "P1", False),
            60: ("xid.media_engines", "P1", False), 68: ("xid.media_engines", "P1", False), 142: ("xid.media_engines", "P1", False)}
    want |= {c: ("xid.media_engines", "P1", False) for c in (82, 83, 84, 86, 88, 89, *range(96, 106), 139)}
    want |= {c: ("xid.application", "P1", False) for c in range(126, 136)}
    for code, (kind, sev, reset) in want.items():
        hit = xid_code(code)
        assert hit is not None, code
        assert (hit[0].id, hit[1].severity.value, hit[1].reset) == (kind, sev, reset), code
    # the catalog's unused codes (a display-engine timeout, a reserved code) stay unknown
    assert xid_code(15) is None and xid_code(91) is None


def net_findings(snap):
    """The ``nccl.net`` findings of the two readers of its signatures: the NCCL-log investigator
    (parts that are NCCL logs) and the signature reader (any other part)."""
    from types import SimpleNamespace

    from infergap.investigators import evidence_files, nccl_log

    ctx = SimpleNamespace(snap=snap)
    return [f for mod in (evidence_files, nccl_log) for f in mod.investigate(ctx) if f.id == "nccl.net"]


def _audit_lines(tmp_path, lines):
    from infergap.audit import run_audit
    from infergap.evidence import EvidenceSnapshot

    p = tmp_path / "pasted.log"
    p.write_text("\n".join(lines) + "\n")
    snap = EvidenceSnapshot(None, [p])
    try:
        return run_audit(snap).findings
    finally:
        snap.close()


def test_oom_killer_lines_name_host_memory(tmp_path):
    """systemd's report of a kernel OOM kill, as ollama's maintainer quoted it for a 128 GB host that
    ran a 136 GB model (https://github.com/ollama/ollama/issues/9322), and the kernel's own line in
    the wording of mm/oom_kill.c (v6.8) and of kernels before 4.19, are host memory, not GPU memory."""
    systemd = ["Feb 24 11:16:31 gpu-host systemd[1]: ollama.service: A process of this unit has been killed by the OOM killer.",
               "Feb 24 11:16:32 gpu-host systemd[1]: ollama.service: Failed with result 'oom-kill'.",
               "Feb 24 11:16:32 gpu-host systemd[1]: ollama.service: Consumed 32.964s CPU time, 123.9G memory peak."]
    kernel = ["[ 7334.054832] Out of memory: Killed process 4242 (python3) total-vm:27177560kB, anon-rss:10021200kB, "
              "file-rss:62204kB, shmem-rss:274432kB, UID:0 pgtables:25880kB oom_score_adj:0"]
    old_kernel = ["[  812.31] Out of memory: Kill process 4242 (llama-server) score 912 or sacrifice child"]
    for lines in (systemd, kernel, old_kernel):
        found = [(f.status.value, f.severity.value) for f in _audit_lines(tmp_path, lines)
                 if f.id == "mem.host" and f.status.value == "actionable"]
        assert found == [("actionable", "P0")], lines


def test_memory_cgroup_kill_is_one_finding_about_the_limit(tmp_path):
    """A kill by a memory cgroup's limit prints the generic "invoked oom-killer" line too (mm/oom_kill.c
    v6.8: dump_header, then "Memory cgroup out of memory: Killed process"): one mem.host finding, the
    cgroup's, not a second one for the generic line."""
    lines = ["[  581.376828] python3 invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0",
             "[  581.507012] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/docker/abc,task=python3,pid=2269,uid=0",
             "[  581.513643] Memory cgroup out of memory: Killed process 2269 (python3) total-vm:9000000kB, anon-rss:8000000kB, "
             "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:20000kB oom_score_adj:0"]
    found = [f for f in _audit_lines(tmp_path, lines) if f.id == "mem.host" and f.status.value == "actionable"]
    assert len(found) == 1 and "cgroup" in found[0].title, [f.title for f in found]


#: Container start failures pasted in public threads (the answers: install or register the NVIDIA
#: Container Toolkit; run nvidia-persistenced), older and newer wordings.
CONTAINER_LINES = [
    # https://github.com/NVIDIA/nvidia-docker/issues/1642 (Docker 20, no quotes around the driver)
    (["docker: Error response from daemon: could not select device driver with capabilities: [[gpu]]."], "gpu.present"),
    # https://github.com/hiyouga/LlamaFactory/issues/5268 (Docker 20.10.17)
    (['docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]]'], "gpu.present"),
    # https://github.com/NVIDIA/nvidia-container-toolkit/issues/202 (the maintainer: run nvidia-persistenced)
    (["docker: Error response from daemon: failed to create shim task: OCI runtime create failed: runc create failed: "
      "unable to start container process: error during container init: error running hook #0: error running hook: "
      "exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'",
      "nvidia-container-cli: initialization error: driver rpc error: timed out: unknown."], "gpu.persistence_mode"),
    # https://github.com/NVIDIA/nvidia-docker/issues/628 (16 GPUs on EC2; the maintainer: nvidia-persistenced)
    (['docker: Error response from daemon: OCI runtime create failed: container_linux.go:296: starting container process '
      'caused "process_linux.go:398: container init caused \\"process_linux.go:381: running prestart hook 1 caused '
      '\\\\\\"error running hook: exit status 1, stdout: , stderr: exec command: [/usr/bin/nvidia-container-cli --load-kmods '
      'configure --ldconfig=@/sbin/ldconfig.real --device=all --utility --pid=16242 /var/lib/docker/overlay2/c2b5/merged]'
      '\\\\\\\\nnvidia-container-cli: initialization error: driver error: timed out\\\\\\\\n\\\\\\"\\"": unknown.'],
     "gpu.persistence_mode"),
]


@pytest.mark.parametrize(("lines", "check"), CONTAINER_LINES)
def test_container_start_failures_name_their_cause(tmp_path, lines, check):
    found = [(f.id, f.severity.value) for f in _audit_lines(tmp_path, lines) if f.status.value == "actionable"]
    assert found[:1] == [(check, "P0")], found


CAPTURE_ADVICE = [
    # https://github.com/sgl-project/sglang/issues/23769 (the whole exception, OOM during capture)
    ["Exception: Capture cuda graph failed: CUDA out of memory.", "Tried to allocate 672.00 MiB.", "",
     "Possible solutions:", "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
     "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)",
     "3. disable torch compile by not using --enable-torch-compile",
     "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)"],
    # the same issue's advice alone, as a paste cut below the exception keeps it
    ["Possible solutions:", "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
     "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)"],
    # SGLang 0.5.23 runner_backend_utils/__init__.py CUDA_GRAPH_CAPTURE_FAILED_MSG (the decode backend flag)
    ["Possible solutions:", "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
     "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)",
     "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge performance loss)"],
]


@pytest.mark.parametrize("lines", CAPTURE_ADVICE)
def test_sglang_capture_failure_advice_names_the_capture(tmp_path, lines):
    found = [(f.id, f.severity.value) for f in _audit_lines(tmp_path, lines) if f.status.value == "actionable"]
    assert found[:1] == [("engine.cuda_graph", "P0")], found


def test_advice_to_disable_graphs_elsewhere_is_not_a_capture_failure(tmp_path):
    # SGLang's server-argument help, not the capture failure's advice
    found = _audit_lines(tmp_path, ["--disable-cuda-graph  Disable cuda graph."])
    assert not [f for f in found if f.id == "engine.cuda_graph" and f.status.value == "actionable"]
