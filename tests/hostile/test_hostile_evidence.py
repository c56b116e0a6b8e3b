"""Hostile pasted evidence: endless devices, NUL floods, escapes, crafted lines for every
pattern known to have been quadratic, nested argument dumps."""

from __future__ import annotations

import json
import time

import pytest
from hostile_helpers import cli, no_traceback

from infergap.parsers.nccl import parse_nccl_log
from infergap.evidence.overlay import EvidenceSnapshot


def test_dev_zero_as_evidence_is_capped(monkeypatch):
    import infergap.evidence.overlay as es

    monkeypatch.setattr(es, "MAX_SPOOL_BYTES", 8 << 20)
    snap = EvidenceSnapshot(None, ["/dev/zero"])
    try:
        reasons = [u.reason for u in snap.unrecognized()]
        assert any("from a pipe or device; not read" in r for r in reasons), reasons
    finally:
        snap.close()


def test_nul_flood_costs_little_and_is_not_stored_whole(tmp_path):
    f = tmp_path / "nul.log"
    f.write_bytes(b"NCCL INFO " + b"\0" * (16 << 20))
    p = cli("audit", "--no-host", "--evidence", str(f), "--format", "json")
    no_traceback(p)
    assert len(p.stdout) < 1 << 20


def test_escapes_in_pasted_output_are_shown_escaped(tmp_path):
    f = tmp_path / "smi.txt"
    f.write_text("[ 12.345678] NVRM: Xid (PCI:0000:01:00): 79, \x1b]0;owned\x07GPU has fallen off the bus.\n")
    p = cli("audit", "--no-host", "--evidence", str(f))
    no_traceback(p)
    assert "\x1b" not in p.stdout and "\x07" not in p.stdout


@pytest.mark.parametrize("line", [
    "x" * 300_000 + ":1:1 [0]",                                  # NCCL prefix: host without end
    "h:1:1 [0] NCCL INFO " + "] NCCL " * 40_000,                 # NCCL prefix: many anchors
    "0000:00:00.0 " * 30_000 + "PCIe Bus Error: severity=",      # kernel AER line
    "a@a:" * 300_000,                                            # shell prompt
    "[" + "@" * 1_000_000,                                       # bracketed prompt
])
def test_crafted_lines_are_linear(tmp_path, line):
    f = tmp_path / "crafted.log"
    f.write_text("NCCL INFO start\n" + line + "\n")
    t0 = time.monotonic()
    p = cli("audit", "--no-host", "--evidence", str(f), "--format", "json")
    no_traceback(p)
    assert time.monotonic() - t0 < 30, "a crafted line took quadratic time"


def test_nccl_parser_on_a_crafted_prefix_is_fast():
    t0 = time.perf_counter()
    facts = parse_nccl_log(["h" * 300_000 + ":1:1 [0] NCCL INFO x", "host:12:34 [0] NCCL INFO NCCL version 2.21.5+cuda12.4"])
    assert time.perf_counter() - t0 < 1.0
    assert facts.version == "2.21.5"


def test_nested_argument_dump_in_an_engine_log(tmp_path):
    f = tmp_path / "vllm.log"
    deep = "{'a': " * 5000 + "1" + "}" * 5000
    f.write_text("INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.8.0\n"
                 f"INFO 01-01 00:00:00 [utils.py:1] non-default args: {deep}\n"
                 f"INFO 01-01 00:00:00 [api_server.py:2] args: Namespace(model='m', tensor_parallel_size={deep})\n")
    p = cli("audit", "--no-host", "--evidence", str(f), "--format", "json")
    no_traceback(p)
    assert json.loads(p.stdout)["schema"] == "infergap.audit/1"


def test_evidence_file_names_are_shown_escaped(tmp_path):
    """A file name holding a newline split a report line in two, and bytes that are not UTF-8
    reached the terminal raw (and JSON as a lone surrogate): both are shown as escapes."""
    import os

    from tests.conftest import ROOT

    smi = (ROOT / "tests/fixtures/hosts/h200-1gpu/cmds/nvsmi_q.out").read_bytes()
    good = os.path.join(os.fsencode(tmp_path), b"smi\xff.txt")
    with open(good, "wb") as f:
        f.write(smi)
    junk = os.path.join(os.fsencode(tmp_path), b"junk\nline\xfe.txt")
    with open(junk, "wb") as f:
        f.write(b"nothing any reader knows\n")
    p = cli("audit", "--no-host", "--evidence", os.fsdecode(good), os.fsdecode(junk))
    no_traceback(p)
    assert "evidence.unrecognized [evidence/junk\\x0aline\\xfe.txt]" in p.stdout, p.stdout
    assert "\udcff" not in p.stdout and "\ufffd" not in p.stdout and "junk\n" not in p.stdout
    p = cli("audit", "--no-host", "--evidence", os.fsdecode(good), os.fsdecode(junk), "-f", "json")
    found = json.loads(p.stdout)["findings"]
    subjects = [f["subject"] for f in found if f["id"] == "evidence.unrecognized"]
    assert subjects == ["evidence/junk\\x0aline\\xfe.txt"]
    assert {e["source"] for f in found for e in f["evidence"]} >= {"evidence/smi\\xff.txt"}


def test_active_with_no_host_is_refused():
    """--active measures this machine and --no-host audits only the evidence: the measurement
    was silently skipped."""
    from hostile_helpers import one_line_error

    one_line_error(cli("audit", "--no-host", "--active", "--evidence", "-", input="x\n"), "--active", "--no-host")
