"""Investigator tests over an in-memory snapshot (:class:`infergap.snapshot.memory.MemorySnapshot`):
a few host files and command outputs, nothing else.

Values come from the real captures under ``tests/fixtures/hosts`` (the seed 8-GPU host and the
H200 captures) so that each test reads what a real machine wrote.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from infergap.audit import run_audit
from infergap.evidence import EvidenceSnapshot
from infergap.findings import Finding
from infergap.snapshot.core import Snapshot
from infergap.snapshot.memory import MemorySnapshot, read_archive


#: Findings the audit adds after the investigators ran (audit.py), not made by the one under test.
AUDIT_NOTES = {"evidence.unmatched", "evidence.unreadable"}


def audit_ids(snap: Snapshot, investigator: str, server: Any = None) -> dict[str, list[Finding]]:
    """Run one investigator over ``snap`` (with the live server's configuration ``server`` when
    given); the findings it made, grouped by check id."""
    from infergap.investigators import REGISTRY

    mods = [m for m in REGISTRY if m.NAME == investigator]
    assert mods, f"no investigator named {investigator}"
    out: dict[str, list[Finding]] = {}
    for f in run_audit(snap, server=server, investigators=mods, parallel=False).findings:
        # The audit adds its own notes on the evidence after the investigators ran; a finding an
        # investigator hands to the owner of its check id carries the owner's name, so the notes
        # are left out by id.
        if f.id not in AUDIT_NOTES:
            out.setdefault(f.id, []).append(f)
    return out


def one(found: dict[str, list[Finding]], check_id: str) -> Finding:
    """The single finding of ``check_id`` (fails when there is none or several)."""
    fs = found.get(check_id, [])
    assert len(fs) == 1, f"{check_id}: expected one finding, got {[(f.status, f.title) for f in fs]}"
    return fs[0]


#: Two NUMA nodes of the seed host (tests/fixtures/hosts/seed-8x-rtxpro6000).
TWO_NODES = {"/sys/devices/system/node/node0/cpulist": "0-15,32-47\n",
             "/sys/devices/system/node/node1/cpulist": "16-31,48-63\n"}


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@lru_cache(maxsize=8)
def _host_members(host: str) -> dict[str, bytes]:
    """Every file of a captured host (``tests/fixtures/hosts/<host>`` directory or ``.tar.gz``),
    keyed by its path inside the snapshot (``cmds/uname.out``, ``files/proc/cmdline``)."""
    root = FIXTURES / "hosts" / host
    out: dict[str, bytes] = {}
    if root.is_dir():
        for p in root.rglob("*"):
            if p.is_file():
                out[p.relative_to(root).as_posix()] = p.read_bytes()
        return out
    members = read_archive(Path(f"{root}.tar.gz").read_bytes(), host)
    return {name.split("/", 1)[1]: data for name, data in members.items()}


def host_text(host: str, rel: str) -> str:
    """Text of one file of a captured host, e.g. ``host_text("h200-1gpu", "cmds/nvsmi_q.out")``."""
    return _host_members(host)[rel].decode()


def host_files(host: str, *paths: str) -> dict[str, str]:
    """Host paths (``/proc/cmdline``) with their text as captured on ``host``; a path ending in
    ``/`` takes every captured file below it."""
    mem = _host_members(host)
    out = {}
    for p in paths:
        if p.endswith("/"):
            out.update({k[len("files"):]: v.decode() for k, v in mem.items() if k.startswith("files" + p)})
        else:
            out[p] = mem["files" + p].decode()
    return out


def host_cmds(host: str, *names: str) -> dict[str, str]:
    """Command outputs (stdout, exit status 0) as captured on ``host``."""
    return {n: host_text(host, f"cmds/{n}.out") for n in names}


def host_probe(host: str, name: str) -> Any:
    """A probe's JSON as captured on ``host`` (``probes/<name>.json``)."""
    return json.loads(host_text(host, f"probes/{name}.json"))


def pasted(*names: str, base: Snapshot | None = None) -> EvidenceSnapshot:
    """Public pastes of ``tests/fixtures/evidence`` (by file name) as the evidence of an audit,
    over ``base`` (an in-memory host) or alone."""
    return EvidenceSnapshot(base, [FIXTURES / "evidence" / n for n in names])


def replaced(text: str, old: str, new: str) -> str:
    """``text`` with every ``old`` replaced by ``new``: one value of a real capture changed to
    reach another branch (fails when the capture no longer holds ``old``)."""
    assert old in text, f"{old!r} is not in the capture"
    return text.replace(old, new)


def statuses(found: dict[str, list[Finding]], check_id: str) -> list[str]:
    """Statuses of every finding of ``check_id``, in order."""
    return [f.status.value for f in found.get(check_id, [])]


def config_word(config_hex: str, offset: int) -> int:
    """The little-endian 16-bit register at ``offset`` of a ``config.hex`` (``od -An -tx1 -v``)."""
    data = [int(b, 16) for b in config_hex.split()]
    return data[offset] | data[offset + 1] << 8


def with_config_word(config_hex: str, offset: int, value: int) -> str:
    """``config.hex`` with the 16-bit register at ``offset`` set to ``value``, in od's layout."""
    data = bytearray(int(b, 16) for b in config_hex.split())
    data[offset:offset + 2] = value.to_bytes(2, "little")
    return "".join(" " + " ".join(f"{b:02x}" for b in data[i:i + 16]) + "\n" for i in range(0, len(data), 16))


def evidence_text(name: str) -> str:
    """Text of one public paste of ``tests/fixtures/evidence``."""
    return (FIXTURES / "evidence" / name).read_text(encoding="utf-8")


def pasted_text(tmp_dir: Path, name: str, text: str, base: Snapshot | None = None) -> EvidenceSnapshot:
    """``text`` (an excerpt of a real paste or capture) written to ``tmp_dir/name`` and given as evidence."""
    p = Path(tmp_dir) / name
    p.write_text(text, encoding="utf-8")
    return EvidenceSnapshot(base, [p])
