"""The check catalog (data/checks.yaml) and the investigators agree.

- every id an investigator names in its source is in the catalog;
- every catalog id is named by exactly one investigator module, its owner's (another module that
  reads a fact about the check hands it to the owner's function), so no entry is dead and no id
  is decided in two places;
- every id emitted while auditing the real fixtures (captured hosts and public pastes) is in the
  catalog and reported under its owner's name;
- the failure signatures report only under ids marked ``signatures: true``, and the remedy
  allow-list of ``infergap fix`` is the catalog's ``actions``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infergap import checks
from infergap.audit import run_audit
from infergap.errors import UserError
from infergap.evidence import EvidenceSnapshot
from infergap.findings import Status
from infergap.investigators import REGISTRY
from infergap.snapshot import open_snapshot

ROOT = Path(__file__).resolve().parents[1]
INV_DIR = ROOT / "src" / "infergap" / "investigators"
FIXTURES = ROOT / "tests" / "fixtures"

# Every dotted string literal in an investigator is taken for a check id, except the kernel
# sysctl names the investigators read (they look alike: ``net.core.rmem_max``).
_DOTTED = re.compile(r"""["']([a-z0-9_]+(?:\.[a-z0-9_]+)+)["']""")
SYSCTL_NAMES_READ = {"kernel.sched_autogroup_enabled", "net.core.rmem_max", "net.core.wmem_max",
                     "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
                     "iommu.passthrough"}  # a kernel command-line parameter iommu.mode reads


def _named_ids() -> dict[str, set[str]]:
    """id -> investigator names whose module source holds that id as a string literal."""
    out: dict[str, set[str]] = {}
    names = {Path(m.__file__).name: m.NAME for m in REGISTRY}
    for path in INV_DIR.glob("*.py"):
        for cid in _DOTTED.findall(path.read_text(encoding="utf-8")):
            if cid not in SYSCTL_NAMES_READ:
                out.setdefault(cid, set()).update({names[path.name]} if path.name in names else set())
    return out


#: Owner name of the findings the audit itself reports (evidence it could not read, audit.py).
AUDIT_ITSELF = "snapshot"


def test_catalog_loads_and_is_not_empty() -> None:
    cat = checks.load()
    assert len(cat) >= 50
    names = {m.NAME for m in REGISTRY} | {AUDIT_ITSELF}
    for c in cat.values():
        assert c.investigator in names, f"{c.id}: investigator {c.investigator} is not registered"


def test_every_named_id_is_in_the_catalog() -> None:
    named = _named_ids()
    assert len(named) >= 40, "the id scanner found too few ids: has the constructor style changed?"
    missing = sorted(set(named) - set(checks.load()))
    assert not missing, ("check ids used by investigators but missing from src/infergap/data/checks.yaml "
                         f"(add an entry for each; a sysctl name goes in SYSCTL_NAMES_READ): {missing}")


def test_every_catalog_id_is_named_by_its_owner_only() -> None:
    named = _named_ids()
    by_name = {m.NAME: Path(m.__file__).read_text(encoding="utf-8") for m in REGISTRY}
    by_name[AUDIT_ITSELF] = (ROOT / "src" / "infergap" / "audit.py").read_text(encoding="utf-8")
    from infergap.evidence.signatures import catalog

    cat = checks.load()
    by_signature = {s.finding.id for s in catalog().signatures}
    dead = [c.id for c in cat.values() if f'"{c.id}"' not in by_name[c.investigator] and c.id not in by_signature]
    assert not dead, f"catalog ids neither their owning investigator nor a failure signature reports: {dead}"
    shared = {cid: sorted(mods) for cid, mods in named.items() if cid in cat and mods - {cat[cid].investigator}}
    assert not shared, ("catalog ids named by an investigator that does not own them (move the code that decides "
                        f"them into the owner's module and call it from there): {shared}")


def test_the_constructor_takes_the_owner_from_the_catalog() -> None:
    f = checks.finding("nccl.env", Status.actionable, "x")
    assert f.investigator == "runtime" and f.fix_kind is not None and f.fix_kind.value == "runtime"
    assert checks.finding("nccl.env", Status.ok, "x").fix_kind is None  # only actionable findings carry it
    with pytest.raises(UserError, match="no check with id"):
        checks.finding("nccl.envv", Status.ok, "x")


def test_signature_checks_and_fix_allow_list_come_from_the_catalog() -> None:
    from infergap.evidence.signatures import catalog
    from infergap.remedy.actions import MODULES, SETPCI_REGISTERS, SYSCTL_KEYS

    cat = checks.load()
    for s in catalog().signatures:
        assert cat[s.finding.id].signatures, f"signature {s.id} reports under {s.finding.id}, which is not marked signatures: true"
    assert SYSCTL_KEYS["vm.swappiness"] == "vm.swappiness" and SETPCI_REGISTERS["ECAP_ACS+6.w"] == "pcie.acs"
    assert MODULES == {"nvidia_peermem"}
    declared = {(a.type, t) for c in cat.values() for a in c.actions for t in a.targets}
    assert {("sysctl", k) for k in SYSCTL_KEYS} | {("modprobe", m) for m in MODULES} | {("setpci", r) for r in SETPCI_REGISTERS} == declared


def _inputs() -> list[tuple[str, object]]:
    out = []
    for p in sorted((FIXTURES / "hosts").iterdir()):
        if p.is_dir() or p.name.endswith(".tar.gz"):
            out.append((f"hosts/{p.name}", lambda p=p: open_snapshot(p)))
    for p in sorted((FIXTURES / "evidence").iterdir()):
        if p.is_file() and p.suffix != ".md":
            out.append((f"evidence/{p.name}", lambda p=p: EvidenceSnapshot(None, [p])))
    return out


@pytest.mark.parametrize("label,make", _inputs(), ids=[i[0] for i in _inputs()])
def test_emitted_ids_match_the_catalog(label: str, make) -> None:
    cat = checks.load()
    with make() as snap:  # an archive's unpacked copy is removed here, not left to the end of the session
        report = run_audit(snap, parallel=False)
    assert report.findings, f"{label}: the audit produced no finding at all"
    for f in report.findings:
        if f.id.endswith(".error") and f.investigator == f.id.split(".")[0]:
            continue  # an investigator that raised is reported under its own name (audit.py)
        assert f.id in cat, f"{label}: {f.investigator} emitted {f.id}, which is not in data/checks.yaml"
        assert f.investigator == cat[f.id].investigator, (
            f"{label}: {f.id} reported by {f.investigator}; the catalog's owner is {cat[f.id].investigator}")


def test_unknown_id_names_the_closest() -> None:
    with pytest.raises(Exception, match="did you mean pcie.acs"):
        checks.get("pcie.acz")


def test_checks_command(cli) -> None:
    r = cli("checks", "nccl.transport")
    assert r.returncode == 0, r.stderr
    assert "ok needs:" in r.stdout and "https://" in r.stdout
    r = cli("checks", "--format", "json")
    import json

    data = json.loads(r.stdout)
    assert {d["id"] for d in data} == set(checks.load())
    r = cli("checks", "nosuch.check")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    r = cli("checks", "PCIE.ACS")  # ids are lower case; the command is not picky about it
    assert r.returncode == 0 and "pcie.acs" in r.stdout, r.stderr
    assert [c.id for c in checks.matching("NCCL.Transport")] == ["nccl.transport"]


# -- the source records (snapshot/sources.py): one record per source of host evidence ---------

def _records():
    from infergap.snapshot.sources import SOURCES

    return SOURCES


#: Recognised kinds no parser reads yet: a paste of them is placed (so it is not "not a known
#: output") but yields no fact. Each is a gap, listed so it cannot grow unnoticed.
RECOGNISED_NOT_READ = {"lspci_tree", "nvcc", "lscpu"}


def test_every_pasted_kind_is_a_record_with_a_parser_a_sample_and_facts_that_exist() -> None:
    import importlib

    from infergap.evidence.recognize import KINDS
    from infergap.facts import Facts

    recs = {s.kind: s for s in _records()}
    assert len(recs) == len(_records()), "two records of one kind"
    for kind in KINDS:
        r = recs[kind]
        assert r.sample, f"{kind}: no real sample"
        if not r.sample.startswith("capture:"):
            assert (FIXTURES / r.sample).is_file(), f"{kind}: sample {r.sample} missing"
        if r.parser is None:
            assert kind in RECOGNISED_NOT_READ, f"{kind}: no parser"
            continue
        mod, _, fn = r.parser.partition(":")
        assert callable(getattr(importlib.import_module(mod), fn)), f"{kind}: parser {r.parser}"
        for acc in r.facts:
            assert callable(getattr(Facts, acc, None)), f"{kind}: Facts.{acc} does not exist"
    assert not {k for k in RECOGNISED_NOT_READ if recs[k].parser}, "a kind now read: take it off RECOGNISED_NOT_READ"


@pytest.mark.parametrize("kind", sorted(k for k, s in __import__("infergap.snapshot.sources", fromlist=["RECORDS"]).RECORDS.items()
                                        if s.sample and not s.sample.startswith("capture:")))
def test_each_records_sample_is_recognised_as_its_kind(kind: str) -> None:
    """The recogniser test of every record whose sample is a file: scanning it alone finds a part
    that serves the kind (the capture's samples are scanned by tests/audit/test_ok_needs_evidence.py)."""
    from infergap.evidence.recognize import scan_file
    from infergap.snapshot.sources import RECORDS

    parts, _ = scan_file(FIXTURES / RECORDS[kind].sample)
    assert kind in {k for p in parts for k in p.kinds}, (kind, [p.kind for p in parts])


def test_the_readmes_kinds_are_the_records_kinds() -> None:
    """The README's table of pasted kinds lists every recognised kind, each a record, and its
    "(recognised, not read yet)" marks are exactly the records without a parser."""
    import re

    from infergap.evidence.recognize import KINDS
    from infergap.snapshot.sources import RECORDS

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    table = text[text.index("| kind | output or log |"):]
    rows = dict(re.findall(r"^\| `(\w+)` \| (.+) \|$", table[: table.index("\n\n")], re.M))
    assert rows and set(rows) <= set(RECORDS), f"README lists kinds that are no record: {sorted(set(rows) - set(RECORDS))}"
    assert set(rows) == set(KINDS), f"recognised kinds missing from the README: {sorted(set(KINDS) - set(rows))}"
    assert {k for k, w in rows.items() if "not read yet" in w} == {k for k in rows if RECORDS[k].parser is None}


def test_every_live_command_is_declared_by_its_record() -> None:
    from infergap.snapshot.sources import COMMANDS, RECORDS

    assert all(RECORDS[name].command is c for name, c in COMMANDS.items())
    assert {r.kind for r in _records() if r.command} == set(COMMANDS)


def test_the_design_docs_example_kind_is_a_record_shown_as_written() -> None:
    """docs/design.md shows adding a kind with the last one added: that kind is a record, its
    record in the page is the record in snapshot/sources.py, and its parser's doctest sample is
    the parser's own."""
    import re

    from infergap.snapshot.sources import RECORDS

    root = Path(__file__).resolve().parents[1]
    doc = (root / "docs" / "design.md").read_text(encoding="utf-8")
    kind = re.search(r"last kind added, `(\w+)`", doc).group(1)
    assert kind in RECORDS and RECORDS[kind].sample and RECORDS[kind].parser
    blocks = re.findall(r"```python\n(.*?)```", doc[doc.index("last kind added"):], re.S)
    src = (root / "src" / "infergap" / "snapshot" / "sources.py").read_text(encoding="utf-8")
    record = "\n".join(ln.strip() for ln in blocks[0].strip().splitlines())
    assert record in "\n".join(ln.strip() for ln in src.splitlines()), "the record shown in docs/design.md is not the one in sources.py"
    mod, _, fn = RECORDS[kind].parser.partition(":")
    # the page shows the docstring as it reads (``\n``), the source escapes it (``\\n``)
    parser_src = (root / "src" / Path(*mod.split("."))).with_suffix(".py").read_text(encoding="utf-8").replace("\\\\", "\\")
    assert f"def {fn}(" in blocks[1] and all(ln.strip() in parser_src for ln in blocks[1].splitlines() if ln.strip().startswith(">>>"))


def test_log_kinds_are_declared_only_by_their_records() -> None:
    """A log kind is one record: its line test exists and takes a line of its own sample, the
    recogniser's log kinds are the records' in rank order, and recognize.py names no log kind
    (its order, families and line tests all come from the records)."""
    import importlib

    from infergap.evidence.recognize import LOG_KINDS
    from infergap.snapshot.sources import LOG_RECORDS

    assert LOG_KINDS == tuple(r.kind for r in LOG_RECORDS)
    assert [r.log_rank for r in LOG_RECORDS] == sorted(r.log_rank for r in LOG_RECORDS)
    src = (Path(__file__).resolve().parents[1] / "src" / "infergap" / "evidence" / "recognize.py").read_text(encoding="utf-8")
    for r in LOG_RECORDS:
        if not r.line_test:
            continue
        assert f'"{r.kind}"' not in src, f"recognize.py names the log kind {r.kind}: declare it in its record"
        mod, _, fn = r.line_test.partition(":")
        test = getattr(importlib.import_module(mod), fn)
        lines = (FIXTURES / r.sample).read_text(encoding="utf-8").splitlines()
        assert any(test(ln.lstrip().lstrip("> ").lstrip()) for ln in lines), f"{r.kind}: its line test takes no line of {r.sample}"
