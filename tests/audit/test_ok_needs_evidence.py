"""Every recognised kind of evidence, audited alone: an ``ok`` may only stand on evidence from that
input. A check whose evidence is missing says ``unknown`` (or nothing), never ``ok``.

The samples are real outputs: the H200 captures (tests/fixtures/hosts) and the public reports of
tests/fixtures/evidence (see their ABOUT.md). ``pip freeze`` and plain ``pip list`` are the H200
capture's package list printed in those two formats.
"""

from __future__ import annotations

import json
import pytest

from infergap.audit import run_audit
from infergap.evidence import EvidenceSnapshot
from infergap.evidence.recognize import KINDS
from infergap.findings import Status
from infergap.snapshot.sources import RECORDS
from tests.conftest import FIXTURES, HOSTS

H200 = HOSTS / "h200-1gpu"
EV = FIXTURES / "evidence"

#: kind -> a real sample, from the source records (``sample``): a file of the fixtures, or
#: ``cmds/<name>`` / ``pip_freeze`` / ``pip_text`` of the two-H200 capture (read from its archive).
SAMPLES = {k: (s.sample.removeprefix("capture:") if s.sample.startswith("capture:") else FIXTURES / s.sample)
           for k, s in RECORDS.items() if k in KINDS and s.sample}
#: every public report of the evidence fixtures, each alone (other GPUs, other shapes of the same kinds)
MORE = sorted(p.name for p in EV.iterdir() if p.is_file() and p.suffix != ".md")


def _sample(kind, capture, tmp_path):
    s = SAMPLES[kind]
    if not isinstance(s, str):
        return s
    if s in ("pip_freeze", "pip_text"):
        pkgs = json.loads((capture / "cmds" / "pip_list.out").read_text())
        text = ("\n".join(f"{p['name']}=={p['version']}" for p in pkgs) if s == "pip_freeze" else
                "Package    Version\n---------- -------\n" + "\n".join(f"{p['name']} {p['version']}" for p in pkgs))
        p = tmp_path / f"{s}.txt"
        p.write_text(text + "\n")
        return p
    src = capture / (s + ".out" if s.startswith("cmds/") else s)
    p = tmp_path / f"pasted-{kind}.txt"
    p.write_bytes(src.read_bytes())
    return p


def _oks_without_support(path):
    snap = EvidenceSnapshot(None, [path])
    report = run_audit(snap)
    bad = []
    for f in report.findings:
        if f.status != Status.ok:
            continue
        if not any(e.source.startswith("evidence/") for e in f.evidence):
            bad.append(f"{f.id} [{f.subject}]: {f.title} — evidence {[(e.source, e.value) for e in f.evidence]}")
    return snap, report, bad


def test_every_kind_has_a_sample():
    assert set(SAMPLES) == set(KINDS)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_ok_cites_the_input(kind, h200x2, tmp_path):
    path = _sample(kind, h200x2, tmp_path)
    snap, report, bad = _oks_without_support(path)
    assert kind in {k for p in snap.parts for k in p.kinds}, [p.kind for p in snap.parts]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", MORE)
def test_ok_cites_the_input_public_reports(name):
    _, _, bad = _oks_without_support(EV / name)
    assert not bad, "\n".join(bad)


def test_topology_alone_says_nothing_about_throttling(h200x2, tmp_path):
    """nvidia-smi topo -m has no clock data: gpu.throttle must not be ok."""
    _, report, _ = _oks_without_support(_sample("nvsmi_topo", h200x2, tmp_path))
    assert {f.status for f in report.get("gpu.throttle")} <= {Status.unknown}
    assert not [f for f in report.findings if f.id.startswith("gpu.") and f.status == Status.ok]
