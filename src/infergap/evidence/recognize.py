"""Recognise pasted outputs and logs by their content, and split a combined paste into parts.

One streaming pass over a file: each line is cleaned (:mod:`infergap.evidence.text`) and tested
against the *start markers* of the outputs infergap reads (the first line ``nvidia-smi -q`` prints,
the header of ``nvidia-smi topo -m``, ``available: N nodes`` of ``numactl -H`` …) and against the
line shapes of the logs it reads (NCCL's ``host:pid:tid [dev] NCCL INFO``, SGLang's
``[date time TP0]``, vLLM's ``INFO mm-dd hh:mm:ss [file.py:N]``, the kernel's ``[ seconds]``).
A start marker of another kind, a shell prompt naming a command (``$ numactl -H``) or a Markdown
fence ends the current part. Only byte offsets and counters are kept, so memory stays bounded
whatever the file's size; the text of a part is read again when it is needed.

The markers are those of the source records (:data:`infergap.snapshot.sources.SOURCES`: one record
per source, with its start marker, prompt command and line shape), taken from the real outputs in
the project's fixtures (an H200 host capture and public bug reports, see
``tests/fixtures/evidence/ABOUT.md``).
"""

from __future__ import annotations

import functools
import importlib
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infergap.evidence.signatures import line_kind
from infergap.evidence.text import LineNumbers, clean_line, clean_text, decode, line_number
from infergap.guard import name_safe
from infergap.messages import catalog as message_catalog
from infergap.snapshot.sources import ENGINE_LOG_KINDS, LOG_RECORDS, SOURCES

#: Longest line read at once; a longer line is read in pieces (bounded memory on a runaway line).
MAX_LINE_BYTES = 64 * 1024
#: Bytes looked at to decide whether a file is binary.
SNIFF_BYTES = 8192
#: A file that starts with NULs is looked at this far in for text before it is called empty.
MAX_NUL_SKIP = 16 * 1024 * 1024

#: kind -> (what it is, how the snapshot overlay serves it), from the source records
#: (:data:`infergap.snapshot.sources.SOURCES`). ``cmd:<name>`` answers ``Snapshot.cmd(name)``;
#: ``file:<path>`` answers ``Snapshot.read(path)``; ``log`` is read with ``Snapshot.evidence_parts(kind)``.
KINDS: dict[str, tuple[str, str]] = {s.kind: (s.what, s.serves) for s in SOURCES if s.start or s.sample}

#: The log kinds, in the order of their records' ``log_rank`` (:data:`infergap.snapshot.sources.LOG_RECORDS`).
LOG_KINDS: tuple[str, ...] = tuple(s.kind for s in LOG_RECORDS)
#: Log kinds other than engines', in rank order: a part of log lines with no engine's among them
#: takes the first of these it holds (NCCL before Ray before the device plugin before the kernel).
_LOG_ORDER: tuple[str, ...] = tuple(s.kind for s in LOG_RECORDS if s.line_test and s.family != "engine")
#: The engines' log kinds in rank order (a tie of line counts goes to the first).
_ENGINES: tuple[str, ...] = tuple(s.kind for s in LOG_RECORDS if s.kind in ENGINE_LOG_KINDS)

# -- start markers (tested on the stripped line), in the records' order ---------------------------
# Compiled on the first line recognised (:func:`_start_markers`): an audit given no evidence, the
# common case, never tests a marker, and compiling some 50 of them costs it 10-40 ms.


@functools.cache
def _start_markers() -> tuple[list[tuple[str, re.Pattern[str]]], frozenset[str]]:
    """(kind, compiled start marker) in the records' order, and the kinds whose marker is a whole
    line (``$``: see :data:`MAX_START_LINE`)."""
    start = [(s.kind, re.compile(s.start)) for s in SOURCES if s.start]
    return start, frozenset(k for k, r in start if r.pattern.endswith("$"))


#: Start markers are short lines: a longer line is tested on its first characters only, and never
#: for the kinds whose marker is a whole line (``$``), which no line this long can be (a kernel
#: command line is at most 4096 bytes). A 16 MB line then costs one pass, not one per pattern.
MAX_START_LINE = 8192
#: Kind -> the line that, directly before its start marker, is the output's first line (records' ``lead``).
_LEADS = {s.kind: re.compile(s.lead) for s in SOURCES if s.lead}
#: Kinds whose start marker repeats on every line (each line of ``sysctl -a`` is a marker).
_REPEATING = {s.kind for s in SOURCES if s.repeats}
#: Kinds whose output holds lines that look like a log or a failure signature (from the records).
_HOLDS_LOGS = {s.kind for s in SOURCES if s.holds_log_lines}
#: Kinds one of whose markers, inside a part of the key kind, continues it.
_CONTINUES = {"nvc_info": {"lscpu"}, "nvsmi_q": {"nvsmi_q_part"}, "nvsmi_qx": {"nvsmi_qx_part"}, "lspci_vvv": {"lspci"}, "collect_env": {"pip_freeze", "collect_env"}, "nvsmi_topo": {"nvsmi_p2p"}, "check_env": {"pip_freeze", "env"}}

# -- log lines: each log kind's own line test (its record's ``line_test``), then the fallbacks ------

@functools.cache
def _line_tests() -> tuple[tuple[str, Any, bool], ...]:
    """(kind, the parser's ``is_…_line`` function, whether its lines interleave with others') for
    every log record with a line test, in rank order; imported on the first line tested."""
    out = []
    for rec in LOG_RECORDS:
        if rec.line_test:
            mod, _, fn = rec.line_test.partition(":")
            out.append((rec.kind, getattr(importlib.import_module(mod), fn), rec.interleaves))
    return tuple(out)


#: A "package version" line of a listing pasted without ``pip list``'s header (``torch 2.3.0+cu118``).
_PKGVER = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]*\s+v?\d+\.\d+[\w.+!\-]*$")
#: Lines of a Python traceback (the header, a frame, an exception line), also behind the
#: ``[rank0]: `` prefix torch adds or the ``(Runner pid=16018) `` prefix Ray puts on an actor's output.
_TRACEBACK = re.compile(r"^(?:\[rank\d+\]: |\([A-Za-z_][\w ]{0,40}pid=\d+[^)]{0,40}\) )?"  # torch rank / Ray actor prefix
                        r"(?:Traceback \(most recent call last\):|\s+File \"[^\"]+\", line \d+|(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception): \S|nccl\w+Error: |ncclInvalidUsage: |Last error:$)")

# -- part separators ----------------------------------------------------------------------------
_QUOTE_PREFIX = re.compile(r"^\s*> ?")
_FENCE = re.compile(r"^(?:```|~~~)")
#: A shell prompt and its command. Every repeat before the command is bounded (user names and host
#: names are short, HOST_NAME_MAX is 64), so a long line that almost looks like a prompt is refused
#: after a bounded number of steps instead of one attempt per ``@`` (quadratic).
_PROMPT = re.compile(r"^(?:\$|#|>>>|[^\s@]{1,64}@[\w.\-]{1,255}(?::[^$#\s]{0,1024})?[$#]|\[[^\]@]{0,64}@[^\]]{0,1024}\][$#]|PS [^>]{0,1024}>)\s{1,16}(?P<cmd>\S.*)$")
#: The command of a shell prompt -> the kind it prints, from the records (``prompt``, tested in
#: ``prompt_rank`` order: ``nvidia-smi -q -x`` before ``nvidia-smi -q``, ``lspci -tv`` before ``lspci -v``).
#: Compiled on first use (as the start markers).
@functools.cache
def _prompt_hints() -> list[tuple[re.Pattern[str], str]]:
    return [(re.compile(s.prompt), s.kind) for s in sorted(SOURCES, key=lambda s: s.prompt_rank) if s.prompt]


CHUNK_BYTES = 1 << 20


def iter_raw_lines(f, start: int = 0, end: int | None = None):
    """(offset, line bytes with its newline) for the lines of binary file ``f`` in ``[start, end)``,
    read in :data:`CHUNK_BYTES` chunks. A line longer than :data:`MAX_LINE_BYTES` comes in pieces,
    so memory stays bounded by the chunk size whatever the file holds."""
    f.seek(start)
    pos = start
    rest = b""
    while end is None or pos + len(rest) < end:
        want = CHUNK_BYTES if end is None else min(CHUNK_BYTES, end - pos - len(rest))
        chunk = f.read(want)
        if not chunk:
            break
        buf = rest + chunk
        lines = buf.split(b"\n")
        rest = lines.pop()
        for ln in lines:
            yield pos, ln + b"\n"
            pos += len(ln) + 1
        while len(rest) > MAX_LINE_BYTES:
            yield pos, rest[:MAX_LINE_BYTES]
            pos += MAX_LINE_BYTES
            rest = rest[MAX_LINE_BYTES:]
    if rest:
        yield pos, rest


@dataclass
class EvidencePart:
    """One recognised output or log inside an evidence file: ``path`` and the byte range
    ``[start, end)``; ``kind`` the main kind (a key of :data:`KINDS`), ``kinds`` every kind it
    serves (an SGLang log with interleaved NCCL lines serves ``sglang_log`` and ``nccl_log``);
    ``first_line`` its 1-based first line in the file; ``counts`` lines per log kind."""

    path: Path
    index: int
    kind: str
    kinds: frozenset[str]
    start: int
    end: int
    first_line: int
    n_lines: int
    counts: dict[str, int] = field(default_factory=dict)
    multi: bool = False
    #: Name shown in the label when ``path`` is a spooled copy of a pipe (``/dev/stdin``, ``<(cmd)``).
    name: str | None = None
    #: Its lines carry the line numbers of ``cat -n`` (removed when the part is read).
    numbered: bool = False

    @property
    def label(self) -> str:
        """Evidence source label: ``evidence/<file name>`` (``#<line>`` when the file has several parts)."""
        base = f"evidence/{name_safe(self.name or self.path.name)}"
        return f"{base}#L{self.first_line}" if self.multi else base

    def iter_lines(self):
        """The part's lines, cleaned (no line ends, no ANSI codes), read from disk in 1 MiB chunks."""
        with open(self.path, "rb") as f:
            for _, raw in iter_raw_lines(f, self.start, self.end):
                line = clean_line(raw.decode("utf-8", "replace"))
                got = line_number(line) if self.numbered else None
                yield got[1] if got is not None else line

    def text(self, limit_bytes: int = 16 * 1024 * 1024) -> str:
        """The part as one normalised block (indentation a paste added removed); at most ``limit_bytes``."""
        with open(self.path, "rb") as f:
            f.seek(self.start)
            data = f.read(min(self.end - self.start, limit_bytes))
        return clean_text(decode(data), numbered=self.numbered)


@dataclass
class Unrecognized:
    """A file, or a stretch of one, that is none of the known kinds, and why."""

    path: Path
    reason: str
    first_line: int | None = None


@dataclass
class _Seg:
    start: int
    first_line: int
    kind: str | None = None
    hint: str | None = None
    n: int = 0
    content: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    vvv: int = 0
    family: str | None = None
    gap: bool = False
    numbered: bool = False


def start_kind(stripped: str) -> str | None:
    """The kind whose first line ``stripped`` looks like, or None.

    >>> start_kind("available: 1 nodes (0)")
    'numactl'
    >>> start_kind("GPU0\\tGPU1\\tCPU Affinity\\tNUMA Affinity")
    'nvsmi_topo'
    """
    c = stripped[:1]
    if not c:
        return None
    long = len(stripped) > MAX_START_LINE
    head = stripped[:MAX_START_LINE] if long else stripped
    start, whole_line = _start_markers()
    for kind, rx in start:
        if long and kind in whole_line:
            continue
        if rx.match(head):
            return kind
    return None


def log_kinds(line: str) -> tuple[str, ...]:
    """The log kinds a cleaned line belongs to (an SGLang line may carry an NCCL message).

    >>> log_kinds("node0:13571:13571 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0")
    ('nccl_log',)
    """
    s = line.lstrip()
    out = []
    taken = False
    for kind, test, interleaves in _line_tests():
        if (interleaves or not taken) and test(s):
            out.append(kind)
            taken = taken or not interleaves
    if out:
        return tuple(out)
    sk = line_kind(s)
    if sk is not None:
        return (sk,)
    if _TRACEBACK.match(line):
        return ("traceback",)
    return ()


def _output_behind_hash(stripped: str, line: str) -> bool:
    """Whether a line that starts with ``#`` is pasted output behind a shell comment sign (people
    annotate a session with ``# <what it printed>``) rather than a root prompt: it carries a
    component's message, a failure signature or a Python traceback/warning line, which no command
    line does.

    >>> _output_behind_hash("# /x/torch/cuda/__init__.py:52: UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 10010).", "")
    True
    >>> _output_behind_hash("# dmesg | grep -i NVRM", "")
    False
    """
    if not stripped.startswith("#"):
        return False
    rest = stripped[1:].strip()
    return bool(rest) and bool(line_kind(rest) or "traceback" in log_kinds(rest) or message_catalog().match_line(rest))


def _prompt_hint(stripped: str) -> str | None | bool:
    """For a shell prompt line: the kind its command produces (None if unknown); False when the
    line is not a prompt."""
    m = _PROMPT.match(stripped)
    if not m:
        return False
    cmd = m.group("cmd")
    for rx, kind in _prompt_hints():
        if rx.search(cmd):
            return kind
    return None


def _is_binary(head: bytes) -> bool:
    """Whether ``head`` is not text: more than 5 % control bytes once NUL bytes are left out.

    NULs alone do not make a file binary: a log rotated with ``copytruncate`` while the writer kept
    its offset, or a syslog written during a crash, holds runs of NULs between text lines (and the
    lines after them are the ones that matter); an executable or an archive has other control
    bytes besides."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return False
    head = head.replace(b"\x00", b"")
    if not head:
        return False
    bad = sum(1 for b in head if b < 9 or 13 < b < 27 or 27 < b < 32)
    return bad / len(head) > 0.05


#: Segment kinds :func:`_close` may still drop (``nvidia-smi -L``'s "GPU 0: … (UUID: …)" lines start an
#: ``nvsmi_nvlink`` segment that is no NVLink output without its link lines): catalog messages in
#: them are counted, so a paste of those lines and an error message is read as the message.
_TENTATIVE = frozenset({"nvsmi_nvlink"})


def _log_kind(logs: dict[str, int]) -> str | None:
    """The kind of a part of log lines: the engine with the most lines, else the first log kind of
    :data:`_LOG_ORDER` it holds; None for a part of none of them."""
    engine = max(_ENGINES, key=lambda k: logs.get(k, 0))
    if logs.get(engine):
        return engine
    return next((k for k in _LOG_ORDER if logs.get(k)), None)


def _close(seg: _Seg, end: int) -> tuple[str | None, frozenset[str]]:
    """Decide a finished segment's kind."""
    logs = {k: v for k, v in seg.counts.items() if k in LOG_KINDS and v}
    kind = seg.kind
    if kind == "lspci" and seg.vvv:
        kind = "lspci_vvv"
    if kind == "nvsmi_p2p" and seg.counts.get("_topo_legend") and not seg.counts.get("_p2p_legend"):
        kind = "nvsmi_topo"
    if kind == "nvsmi_nvlink" and not seg.counts.get("_link"):
        kind = None  # ``nvidia-smi -L`` also prints "GPU 0: … (UUID: …)"
    if kind is None:
        kind = _log_kind(logs)
    if kind is None:
        if logs.get("traceback") or logs.get("fragment"):
            kind = "traceback" if logs.get("traceback", 0) >= logs.get("fragment", 0) else "fragment"
        elif logs.get("messages"):
            kind = "messages"  # a log of no known format that carries catalog messages
        elif seg.hint and seg.content:
            kind = seg.hint
        elif seg.counts.get("_pkgver", 0) >= 2 and 2 * seg.counts["_pkgver"] >= seg.content:
            kind = "pip_text"  # "torch 2.3.0+cu118" lines without pip's header
    if kind is None:
        return None, frozenset()
    kinds = {kind}
    if kind in ("pip_freeze", "pip_text"):
        kinds.add("pip_list")
    for lk in LOG_KINDS:
        if logs.get(lk) and (kind in LOG_KINDS or kind in _HOLDS_LOGS):
            kinds.add(lk)
    return kind, frozenset(kinds)


def _head(f, limit: int = MAX_NUL_SKIP) -> bytes:
    """Up to :data:`SNIFF_BYTES` bytes of ``f`` from its first byte that is not NUL, looking at
    most ``limit`` bytes in (a file that starts with a run of NULs is judged by what follows);
    empty when there is none."""
    seen = 0
    while seen < limit:
        chunk = f.read(SNIFF_BYTES)
        if not chunk:
            return b""
        seen += len(chunk)
        text = chunk.lstrip(b"\x00")
        if text:
            return text + f.read(SNIFF_BYTES - len(text))
    return b""


def _sniff(p: Path, head: bytes) -> Unrecognized | None:
    """Why a file whose first bytes are ``head`` is not read as text (empty, UTF-16, binary), or None."""
    if not head.strip():
        return Unrecognized(p, "empty file (or only NUL bytes and blanks)")
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return Unrecognized(p, "UTF-16 text: save it as UTF-8")
    if _is_binary(head):
        return Unrecognized(p, "binary file, not text")
    return None


class _Splitter:
    """Cuts a file's lines into segments: a start marker of another kind, a shell prompt, a fence
    or a log of another family after some words ends the current segment. Keeps offsets and
    counters only."""

    def __init__(self) -> None:
        self.seg = _Seg(0, 1)
        self.done: list[tuple[_Seg, int]] = []
        self.numbers = LineNumbers()
        self.prev: tuple[int, int, str] | None = None  # (byte offset, line number, text) of the last content line

    def cut(self, end: int, nxt_start: int, nxt_line: int, hint: str | None = None) -> None:
        """End the current segment at ``end`` (kept when it has content) and start a new one."""
        if self.seg.content:
            self.done.append((self.seg, end))
        self.seg = _Seg(nxt_start, nxt_line, hint=hint)

    def feed(self, line_start: int, raw: bytes, lineno: int) -> None:
        """Take one raw line (``lineno`` 1-based, starting at byte ``line_start``)."""
        pos = line_start + len(raw)
        line = clean_line(raw.decode("utf-8", "replace") if lineno > 1 else decode(raw))
        if line[:1] in (" ", "\t") or line[:1].isdigit() or self.numbers.expect is not None:
            plain = self.numbers.feed(line)
            if plain is not line:
                line, self.seg.numbered = plain, True
        s = line.strip()
        if s.startswith(">") and not s.startswith(">>>"):  # a Markdown quote
            s = s[1:].strip()
            line = _QUOTE_PREFIX.sub("", line, count=1)
        if not s:
            self.seg.n += 1
            return
        if _FENCE.match(s):
            self.cut(line_start, pos, lineno + 1, hint=self.seg.hint if not self.seg.content else None)
            return
        if s[0] == "#" and start_kind(s) is not None:  # an output whose own lines start with "#" (nccl-tests), not a root prompt
            self._marker(start_kind(s) or "", s, line_start, lineno)
            self.seg.n += 1
            self.seg.content += 1
            return
        hint = _prompt_hint(s) if (s[0] in "$#>[P" or "@" in s[:64]) and not s.startswith(">>>") and not _output_behind_hash(s, line) else False
        if hint is not False:
            self.cut(line_start, pos, lineno + 1, hint=hint)
            return
        lk = log_kinds(line)
        sk = None if lk else start_kind(s)
        if sk is not None:
            self._marker(sk, s, line_start, lineno)
        elif lk:
            self._log(lk, line_start, lineno)
        elif (self.seg.kind is None or self.seg.kind in _TENTATIVE) and self.seg.family is None and message_catalog().match_line(s):
            # a known message in a format of no known kind (inside a known log, such a line stays the log's)
            self._log(("messages",), line_start, lineno)
        else:
            self._other(s, line, raw)
        self.seg.n += 1
        self.seg.content += 1
        self.prev = (line_start, lineno, s)

    def _marker(self, sk: str, s: str, line_start: int, lineno: int) -> None:
        """A start marker of kind ``sk``: it continues the current segment or begins a new one."""
        cur = self.seg.kind
        if cur is None and self.seg.hint == sk:  # the output the prompt's command prints, after a line of its own
            self.seg.kind = sk
            return
        same = cur is not None and (sk == cur and sk in _REPEATING or sk in _CONTINUES.get(cur, ()) or (cur == "lspci" and sk == "lspci"))
        if sk == "lspci_vvv" and cur in ("lspci", "lspci_vvv"):  # a link register inside a device block
            same = True
            self.seg.vvv += 1
        if cur == "collect_env" and sk in ("pip_freeze", "sysctl_all", "env"):
            same = True
        if cur == "nvsmi_qx" and sk == "nvsmi_qx" and not s.startswith("<?xml"):
            same = True
        if not same:
            lead = _LEADS.get(sk)
            if lead is not None and self.prev is not None and self.seg.content and lead.match(self.prev[2]):
                self._cut_before_lead(sk)
                return
            if self.seg.content or self.seg.kind is not None:
                self.cut(line_start, line_start, lineno)
            self.seg.kind = sk

    def _cut_before_lead(self, sk: str) -> None:
        """The last content line is the lead of ``sk``'s output (its first line): the new segment
        of kind ``sk`` begins at that line, the current one ends before it."""
        assert self.prev is not None
        at, ln, _ = self.prev
        moved = self.seg.first_line + self.seg.n - ln  # the lead line and the blank lines after it
        if self.seg.content > 1 or self.seg.kind is not None:
            self.seg.n -= moved
            self.seg.content -= 1
            self.cut(at, at, ln)
        self.seg.kind, self.seg.n, self.seg.content = sk, moved, 1

    def _log(self, lk: tuple[str, ...], line_start: int, lineno: int) -> None:
        """A log line of kinds ``lk``: counted; it begins a new segment after an output, or after
        words that separate it from a log of another family."""
        fam = "engine" if any(k in ENGINE_LOG_KINDS for k in lk) else lk[0]
        seg = self.seg
        if seg.kind is not None and seg.kind not in _HOLDS_LOGS and seg.content:
            self.cut(line_start, line_start, lineno)
        elif seg.family is not None and seg.gap and fam != seg.family:
            # separate pastes of different logs, with words between them
            self.cut(line_start, line_start, lineno)
        seg = self.seg
        if seg.family is None:
            seg.family = fam
        seg.gap = False
        for k in lk:
            seg.counts[k] += 1

    def _other(self, s: str, line: str, raw: bytes) -> None:
        """A line that is neither marker nor log line: the body of an output, or words between logs."""
        seg = self.seg
        if seg.family is not None:
            seg.gap = True
        if seg.kind == "lspci" and raw[:1] in (b"\t", b" ") and re.match(
                r"\s+(?:Subsystem|Control|Status|Capabilities|Kernel driver in use|Flags|Region|LnkCap|LnkSta|DevCtl|DevCap)\b", line):
            seg.vvv += 1
        elif seg.kind == "nvsmi_nvlink" and s.startswith("Link "):
            seg.counts["_link"] += 1
        elif seg.kind is None and _PKGVER.match(s):
            seg.counts["_pkgver"] += 1
        elif seg.kind in ("nvsmi_p2p", "nvsmi_topo"):
            if "= Status Ok" in s or s.startswith("CNS"):
                seg.counts["_p2p_legend"] += 1
            elif s.startswith(("SYS ", "NODE ", "PHB ", "PIX ", "NV# ")):
                seg.counts["_topo_legend"] += 1

    def close(self, end: int) -> list[tuple[_Seg, int]]:
        """Every segment with content and its end offset, the last one ending at ``end``."""
        if self.seg.content:
            self.done.append((self.seg, end))
        return self.done


def _assemble(p: Path, segs: list[tuple[_Seg, int]]) -> tuple[list[EvidencePart], list[Unrecognized]]:
    """Parts from the segments: each one's kind decided, a log continued by a segment of the same
    kind joined to it; stretches of no known kind longer than a few lines are unrecognised."""
    parts: list[EvidencePart] = []
    unknown: list[Unrecognized] = []
    for sg, end in segs:
        kind, kinds = _close(sg, end)
        if kind is None:
            if sg.content > 3:  # a sentence or two around pasted blocks is commentary, not evidence
                unknown.append(Unrecognized(p, "not a known output or log", sg.first_line))
            continue
        # a part of a kind right after one of the same log kind is one log
        if parts and kind in LOG_KINDS and parts[-1].kind == kind and parts[-1].end == sg.start:
            prev = parts[-1]
            prev.end = end
            prev.kinds = prev.kinds | kinds
            for k, v in sg.counts.items():
                prev.counts[k] = prev.counts.get(k, 0) + v
            prev.n_lines += sg.n
            prev.numbered = prev.numbered or sg.numbered
            continue
        parts.append(
            EvidencePart(p, len(parts), kind, kinds, sg.start, end, sg.first_line, sg.n,
                         {k: v for k, v in sg.counts.items() if not k.startswith("_")}, numbered=sg.numbered)
        )
    if len(parts) > 1:
        for part in parts:
            part.multi = True
    if not parts:
        unknown = [Unrecognized(p, "not a known output or log")]
    return parts, unknown


def scan_file(path: str | Path) -> tuple[list[EvidencePart], list[Unrecognized]]:
    """Split one evidence file into recognised parts, streaming it line by line.

    Returns (parts in file order, unrecognised stretches). An empty or binary file, or one that
    cannot be read, yields no part and one :class:`Unrecognized` naming the reason. Never raises
    for file content; OSError on open is reported the same way.
    """
    p = Path(path)
    try:
        f = open(p, "rb")
    except OSError as e:
        return [], [Unrecognized(p, f"cannot read ({e.strerror or e})")]
    with f:
        bad = _sniff(p, _head(f))
        if bad is not None:
            return [], [bad]
        splitter = _Splitter()
        pos = 0
        lineno = 0
        for line_start, raw in iter_raw_lines(f, 0, None):
            pos = line_start + len(raw)
            lineno += 1
            splitter.feed(line_start, raw, lineno)
        segs = splitter.close(pos)
    return _assemble(p, segs)
