"""Mine llama.cpp's argument table (``common/arg.cpp``) and the defaults of ``common_params``
(``common/common.h``) into ``src/infergap/data/engine_args/llama.cpp.json``.

Usage::

    python tools/mine_llamacpp_args.py SRC_DIR --label "llama.cpp <tag or where SRC_DIR came from>" [-o OUT]

``SRC_DIR`` is a llama.cpp source tree at the release to describe (a git checkout at a tag, or the
``vendor/llama.cpp`` of a llama-cpp-python sdist, which is what llama-cpp-python builds). Re-run
it for a new release; the label is written as the table's ``source``.

Each ``add_opt(common_arg(...))`` call gives one option: its names (``{"-ub", "--ubatch-size"}``),
the negated names of a boolean pair (``{"-nkvo", "--no-kv-offload"}``), whether it takes a value
(the lambda's second parameter: ``int``, ``float``, ``std::string``, ``bool`` for a pair, none for
a switch), the ``common_params`` fields its lambda assigns, the environment variable
(``.set_env``), the programs it applies to (``.set_examples`` / ``.set_excludes``) and its help
text's format string. The default is the option's value when it is not given: the field's initializer in ``struct common_params`` (nested
structs followed: ``params.cpuparams.n_threads``), with the server's own overrides applied (the
``ex == LLAMA_EXAMPLE_SERVER`` block of ``common_params_parser_init``: ``n_parallel = -1``),
negated for a pair whose lambda stores ``!value``; a switch is False (not given).
Nothing is executed: the C++ is read as text.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

_STR = re.compile(r'"((?:[^"\\]|\\.)*)"')
_FIELD_DECL = re.compile(r"^\s*(?:struct\s+)?([A-Za-z_][\w:<>, ]*?)\s+([A-Za-z_]\w*)\s*(?:=\s*([^;]+?))?\s*;")


def _skip_literal(text: str, i: int) -> int:
    """Index just past the string or char literal starting at ``text[i]``."""
    q = text[i]
    i += 1
    while i < len(text) and text[i] != q:
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _close(text: str, i: int) -> int:
    """Index of the bracket closing the one at ``text[i]`` (strings, chars, comments skipped)."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = [pairs[text[i]]]
    i += 1
    while i < len(text) and stack:
        c = text[i]
        if c in "\"'":
            i = _skip_literal(text, i)
            continue
        if text.startswith("//", i):
            i = text.find("\n", i)
            continue
        if text.startswith("/*", i):
            i = text.find("*/", i) + 2
            continue
        if c in pairs:
            stack.append(pairs[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return i
        i += 1
    raise ValueError("unbalanced brackets")


def _split_top(text: str) -> list[str]:
    """The comma-separated arguments of a call's inside, at bracket depth 0."""
    out, depth, cur, i = [], 0, [], 0
    while i < len(text):
        c = text[i]
        if c in "\"'":
            j = _skip_literal(text, i)
            cur.append(text[i:j])
            i = j
            continue
        if text.startswith("//", i):  # a comment (it may quote an option name): not an argument
            i = text.find("\n", i) if "\n" in text[i:] else len(text)
            continue
        if text.startswith("/*", i):
            i = text.find("*/", i) + 2
            continue
        if c in "({[":
            depth += 1
        elif c in ")}]":
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


def _strings(text: str) -> list[str]:
    return [bytes(m.group(1), "utf-8").decode("unicode_escape") for m in _STR.finditer(text)]


def _option(call: str, chain: str) -> dict:
    """One option from the inside of ``common_arg(...)`` and the chained setters after it."""
    parts = _split_top(call)
    lists = [p for p in parts if p.startswith("{")]
    lam = next((p for p in parts if p.startswith("[")), "")
    scalars = [p for p in parts if not p.startswith(("{", "["))]
    names = _strings(lists[0]) if lists else []
    neg = _strings(lists[1]) if len(lists) > 1 else []
    sig = re.search(r"\]\s*\(([^)]*)\)", lam)
    params = [s.strip() for s in sig.group(1).split(",")] if sig else []
    kind = "switch"
    if len(params) >= 2:
        t = params[1]
        kind = ("bool" if re.search(r"\bbool\b", t) else "int" if re.search(r"\bint\b", t) else
                "float" if re.search(r"\bfloat\b|\bdouble\b", t) else "str")
        if len(params) >= 3:
            kind = "pair"
    hints = [_strings(s)[0] for s in scalars[:-1] if s.startswith('"') and _strings(s)] if kind != "switch" and kind != "bool" else []
    help_src = scalars[-1] if scalars else ""
    fields = list(dict.fromkeys(re.findall(r"params\.([A-Za-z_][\w.]*)\s*(?:=(?!=)|\.push_back|\.emplace_back|\.insert)", lam)))
    sets = re.search(r"params\.[\w.]+\s*=\s*(true|false)\s*;", lam) if kind == "switch" else None
    inverted = bool(re.search(r"params\.[\w.]+\s*=\s*!\s*value\s*;", lam))
    env = re.search(r'set_env\(\s*"([^"]+)"', chain)
    ex = re.search(r"set_examples\(\s*\{([^}]*)\}", chain)
    exc = re.search(r"set_excludes\(\s*\{([^}]*)\}", chain)
    return {
        "names": names, "negated": neg, "kind": kind, "value_hint": hints[0] if hints else None,
        "fields": fields, "switch_sets": (sets.group(1) == "true") if sets else None, "inverted": inverted,
        "env": env.group(1) if env else None,
        "examples": re.findall(r"LLAMA_EXAMPLE_(\w+)", ex.group(1)) if ex else [],
        "excludes": re.findall(r"LLAMA_EXAMPLE_(\w+)", exc.group(1)) if exc else [],
        "help": " ".join("".join(_strings(help_src)).split())[:400],
    }


def mine_options(arg_cpp: str) -> list[dict]:
    """Every ``add_opt(common_arg(...))`` of ``arg.cpp`` as a dict (see the module docstring)."""
    out = []
    for m in re.finditer(r"add_opt\(\s*common_arg\s*\(", arg_cpp):
        open_outer = m.start() + len("add_opt")
        open_call = m.end() - 1
        end_call = _close(arg_cpp, open_call)
        end_outer = _close(arg_cpp, open_outer)
        out.append(_option(arg_cpp[open_call + 1:end_call], arg_cpp[end_call + 1:end_outer]))
    return out


def _literal(v: str | None):
    """A C++ initializer as JSON: numbers, booleans, strings; anything else kept as its text."""
    if v is None:
        return None
    v = v.strip()
    if v in ("true", "false"):
        return v == "true"
    if re.fullmatch(r"-?\d+", v):
        return int(v)
    if re.fullmatch(r"-?\d*\.\d+(e-?\d+)?f?|-?\d+\.\d*f?|-?\d+(\.\d*)?e-?\d+f?", v):
        return float(v.rstrip("f"))
    if v.startswith('"') and v.endswith('"'):
        return v[1:-1]
    return v


def mine_structs(common_h: str) -> dict[str, dict[str, tuple[str, str | None]]]:
    """``struct name { type field = init; ... }`` of ``common.h``: name → field → (type, init)."""
    out: dict[str, dict[str, tuple[str, str | None]]] = {}
    for m in re.finditer(r"^struct\s+(\w+)\s*\{", common_h, flags=re.M):
        body = common_h[m.end():_close(common_h, m.end() - 1)]
        fields: dict[str, tuple[str, str | None]] = {}
        depth = 0
        for line in body.splitlines():
            code = line.split("//")[0]
            if depth == 0 and "(" not in code.split("=")[0]:
                d = _FIELD_DECL.match(code)
                if d:
                    fields[d.group(2)] = (d.group(1).strip(), d.group(3))
            depth += code.count("{") - code.count("}")
        out[m.group(1)] = fields
    return out


def default_of(path: str, structs: dict, root: str = "common_params"):
    """The initializer of ``params.<path>`` (``cpuparams.n_threads``), or None when not found."""
    cur = root
    parts = path.split(".")
    for i, p in enumerate(parts):
        f = structs.get(cur, {}).get(p)
        if f is None:
            return None
        if i == len(parts) - 1:
            return _literal(f[1])
        cur = f[0].replace("struct ", "").strip()
    return None


def server_overrides(arg_cpp: str) -> dict[str, object]:
    """``params.X = V;`` in the ``ex == LLAMA_EXAMPLE_SERVER`` branch of the parser's setup."""
    m = re.search(r"else if \(ex == LLAMA_EXAMPLE_SERVER\)\s*\{", arg_cpp)
    if not m:
        return {}
    body = arg_cpp[m.end():_close(arg_cpp, m.end() - 1)]
    return {k: _literal(v) for k, v in re.findall(r"params\.([\w.]+)\s*=\s*([^;]+);", body)}


def _option_default(o: dict):
    """The option's own value when not given: a switch is off (False); a boolean pair whose lambda
    stores ``!value`` (``--kv-offload`` sets ``no_kv_offload``) is the negation of its field's
    default; anything else is its field's default."""
    fd = o["field_default"]
    if o["kind"] == "switch":
        return False
    if o["kind"] == "bool" and o["inverted"] and isinstance(fd, bool):
        return not fd
    return fd


def mine(src: Path, label: str) -> dict:
    """The table for the source tree ``src``."""
    arg_cpp = (src / "common" / "arg.cpp").read_text(encoding="utf-8")
    structs = mine_structs((src / "common" / "common.h").read_text(encoding="utf-8"))
    over = server_overrides(arg_cpp)
    opts = mine_options(arg_cpp)
    for o in opts:
        f = o["fields"][0] if o["fields"] else None
        o["field_default"] = (over[f] if f in over else default_of(f, structs)) if f else None
        o["server_default_override"] = f in over if f else False
        o["default"] = _option_default(o)
    return {"engine": "llama.cpp", "source": label,
            "files": ["common/arg.cpp", "common/common.h"],
            "mined_by": "tools/mine_llamacpp_args.py", "options": opts}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path, help="llama.cpp source tree (common/arg.cpp, common/common.h)")
    ap.add_argument("--label", required=True, help="where the tree came from (tag, sdist)")
    ap.add_argument("-o", "--output", type=Path,
                    default=Path(__file__).resolve().parents[1] / "src/infergap/data/engine_args/llama.cpp.json")
    a = ap.parse_args(argv)
    try:
        table = mine(a.src, a.label)
    except (OSError, ValueError) as e:
        print(f"{a.src}: {e}", file=sys.stderr)
        return 2
    a.output.parent.mkdir(parents=True, exist_ok=True)
    a.output.write_text(json.dumps(table, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(table['options'])} options → {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
