"""The result table of DCGM's ``dcgmi diag -r N`` (NVIDIA/DCGM ``dcgmi/Diag.cpp``): a box of
``| Diagnostic | Result |`` rows in sections (``-----  Metadata  ----``, ``Deployment``,
``Integration``, ``Hardware``, ``Stress``), one row per test with its result.

Two layouts are printed. DCGM 3.x puts the GPUs in the result cell (``Pass``, ``Fail - GPU: 0``,
``Pass - All``, a second GPU on a continuation row) and the messages in ``Warning`` / ``Info``
rows, wrapped at the cell's width even inside a word; DCGM 4.x names the tests in lower case
(``software``, ``memory``, ``pcie``) and lists each GPU on its own row (``GPU0: Pass``). A paste
often starts or ends inside the box; every row is read on its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

_SECTION = re.compile(r"^[|+]-{3,8}\s{1,4}([A-Za-z][A-Za-z ]{0,40}?)\s{1,4}-{1,40}\+-{4,120}[|+]$")
_RESULT = re.compile(r"^(Pass|Fail|Warn|Skip|Skipped|Warning)(?: - (?:GPU(?:s)?: ?([\d, ]{1,200})|(All)))?$")
_PER_GPU = re.compile(r"^GPU ?(\d{1,3}): (Pass|Fail|Warn|Skip|Skipped|Warning)$")
_GPU_IN_TEXT = re.compile(r"\bGPU ?(\d{1,3})\b")
#: Rows and messages kept (a paste of a large run is cut there).
MAX_ROWS = 2048
#: Longest message kept (characters).
MAX_TEXT = 2000
_WORD = {"Skipped": "Skip", "Warning": "Warn"}


class DcgmTest(BaseModel):
    """One test row: ``name`` as printed, ``section`` (``Deployment``, ``Hardware`` …; None when
    the paste starts below its header), ``gpus``: GPU index (``"0"``) or ``"all"`` -> ``Pass``,
    ``Fail``, ``Warn`` or ``Skip``."""

    model_config = ConfigDict(defer_build=True)  # schema built on first use, not at import (start time)

    name: str
    section: str | None = None
    gpus: dict[str, str] = Field(default_factory=dict)


class DcgmNote(BaseModel):
    """A ``Warning`` or ``Info`` row: ``kind``, the ``gpu`` it names (None when none), its
    ``text`` joined across the wrapped rows, and the ``test`` it follows."""

    model_config = ConfigDict(defer_build=True)  # schema built on first use, not at import (start time)

    kind: str
    text: str
    gpu: str | None = None
    test: str | None = None


class DcgmDiag(BaseModel):
    """One ``dcgmi diag`` table: ``metadata`` (``DCGM Version``, ``Driver Version Detected`` …),
    ``tests`` in order, ``notes``."""

    model_config = ConfigDict(defer_build=True)  # schema built on first use, not at import (start time)

    metadata: dict[str, str] = Field(default_factory=dict)
    tests: list[DcgmTest] = Field(default_factory=list)
    notes: list[DcgmNote] = Field(default_factory=list)

    def results(self, word: str) -> list[tuple[DcgmTest, str]]:
        """(test, GPU) pairs whose result is ``word`` (``Fail``, ``Warn``, ``Pass``)."""
        return [(t, g) for t in self.tests for g, r in t.gpus.items() if r == word]


def _cells(line: str) -> tuple[str, str] | None:
    """(name cell, result cell) of a table row, raw (the result keeps its padding; a row cut
    before its closing bar is read as far as it goes); None for any other line."""
    s = line.strip()
    if not s.startswith("|") or s.startswith(("|-", "|=")):
        return None
    inner = s[1:-1] if s.endswith("|") and len(s) > 1 else s[1:]
    name, bar, value = inner.partition("|")
    return (name.strip(), value) if bar else None


def _result(t: DcgmTest, value: str) -> bool:
    """Read a result cell into ``t``; False when the cell holds no result."""
    v = value.strip()
    m = _PER_GPU.match(v)
    if m:
        t.gpus[m.group(1)] = _WORD.get(m.group(2), m.group(2))
        return True
    m = _RESULT.match(v)
    if not m:
        return False
    word = _WORD.get(m.group(1), m.group(1))
    for g in (re.findall(r"\d{1,3}", m.group(2)) if m.group(2) else ["all"]):
        t.gpus[g] = word
    return True


class _Reader:
    def __init__(self) -> None:
        self.out = DcgmDiag()
        self.section: str | None = None
        self.test: DcgmTest | None = None
        self.note: DcgmNote | None = None
        self.rows = 0
        self.full = False

    def line(self, line: str) -> None:
        m = _SECTION.match(line.strip())
        if m:
            self.section, self.test, self.note = m.group(1).strip(), None, None
            return
        cells = _cells(line)
        if cells is None or self.rows >= MAX_ROWS:
            return
        self.rows += 1
        name, value = cells
        if name in ("Warning", "Info") or name.startswith(("Warning:", "Info:")):
            self._note(name.split(":")[0], value)
        elif name:
            self._row(name, value)
        elif self.note is not None:
            self._more(value)
        elif self.test is not None:
            _result(self.test, value)

    def _note(self, kind: str, value: str) -> None:
        self.note = DcgmNote(kind=kind, text="", test=self.test.name if self.test else None)
        self.out.notes.append(self.note)
        self.full = False
        self._more(value)

    def _more(self, value: str) -> None:
        """Append a row of the current note's text: dcgmi wraps at the cell's width (its padding
        is one blank before and two after), inside a word too, so a row that filled the cell
        runs on into the next without a blank."""
        if self.note is None:
            return
        seg = (value[1:] if value.startswith(" ") else value).rstrip()
        sep = "" if self.full or not self.note.text else " "
        self.note.text = (self.note.text + sep + seg)[:MAX_TEXT]
        self.full = len(seg) >= len(value) - 3

    def _row(self, name: str, value: str) -> None:
        self.note = None
        if name == "Diagnostic":
            return
        if self.section == "Metadata":
            self.out.metadata[name] = value.strip()
            return
        t = DcgmTest(name=name, section=self.section)
        if _result(t, value) or not value.strip():
            self.test = t
            self.out.tests.append(t)

    def done(self) -> DcgmDiag:
        for n in self.out.notes:
            n.text = " ".join(n.text.split())
            m = _GPU_IN_TEXT.search(n.text)
            n.gpu = m.group(1) if m else None
        return self.out


def parse_dcgmi_diag(lines: Iterable[str]) -> DcgmDiag:
    """Parse a pasted ``dcgmi diag`` table, streaming. Never raises for text.

    NVIDIA/go-dcgm#52 (``tests/fixtures/evidence/dcgmi-godcgm52-gpu0-memory-fail.txt``), the 3.x
    layout:

    >>> d = parse_dcgmi_diag([
    ...     "+-----  Hardware  ----------+------------------------------------------------+",
    ...     "| GPU Memory                | Pass - GPU: 1                                  |",
    ...     "|                           | Fail - GPU: 0                                  |",
    ...     "| Warning                   | GPU 0 Error using CUDA API cuCtxCreate Check   |",
    ...     "|                           | DCGM and system logs for errors. Reset GPU. R  |",
    ...     "|                           | estart DCGM. Rerun diagnostics.                |"])
    >>> [(t.section, t.name, t.gpus) for t in d.tests]
    [('Hardware', 'GPU Memory', {'1': 'Pass', '0': 'Fail'})]
    >>> d.notes[0].gpu, d.notes[0].text
    ('0', 'GPU 0 Error using CUDA API cuCtxCreate Check DCGM and system logs for errors. Reset GPU. Restart DCGM. Rerun diagnostics.')

    NVIDIA/DCGM#253, the 4.x layout (one row per GPU):

    >>> parse_dcgmi_diag(["|-----  Deployment  --------+------------------------------------------------|",
    ...                   "| software                  | Pass                                           |",
    ...                   "|                           | GPU0: Pass                                     |"]).tests[0].gpus
    {'all': 'Pass', '0': 'Pass'}
    """
    r = _Reader()
    for line in lines:
        r.line(line)
    return r.done()
