"""A paste that repeats one output many times (a log copied in a loop, a terminal scrolled back
over the same command) gives each finding once, with how many copies and the first and last
line, while any copy that says something else keeps its own finding."""

from __future__ import annotations

import json

from tests.conftest import ROOT, run_cli

PASTE = ROOT / "tests" / "fixtures" / "evidence" / "akash-244-xid94-multi-gpu.txt"
COPIES = 60


def _audit(path) -> list[dict]:
    r = run_cli("audit", "--no-host", "--evidence", str(path), "-f", "json", "--db",
                str(path.parent / "ledger.sqlite3"), timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["findings"]


def test_repeated_copies_fold_into_one_item_each(tmp_path):
    one = PASTE.read_text()
    one = one if one.endswith("\n") else one + "\n"
    single = tmp_path / "one" / "paste.txt"
    single.parent.mkdir()
    single.write_text(one)
    base = _audit(single)
    rep = tmp_path / "rep" / "paste.txt"
    rep.parent.mkdir()
    rep.write_text(one * COPIES)
    folded = _audit(rep)
    assert len(folded) == len(base)  # was one finding per copy: 2 Xid findings × 60, 60 driver messages
    assert sorted((f["id"], f["status"]) for f in folded) == sorted((f["id"], f["status"]) for f in base)
    n_lines = one.count("\n")
    xids = [f for f in folded if f["id"] == "gpu.xid"]
    assert xids
    for f in xids:
        r = f["details"]["repeats"]
        assert r["count"] == COPIES and r["first_line"] == 2 and r["last_line"] == 2 + (COPIES - 1) * n_lines, r
        assert f"the same in {COPIES} pasted copies, lines 2-{r['last_line']}" in f["title"]
    # one copy that differs (another Xid code on another GPU) is never folded away
    odd = one.replace("NVRM: Xid (PCI:0000:00:05): 43,", "NVRM: Xid (PCI:0000:00:09): 79,", 1)
    assert odd != one
    rep.write_text(one * 30 + odd + one * 29)
    mixed = _audit(rep)
    assert any("79" in f["title"] for f in mixed if f["id"] == "gpu.xid"), [f["title"] for f in mixed if f["id"] == "gpu.xid"]
    assert len(mixed) > len(folded)
    assert all((f["details"].get("repeats") or {}).get("count", 1) <= COPIES for f in mixed)
