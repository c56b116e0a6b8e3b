"""Timeouts, failing investigators, parallel vs sequential, and parser fuzzing."""

from __future__ import annotations

import time
import types

from hypothesis import given, settings
from hypothesis import strategies as st

from infergap.audit import run_audit
from infergap.findings import Status
from infergap.investigators import REGISTRY
from infergap.parsers import host as hp
from infergap.parsers.nvsmi import NvsmiParseError, parse_nvsmi_xml, parse_p2p, parse_query_csv, parse_topo
from infergap.parsers.pci import ConfigSpaceError, decode_config, parse_lspci_vvv, parse_od_hex
from infergap.snapshot import open_snapshot
from infergap.snapshot.core import _run
from tests.conftest import HOSTS


def test_hanging_source_is_cut_at_timeout():
    t0 = time.monotonic()
    r = _run(("sleep", "30"), timeout_s=0.5)
    assert time.monotonic() - t0 < 5
    assert r.rc == 124 and r.error == "timed out after 0.5 s"


def test_hanging_shell_pipeline_killed_with_its_children():
    t0 = time.monotonic()
    r = _run(("bash", "-c", "sleep 30 | cat"), timeout_s=0.5)
    assert time.monotonic() - t0 < 5 and r.rc == 124


def test_investigator_that_raises_still_renders():
    def boom(ctx):
        raise RuntimeError("simulated investigator bug")

    bad = types.SimpleNamespace(NAME="broken", investigate=boom)
    with open_snapshot(HOSTS / "h200-1gpu") as snap:
        r = run_audit(snap, investigators=[*REGISTRY, bad])
    run = next(i for i in r.investigators if i.name == "broken")
    assert run.error == "RuntimeError: simulated investigator bug"
    assert r.get("broken.error")[0].status == Status.unknown
    assert r.summary["investigator_errors"] == ["broken"]
    from infergap.render.audit import render_md, render_text

    assert "broken: RuntimeError" in render_text(r)
    assert "broken: RuntimeError" in render_md(r)
    assert r.get("vm.swappiness")[0].status == Status.actionable


def test_parallel_and_sequential_agree():
    with open_snapshot(HOSTS / "h200-1gpu") as snap:
        a = run_audit(snap)
    with open_snapshot(HOSTS / "h200-1gpu") as snap:
        b = run_audit(snap, parallel=False)
    assert [(f.id, f.subject, f.status) for f in a.findings] == [(f.id, f.subject, f.status) for f in b.findings]


REAL = {n: (HOSTS / "h200-1gpu" / "cmds" / f"{n}.out").read_text() for n in ("nvsmi_qx", "nvsmi_topo", "nvsmi_csv", "nvsmi_p2p", "ulimit", "sysctl_all")}


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=400), st.integers(min_value=0, max_value=len(REAL["nvsmi_qx"])))
def test_fuzz_nvsmi_xml(noise, cut):
    for text in (noise, REAL["nvsmi_qx"][:cut], REAL["nvsmi_qx"][:cut] + noise):
        try:
            log = parse_nvsmi_xml(text)
        except NvsmiParseError:
            continue
        assert isinstance(log.gpus, list)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300), st.integers(min_value=0, max_value=2000))
def test_fuzz_text_parsers(noise, cut):
    for name in ("nvsmi_topo", "nvsmi_csv", "nvsmi_p2p", "ulimit", "sysctl_all"):
        text = REAL[name][:cut] + noise
        try:
            parse_topo(text)
        except NvsmiParseError:
            pass
        parse_query_csv(text)
        parse_p2p(text)
        hp.parse_ulimit(text)
        hp.parse_sysctl_all(text)
        hp.parse_limits(text)
        hp.parse_meminfo(text)
        hp.parse_pip_list(text)
        hp.parse_swaps(text)
        parse_lspci_vvv(text)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=4096))
def test_fuzz_config_space(raw):
    try:
        cs = decode_config(raw)
    except ConfigSpaceError:
        return
    if cs.pcie is not None:
        assert cs.pcie.mrrs_B in {128, 256, 512, 1024, 2048, 4096, 8192, 16384}


@given(st.text(alphabet="0123456789abcdef \n", max_size=200))
def test_fuzz_od_hex(text):
    try:
        b = parse_od_hex(text)
    except ConfigSpaceError:
        return
    assert len(b) == len(text.split())


def test_real_config_space_decodes():
    raw = parse_od_hex((HOSTS / "h200-1gpu/files/sys/bus/pci/devices/0000:00:06.0/config.hex").read_text())
    cs = decode_config(raw)
    assert (cs.vendor, cs.device) == (0x10DE, 0x2335)
    assert cs.pcie.mrrs_B == 4096 and cs.pcie.mps_B == 256 and cs.pcie.mps_supported_B == 256
    assert cs.pcie.link_speed_GTs == 32.0 and cs.pcie.link_width == 16


@given(st.text(max_size=50))
def test_fuzz_cpulist(text):
    try:
        cpus = hp.parse_cpulist(text)
    except ValueError:
        return
    assert cpus == sorted(set(cpus))
