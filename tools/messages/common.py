"""Shared helpers of the message-catalog mining scripts (``tools/messages/mine_<component>.py``).

The catalog format is described in ``src/infergap/data/messages/README.md``. This module turns an
upstream log template into a bounded regex (:func:`template_pattern`), renders a sample line from it
(:func:`render_sample`, used by the tests), finds log call sites in C/C++, Python and Go sources,
classifies a template by keyword rules (:func:`classify`), builds stable ids (:func:`make_id`),
merges curated knowledge (:func:`merge_curated`) and writes a catalog (:func:`write_catalog`).

>>> template_pattern("NET/IB : No device found.", "printf")
'NET/IB\\\\s{1,8}:\\\\s{1,8}No\\\\s{1,8}device\\\\s{1,8}found\\\\.'
>>> import re
>>> m = re.search(template_pattern("Found ulimit of %s and failed", "percent"), "x Found ulimit of 20000 and failed")
>>> m.group("a1")
'20000'
>>> classify("NET/IB : No device found.")
'network_fallback'
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

if "infergap" not in sys.modules:  # run as a script: the package lives in src/
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from infergap.messages.template import (  # noqa: E402,F401  (the shared template parser)
    CAPTURE, CLASSES, LEVELS, MAX_LINE, SAMPLE, STR_MAX, STYLES, Piece, key_words, longest_literal, parse_template,
    pieces_pattern, render_sample, template_pattern, _matchable_line,
)

# ------------------------------------------------------------------------------------------------
# Keyword classification

#: Class rules, tried in order; the first whose regex matches the template (case-insensitive)
#: gives the class. Order matters: a network fallback that mentions memory registration is still
#: a network matter, a refusal of peer access is P2P before it is a generic "not supported".
CLASS_RULES: tuple[tuple[str, str], ...] = (
    ("limit", r"ulimit|rlimit|open files|memlock|locked memory|/dev/shm|shared memory segment|"
              r"shm_open|\bshm\b.{0,40}(size|space|small|full|enough)|no space left|too many open|"
              r"RLIMIT|resource temporarily unavailable|shared memory (file|segment)|extend .{0,20} to .{0,10} bytes"),
    ("driver_cuda_mismatch", r"driver version|insufficient driver|driver.{0,30}(too old|older|newer|"
                             r"mismatch|not compatible|incompatib)|cuda version|compute capability|"
                             r"cuda driver|libcuda|libnvidia-ml|NVML.{0,40}(version|mismatch|not found)|"
                             r"forward compat|unsupported (ptx|toolchain)|no kernel image|ptx|cuda failure|PFN functions|"
                             r"cudaArch|\bsm_?\d\d\b.{0,20}(capable|required|support)|version mismatch|"
                             r"mismatched .{0,20}version|wrong version|dlsym|dlvsym|dlopen"),
    ("network_fallback", r"\bnet/|\bib\b|infiniband|roce|ibv_|verbs|\brdma\b|gdr|gpu ?direct|"
                         r"socket|interface|ncclnet|net plugin|collnet|bootstrap|\bnic\b|\bhca\b|"
                         r"\bport\b|ethernet|tcp|connect(ion)? (refused|reset|timed out)|connect to|address info|"
                         r"\bnet\b|TOPO/NET|\bNICs?\b|sharp|listen ?sock|accept failed|\bpoll failed"),
    ("memory_kv", r"out of memory|\boom\b|kv[ _-]?cache|cache blocks|gpu_memory_utilization|"
                  r"\bvram\b|memory (usage|pressure|limit|fragment|leak|exhaust|estimate)|"
                  r"(cuda|device|host|gpu|pinned) memory|\balloc|cudaMalloc|cuMemAlloc|"
                  r"insufficient memory|not enough memory|swap space|preempt|\bmalloc|calloc|mmap|munmap|"
                  r"could not map|posix_memalign|out of room|register(ed)? (memory|buffer)|buffer registration"),
    ("p2p_refused", r"\bp2p\b|peer[- ]?to[- ]?peer|peer access|nvlink|cuda ?ipc|\bipc\b|cumem|"
                    r"nvls|multicast|\bnvswitch\b|fabric manager|imex|peer with device"),
    ("device_not_visible", r"no (cuda|gpu|nvidia)[- ]?(capable )?(device|gpu)|no devices? (were |was )?found|"
                           r"CUDA_VISIBLE_DEVICES|invalid device|device (not|is not) (found|visible|"
                           r"available)|gpu.{0,30}(not (found|detected|visible)|lost|fallen off)|"
                           r"failed to (detect|discover|enumerate)|device.{0,20}unavailable|"
                           r"nvidia-smi.{0,40}(fail|not found)|no gpus?\b|nvml\w*\(.{0,40}\) failed|duplicate gpu|"
                           r"(set|create) cuda (device|context)|cuda context"),
    ("crash", r"watchdog|timed out|timeout|\bhang|abort|segmentation|sigsegv|core dump|illegal (memory|"
              r"address|instruction)|unhandled|fatal|terminat|crash|assert|exception|corrupt|"
              r"\bxid\b|\becc\b|uncorrectable|desync|\bnan\b|unrecoverable|killed"),
    ("backend_fallback", r"fall(ing)? ?back|fallback|sub-?optimal|not (available|supported|enabled)|"
                         r"is disabled|disabling|disabled because|unsupported|instead of|will be slow|"
                         r"performance (may|will|might)|slower|using .{0,40} instead|not (be )?used"),
    ("config", r"environment variable|\benv\b|invalid (value|argument|config|setting)|ignor(e|ing)|"
               r"deprecated|config|setting|option|parameter|NCCL_[A-Z_]+|must be|should be|expected|"
               r"xml|topology file|tuning|unrecognized|profiler"),
    ("internal", r"internal|unknown|invalid|not (a )?valid|already|nonexistent|mismatch|out of bounds|"
                 r"too many|exceeds|garbage|improper|not allowed|must either|without a matching|\bnull\b|"
                 r"not in a group|could ?n[o']t find|cannot find|not found|can't find|loop|failed|error|"
                 r"could not|unable|cannot"),
)
_CLASS_RX = tuple((c, re.compile(rx, re.IGNORECASE)) for c, rx in CLASS_RULES)


def classify(template: str, default: str = "informational") -> str:
    """Class of a message from its template by :data:`CLASS_RULES` (first match); ``default`` if none."""
    for cls, rx in _CLASS_RX:
        if rx.search(template):
            return cls
    return default


_CLASS_MEANING = {
    "network_fallback": "a problem with the network transport or its setup",
    "p2p_refused": "GPU peer-to-peer, NVLink or inter-process GPU memory sharing is refused or failing",
    "memory_kv": "a GPU or host memory (or KV cache) allocation or limit",
    "driver_cuda_mismatch": "the NVIDIA driver, CUDA version or GPU architecture does not fit",
    "device_not_visible": "a GPU is missing, not visible or not usable by this process",
    "limit": "an operating-system limit (open files, locked memory, /dev/shm) is reached or too small",
    "backend_fallback": "a faster path was not used: a backend, kernel or feature is disabled or fell back",
    "crash": "a fatal condition: a hang, timeout, abort or hardware error",
    "config": "a setting or environment variable is invalid, ignored or conflicting",
    "internal": "an internal consistency check failed or the calling program misused the API (not a host setting; "
                "an earlier warning or the caller's own error usually names the cause)",
    "informational": "a status report",
}


def generated_meaning(label: str, cls: str, level: str, template: str) -> str:
    """One-line meaning for an entry without a curated one: who says it, how loud, what class.

    ``label`` the component's name as a user knows it ("NCCL"). The template itself follows so a
    reader sees what was said even without a person's explanation.
    """
    loud = {"fatal": "fatal error", "error": "error", "warn": "warning", "info": "note"}[level]
    text = " ".join(template.split())
    if len(text) > 160:
        text = text[:157] + "..."
    return f"{label} {loud} ({_CLASS_MEANING[cls]}): {text}"


# ------------------------------------------------------------------------------------------------
# Ids

_STOP = {"the", "a", "an", "of", "to", "for", "in", "on", "is", "and", "or", "with", "be", "this",
         "that", "it", "at", "by", "from", "as", "are", "was", "not"}


def slug(template: str, style: str = "printf", words: int = 5) -> str:
    """Stable slug from the first significant words of the template's literal text."""
    pieces = parse_template(_matchable_line(template), style) if style != "slog" else [Piece(template)]
    text = " ".join(p.text for p in pieces if not p.kind)
    toks = [t.lower() for t in re.findall(r"[A-Za-z][A-Za-z0-9]*", text)]
    keep = [t for t in toks if t not in _STOP] or toks or ["message"]
    return "_".join(keep[:words])[:60]


def make_id(component: str, area: str, template: str, style: str, taken: set[str]) -> str:
    """``component.area.slug`` unique within ``taken`` (which it updates): ``_2``, ``_3`` on collision."""
    area = re.sub(r"\W+", "_", area.lower()).strip("_") or "core"
    base = f"{component}.{area}.{slug(template, style)}"
    out, k = base, 1
    while out in taken:
        k += 1
        out = f"{base}_{k}"
    taken.add(out)
    return out


# ------------------------------------------------------------------------------------------------
# Entries, curated merge, writing


@dataclass
class Entry:
    """One catalog message before it is written (fields as in the README)."""

    id: str
    level: str
    template: str
    where: str
    style: str = "printf"
    cls: str = "informational"
    meaning: str = ""
    check: str | None = None
    severity: str | None = None
    more: str | None = None
    sites: int = 1
    also: list[str] = field(default_factory=list)
    curated: bool = False
    attrs: list[str] = field(default_factory=list)
    code: int | None = None
    name: str | None = None
    #: the releases whose source carries this template, mined one first (``--also-tag``); empty
    #: when only the header's tag was mined
    tags: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The entry as written to the catalog (optional fields only when set)."""
        d: dict[str, Any] = {"id": self.id, "level": self.level}
        if self.name is not None:
            d["name"] = self.name
        if self.code is not None:
            d["code"] = self.code
        d["template"] = self.template
        d["style"] = self.style
        if self.attrs:
            d["attrs"] = list(self.attrs)
        d["pattern"] = template_pattern(self.template, self.style, self.attrs)
        d["where"] = self.where
        if self.sites > 1:
            d["sites"] = self.sites
        if self.also:
            d["also"] = self.also[:10]
        if self.tags:
            d["tags"] = list(self.tags)
        d["class"] = self.cls
        d["meaning"] = self.meaning
        for k in ("check", "severity", "more"):
            if getattr(self, k):
                d[k] = getattr(self, k)
        if self.curated:
            d["curated"] = True
        return d


def dedupe(entries: Iterable[Entry]) -> list[Entry]:
    """One entry per (template, style): later call sites counted in ``sites`` and listed in ``also``.

    The loudest level of the sites is kept (fatal > error > warn > info).
    """
    out: dict[tuple[str, str], Entry] = {}
    for e in entries:
        key = (" ".join(e.template.split()), e.style)
        if key not in out:
            out[key] = e
            continue
        first = out[key]
        first.sites += e.sites
        first.also.append(e.where)
        if LEVELS.index(e.level) < LEVELS.index(first.level):
            first.level = e.level
    return list(out.values())


def load_curated(path: Path) -> dict[str, dict[str, Any]]:
    """The curated file (id → fields) or {} when it does not exist. Raises ValueError on bad fields."""
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    allowed = {"meaning", "class", "check", "severity", "more"}
    for key, val in data.items():
        bad = set(val or {}) - allowed
        if bad:
            raise ValueError(f"{path}: {key}: unknown field(s) {sorted(bad)}")
        if (val or {}).get("class") not in (None, *CLASSES):
            raise ValueError(f"{path}: {key}: unknown class {val['class']!r}")
    return data


def merge_curated(entries: list[Entry], curated: dict[str, dict[str, Any]], label: str) -> list[str]:
    """Apply curated fields by id and generate the missing meanings; returns curated ids not found."""
    by_id = {e.id: e for e in entries}
    for key, val in curated.items():
        e = by_id.get(key)
        if e is None:
            continue
        val = val or {}
        e.cls = val.get("class", e.cls)
        for k in ("check", "severity", "more"):
            if val.get(k):
                setattr(e, k, val[k])
        if val.get("meaning"):
            e.meaning, e.curated = val["meaning"], True
    for e in entries:
        if not e.meaning:
            e.meaning = generated_meaning(label, e.cls, e.level, e.template)
    return sorted(set(curated) - set(by_id))


def write_catalog(path: Path, header: dict[str, Any], entries: list[Entry]) -> None:
    """Write the catalog YAML: ``header`` (component, upstream, mined_by, call_sites, …) then messages.

    Entries keep their order (the scripts sort by upstream location); raises ValueError on a
    duplicate id or an invalid level/class/style.
    """
    seen: set[str] = set()
    for e in entries:
        if e.id in seen:
            raise ValueError(f"duplicate id {e.id}")
        seen.add(e.id)
        if e.level not in LEVELS or e.cls not in CLASSES or e.style not in STYLES:
            raise ValueError(f"{e.id}: bad level/class/style {e.level}/{e.cls}/{e.style}")
    doc = dict(header)
    doc["messages"] = [e.to_dict() for e in entries]
    text = "# Written by %s: do not edit by hand (curated knowledge: tools/messages/curated/).\n" % (
        header.get("mined_by", "a mining script"))
    text += yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100, default_flow_style=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def union_tags(main: list[Entry], tag: str, other: list[Entry], other_tag: str) -> list[Entry]:
    """``main`` (mined at ``tag``) with ``other`` (the same component mined at ``other_tag``)
    merged in: a template both releases print is one entry whose ``tags`` name both; a template
    only ``other`` prints is added with ``tags: [other_tag]`` (its id kept unless ``main`` holds it,
    then suffixed with the tag), so a line an older release prints is read too. ``main``'s entries
    keep their order; the others follow in theirs. Entries of ``main`` are changed in place."""
    by_tmpl = {(e.template, e.style): e for e in main}
    taken = {e.id for e in main}
    for e in main:
        e.tags = e.tags or [tag]
    out = list(main)
    suffix = re.sub(r"\W+", "_", other_tag).strip("_")
    for o in other:
        hit = by_tmpl.get((o.template, o.style))
        if hit is not None:
            if other_tag not in hit.tags:
                hit.tags.append(other_tag)
            continue
        if o.id in taken:
            base = f"{o.id}_{suffix}"
            o.id, k = base, 1
            while o.id in taken:
                k += 1
                o.id = f"{base}_{k}"
        taken.add(o.id)
        o.tags = [other_tag]
        by_tmpl[(o.template, o.style)] = o
        out.append(o)
    return out


def sites_by_level(entries: Iterable[Entry]) -> dict[str, int]:
    """Call sites per level (fatal, error, warn, info) over ``entries`` (their ``sites`` counts)."""
    out = dict.fromkeys(LEVELS, 0)
    for e in entries:
        out[e.level] += e.sites
    return out


# ------------------------------------------------------------------------------------------------
# Reading upstream sources


class Checkout:
    """Files of an upstream source at a tag: a git repository (bare or not) or a plain directory.

    ``Checkout(path, tag)``: with a git repository, files are read with ``git show tag:path``
    (timeout 60 s); a plain directory (files assembled for one release) is read as is and ``tag``
    is only recorded. Raises ValueError when the path is neither or the tag is unknown.
    """

    def __init__(self, path: str | Path, tag: str) -> None:
        self.path, self.tag = Path(path), tag
        self.git = self._is_git()
        self.commit = self._git("rev-parse", f"{tag}^{{commit}}").strip() if self.git else None

    def _is_git(self) -> bool:
        if not self.path.is_dir():
            raise ValueError(f"{self.path}: not a directory")
        try:
            r = subprocess.run(["git", "--git-dir", str(self._gitdir()), "rev-parse", "--git-dir"],
                               capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return r.returncode == 0

    def _gitdir(self) -> Path:
        return self.path / ".git" if (self.path / ".git").exists() else self.path

    def _git(self, *args: str) -> str:
        r = subprocess.run(["git", "--git-dir", str(self._gitdir()), *args], capture_output=True,
                           timeout=120, check=False)
        if r.returncode != 0:
            raise ValueError(f"{self.path}: git {' '.join(args)}: {r.stderr.decode(errors='replace').strip()}")
        return r.stdout.decode("utf-8", errors="replace")

    def files(self, under: str = "", suffixes: tuple[str, ...] = ()) -> list[str]:
        """Paths (relative, sorted) under ``under`` ending in one of ``suffixes`` (all when empty)."""
        if self.git:
            names = self._git("ls-tree", "-r", "--name-only", self.tag, "--", under or ".").splitlines()
        else:
            root = self.path / under if under else self.path
            names = [str(p.relative_to(self.path)) for p in root.rglob("*") if p.is_file()]
        return sorted(n for n in names if not suffixes or n.endswith(suffixes))

    def read(self, rel: str) -> str:
        """Text of one file at the tag (UTF-8, undecodable bytes replaced)."""
        if self.git:
            return self._git("show", f"{self.tag}:{rel}")
        return (self.path / rel).read_text(encoding="utf-8", errors="replace")


def upstream_header(repo: str, co: Checkout, files: list[str] | None = None) -> dict[str, Any]:
    """The ``upstream`` header mapping: repo, tag, and commit (git) or the files read (directory)."""
    up: dict[str, Any] = {"repo": repo, "tag": co.tag}
    if co.commit:
        up["commit"] = co.commit
    elif files:
        up["files"] = files
    return up


# --- C and C++ ---------------------------------------------------------------------------------

_C_STR = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_PRI = re.compile(r'"\s*PRI([diouxX])(8|16|32|64|PTR|MAX)\s*"')


def line_of(text: str, offset: int) -> int:
    """1-based line number of ``offset`` in ``text``."""
    return text.count("\n", 0, offset) + 1


def strip_c_comments(text: str) -> str:
    """``text`` with C/C++ comments blanked (same length and line breaks, strings kept)."""
    def blank(m: re.Match[str]) -> str:
        s = m.group(0)
        return s if s.startswith('"') or s.startswith("'") else re.sub(r"[^\n]", " ", s)

    return re.sub(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|//[^\n]*|/\*.*?\*/', blank, text, flags=re.S)


def call_args(text: str, open_paren: int) -> tuple[str, int] | None:
    """The text between the parenthesis at ``open_paren`` and its match, and the end offset.

    Strings and character literals are skipped; None when unbalanced within 20 000 characters.
    """
    depth, i, end = 0, open_paren, min(len(text), open_paren + 20000)
    while i < end:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < end and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return text[open_paren + 1:i], i + 1
        i += 1
    return None


def split_args(args: str) -> list[str]:
    """Top-level comma split of a C/Python argument list (strings and brackets respected)."""
    out, depth, cur, i = [], 0, [], 0
    while i < len(args):
        c = args[i]
        if c in "\"'":
            j = i + 1
            while j < len(args) and args[j] != c:
                j += 2 if args[j] == "\\" else 1
            cur.append(args[i:j + 1])
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def c_unescape(s: str) -> str:
    """C string-literal escapes (``\\n``, ``\\t``, ``\\"``, ``\\\\``) resolved."""
    return re.sub(r'\\(["\\\'nt])', lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), s)


def c_string(expr: str, macro_args: bool = False) -> str | None:
    """The format string of a C expression made only of adjacent string literals and ``PRI*`` macros.

    ``"a %" PRIu64 " b"`` → ``a %lu b``. None when the expression holds anything else (a variable,
    a call): such a call site has no fixed template. With ``macro_args``, a bare identifier between
    two literals (a macro parameter: ``"Call to " name " failed"``) counts as ``%s``.
    """
    e = re.sub(r"\\\n", "", expr)  # backslash-newline: removed before anything else (C phase 2)
    e = _PRI.sub(lambda m: ("lu" if m.group(1) != "X" else "lX") if m.group(2) in ("64", "PTR", "MAX")
                 else m.group(1), e.strip())
    if macro_args:
        e = re.sub(r'(?<=")\s*\b[A-Za-z_]\w*\b\s*(?=")', ' "%s" ', e)
    rest = _C_STR.sub("", e)
    if rest.strip() or not _C_STR.search(e):
        return None
    return c_unescape("".join(m.group(1) for m in _C_STR.finditer(e)))


@dataclass
class CallSite:
    """One log call found in a source file: its line, the macro/function, and its argument texts."""

    path: str
    line: int
    func: str
    args: list[str]


def c_calls(path: str, text: str, funcs: Iterable[str]) -> Iterator[CallSite]:
    """Every call of one of ``funcs`` (macro or function names) in C/C++ ``text``, comments ignored."""
    clean = strip_c_comments(text)
    rx = re.compile(r"(?<![\w.>])(%s)\s*\(" % "|".join(re.escape(f) for f in funcs))
    for m in rx.finditer(clean):
        got = call_args(clean, m.end() - 1)
        if got is None:
            continue
        yield CallSite(path, line_of(clean, m.start()), m.group(1), split_args(got[0]))


def cpp_stream_template(expr: str) -> str | None:
    """Template (``format`` style) of a C++ ``<<`` chain: literals kept, each other operand ``{}``.

    None when the chain has no string literal.
    """
    parts = [p.strip() for p in re.split(r"<<(?=(?:[^\"]*\"[^\"]*\")*[^\"]*$)", expr)]
    out, any_lit = [], False
    for p in parts:
        if not p:
            continue
        s = c_string(p)
        if s is not None:
            out.append(s.replace("{", "{{").replace("}", "}}"))
            any_lit = True
        elif p not in ("std::endl", "endl"):
            out.append("{}")
    return "".join(out) if any_lit else None


# --- Python ------------------------------------------------------------------------------------

PY_LEVELS = {"warning": "warn", "warn": "warn", "warning_once": "warn", "warn_once": "warn",
             "error": "error", "exception": "error", "critical": "fatal", "fatal": "fatal",
             "info": "info", "info_once": "info"}
_LOGGER_NAME = re.compile(r"(^|_|\.)(log|logger|logging|LOG|LOGGER|_logger|log_)$|logger$", re.I)


def _py_template(node: ast.expr, has_args: bool) -> tuple[str, str] | None:
    """(template, style) of a message expression, or None when it is not built from literals."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, ("percent" if has_args else "literal")
    if isinstance(node, ast.JoinedStr):
        out = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                out.append(str(v.value).replace("{", "{{").replace("}", "}}"))
            else:
                out.append("{" + _fvalue(v) + "}")
        return "".join(out), "format"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _py_template(node.left, has_args), _py_template(node.right, has_args)
        if a and b and a[1] == b[1]:
            return a[0] + b[0], a[1]
        if a and b and "format" not in (a[1], b[1]):
            return a[0] + b[0], "percent"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        left = _py_template(node.left, True)
        return (left[0], "percent") if left else None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
            and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)):
        return node.func.value.value, "format"
    return None


def _fvalue(v: ast.FormattedValue | ast.expr) -> str:
    if isinstance(v, ast.FormattedValue):
        spec = ""
        if v.format_spec is not None and isinstance(v.format_spec, ast.JoinedStr):
            spec = ":" + "".join(str(c.value) for c in v.format_spec.values if isinstance(c, ast.Constant))
        name = ast.unparse(v.value)
        return (name if name.isidentifier() else "") + spec
    return ""


@dataclass
class PyMessage:
    """A message found in Python source: line, level, template, style, and what printed it."""

    line: int
    level: str
    template: str
    style: str
    func: str


def python_messages(text: str, raises: bool = False) -> Iterator[PyMessage]:
    """Logger calls (``logger.warning(...)``, ``warnings.warn(...)``, ``print_warning_once``…) in ``text``.

    With ``raises``, ``raise SomeError("…")`` messages too (level error). A syntax error yields
    nothing (a file of another Python version is skipped, not guessed).
    """
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return
    for node in ast.walk(tree):
        if raises and isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            t = _py_template(node.exc.args[0], False)
            if t:
                yield PyMessage(node.lineno, "error", t[0], t[1], "raise")
            continue
        if not isinstance(node, ast.Call) or not node.args:
            continue
        level, func = _py_call_level(node)
        if level is None:
            continue
        t = _py_template(node.args[0], len(node.args) > 1)
        if t:
            yield PyMessage(node.lineno, level, t[0], t[1], func)


def _py_call_level(node: ast.Call) -> tuple[str | None, str]:
    f = node.func
    if isinstance(f, ast.Attribute):
        recv = ast.unparse(f.value)
        if f.attr == "warn" and recv == "warnings":
            return "warn", "warnings.warn"
        if f.attr in PY_LEVELS and _LOGGER_NAME.search(recv.split(".")[-1]):
            return PY_LEVELS[f.attr], f"{recv}.{f.attr}"
    if isinstance(f, ast.Name) and f.id in ("print_warning_once", "warning_once", "log_warning"):
        return "warn", f.id
    return None, ""


# --- Go ----------------------------------------------------------------------------------------

_GO_STR = r'"((?:[^"\\\n]|\\.)*)"|`([^`]*)`'
GO_LEVELS = {"Warn": "warn", "Error": "error", "Info": "info", "Debug": "info", "Fatal": "fatal",
             "Warning": "warn", "Errorf": "error", "Warnf": "warn", "Warningf": "warn",
             "Infof": "info", "Fatalf": "fatal", "Panicf": "fatal", "Panic": "fatal"}


@dataclass
class GoMessage:
    """A message found in Go source: line, level, template, style (slog / printf / literal), attrs."""

    line: int
    level: str
    template: str
    style: str
    attrs: list[str]
    func: str


def _go_literal(arg: str) -> str | None:
    arg = arg.strip()
    m = re.fullmatch(_GO_STR, arg)
    if not m:
        return None
    return c_unescape(m.group(1)) if m.group(1) is not None else m.group(2)


def go_messages(path: str, text: str) -> Iterator[GoMessage]:
    """``slog.Warn("msg", "k", v…)`` (and ``slog.WarnContext``, ``logger.Warn``), ``klog.Warningf``,
    ``log.Printf``, ``fmt.Errorf`` calls of Go ``text`` whose message is a string literal."""
    clean = strip_c_comments(text)
    rx = re.compile(r"\b((?:\w+\.)?(?:slog|klog|log|Log|logger|Logger|\w+Logger|\w+Log|l|logrus|fmt|errors))\.("
                    r"Warn|Error|Info|Debug|Fatal|Warning|Errorf|Warnf|Warningf|Infof|Fatalf|Panicf|"
                    r"Printf|Println|Print|New|WarnContext|ErrorContext|InfoContext)\s*\(")
    for m in rx.finditer(clean):
        got = call_args(clean, m.end() - 1)
        if got is None:
            continue
        args = split_args(got[0])
        name = m.group(2).replace("Context", "")
        if m.group(2).endswith("Context"):
            args = args[1:]
        if not args:
            continue
        lit = _go_literal(args[0])
        if lit is None and name == "Error" and len(args) > 1:  # logr: Error(err, "msg", "k", v...)
            lit, args = _go_literal(args[1]), args[1:]
        if lit is None:
            continue
        yield _go_message(m, name, lit, args, line_of(clean, m.start()))


def _go_message(m: re.Match[str], name: str, lit: str, args: list[str], line: int) -> GoMessage:
    pkg = m.group(1)
    if name in ("Printf", "Println", "Print", "New"):
        level = "error" if (name == "New" or pkg == "fmt") else "info"
    else:
        level = GO_LEVELS.get(name, "info")
    if pkg == "fmt" and name == "Errorf":
        level = "error"
    structured = pkg in ("slog", "l") or pkg.lower().endswith(("logger", "log")) and pkg not in ("log", "klog")
    if structured and not name.endswith("f") and name not in ("Printf", "Println", "Print", "New"):
        attrs = [k for k in (_go_literal(a) for a in args[1::2]) if k]
        return GoMessage(line, level, lit, "slog", attrs, f"{pkg}.{m.group(2)}")
    style = "printf" if "%" in lit else "literal"
    return GoMessage(line, level, lit, style, [], f"{pkg}.{m.group(2)}")
