"""The catalog of failure signatures (``infergap/data/signatures.yaml``): loading, validation and
matching.

Each :class:`Signature` is data: what to look for (a message that people paste, an NVIDIA Xid
code, or a version range of NCCL, the driver, CUDA, torch, vLLM or SGLang), the finding it yields
(check id, severity, fix kind, fix, revert), why, and the public thread or release note that
established it. Nothing in the file is executed; patterns are Python regular expressions searched
in each cleaned line, after a literal pre-filter (``contains``) that keeps a 200 MB log fast.

:func:`scan_lines` matches message signatures over a stream of lines; :func:`version_issues`
matches version signatures; :func:`xid_signature` gives the entry for an Xid code.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from infergap import datafile
from infergap.errors import UserError
from infergap.findings import SEVERITY_ORDER, FixKind, Severity

#: Log kinds a fragment matching a signature may be recognised as (keys of ``recognize.KINDS``).
FragmentKind = Literal["nccl_log", "dmesg", "vllm_log", "sglang_log", "traceback", "fragment"]
#: Conditions a message signature may need besides its line (evaluated by the evidence investigator):
#: ``multi_node`` the NCCL log spans more than one host; ``rdma_present`` an RDMA NIC is in the
#: evidence or on the host; ``multi_node_rdma`` both of these; ``peer_result_false`` a REPL printed
#: 0/False after the peer query.
Condition = Literal["multi_node", "rdma_present", "multi_node_rdma", "peer_result_false"]
Component = Literal["nccl", "nccl_cuda", "driver", "cuda", "torch", "vllm", "sglang", "nvidia-nccl-cu11", "nvidia-nccl-cu12"]

#: Example lines kept per matched signature and evidence part.
MAX_EXAMPLES = 3


def version_key(text: str) -> tuple[int, ...]:
    """Numeric key of a version string: ``2.26.2`` → (2, 26, 2); ``550.54.15`` → (550, 54, 15);
    ``0.8.0rc2`` → (0, 8, 0, 2) (a pre-release sorts as its numbers; an approximation).

    >>> version_key("2.25.1+cuda12.8") < version_key("2.26.2")
    True
    """
    head = re.split(r"[+ ]", str(text).strip(), maxsplit=1)[0]
    nums = [int(x) for x in re.findall(r"\d+", head)]
    return tuple(nums[:4]) if nums else (0,)


def in_range(version: str, spec: str) -> bool:
    """Whether ``version`` lies in ``spec``: comma-separated ``>=A``, ``>A``, ``<B``, ``<=B``,
    ``==A`` (``==2.25`` matches every 2.25.x), or ``*`` for any version.

    >>> in_range("2.25.1", ">=2.25,<2.26.2"), in_range("2.26.2", ">=2.25,<2.26.2"), in_range("2.25.1", "==2.25")
    (True, False, True)
    """
    v = version_key(version)
    for part in filter(None, (p.strip() for p in spec.split(","))):
        if part == "*":
            continue
        m = re.fullmatch(r"(>=|<=|==|>|<)\s*(\S+)", part)
        if not m:
            raise ValueError(f"version range {spec!r}: expected >=A, <B, ==A or *")
        op, ref = m.group(1), version_key(m.group(2))
        if op == "==":
            if v[: len(ref)] != ref:
                return False
            continue
        # compare on the reference's length so that "<2.26" includes 2.25.9 and excludes 2.26.0
        cur = v[: len(ref)] + (0,) * max(0, len(ref) - len(v))
        ok = {">=": cur >= ref, ">": cur > ref, "<": cur < ref, "<=": cur <= ref}[op]
        if not ok:
            return False
    return True


class SignatureFinding(BaseModel):
    """The finding a signature yields: check id, severity, fix kind, title, the fix and its revert."""

    model_config = ConfigDict(extra="forbid")

    id: str
    severity: Severity
    fix_kind: FixKind
    title: str
    fix: list[str] = Field(default_factory=list)
    revert: list[str] = Field(default_factory=list)
    note: str | None = None


#: Recovery actions of an Xid 154 line that need no reset (the values NVIDIA's Xid catalog lists
#: for Xid 154): nothing to do, or drain peer-to-peer traffic.
_NO_RESET_ACTIONS = {"None": Severity.P2, "Drain P2P": Severity.P1}


class XidCode(BaseModel):
    """One NVIDIA Xid code as NVIDIA's Xid catalog classifies it: ``name`` the catalog's mnemonic,
    ``severity`` from its immediate action (P0 a GPU reset or machine restart, P1 restart the
    application, P2 no action), ``reset`` whether the GPU takes no more work until it is reset,
    ``action`` what to do, ``source`` the public document; ``by_message`` when the line's own
    ``Fatal``/``Nonfatal`` word decides (Xid 144-150), ``by_recovery_action`` when the recovery
    action the line names decides (Xid 154)."""

    model_config = ConfigDict(extra="forbid")

    code: int = Field(ge=1)
    name: str
    meaning: str
    severity: Severity
    reset: bool
    action: str
    source: str
    by_message: bool = False
    by_recovery_action: bool = False

    def judged(self, fatal: bool | None, recovery: str | None = None) -> tuple[Severity, bool]:
        """(severity, reset needed) of one event of this code whose line said ``fatal`` (True
        ``Fatal``, False ``Nonfatal``, None neither) and named the recovery action ``recovery``.
        Only ``by_message`` codes read the word: Fatal is P0 with a reset, Nonfatal P2 without
        (NVIDIA's decode table for Xid 144-150). Only ``by_recovery_action`` codes read the action
        (Xid 154): ``None`` is P2 and ``Drain P2P`` P1, neither with a reset; the others (a reset or
        a reboot) keep the row's severity.

        >>> XidCode(code=145, name="NVLINK_RLW_ERROR", meaning="m", severity="P1", reset=False, action="a",
        ...         source="https://x", by_message=True).judged(False)
        (<Severity.P2: 'P2'>, False)
        """
        if self.by_message and fatal is not None:
            return (Severity.P0, True) if fatal else (Severity.P2, False)
        if self.by_recovery_action and recovery in _NO_RESET_ACTIONS:
            return _NO_RESET_ACTIONS[recovery], False
        return self.severity, self.reset


class VersionMatch(BaseModel):
    """A version range of one component; ``gpu_sm`` limits it to GPUs of those compute
    capabilities (``120`` for sm_120)."""

    model_config = ConfigDict(extra="forbid")

    component: Component
    range: str
    gpu_sm: list[int] = Field(default_factory=list)


class Explains(BaseModel):
    """What follows from a signature's fault in the same evidence (one incident): the Xid codes and
    the other entries whose findings are its consequences, and the public document that says so."""

    model_config = ConfigDict(extra="forbid")

    xid: list[int] = Field(default_factory=list)
    signatures: list[str] = Field(default_factory=list)
    source: str


class Signature(BaseModel):
    """One catalog entry (field meanings in the header of ``signatures.yaml``)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    contains: list[str] = Field(default_factory=list)
    pattern: str | None = None
    xid: list[XidCode] = Field(default_factory=list)
    version: VersionMatch | None = None
    kind: FragmentKind | None = None
    when: Condition | None = None
    #: A hit is itself evidence of this (``rdma_device``: an RDMA NIC exists), for ``when`` of other entries.
    shows: Literal["rdma_device"] | None = None
    read_by: Literal["engine_log", "nccl_log"] | None = None
    explains: Explains | None = None
    finding: SignatureFinding
    why: str
    sources: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_trigger(self) -> "Signature":
        n = sum(bool(x) for x in (self.contains, self.xid, self.version))
        if n != 1:
            raise ValueError(f"signature {self.id}: needs exactly one of contains (with an optional pattern), xid, version")
        if self.pattern:
            re.compile(self.pattern)
        if self.version:
            in_range("0", self.version.range)  # validates the range syntax
        for s in self.sources + [x.source for x in self.xid] + ([self.explains.source] if self.explains else []):
            if not s.startswith("https://"):
                raise ValueError(f"signature {self.id}: source {s!r} is not a public https URL")
        if self.xid:
            worst = min((x.severity for x in self.xid), key=lambda v: SEVERITY_ORDER[v])
            if worst != self.finding.severity:
                raise ValueError(f"signature {self.id}: finding severity {self.finding.severity.value} is not that of its worst Xid ({worst.value})")
        return self

    @functools.cached_property
    def regex(self) -> re.Pattern[str] | None:
        """The compiled ``pattern`` (None when the literal is enough)."""
        return re.compile(self.pattern) if self.pattern else None

    def match_line(self, line: str) -> bool:
        """Whether a cleaned line shows this message signature."""
        if not any(c in line for c in self.contains):
            return False
        return self.regex is None or self.regex.search(line) is not None


class Catalog(BaseModel):
    """The whole catalog, with the literal pre-filter of all message signatures compiled once."""

    signatures: list[Signature]

    @functools.cached_property
    def messages(self) -> list[Signature]:
        """Signatures matched on log lines."""
        return [s for s in self.signatures if s.contains]

    @functools.cached_property
    def prefilter(self) -> re.Pattern[str]:
        """One regular expression of every ``contains`` literal: a line that misses it matches no signature."""
        lits = sorted({c for s in self.messages for c in s.contains}, key=len, reverse=True)
        return re.compile("|".join(re.escape(x) for x in lits)) if lits else re.compile(r"(?!)")

    def by_id(self, sid: str) -> Signature:
        """The entry with id ``sid`` (KeyError when absent)."""
        for s in self.signatures:
            if s.id == sid:
                return s
        raise KeyError(sid)


def load_catalog(path: str | Path | None = None) -> Catalog:
    """Load and validate the catalog (the packaged ``signatures.yaml`` when ``path`` is None).

    Raises :class:`infergap.errors.UserError` with one line naming the file and the problem for an
    unreadable file, bad YAML, a missing field, a bad regular expression or version range, a
    source that is not a public URL, or a duplicated id.
    """
    where = str(path) if path else "infergap/data/signatures.yaml"
    data: Any = datafile.read(path) if path else datafile.packaged("signatures.yaml")
    if not isinstance(data, dict) or not isinstance(data.get("signatures"), list):
        raise UserError(f"{where}: expected a mapping with a 'signatures' list")
    try:
        cat = Catalog(signatures=data["signatures"])
    except (ValidationError, re.error) as e:
        first = str(e).splitlines()
        raise UserError(f"{where}: {' '.join(first[:3])}") from None
    seen: set[str] = set()
    codes: set[int] = set()
    for s in cat.signatures:
        if s.id in seen:
            raise UserError(f"{where}: signature id {s.id!r} appears twice")
        seen.add(s.id)
        for x in s.xid:
            if x.code in codes:
                raise UserError(f"{where}: Xid {x.code} is classified twice")
            codes.add(x.code)
    return cat


@functools.lru_cache(maxsize=1)
def catalog() -> Catalog:
    """The packaged catalog, loaded once per process."""
    return load_catalog()


class SignatureHit(BaseModel):
    """Lines of one evidence part that matched one message signature."""

    model_config = ConfigDict(defer_build=True)  # schema built on first use, not at import (start time)

    signature: str
    count: int = 0
    examples: list[str] = Field(default_factory=list)


def scan_lines(lines: Iterable[str], cat: Catalog | None = None) -> dict[str, SignatureHit]:
    """Match every message signature of ``cat`` over ``lines`` (cleaned text), streaming.

    Returns signature id → hit (count and the first :data:`MAX_EXAMPLES` lines, cut at 300
    characters). Memory is bounded by the catalog's size, not the input's.

    >>> hits = scan_lines(["x NCCL WARN Error while creating shared memory segment /dev/shm/nccl-AbC (size 9637888)"])
    >>> sorted(hits)
    ['nccl.shm_create']
    """
    cat = cat or catalog()
    pre = cat.prefilter
    out: dict[str, SignatureHit] = {}
    for line in lines:
        if not pre.search(line):
            continue
        for s in cat.messages:
            if s.match_line(line):
                hit = out.setdefault(s.id, SignatureHit(signature=s.id))
                hit.count += 1
                if len(hit.examples) < MAX_EXAMPLES:
                    hit.examples.append(line.strip()[:300])
    return out


def line_kind(line: str, cat: Catalog | None = None) -> str | None:
    """The fragment kind of a line matching a message signature that names one, else None
    (a bare vLLM preemption warning is a ``vllm_log`` line)."""
    cat = cat or catalog()
    if not cat.prefilter.search(line):
        return None
    for s in cat.messages:
        if s.kind and s.match_line(line):
            return s.kind
    return None


def version_issues(component: str, version: str, gpu_sm: Iterable[int] = (), cat: Catalog | None = None) -> list[tuple[Signature, bool]]:
    """Version signatures of ``component`` whose range holds ``version``, each with whether it
    certainly applies: an entry limited to some GPU architectures (``gpu_sm``) applies when one of
    the given GPUs has one of them, and is returned with False when no GPU is known."""
    cat = cat or catalog()
    sms = set(gpu_sm)
    out = []
    for s in cat.signatures:
        v = s.version
        if v is None or v.component != component or not in_range(version, v.range):
            continue
        if v.gpu_sm:
            if sms and not (sms & set(v.gpu_sm)):
                continue
            out.append((s, bool(sms)))
        else:
            out.append((s, True))
    return out


def checked_against(component: str, cat: Catalog | None = None) -> int:
    """How many version signatures the catalog holds for ``component`` (shown with an ok version)."""
    cat = cat or catalog()
    return sum(1 for s in cat.signatures if s.version and s.version.component == component)


def xid_code(code: int, cat: Catalog | None = None) -> tuple[Signature, XidCode] | None:
    """The catalog entry (the kind of Xid) and the row classifying NVIDIA Xid ``code``, or None
    for a code the catalog does not hold.

    >>> sig, row = xid_code(94)
    >>> sig.id, row.name, row.severity.value, row.reset
    ('xid.memory', 'ROBUST_CHANNEL_CONTAINED_ERROR', 'P1', False)
    """
    cat = cat or catalog()
    for s in cat.signatures:
        for x in s.xid:
            if x.code == code:
                return s, x
    return None


def xid_signature(code: int, cat: Catalog | None = None) -> Signature | None:
    """The catalog entry for NVIDIA Xid ``code``, or None."""
    hit = xid_code(code, cat)
    return hit[0] if hit else None
