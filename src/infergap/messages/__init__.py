"""The field's own messages: catalogs mined from the components' sources, matched on any line.

Each ``data/messages/<component>.yaml`` (format: ``data/messages/README.md``) lists the warning and
error messages a component prints (NCCL, CUDA, NVML, the NVIDIA driver's Xids, nvidia-smi, PyTorch
distributed, Ray, the Kubernetes device plugin and GPU operator, the serving engines), each with
its template as a bounded regex, where upstream it comes from, what it means, its class and, where
the meaning determines one, the check it feeds.

:func:`match_lines` finds every catalog message in a sequence of lines, whatever log format wraps
them. Patterns are compiled on first use; a line is only tried against the messages indexed under
one of its words (each message is indexed under its rarest whole word), so a line costs a few
dict look-ups plus the few patterns that can match it.

>>> m = match_lines(["gpu1:123:456 [0] NCCL INFO NET/IB : No device found."])[0]
>>> (m.message.id, m.message.check, m.line_no)
('nccl.net_ib.net_ib_no_device_found', 'nccl.net', 1)
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from infergap import datafile
from infergap.messages.routes import routes
from infergap.messages.template import LEVELS, MAX_LINE, head_text, key_words, longest_literal, loose_pattern

__all__ = ["LABELS", "Catalog", "Message", "MessageMatch", "catalog", "match_lines"]

#: A message whose longest literal is shorter than this (characters) is too generic to match on
#: its own (``%s: %s``); it stays in the catalog (and in the coverage figures) but never matches.
MIN_LITERAL = 6
#: Levels whose messages also match in their loose form (another release's wording).
LOUD = ("fatal", "error", "warn")
_WORD = re.compile(r"[A-Za-z0-9_]+")
#: Names of the components as a user knows them.
LABELS = {"nccl": "NCCL", "cuda": "CUDA", "nvml": "NVML", "nvrm_xid": "NVIDIA driver", "nvrm": "NVIDIA driver", "nvidia_smi": "nvidia-smi",
          "torch_distributed": "PyTorch distributed", "ray": "Ray", "k8s_device_plugin": "NVIDIA device plugin",
          "gpu_operator": "NVIDIA GPU operator", "vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp",
          "ollama": "ollama", "tensorrt_llm": "TensorRT-LLM"}



@dataclass(frozen=True)
class Message:
    """One catalog entry (fields as in ``data/messages/README.md``); ``component`` the catalog it
    is in, ``repo``/``tag`` the upstream source it was mined from."""

    id: str
    component: str
    level: str
    template: str
    style: str
    pattern: str
    where: str
    cls: str
    meaning: str
    repo: str
    tag: str
    check: str | None = None
    severity: str | None = None
    more: str | None = None
    curated: bool = False
    name: str | None = None
    code: int | None = None
    sites: int = 1
    attrs: tuple[str, ...] = ()
    #: the rule of ``data/message_routes.yaml`` that gave ``check`` and ``severity`` (None: the
    #: entry's own, curated, or no check)
    route: str | None = None

    @functools.cached_property
    def regex(self) -> re.Pattern[str]:
        """The compiled pattern (compiled on first use)."""
        return re.compile(self.pattern)

    @functools.cached_property
    def loose(self) -> str | None:
        """The template's loose form (:func:`~infergap.messages.template.loose_pattern`: the line
        another release prints), or None when there is none (quiet levels included)."""
        return loose_pattern(self.template, self.style) if self.level in LOUD else None

    @functools.cached_property
    def loose_regex(self) -> re.Pattern[str] | None:
        """:attr:`loose` compiled on first use, tried where :attr:`regex` did not match."""
        return re.compile(self.loose) if self.loose else None

    @property
    def source(self) -> str:
        """Where upstream the template is printed: ``repo tag path:line``, or a URL for GitHub."""
        path, _, line = self.where.partition(":")
        if self.repo.count("/") == 1 and self.tag:
            return f"https://github.com/{self.repo}/blob/{self.tag}/{path}" + (f"#L{line}" if line.isdigit() else "")
        return f"{self.repo} {self.tag} {self.where}".strip()

    @functools.cached_property
    def literal_len(self) -> int:
        """Characters of the template's longest literal run (how specific a match is)."""
        return len(longest_literal(self.template, self.style))

    @property
    def matchable(self) -> bool:
        """False for a template with too little literal text to be recognised (see :data:`MIN_LITERAL`)."""
        return self.literal_len >= MIN_LITERAL


@dataclass(frozen=True)
class MessageMatch:
    """A catalog message found on one line: ``line_no`` 1-based (offset by ``first``), the line
    (cut at :data:`MAX_LINE` characters), the named captures of its placeholders."""

    message: Message
    line_no: int
    line: str
    captures: dict[str, str] = field(default_factory=dict)
    span: tuple[int, int] = (0, 0)
    loose: bool = False  # matched the template's loose form (another release's wording), not its pattern
    #: other components whose catalog holds the same template and matched the same span (SGLang
    #: carries vLLM's start-up checks word for word): the line may come from either
    alike: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The part of the line the message matched (the log format's prefix left out)."""
        return self.line[self.span[0]:self.span[1]] if self.span[1] else self.line


def _routed(m: Message) -> Message:
    """``m`` with the check and severity of the first rule of ``data/message_routes.yaml`` that
    takes it (:mod:`infergap.messages.routes`); ``m`` itself when it has its own check or no rule
    takes it."""
    if m.check:
        return m
    r = routes().route(m.component, m.level, m.cls, m.template, m.where)
    return dataclasses.replace(m, check=r[0], severity=r[1], route=r[2]) if r else m


def _messages(doc: dict[str, Any], name: str) -> list[Message]:
    up = doc.get("upstream") or {}
    out = []
    comp = doc.get("component", name)
    for e in doc.get("messages") or []:
        if e.get("level") not in LEVELS or not e.get("pattern"):
            raise ValueError(f"data/messages/{name}: {e.get('id')}: bad level or no pattern")
        out.append(Message(
            id=e["id"], component=comp, level=e["level"], template=e["template"],
            style=e.get("style", "printf"), pattern=e["pattern"], where=str(e.get("where", "")),
            cls=e.get("class", "informational"), meaning=e.get("meaning", ""), repo=str(up.get("repo", "")),
            tag=str((e.get("tags") or [up.get("tag", "")])[0]), check=e.get("check"), severity=e.get("severity"), more=e.get("more"),
            curated=bool(e.get("curated")), name=e.get("name"), code=e.get("code"), sites=int(e.get("sites", 1)),
            attrs=tuple(e.get("attrs") or ())))
    return out


class Catalog:
    """Every message of every catalog file, with the word index built on first match.

    ``headers`` maps each component to its file's header (upstream, mined_by, call_sites …).
    """

    def __init__(self, docs: dict[str, dict[str, Any]]) -> None:
        self.headers = {name: {k: v for k, v in d.items() if k != "messages"} for name, d in docs.items()}
        msgs = [m for name, d in sorted(docs.items()) for m in _messages(d, name)]
        self.messages: tuple[Message, ...] = tuple(msgs)
        self._by_id = {m.id: m for m in msgs}
        self._routed: dict[str, Message] = {}
        if len(self._by_id) != len(msgs):
            dup = [k for k, n in Counter(m.id for m in msgs).items() if n > 1]
            raise ValueError(f"data/messages: duplicate message ids {dup[:5]}")

    def by_id(self, mid: str) -> Message:
        """The message of id ``mid`` (routed, :meth:`routed`); KeyError if none."""
        return self.routed(self._by_id[mid])

    def routed(self, m: Message) -> Message:
        """``m`` with the check a rule of ``data/message_routes.yaml`` gives it when it has none of
        its own; computed once per message, when it is first matched (routing every entry at load
        would cost every start the rules' regexes over thousands of templates)."""
        hit = self._routed.get(m.id)
        if hit is None:
            hit = self._routed[m.id] = _routed(m)
        return hit

    def all_routed(self) -> tuple[Message, ...]:
        """Every message, routed (:meth:`routed`): for coverage figures and tests."""
        return tuple(self.routed(m) for m in self.messages)

    @functools.cached_property
    def _words(self) -> dict[str, list[str]]:
        """message id -> the whole words any line printed from its template holds."""
        return {m.id: key_words(m.template, m.style) for m in self.messages if m.matchable}

    @functools.cached_property
    def _freq(self) -> Counter[str]:
        return Counter(w for ws in self._words.values() for w in set(ws))

    def _build(self, words_of: Any) -> dict[str, tuple[Message, ...]]:
        index: dict[str, list[Message]] = {}
        freq = self._freq
        for m in self.messages:
            ws = words_of(m)
            if ws:
                index.setdefault(min(ws, key=lambda w: (freq[w], -len(w))), []).append(m)
        return {w: tuple(ms) for w, ms in index.items()}

    @functools.cached_property
    def _index(self) -> dict[str, tuple[Message, ...]]:
        """word -> messages indexed under it: each message under its rarest whole word."""
        return self._build(lambda m: self._words.get(m.id))

    @functools.cached_property
    def _loose_index(self) -> dict[str, tuple[Message, ...]]:
        """word -> messages whose first sentence alone (their loose form's head) is indexed under
        it, when that head lacks the word the whole template is indexed under."""
        def head_words(m: Message) -> list[str] | None:
            ws = self._words.get(m.id)
            if not ws or m.level not in LOUD:
                return None
            head = head_text(m.template)
            if head is None:
                return None
            toks = set(_WORD.findall(head))
            hw = [w for w in ws if w in toks]
            return hw if hw and min(ws, key=lambda w: (self._freq[w], -len(w))) not in hw else None
        return self._build(head_words)

    def match_line(self, line: str) -> list[tuple[Message, re.Match[str]]]:
        """Messages found on one line (cut at :data:`MAX_LINE`), most specific first; a match whose
        span lies inside a more specific one's is dropped (``%s:%d Cuda failure '%s'`` wins over
        ``Cuda failure '%s'``). A template's loose form (:attr:`Message.loose_regex`) is tried only
        where its pattern did not match, and ranks after every pattern match."""
        return [(m, h) for m, h, _alike in self._match_line(line)]

    def _match_line(self, line: str) -> list[tuple[Message, re.Match[str], tuple[str, ...]]]:
        """:meth:`match_line` with, for each kept match, the other components whose identical
        template matched the identical span (dropped as duplicates, named in ``alike``)."""
        line = line[:MAX_LINE]
        index = self._index
        cands: dict[str, Message] = {}
        loose = self._loose_index
        for w in set(_WORD.findall(line)):
            for m in index.get(w, ()) + loose.get(w, ()):
                cands[m.id] = m
        found = []
        for m in cands.values():
            hit = m.regex.search(line) or (m.loose_regex.search(line) if m.loose_regex is not None else None)
            if hit:
                found.append((m, hit))
        if len(found) < 2:
            return [(m, h, ()) for m, h in found]
        # strict matches first: another message's loose form (a longer sibling cut to the first
        # sentence both share) never hides the message whose own pattern matched
        found.sort(key=lambda mh: (mh[1].re is not mh[0].regex, -mh[0].literal_len, mh[0].id))
        kept: list[tuple[Message, re.Match[str], tuple[str, ...]]] = []
        for m, h in found:
            if not any(k.start() <= h.start() and h.end() <= k.end() for _m, k, _a in kept):
                kept.append((m, h, ()))
                continue
            for i, (km, k, alike) in enumerate(kept):
                if k.span() == h.span() and km.template == m.template and km.component != m.component \
                        and m.component not in alike:
                    kept[i] = (km, k, alike + (m.component,))
        return kept

    def match_lines(self, lines: Iterable[str], first: int = 1) -> list[MessageMatch]:
        """Every message on every line; ``first`` the number of the first line."""
        out = []
        for n, line in enumerate(lines, first):
            for m, h, alike in self._match_line(line):
                caps = {k: v for k, v in h.groupdict().items() if v is not None}
                out.append(MessageMatch(self.routed(m), n, line[:MAX_LINE].rstrip("\n"), caps, h.span(), h.re is not m.regex, alike))
        return out


@functools.lru_cache(maxsize=1)
def catalog() -> Catalog:
    """Every packaged catalog (``data/messages/*.yaml``), loaded once (each file parsed once per
    change, :func:`infergap.datafile.packaged`). Raises ValueError for a malformed entry and
    :class:`~infergap.errors.UserError` for a file that is not valid YAML (packaged data: a bug,
    not user input)."""
    base = resources.files("infergap") / "data" / "messages"
    docs = {}
    for f in sorted(base.iterdir(), key=lambda x: x.name):
        if f.name.endswith(".yaml"):
            docs[f.name[:-5]] = datafile.packaged(f"messages/{f.name}")
    return Catalog(docs)


def match_lines(lines: Iterable[str], first: int = 1) -> list[MessageMatch]:
    """Every catalog message found in ``lines`` (any log format; a line is cut at
    :data:`MAX_LINE` characters), as :class:`MessageMatch` in line order."""
    return catalog().match_lines(lines, first)
