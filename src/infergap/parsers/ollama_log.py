"""Ollama's server log as evidence: the GPUs it discovered, their compute capability, how many
layers its scheduler offloaded and why (``memory.required.*`` against ``memory.available``), and a
fall-back to the CPU.

Ollama logs with Go's ``log/slog`` text handler: ``time=… level=INFO source=server.go:175
msg=offload library=cuda layers.requested=-1 layers.model=81 layers.offload=44 …
memory.available="[22.0 GiB 22.0 GiB]" memory.required.full="127.4 GiB"`` (``llm/server.go``;
``llm/memory.go`` before 0.5.x, with ``msg="offload to cuda"``); ``msg="inference compute" id=GPU-…
library=cuda compute=8.6 name="NVIDIA GeForce RTX 3090" total="24.0 GiB"`` (``discover/types.go``);
``msg="no compatible GPUs were discovered"`` (``discover/gpu.go``). Systemd's journal prefix
(``Aug 08 23:02:37 host ollama[1617]: ``) and Docker Compose's (``ollama  | ``) are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from infergap.parsers.engine_log import EngineLogFacts

#: One slog line of Ollama: ``level=… source=<file>.go:<line> msg=``; or that head alone, when a
#: terminal or a thread wrapped the record and ``msg=…`` went on to the next line.
LINE = re.compile(r"\blevel=(?:INFO|WARN|ERROR|DEBUG) source=[\w./-]{1,80}\.go:\d{1,6}(?: msg=|\s*$)")
#: A wrapped record's continuation: a line that starts with blanks, then ``key=`` (an attribute).
_CONT = re.compile(r"\s{1,40}(?:msg|[a-z][\w]{0,30}\.[\w.]{1,40}|[a-z_]{2,30})=")
_ATTR = re.compile(r'([\w.]{1,60})=("(?:[^"\\]|\\.){0,400}"|\S{0,400})')
_SIZE = re.compile(r"(\d{1,9}(?:\.\d{1,4})?) (B|KiB|MiB|GiB|TiB)")
_UNIT = {"B": 1 / 2**30, "KiB": 1 / 2**20, "MiB": 1 / 2**10, "GiB": 1.0, "TiB": 1024.0}
_NO_GPU = ("no compatible GPUs were discovered", "no GPU detected")


def is_ollama_line(line: str) -> bool:
    """True for a line of Ollama's server log.

    >>> is_ollama_line('time=2025-02-18T02:21:25.646Z level=INFO source=server.go:182 msg="enabling flash attention"')
    True
    >>> is_ollama_line('May 19 10:50:36 h ollama[1995]: time=2025-05-19T10:50:36.626+05:00 level=INFO source=server.go:168')
    True
    """
    return "level=" in line and "source=" in line and bool(LINE.search(line))


def _attrs(line: str) -> dict[str, str]:
    return {k: v.strip('"') for k, v in _ATTR.findall(line[line.find("msg="):])}


def _gib(text: str) -> float | None:
    """GiB of every size in ``text`` summed (``[22.0 GiB 22.0 GiB]`` is 44.0), or None."""
    sizes = [float(n) * _UNIT[u] for n, u in _SIZE.findall(text or "")]
    return round(sum(sizes), 2) if sizes else None


def _offload(args: dict, a: dict[str, str]) -> None:
    """The scheduler's offload line: layers placed, memory it needs and has."""
    for key, name in (("layers.offload", "offloaded_layers"), ("layers.model", "model_layers")):
        if a.get(key, "").lstrip("-").isdigit():
            args[name] = int(a[key])
    for key, name in (("memory.available", "memory_available_GiB"), ("memory.required.full", "memory_required_full_GiB"),
                      ("memory.required.partial", "memory_required_partial_GiB"), ("memory.required.kv", "memory_required_kv_GiB")):
        if key in a:
            args[name] = _gib(a[key])
    if a.get("library"):
        args["library"] = a["library"]


def records(lines: Iterable[str]) -> Iterable[tuple[int, str]]:
    """(number of physical lines, logical line): a record wrapped over several lines (each
    continuation starts with blanks and an attribute, ``  layers.model=63 layers.offload=49 …``, as
    a terminal or an issue's text box wraps it) joined back into one line.

    >>> [r for _n, r in records(["t level=INFO source=server.go:168 msg=offload library=cuda", " layers.model=63 layers.offload=49"])]
    ['t level=INFO source=server.go:168 msg=offload library=cuda layers.model=63 layers.offload=49']
    """
    cur, n = None, 0
    for line in lines:
        if cur is not None and _CONT.match(line) and "level=" not in line:
            cur, n = cur.rstrip("\n") + " " + line.strip(), n + 1
            continue
        if cur is not None:
            yield n, cur
        cur, n = line, 1
    if cur is not None:
        yield n, cur


def parse_ollama_log(lines: Iterable[str]) -> EngineLogFacts:
    """Parse an Ollama server log into :class:`EngineLogFacts` (``engine`` ``ollama``; ``args``:
    ``offloaded_layers``, ``model_layers``, ``memory_*_GiB``, ``library``, ``gpu_name``,
    ``compute_capability``, ``no_gpu``).

    The offload line of ollama/ollama#9181 (``tests/fixtures/evidence/ollama-9181-partial-offload.log``):

    >>> f = parse_ollama_log(['time=2025-02-18T02:21:25.646Z level=INFO source=server.go:130 msg=offload library=cuda '
    ...     'layers.requested=-1 layers.model=81 layers.offload=44 memory.available="[22.0 GiB 22.0 GiB 22.0 GiB 22.0 GiB]" '
    ...     'memory.required.full="127.4 GiB"'])
    >>> f.args["offloaded_layers"], f.args["model_layers"], f.args["memory_available_GiB"], f.args["memory_required_full_GiB"]
    (44, 81, 88.0, 127.4)
    """
    f = EngineLogFacts(engine="ollama")
    args = f.args
    for n, line in records(lines):
        f.lines += n
        if "msg=" not in line:
            continue
        a = _attrs(line)
        msg = a.get("msg", "")
        if msg in ("offload", "offload to cuda", "offload to gpu") or "layers.offload=" in line:
            _offload(args, a)
        elif msg == "inference compute":
            if a.get("name") and "gpu_name" not in args:
                args["gpu_name"] = a["name"]
            if a.get("compute") and "compute_capability" not in args:
                args["compute_capability"] = a["compute"]
            if a.get("library") == "cpu":
                args["no_gpu"] = True
        elif any(w in msg for w in _NO_GPU):
            args["no_gpu"] = True
        elif msg.startswith("Ollama") or msg == "server config":
            v = re.search(r"version=(\S{1,40})", line)
            if v and f.version is None:
                f.version = v.group(1).strip('"')
    return f
