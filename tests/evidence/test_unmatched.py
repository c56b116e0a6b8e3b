"""A recognised paste that matches no known cause is listed as read and unmatched, never dropped:
the audit names what was read, its failure lines and what to collect next, in text, Markdown,
JSON and HTML."""

from __future__ import annotations

import json

from infergap.audit import run_audit
from infergap.evidence import EvidenceSnapshot
from infergap.findings import Status
from infergap.plan import build_plan
from infergap.render.audit import render_json, render_md, render_text
from infergap.render.report import render_html
from tests.evidence.evidence_data import FIX

BARE = "autoawq-20-illegal-access.txt"


def audit(*names: str):
    snap = EvidenceSnapshot(None, [FIX / n for n in names])
    try:
        return run_audit(snap)
    finally:
        snap.close()


def test_bare_cuda_error_is_listed_as_read_and_unmatched_in_every_format():
    rep = audit(BARE)
    [f] = rep.get("evidence.unmatched")
    assert f.status == Status.unknown and f.subject == f"evidence/{BARE}"
    assert "Python traceback" in f.title and "no known cause matched" in f.title
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in f.title
    assert [e.value for e in f.evidence] == ["RuntimeError: CUDA error: an illegal memory access was encountered"]
    assert "CUDA_LAUNCH_BLOCKING=1" in f.impact and "Xid" in f.impact  # what to collect next
    assert not rep.by_status(Status.actionable)
    assert rep.summary["evidence_unmatched"] == 1
    text = render_text(rep)
    # the CUDA catalog explains the line (evidence.message, unknown: the cause on the host is not established)
    [msg] = rep.get("evidence.message")
    assert msg.status == Status.unknown and "cudaErrorIllegalAddress (700)" in msg.impact
    assert "3 unknown (1 pasted part(s) with no known cause)" in text.splitlines()[2]  # items: the message, the part, the checks not captured as one line
    head = text.index("READ, NO KNOWN CAUSE: 1")
    assert head < text.index("UNKNOWN: ") and "an illegal memory access" in text[head:text.index("UNKNOWN: ")]
    assert " more (evidence missing or unreadable)" in text  # not listed twice
    assert "an illegal memory access" in render_md(rep)
    js = json.loads(render_json(rep))
    assert any(x["id"] == "evidence.unmatched" and x["status"] == "unknown" for x in js["findings"])
    html = render_html(build_plan(audit=rep), audit=rep)
    assert "evidence.unmatched" in html and "an illegal memory access was encountered" in html and "CUDA_LAUNCH_BLOCKING=1" in html


def test_an_evidence_only_header_leaves_out_what_the_paste_did_not_show():
    # a paste holds no kernel, CPU or GPU list: the Markdown header says none of them, never "None"
    md_head = render_md(audit(BARE)).splitlines()[2]
    text_head = render_text(audit(BARE)).splitlines()[1]
    for head in (md_head, text_head):
        assert "None" not in head and "·  ·" not in head and "kernel" not in head


def test_a_paste_whose_cause_is_found_is_not_also_unmatched():
    # a DistBackendError traceback whose "Last error:" block names /dev/shm: the cause is found
    rep = audit("sglang-docs5-shm-last-error.txt")
    assert rep.get("container.shm")[0].status == Status.actionable
    assert not rep.get("evidence.unmatched")


def test_healthy_log_without_failures_is_cited_and_not_unmatched():
    rep = audit("vllm-15036-engine-config.log")
    assert rep.get("engine.config")[0].status == Status.ok
    assert not rep.get("evidence.unmatched")


def test_each_paste_is_accounted_for_on_its_own():
    # the healthy engine log is cited by engine.config; the bare traceback next to it still shows
    rep = audit("vllm-15036-engine-config.log", BARE)
    assert [f.subject for f in rep.get("evidence.unmatched")] == [f"evidence/{BARE}"]


def test_warning_count_alone_is_no_cause(tmp_path):
    """NCCL's WARN count is a tally, not a cause: IB completion errors of a status no signature
    explains are listed as read and unmatched next to the count (the lines of NVIDIA/nccl#928 with
    their status changed from 4 to 5, a WR flush, which names no cause by itself)."""
    src = (FIX / "nccl-928-ib-error4-acs.log").read_text().replace("with error 4,", "with error 5,")
    p = tmp_path / "flush.log"
    p.write_text(src)
    snap = EvidenceSnapshot(None, [p])
    try:
        rep = run_audit(snap)
    finally:
        snap.close()
    assert [f.id for f in rep.by_status(Status.actionable)] == ["nccl.warnings"]
    [f] = rep.get("evidence.unmatched")
    assert "2 failure line(s)" in f.title and "with error 5" in f.title and "NCCL_DEBUG=INFO" in f.impact


def test_a_part_no_finding_cites_is_listed():
    rep = audit("nvcc-risc0-2449.txt")
    [f] = rep.get("evidence.unmatched")
    assert "nvcc --version" in f.title and "no finding cites it" in f.title and "infergap collect" in f.impact
