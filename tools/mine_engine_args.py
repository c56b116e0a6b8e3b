"""Mine vLLM's and SGLang's server argument tables into ``src/infergap/data/engine_args/<engine>.json``.

Usage::

    python tools/mine_engine_args.py vllm --python build/vllm/bin/python --label "vLLM 0.32.0 (...)"
    python tools/mine_engine_args.py sglang --python build/vllm/bin/python --source /path/sglang-0.5.23 \\
        --label "SGLang 0.5.23 (...)"

Both engines build their command line with ``argparse`` from their own definitions: vLLM's
``vllm serve`` parser is ``make_arg_parser`` (``vllm/entrypoints/launchers/cli_args.py``: the
frontend's options, then ``AsyncEngineArgs.add_cli_args`` of ``vllm/engine/arg_utils.py``, whose
fields, defaults and help come from the config dataclasses); SGLang's is
``ServerArgs.add_cli_args`` (``sglang/srt/server_args.py``, the ``A[T, Arg(...)]`` fields of
``sglang/srt/arg_groups/fields/*.py``). Reading that Python as text would mean re-implementing
both dataclass-to-argparse layers, so this script runs the engine's own parser builder in the
engine's environment (``--python``; ``--source`` puts a release tree first on its path, for
SGLang the package directory of the unpacked wheel or ``python/`` of a checkout at the tag) and
walks the ``argparse`` actions it made. Only the argument definitions are loaded (for SGLang
the top-level ``sglang/__init__.py``, which pulls the frontend language and IPython, is
bypassed); no server is started, nothing is downloaded.

Each option: its names (``--max-num-seqs``), the negated names of a ``--x/--no-x`` pair, the
kind (``switch``: takes no value; ``bool``: a pair; ``int``, ``float``, ``str``; ``list``: one or
more values), the default (``null`` where the engine decides at start-up: vLLM's
``--max-num-seqs`` and ``--max-num-batched-tokens`` come from the usage context and the
hardware), the choices, the ``argparse`` group (vLLM: the config class), and the help text
(``hidden``: accepted but left out of ``--help``).
Re-run it for a new release; the label is written as the table's ``source``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Runs in the engine's environment: builds its parser, prints the actions as JSON.
WALKER = r'''
import argparse, json, sys, types
engine, source = sys.argv[1], sys.argv[2]
if source:
    sys.path.insert(0, source)
if engine == "vllm":
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    import vllm
    version = vllm.__version__
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
else:
    pkg = types.ModuleType("sglang")
    pkg.__path__ = [source.rstrip("/") + "/sglang"] if source else []
    sys.modules["sglang"] = pkg
    from sglang.srt.server_args import ServerArgs
    import re
    import glob
    version = "unknown"
    for meta in glob.glob(source.rstrip("/") + "/sglang-*.dist-info/METADATA") + glob.glob(source.rstrip("/") + "/PKG-INFO"):
        m = re.search(r"^Version: (\S+)", open(meta).read(), re.M)
        version = m.group(1) if m else version
    parser = argparse.ArgumentParser(prog="python -m sglang.launch_server")
    ServerArgs.add_cli_args(parser)
group = {}
for g in parser._action_groups:
    for a in g._group_actions:
        group[id(a)] = g.title
def plain(v):
    if v is argparse.SUPPRESS:
        return None
    try:
        json.dumps(v)
        return v
    except (TypeError, ValueError):
        return repr(v)
out = []
for a in parser._actions:
    if not a.option_strings or isinstance(a, argparse._HelpAction):
        continue
    t = getattr(a.type, "__name__", None) if a.type is not None else None
    out.append({"names": list(a.option_strings), "action": type(a).__name__, "nargs": a.nargs if not isinstance(a.nargs, int) else a.nargs,
                "type": t, "const": plain(a.const), "default": plain(a.default),
                "choices": [plain(c) for c in a.choices] if a.choices else None, "dest": a.dest,
                "group": group.get(id(a)), "help": (a.help or "")[:2000] if a.help is not argparse.SUPPRESS else "",
                "hidden": a.help is argparse.SUPPRESS})
print(json.dumps({"version": version, "actions": out, "help": parser.format_help()}))
'''

#: The files whose definitions the parser is built from, per engine (the table's ``files``).
FILES = {"vllm": ["vllm/entrypoints/launchers/cli_args.py", "vllm/engine/arg_utils.py", "vllm/config/*.py"],
         "sglang": ["sglang/srt/server_args.py", "sglang/srt/arg_groups/arg_utils.py", "sglang/srt/arg_groups/fields/*.py"]}


def kind_of(act: dict) -> str:
    """The table's kind for one walked ``argparse`` action (see the module docstring).

    >>> kind_of({"action": "BooleanOptionalAction", "nargs": 0, "type": None})
    'bool'
    >>> kind_of({"action": "_StoreAction", "nargs": None, "type": "human_readable_int"})
    'int'
    >>> kind_of({"action": "_StoreAction", "nargs": "+", "type": "str"})
    'list'
    """
    a, nargs, t = act["action"], act["nargs"], act.get("type") or ""
    if a == "BooleanOptionalAction":
        return "bool"
    if nargs == 0 or a.endswith(("StoreTrueAction", "StoreFalseAction", "StoreConstAction", "CountAction")):
        return "switch"
    if nargs in ("+", "*") or (isinstance(nargs, int) and nargs > 1):
        return "list"
    if t == "float":
        return "float"
    if t == "int" or (t.startswith("human_readable_int") and "auto" not in t):
        return "int"
    return "str"


def option(act: dict) -> dict:
    """One table entry (the shape ``infergap.parsers.engine_args`` reads) from a walked action."""
    k = kind_of(act)
    neg = [n for n in act["names"] if n.startswith("--no-")] if k == "bool" else []
    names = [n for n in act["names"] if n not in neg]
    sets = None
    if k == "switch":
        sets = False if act["action"].endswith("StoreFalseAction") else True
    default = act["default"]
    if k == "switch" and default is None:
        default = not sets if isinstance(sets, bool) else False
    return {"names": names, "negated": neg, "kind": k, "fields": [act["dest"]], "switch_sets": sets, "env": None,
            "examples": [], "excludes": [], "group": act["group"], "choices": act["choices"], "help": act["help"],
            "hidden": act.get("hidden", False), "default": default}


def mine(engine: str, python: Path, source: Path | None, timeout_s: float = 900.0) -> dict:
    """Run the walker with ``python`` and return ``{"version", "options", "help"}``. Raises
    RuntimeError with the child's last output when it fails."""
    r = subprocess.run([str(python.absolute()), "-c", WALKER, engine, str(source.absolute()) if source else ""], capture_output=True, text=True,
                       timeout=timeout_s, stdin=subprocess.DEVNULL, cwd="/")
    if r.returncode != 0:
        raise RuntimeError(f"{python}: the {engine} parser could not be built:\n{r.stderr[-3000:]}")
    got = json.loads(r.stdout.strip().splitlines()[-1])
    return {"version": got["version"], "options": [option(a) for a in got["actions"]], "help": got["help"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("engine", choices=("vllm", "sglang"))
    ap.add_argument("--python", type=Path, required=True, help="the Python of an environment the engine's parser imports in")
    ap.add_argument("--source", type=Path, help="release tree put first on that Python's path (SGLang: the unpacked wheel, sglang/ beside its dist-info; or python/ of a checkout, with PKG-INFO)")
    ap.add_argument("--label", required=True, help="the release and where its files came from")
    ap.add_argument("--tag", required=True, help="the release tag (v0.32.0)")
    ap.add_argument("-o", "--output", type=Path, help="default: src/infergap/data/engine_args/<engine>.json")
    ap.add_argument("--help-out", type=Path, help="also write the parser's --help text here")
    a = ap.parse_args(argv)
    try:
        got = mine(a.engine, a.python, a.source)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print(f"mine_engine_args: {e}", file=sys.stderr)
        return 1
    if got["version"].lstrip("v") != a.tag.lstrip("v"):
        print(f"mine_engine_args: the environment holds {a.engine} {got['version']}, not {a.tag}", file=sys.stderr)
        return 1
    out = a.output or ROOT / "src" / "infergap" / "data" / "engine_args" / f"{a.engine}.json"
    doc = {"engine": a.engine, "source": a.label, "tag": a.tag, "files": FILES[a.engine], "mined_by": "tools/mine_engine_args.py",
           "options": got["options"]}
    out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if a.help_out:
        a.help_out.write_text(got["help"], encoding="utf-8")
    print(f"wrote {out}: {len(doc['options'])} options of {a.engine} {got['version']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
