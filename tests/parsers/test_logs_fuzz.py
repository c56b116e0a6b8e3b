"""The log parsers on real lines cut, shuffled and mixed with noise, as pastes arrive: no exception,
and what they count stays within what the input holds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from infergap.parsers.dmesg import parse_dmesg
from infergap.parsers.engine_log import parse_engine_log, parse_kv_repr
from infergap.parsers.nccl import parse_nccl_log
from tests.evidence.evidence_data import FIX

REAL = [ln for p in sorted(FIX.glob("*.log")) + sorted(FIX.glob("*.txt")) for ln in p.read_text().splitlines()]

line = st.one_of(
    st.sampled_from(REAL),
    st.tuples(st.sampled_from(REAL), st.integers(0, 400)).map(lambda t: t[0][: t[1]]),
    st.text(max_size=200),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(line, max_size=60))
def test_nccl_parser_total(lines):
    f = parse_nccl_log(lines)
    assert f.lines == len(lines)
    assert sum(f.transports.values()) <= sum(("Channel" in ln or "Ring" in ln) and " via " in ln for ln in lines)  # NCCL < 2.6 logs "Ring NN : …"
    assert sum(lk.channels for lk in f.links) == sum(f.transports.values())
    assert len(f.warnings) <= 20


@settings(max_examples=300, deadline=None)
@given(st.lists(line, max_size=60))
def test_engine_parser_total(lines):
    f = parse_engine_log(lines)
    assert f.lines <= len(lines)
    assert f.decode_no_graph <= f.decode_batches <= sum("Decode batch" in ln for ln in lines)
    assert f.moe_default_count <= sum("MoE" in ln for ln in lines)


@settings(max_examples=200, deadline=None)
@given(st.lists(line, max_size=40))
def test_dmesg_parser_total(lines):
    f = parse_dmesg(lines)
    assert f.xid_count <= sum("Xid" in ln for ln in lines)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_kv_repr_never_raises(text):
    out = parse_kv_repr(text)
    assert all(isinstance(k, str) and k.isidentifier() for k in out)


def test_nccl_channel_cut_after_its_transport_slash():
    """A channel line cut right after ``via P2P/`` (a truncated paste): read, not a crash."""
    f = parse_nccl_log(["0:0:0 [0] NCCL INFOChannel 0: 0[0] -> 0[0] via P2P/"])
    assert f is not None
