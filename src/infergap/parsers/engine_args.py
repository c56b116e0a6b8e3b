"""A serving engine's command line, parsed with the engine's own argument table.

The tables are data mined from the engine's source at a release
(``src/infergap/data/engine_args/<engine>.json``; llama.cpp's ``common/arg.cpp`` by
``tools/mine_llamacpp_args.py``; vLLM's ``vllm serve`` parser (``EngineArgs.add_cli_args``) and
SGLang's ``ServerArgs.add_cli_args`` by ``tools/mine_engine_args.py``), so every option the server was started with is known by its
canonical name, with the value it takes, and every option it was not started with has the
default the source gives. Pure: argv and environment in, :class:`ParsedArgs` out.

>>> p = parse_argv(["llama-server", "-m", "m.gguf", "-ub", "8", "--no-kv-offload", "-ngl=99"], {})
>>> p.engine, p.value("--ubatch-size"), p.value("--kv-offload"), p.value("--batch-size"), p.value("--gpu-layers")
('llama.cpp', 8, False, 2048, '99')
>>> p.given["--kv-offload"]
'--no-kv-offload'
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from infergap.guard import secret_name

SCRUBBED = "<scrubbed>"


@dataclass
class ParsedArgs:
    """An engine's options as the server runs them.

    ``given``: canonical name → the option as written (``-ub``, ``--no-kv-offload``, or
    ``env LLAMA_ARG_UBATCH``); ``values``: canonical name → value for every option of the table
    (the given value, else the source's default); ``unknown``: tokens the table does not know;
    ``source``: the table's provenance (release and files)."""

    engine: str
    source: str
    values: dict[str, Any] = field(default_factory=dict)
    given: dict[str, str] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)

    def value(self, name: str) -> Any:
        """The value of option ``name`` (any of its spellings), or None when the table lacks it."""
        return self.values.get(canonical(self.engine, name))

    def is_given(self, name: str) -> bool:
        """True when the server was started with option ``name`` (command line or environment)."""
        return canonical(self.engine, name) in self.given


@lru_cache(maxsize=None)
def table(engine: str) -> dict[str, Any]:
    """The mined table of ``engine`` (``llama.cpp``); raises KeyError for an engine without one."""
    try:
        text = (resources.files("infergap") / "data" / "engine_args" / f"{engine}.json").read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KeyError(engine) from None
    return json.loads(text)


def _long(opt: dict[str, Any]) -> str:
    names = [n for n in opt["names"] if n.startswith("--")] or opt["names"] or ["?"]
    return names[0]


@lru_cache(maxsize=None)
def _index(engine: str) -> dict[str, tuple[dict[str, Any], bool]]:
    """Spelling → (option, negated). Server options win over another program's of the same name."""
    out: dict[str, tuple[dict[str, Any], bool]] = {}
    for opt in table(engine)["options"]:
        if "SERVER" in opt.get("excludes", []) or (opt.get("examples") and not {"SERVER", "COMMON"} & set(opt["examples"])):
            continue
        for names, neg in ((opt["names"], False), (opt.get("negated") or [], True)):
            for n in names:
                if n not in out or "SERVER" in opt.get("examples", []):
                    out[n] = (opt, neg)
    return out


def canonical(engine: str, name: str) -> str:
    """The canonical (first ``--``) spelling of option ``name``; ``name`` itself when unknown."""
    hit = _index(engine).get(name)
    return _long(hit[0]) if hit else name


def engine_of(argv: list[str]) -> str | None:
    """The engine a command line starts: ``llama.cpp`` (``llama-server``), ``vllm``, ``sglang``."""
    words = [os.path.basename(a) for a in argv[:4]]
    if any(w.startswith("llama-server") for w in words):
        return "llama.cpp"
    joined = " ".join(argv[:4])
    if "sglang.launch_server" in joined or "sglang serve" in joined:
        return "sglang"
    if "vllm" in joined and ("serve" in joined or "api_server" in joined):
        return "vllm"
    return None


def _lookup(idx: dict[str, tuple[dict[str, Any], bool]], name: str, dashes: bool, abbrev: bool) -> tuple[dict[str, Any], bool] | None:
    """The option ``name`` spells: exactly, with ``_`` read as ``-`` (``dashes``), or — as Python's
    argparse does by default (``allow_abbrev``) — a long option's unique prefix (``--tp`` for
    ``--tp-size``)."""
    hit = idx.get(name)
    if hit is None and dashes and name.startswith("--"):
        name = name[:2] + name[2:].replace("_", "-")
        hit = idx.get(name)
    if hit is None and abbrev and name.startswith("--") and len(name) > 2:
        cands = {id(o): (o, neg) for n, (o, neg) in idx.items() if n.startswith(name)}
        hit = next(iter(cands.values())) if len(cands) == 1 else None
    return hit


def args_start(argv: list[str], engine: str) -> int:
    """Index of the first engine option in ``argv``: past ``python -m vllm.entrypoints.openai.api_server``,
    ``vllm serve`` or ``python -m sglang.launch_server`` (the interpreter's own words are not the engine's).

    >>> args_start(["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], "vllm")
    3
    >>> args_start(["/usr/bin/vllm", "serve", "m", "--max-num-seqs", "2"], "vllm")
    2
    >>> args_start(["llama-server", "-m", "x.gguf"], "llama.cpp")
    1
    """
    if engine in ("vllm", "sglang"):
        for j, a in enumerate(argv[:6]):
            if a == "serve" or a.endswith((".api_server", ".launch_server")):
                return j + 1
    return 1


def _convert(opt: dict[str, Any], raw: str) -> Any:
    kind = opt["kind"]
    try:
        if kind == "int":
            return int(raw, 0)
        if kind == "float":
            return float(raw)
    except ValueError:
        return raw
    if kind == "bool":
        return raw.lower() in ("1", "true", "on", "yes", "enabled")
    return raw


def is_secret(name: str) -> bool:
    """True when option or variable ``name`` holds a secret (:func:`infergap.guard.secret_name`)."""
    return secret_name(name)


def _apply_env(p: ParsedArgs, engine: str, env: dict[str, str]) -> None:
    """llama.cpp reads ``LLAMA_ARG_*`` before the command line: an option not given takes it."""
    for opt in table(engine)["options"]:
        var = opt.get("env")
        if not var or var not in env:
            continue
        name = _long(opt)
        if name in p.given or name not in p.values:
            continue
        p.values[name] = SCRUBBED if is_secret(var) else (_convert(opt, env[var]) if opt["kind"] != "switch" else
                                                         env[var].lower() in ("1", "true", "on", "yes", "enabled"))
        p.given[name] = f"env {var}"


def parse_argv(argv: list[str], env: dict[str, str] | None = None, engine: str | None = None) -> ParsedArgs | None:
    """Parse ``argv`` (the process's command line, program first) with ``engine``'s table
    (default: :func:`engine_of`); ``env`` is the process's environment (``LLAMA_ARG_*``). None
    when the engine is not known or has no table. Secret values are kept as :data:`SCRUBBED`."""
    engine = engine or engine_of(argv)
    if engine is None:
        return None
    try:
        tab = table(engine)
    except KeyError:
        return None
    idx = _index(engine)
    dashes = engine in ("vllm",)  # vLLM's FlexibleArgumentParser reads --max_num_seqs as --max-num-seqs
    p = ParsedArgs(engine=engine, source=f"{tab['source']} ({', '.join(tab.get('files', []))}, mined by {tab['mined_by']})")
    for opt in tab["options"]:
        n = _long(opt)
        if n in idx and idx[n][0] is opt:
            p.values[n] = p.defaults[n] = opt.get("default")
    i = args_start(argv, engine)
    while i < len(argv):
        tok, i = argv[i], i + 1
        name, eq, inline = tok.partition("=") if tok.startswith("-") else (tok, "", "")
        hit = _lookup(idx, name, dashes, engine in ("vllm", "sglang"))
        if hit is None:
            p.unknown.append(tok if not is_secret(tok) else SCRUBBED)
            continue
        opt, neg = hit
        key = _long(opt)
        if opt["kind"] == "switch":
            p.values[key] = True if opt.get("switch_sets") is not False else False
        elif opt["kind"] == "bool":
            p.values[key] = not neg if not eq else _convert(opt, inline)
        else:
            if eq:
                raw = inline
            elif i < len(argv):
                raw, i = argv[i], i + 1
            else:
                raw = ""
            if opt["kind"] == "pair" and not eq and i < len(argv):
                raw, i = f"{raw} {argv[i]}", i + 1
            if opt["kind"] == "list":
                vals = [raw] if raw else []
                while not eq and i < len(argv) and not argv[i].startswith("-"):
                    vals, i = vals + [argv[i]], i + 1
                p.values[key] = [SCRUBBED] * len(vals) if is_secret(key) else vals
                p.given[key] = name
                continue
            p.values[key] = SCRUBBED if is_secret(key) else _convert(opt, raw)
        p.given[key] = name
    _apply_env(p, engine, env or {})
    return p
