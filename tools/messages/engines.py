"""Shared part of the serving-engine mining scripts (vLLM, SGLang, llama.cpp, ollama, TensorRT-LLM).

Each ``mine_<engine>.py`` finds its engine's log call sites (:class:`Site`) in the upstream source at
a tag and hands them to :func:`build`, which

1. counts every warning/error/fatal call site found (``call_sites``, ``sites_by_level``);
2. keeps the ones that concern the field (:data:`TOPIC`: GPUs, CUDA and drivers, memory and the KV
   cache, communication, devices, limits, kernels and attention backends chosen or refused,
   performance fallbacks) and, from the info calls, those that state a backend chosen or refused,
   a fallback or a memory/KV budget (:data:`INFO_KEEP`);
3. drops kept sites that no line could be recognised by (:func:`matchable`: the template's longest
   literal run is shorter than :data:`MIN_LITERAL` characters, e.g. ``"%s: %s"``);
4. classifies them (``common.classify``), merges ``tools/messages/curated/<engine>.yaml`` and writes
   ``src/infergap/data/messages/<engine>.yaml``.

The header records ``call_sites`` (warn/error/fatal found), ``topic_sites`` (of those, the ones on
the field's topics by :data:`TOPIC`), ``kept_sites`` (topic sites in the catalog) and
``kept_info_sites``, so the coverage benchmark can print ``kept_sites / topic_sites`` per engine.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: ``python tools/messages/mine_vllm.py``
    sys.path.insert(0, str(ROOT))

from tools.messages import common as c  # noqa: E402

#: What "concerns GPUs, memory, communication, devices, drivers, limits, kernels/backends and
#: performance fallbacks" means for a template (case-insensitive search). Written from the topics
#: of the message-catalog issue; broad on purpose: a kept message with only a generated meaning
#: still tells the user which component said what.
TOPIC = re.compile(
    r"\bgpus?\b|cuda|cudnn|cublas|nccl|rccl|nvml|nvidia|\brocm\b|\bhip\b|\bxpu\b|\btpu\b|\bnpu\b|"
    r"vulkan|metal\b|\bsycl\b|opencl|device|driver|memory|\bmem\b|\boom\b|vram|\bram\b|"
    r"kv[ _-]?cache|cache blocks?|block pool|swap|offload|preempt|retract|token pool|"
    r"all[ _-]?reduce|all[ _-]?gather|all[ _-]?to[ _-]?all|collective|\bp2p\b|peer|nvlink|\bipc\b|"
    r"\bshm\b|shared memory|/dev/shm|ulimit|rlimit|open files|\bnuma\b|\brdma\b|infiniband|\bib\b|"
    r"socket|\bkernels?\b|triton|flash[ _-]?attn|flash[ _-]?attention|flashinfer|flashmla|"
    r"attention backend|backend|marlin|cutlass|deep_?gemm|\bfp8\b|\bfp4\b|\bint8\b|quantiz|"
    r"compute capability|\bsm_?\d\d|cuda ?graph|graph capture|torch\.compile|fall(?:ing|s)? ?back|"
    r"sub-?optimal|disabled because|is disabled|not supported on|unsupported|performance|slow|"
    r"tensor[ _-]parallel|pipeline[ _-]parallel|expert[ _-]parallel|world[ _-]size|\branks?\b|"
    r"max[ _-]num[ _-]seqs|max[ _-]model[ _-]len|max[ _-]num[ _-]batched|batch[ _-]size|"
    r"gpu_memory_utilization|mem[ _-]fraction|timed? ?out|watchdog|\bhang|heartbeat|"
    r"context (?:length|size)|n_ctx|\blayers?\b|\bvmm\b|mmap|mlock|\bbuffer|\balloc",
    re.IGNORECASE,
)

#: Info calls worth a catalog entry: a backend or kernel chosen or refused, a fallback, a memory,
#: KV-cache or offload budget, CUDA graphs, devices found.
INFO_KEEP = re.compile(
    r"fall(?:ing|s)? ?back|fallback|disabled|disabling|not (?:supported|available)|unsupported|"
    r"sub-?optimal|instead|\busing\b.{0,60}\b(?:backend|kernel|attention|all[ _-]?reduce)|"
    r"backend|kv[ _-]?cache|cache blocks|memory|offload|cuda ?graph|graph capture|\bgpus?\b|"
    r"\bdevices?\b|driver|\bvram\b|preempt|max[ _-]num[ _-]seqs|concurrency|layers? to gpu",
    re.IGNORECASE,
)

#: Exceptions raised with a literal message are kept when they state one of the decisive causes
#: (memory and KV cache, GPUs missing, CUDA/driver, NCCL and all-reduce, /dev/shm and limits, batch
#: and length limits): the user reads them as the last line of a traceback.
RAISE_TOPIC = re.compile(
    r"out of memory|\boom\b|kv[ _-]?cache|cache blocks|gpu_memory_utilization|mem[ _-]fraction|"
    r"(?:no|insufficient|not enough)\b.{0,20}memory|memory.{0,30}(?:insufficient|not enough|exceed)|"
    r"\bgpus?\b.{0,40}(?:available|found|visible|detected)|(?:no|not).{0,20}\b(?:gpus?|cuda|devices?)\b|"
    r"cuda (?:is )?not available|compute capability|driver|nccl|/dev/shm|shared memory|\bshm\b|ulimit|"
    r"open files|max[ _-]num[ _-]seqs|max[ _-]model[ _-]len|world[ _-]size|\bp2p\b|nvlink|"
    r"all[ _-]?reduce|cuda ?graph|"
    # the engine refuses its configuration for this host or model: a quantization or dtype the GPU's
    # compute capability cannot run, a parallel size the model's heads cannot be split by, a model
    # architecture the release does not know (vllm/config/vllm.py, config/model.py, models/registry.py)
    r"not supported for the current gpu|(?:minimum|min|required) capability|"
    r"must be divisible by (?:the )?(?:tensor|pipeline)[ _-]parallel|architectures?\b.{0,60}\bnot supported",
    re.IGNORECASE,
)

#: A template whose longest literal run (whitespace collapsed) is shorter than this cannot be told
#: apart from other lines (``"%s: %s"``, ``"Error: {}"``): not kept.
MIN_LITERAL = 10


@dataclass
class Site:
    """One log call site: upstream ``path``:``line``, ``level``, ``template`` as written, its ``style``."""

    path: str
    line: int
    level: str
    template: str
    style: str
    attrs: list[str] = field(default_factory=list)
    kind: str = "log"   # log: a logger call; raise: an exception raised with this message


@dataclass
class Stats:
    """Counts written to the catalog header (see the module docstring)."""

    call_sites: int = 0
    topic_sites: int = 0
    kept_sites: int = 0
    kept_info_sites: int = 0
    raise_sites: int = 0
    kept_raise_sites: int = 0
    by_level: dict[str, int] = field(default_factory=lambda: dict.fromkeys(c.LEVELS, 0))


def matchable(template: str, style: str) -> bool:
    """Whether ``template`` has a literal run of at least :data:`MIN_LITERAL` characters and no run
    of more than 8 blanks inside its text (the shared pattern builder matches ``\\s{1,8}``), and
    whose line to match has a word in it (a banner of ``=====`` is not a message) and no two
    placeholders side by side (``sm%d%d``: the first capture takes every digit, no line splits)."""
    line = c._matchable_line(template)
    if re.search(r"\S\s{9,}\S", line) or not re.search(r"[A-Za-z]{3}", line):
        return False
    if style != "slog":
        pieces = c.parse_template(line, style)
        if any(a.kind and b.kind for a, b in zip(pieces, pieces[1:])):
            return False
    return len(c.longest_literal(template, style)) >= MIN_LITERAL


def on_topic(site: Site) -> bool:
    """Whether a warning/error/fatal site concerns the field (:data:`TOPIC` on its template)."""
    return bool(TOPIC.search(site.template))


def keep_info(site: Site) -> bool:
    """Whether an info site states a backend, fallback, memory/KV budget or device (:data:`INFO_KEEP`)."""
    return bool(INFO_KEEP.search(site.template)) and on_topic(site)


def select(sites: Iterable[Site], info_keep: re.Pattern[str] | None = None) -> tuple[list[Site], Stats]:
    """The sites to catalog and the counts; ``sites`` in upstream order; ``info_keep``: info
    templates an engine keeps besides :func:`keep_info`'s."""
    st, kept = Stats(), []
    for s in sites:
        if s.kind == "raise":
            st.raise_sites += 1
            if RAISE_TOPIC.search(s.template) and matchable(s.template, s.style):
                st.kept_raise_sites += 1
                kept.append(s)
            continue
        loud = s.level != "info"
        if loud:
            st.call_sites += 1
            st.by_level[s.level] += 1
        if loud and on_topic(s):
            st.topic_sites += 1
            if matchable(s.template, s.style):
                st.kept_sites += 1
                kept.append(s)
        elif (not loud and (keep_info(s) or (info_keep is not None and info_keep.search(s.template)))
              and matchable(s.template, s.style)):
            st.kept_info_sites += 1
            kept.append(s)
    return kept, st


def area_of(path: str) -> str:
    """The id's area: the file's stem (``vllm/utils/system_utils.py`` → ``system_utils``; a package's
    ``__init__`` → the package's name)."""
    p = Path(path)
    stem = p.name.split(".")[0]
    if stem == "__init__" and p.parent.name:
        stem = p.parent.name
    return re.sub(r"\W+", "_", stem.lower()).strip("_") or "core"


def entries_of(component: str, sites: list[Site]) -> list[c.Entry]:
    """One entry per distinct template (later sites counted in ``sites``/``also``), ids stable by order."""
    raw = [c.Entry(id="", level=s.level, template=s.template, where=f"{s.path}:{s.line}",
                   style=s.style, cls=c.classify(s.template), attrs=list(s.attrs)) for s in sites]
    entries = c.dedupe(raw)
    taken: set[str] = set()
    for e in entries:
        e.id = c.make_id(component, area_of(e.where.rsplit(":", 1)[0]), e.template, e.style, taken)
    return entries


@dataclass
class Engine:
    """What a mining script tells :func:`build` about its engine."""

    component: str          # catalog name: vllm, sglang, llamacpp, ollama, tensorrt_llm
    label: str              # as a user knows it: "vLLM"
    repo: str               # upstream owner/name
    find: Callable[[c.Checkout], list[Site]]
    info_keep: re.Pattern[str] | None = None   # more info calls to keep (the engine's own words)


def _mined(engine: Engine, co: c.Checkout) -> tuple[list[c.Entry], Stats]:
    kept, st = select(engine.find(co), engine.info_keep)
    return entries_of(engine.component, kept), st


def build(engine: Engine, co: c.Checkout, out: Path, curated: Path,
          archive: str | None = None, also: list[tuple[c.Checkout, str | None]] | None = None) -> tuple[Stats, list[str]]:
    """Mine ``co`` and write the catalog to ``out``; returns the counts and curated ids not found.

    ``archive``: the release archive a plain-directory source was unpacked from (recorded).
    ``also``: other releases (checkout, archive) mined too and unioned in
    (:func:`~tools.messages.common.union_tags`: each entry names the tags that print it); the
    counts of the header are ``co``'s.
    """
    entries, st = _mined(engine, co)
    for other, _arch in also or []:
        entries = c.union_tags(entries, co.tag, _mined(engine, other)[0], other.tag)
    missing = c.merge_curated(entries, c.load_curated(curated), engine.label)
    header = {
        "component": engine.component,
        "upstream": c.upstream_header(engine.repo, co) | ({"archive": archive} if archive else {}),
        "mined_by": f"tools/messages/mine_{engine.component}.py",
        "call_sites": st.call_sites,
        "sites_by_level": st.by_level,
        "topic_sites": st.topic_sites,
        "kept_sites": st.kept_sites,
        "kept_info_sites": st.kept_info_sites,
        "raise_sites": st.raise_sites,
        "kept_raise_sites": st.kept_raise_sites,
    }
    if also:
        header["upstream"]["also_tags"] = [o.tag for o, _a in also]
        header["upstream"]["also_archives"] = [a or "" for _o, a in also]
    c.write_catalog(out, header, entries)
    return st, missing


def main(engine: Engine, argv: list[str] | None = None) -> int:
    """Command line of a mining script: ``SOURCE TAG [--out FILE] [--curated FILE] [--also-tag SOURCE TAG]``.

    SOURCE is a git repository (bare or not) read at TAG, or a directory holding the release's
    files (an unpacked release archive), TAG then naming that release. Prints the counts and every
    curated id that no longer exists (its template changed upstream: review it). Exit 2 on bad input.
    """
    ap = argparse.ArgumentParser(description=f"Mine {engine.label}'s log messages into a catalog.")
    ap.add_argument("source", help="git repository or unpacked release directory")
    ap.add_argument("tag", help="release tag to read (git) or the release it holds (directory)")
    ap.add_argument("--out", type=Path, default=ROOT / f"src/infergap/data/messages/{engine.component}.yaml")
    ap.add_argument("--curated", type=Path, default=ROOT / f"tools/messages/curated/{engine.component}.yaml")
    ap.add_argument("--archive", help="release archive SOURCE was unpacked from (recorded in the header)")
    ap.add_argument("--also-tag", nargs=2, action="append", default=[], metavar=("SOURCE", "TAG"),
                    help="also mine another release (an older one whose wording users paste); repeatable")
    ap.add_argument("--also-archive", action="append", default=[], help="archive each --also-tag SOURCE was unpacked from, in order")
    a = ap.parse_args(argv)
    try:
        co = c.Checkout(a.source, a.tag)
        arch = a.also_archive + [None] * len(a.also_tag)
        also = [(c.Checkout(src, tag), arch[i]) for i, (src, tag) in enumerate(a.also_tag)]
        st, missing = build(engine, co, a.out, a.curated, a.archive, also)
    except ValueError as e:
        print(f"mine_{engine.component}: {e}", file=sys.stderr)
        return 2
    print(f"{engine.label} {a.tag}: {st.call_sites} warn/error call sites, {st.topic_sites} on topic, "
          f"{st.kept_sites} kept (+{st.kept_info_sites} info) -> {a.out}")
    for m in missing:
        print(f"curated id not found (review): {m}", file=sys.stderr)
    return 0


# --- finders shared by several engines ---------------------------------------------------------


def python_sites(co: c.Checkout, under: str, skip: re.Pattern[str] | None = None) -> list[Site]:
    """Logger calls and ``raise X("…")`` with a literal message in the ``.py`` files under ``under``
    (``skip``: paths left out), in path/line order."""
    out = []
    for rel in co.files(under, (".py",)):
        if skip is not None and skip.search(rel):
            continue
        found = [Site(rel, m.line, m.level, m.template, m.style, kind="raise" if m.func == "raise" else "log")
                 for m in c.python_messages(co.read(rel), raises=True)]
        out.extend(sorted(found, key=lambda s: s.line))
    return out


#: Paths of a Python engine that print no GPU/memory/communication message worth reading
#: (tests, examples, benchmarks, request parsers of tool calls and reasoning).
PY_SKIP = re.compile(r"(^|/)(tests?|examples|benchmarks|docs|tool_parsers?|reasoning|function_call)(/|$)")
