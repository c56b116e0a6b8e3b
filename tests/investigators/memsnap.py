"""An in-memory snapshot for investigator tests: a few host files and command outputs, nothing else.

Values come from the real captures under ``tests/fixtures/hosts`` (the seed 8-GPU host and the
H200 captures) so that each test reads what a real machine wrote.
"""

from __future__ import annotations

from typing import Any

from infergap.audit import run_audit
from infergap.findings import Finding
from infergap.snapshot.core import CmdResult, Snapshot


class MemorySnapshot(Snapshot):
    """A snapshot held in dictionaries.

    ``files``: host path -> text; directories exist implicitly above every file.
    ``cmds``: command name -> stdout (exit status 0) or a :class:`CmdResult`.
    ``probes``: probe name -> JSON-like object.
    """

    kind = "memory"
    label = "in-memory test snapshot"

    def __init__(self, files: dict[str, str] | None = None, cmds: dict[str, str | CmdResult] | None = None,
                 probes: dict[str, Any] | None = None) -> None:
        self.files = {p.rstrip("/"): t for p, t in (files or {}).items()}
        self.cmds = {n: (c if isinstance(c, CmdResult) else CmdResult(name=n, stdout=c, rc=0)) for n, c in (cmds or {}).items()}
        self.probes = dict(probes or {})

    def _read_bytes(self, path: str) -> bytes | None:
        t = self.files.get(path.rstrip("/"))
        return None if t is None else t.encode()

    def _listdir(self, path: str) -> list[str] | None:
        base = path.rstrip("/") + "/"
        names = {p[len(base):].split("/", 1)[0] for p in self.files if p.startswith(base)}
        return sorted(names) if names else None

    def _cmd(self, name: str) -> CmdResult | None:
        return self.cmds.get(name)

    def _probe(self, name: str) -> Any | None:
        return self.probes.get(name)


def audit_ids(snap: Snapshot, investigator: str) -> dict[str, list[Finding]]:
    """Run one investigator over ``snap``; its findings grouped by check id."""
    from infergap.investigators import REGISTRY

    mods = [m for m in REGISTRY if m.NAME == investigator]
    assert mods, f"no investigator named {investigator}"
    out: dict[str, list[Finding]] = {}
    for f in run_audit(snap, investigators=mods, parallel=False).findings:
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
