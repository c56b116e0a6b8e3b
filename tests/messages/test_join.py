"""Catalog messages in the audit: any input's lines are matched, and a matched message joins the
finding of its check (contradicting an ok read from weaker evidence) or is explained on its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from infergap.audit import run_audit
from infergap.evidence.recognize import scan_file
from infergap.evidence.overlay import EvidenceSnapshot
from infergap.findings import Status
from infergap.messages import catalog
from infergap.snapshot import open_snapshot

FIX = Path(__file__).resolve().parents[1] / "fixtures"
PASTE = FIX / "messages" / "unknown-format.log"
HOST = FIX / "hosts" / "h200-1gpu"


def _audit(paths, base=None):
    with EvidenceSnapshot(open_snapshot(base) if base else None, paths) as snap:
        return run_audit(snap, parallel=False)


def test_an_unknown_log_format_with_known_messages_is_read():
    parts, unknown = scan_file(PASTE)
    assert [p.kind for p in parts] == ["messages"] and not unknown
    report = _audit([PASTE])
    assert not report.get("evidence.unrecognized")
    cited = {m["id"] for f in report.findings for m in f.details.get("messages", [])}
    assert {"nccl.net_ib.net_ib_no_device_found", "nccl.shmutils.error_failed_create_shared_memory",
            "nccl.checks.cuda_failure", "cuda.runtime_text.cudaerrornodevice"} <= cited
    assert report.get("gpu.present")[0].details["messages"][0]["id"] == "cuda.runtime_text.cudaerrornodevice"
    shm = report.get("container.shm")[0]
    assert shm.status == Status.actionable and "line 3" in shm.evidence[-1].value
    explained = report.get("evidence.message")
    assert any("Cuda failure 'out of memory'" in f.title for f in explained)
    for f in explained:  # never silent: what was said, what it means, where it comes from
        assert f.evidence and f.impact and f.references and f.status != Status.ok


def test_a_message_contradicts_an_ok_from_weaker_evidence():
    """The H200 capture's /dev/shm is 128G (container.shm ok on its own); NCCL saying it could not
    create its shared-memory file outweighs that reading."""
    alone = run_audit(open_snapshot(HOST), parallel=False).get("container.shm")
    assert alone and alone[0].status == Status.ok
    shm = _audit([PASTE], HOST).get("container.shm")
    assert len(shm) == 1 and shm[0].status == Status.actionable and shm[0].details["contradicts"] == "ok"
    assert any("No space left on device" in e.value for e in shm[0].evidence)
    assert any(e.value == alone[0].evidence[0].value for e in shm[0].evidence)  # the weaker reading kept beside it


def test_lines_in_a_known_output_are_matched_too(tmp_path):
    log = tmp_path / "nccl.log"
    log.write_text("node1:100:100 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
                   "node1:100:100 [0] NCCL INFO NET/IB : No device found.\n"
                   "node1:100:100 [0] NCCL WARN Error: failed to create shared memory file /dev/shm/nccl-x, error No space left on device (28)\n")
    parts, _ = scan_file(log)
    assert parts[0].kind == "nccl_log"
    shm = _audit([log]).get("container.shm")
    assert shm and shm[0].status == Status.actionable


def test_a_line_of_nothing_known_stays_not_a_known_output(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("we restarted the pods\nthen it was slow\nno idea why\nhelp please\nthanks\n")
    parts, unknown = scan_file(p)
    assert not parts and unknown and unknown[0].reason == "not a known output or log"


ULIMIT_ID = "vllm.system_utils.found_ulimit_failed_automatically_increase"


@pytest.mark.skipif(ULIMIT_ID not in {m.id for m in catalog().messages}, reason="the vLLM catalog is not in data/messages yet")
def test_vllm_ulimit_warning_joins_limits_nofile():
    """Issue 25's case: a vLLM server's ulimit warning, with a host whose RLIMIT_NOFILE is 20000
    (limits.nofile P2 from /proc/self/limits), is that finding's evidence, not a line apart."""
    report = _audit([PASTE], HOST)
    nofile = report.get("limits.nofile")
    assert len(nofile) == 1 and nofile[0].status == Status.actionable
    assert any("Too many open files" in e.value for e in nofile[0].evidence)
    assert ULIMIT_ID in [m["id"] for m in nofile[0].details["messages"]]
    assert not any(ULIMIT_ID in [m["id"] for m in f.details.get("messages", [])] for f in report.get("evidence.message"))
