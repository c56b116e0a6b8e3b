"""Mine the CUDA runtime and driver error codes into ``src/infergap/data/messages/cuda.yaml``.

Usage: ``python tools/messages/mine_cuda.py CUDA_ROOT TAG [--out FILE]`` where CUDA_ROOT is a CUDA
toolkit (``/usr/local/cuda-13.0``) holding ``include/driver_types.h`` (``enum cudaError``) and
``include/cuda.h`` (``enum cudaError_enum``, i.e. ``CUresult``); TAG names the toolkit release
(``13.0``).

For every code (``cudaSuccess`` / ``CUDA_SUCCESS`` left out) it writes:

- an entry matching the enum name (``cudaErrorNoDevice``, ``CUDA_ERROR_NO_DEVICE``): the form
  TensorFlow, CuPy, Numba and the driver API's own callers print;
- for runtime codes, an entry matching the text ``cudaGetErrorString`` returns, read from the
  toolkit's ``lib64/libcudart.so*`` when it is there (a pure table look-up, no GPU needed): the form
  PyTorch prints as ``CUDA error: <text>``. A text of fewer than four words (``out of memory``,
  ``invalid argument``) is written as PyTorch prints it (``CUDA error: out of memory``), since the
  bare words would match unrelated lines.

``--also-tag RUNTIME TAG`` (repeatable) mines another release's ``cudaGetErrorString`` texts too
(RUNTIME: a toolkit, a ``libcudart`` file, or an unpacked wheel that bundles one): a text that
release words differently is added as its own entry (``tags: [TAG]``), one both print lists both
tags. CUDA 10.2, for example, says ``all CUDA-capable devices are busy or unavailable`` where 13.0
says ``CUDA-capable device(s) is/are busy or unavailable``; users paste logs of old releases.

The meaning of each entry starts from the header's own comment for the code (first sentence);
curated knowledge (``tools/messages/curated/cuda.yaml``) adds checks, severities and the command
that tells more.
"""

from __future__ import annotations

import argparse
import ctypes
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.messages import common as c  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
_ENUM = re.compile(r"/\*\*(?P<doc>(?:(?!\*/).)*)\*/\s*(?P<name>(?:cudaError\w*|CUDA_ERROR_\w+))\s*=\s*(?P<code>\d+)", re.S)


def enum_codes(text: str, start: str) -> list[tuple[str, int, str, int]]:
    """(name, code, first sentence of its doc comment, line) for the enum that begins at ``start``."""
    at = text.find(start)
    if at < 0:
        raise ValueError(f"enum {start!r} not found")
    end = text.find("}", text.find("{", at))
    body = text[at:end]
    out = []
    for m in _ENUM.finditer(body):
        doc = " ".join(re.sub(r"^\s*\*\s?", "", ln) for ln in m.group("doc").splitlines()).strip()
        doc = re.sub(r"\s+", " ", re.sub(r"::|\\(?:ref|p|c) ", "", doc))
        first = re.split(r"(?<=[a-z0-9)])\.\s", doc + " ", maxsplit=1)[0].strip().rstrip(".") + "."
        out.append((m.group("name"), int(m.group("code")), first, c.line_of(text, at + m.start("name"))))
    return out


def runtime_libs(root: Path) -> list[Path]:
    """The libcudart files of a release: ``root`` itself when it is one, else ``lib64/`` or
    ``lib/`` under it (a toolkit, or an unpacked wheel that bundles the runtime, whose file name
    may carry a hash: ``libcudart-80664282.so.10.2``)."""
    if root.is_file():
        return [root]
    return [p for d in ("lib64", "lib") if (root / d).is_dir() for p in sorted((root / d).glob("libcudart*.so*"))]


def runtime_strings(root: Path) -> dict[int, str]:
    """code -> ``cudaGetErrorString(code)`` from the release's libcudart (:func:`runtime_libs`);
    {} when it cannot be loaded."""
    libs = runtime_libs(root)
    for lib in libs:
        try:
            f = ctypes.CDLL(str(lib)).cudaGetErrorString
        except (OSError, AttributeError):
            continue
        f.restype = ctypes.c_char_p
        return {code: f(code).decode() for code in range(0, 1000)}
    return {}


def _entry(eid: str, name: str, code: int, template: str, where: str, doc: str) -> c.Entry:
    return c.Entry(id=eid, level="error", template=template, where=where, style="literal",
                   cls=c.classify(f"{name} {template} {doc}", "crash"), name=name, code=code,
                   meaning=f"{name} ({code}): {doc}")


def _text_entry(name: str, code: int, text: str, doc: str, taken: set[str]) -> c.Entry:
    tmpl = text if len(text.split()) >= 4 else f"CUDA error: {text}"
    return _entry(c.make_id("cuda", "runtime_text", name, "literal", taken), name, code, tmpl,
                  f"lib64/libcudart (cudaGetErrorString({code}))", doc)


def older_texts(root: Path, rt: list[tuple[str, int, str, int]]) -> list[c.Entry]:
    """Text entries of another release's libcudart (``--also-tag``), for the codes of ``rt`` (the
    mined release's enum: the names and meanings; an older runtime has no code the newer lacks)."""
    texts = runtime_strings(root)
    if not texts:
        raise SystemExit(f"{root}: no loadable libcudart (lib64/ or lib/ libcudart*.so*)")
    taken: set[str] = set()
    return [_text_entry(name, code, texts[code], doc, taken) for name, code, doc, _line in rt
            if code and texts.get(code) not in (None, "unrecognized error code")]


def mine(root: Path) -> tuple[list[c.Entry], int]:
    """Entries of every runtime and driver error code, and the number of codes."""
    taken: set[str] = set()
    out: list[c.Entry] = []
    texts = runtime_strings(root)
    rt = enum_codes((root / "include/driver_types.h").read_text(encoding="utf-8", errors="replace"), "enum __device_builtin__ cudaError")
    drv = enum_codes((root / "include/cuda.h").read_text(encoding="utf-8", errors="replace"), "typedef enum cudaError_enum")
    codes = 0
    for name, code, doc, line in rt:
        if code == 0:
            continue
        codes += 1
        where = f"include/driver_types.h:{line}"
        out.append(_entry(c.make_id("cuda", "runtime", name, "literal", taken), name, code, name, where, doc))
        text = texts.get(code)
        if text and text != "unrecognized error code":
            out.append(_text_entry(name, code, text, doc, taken))
    for name, code, doc, line in drv:
        if code == 0:
            continue
        codes += 1
        out.append(_entry(c.make_id("cuda", "driver", name, "literal", taken), name, code, name, f"include/cuda.h:{line}", doc))
    return out, codes


def _curate(entries: list[c.Entry], curated: dict) -> list[str]:
    """Curated fields are keyed by enum name (they apply to the name entry and the text entry)."""
    by_name: dict[str, list[c.Entry]] = {}
    for e in entries:
        by_name.setdefault(e.name or "", []).append(e)
    for name, val in curated.items():
        for e in by_name.get(name, []):
            e.cls = (val or {}).get("class", e.cls)
            for k in ("check", "severity", "more"):
                if (val or {}).get(k):
                    setattr(e, k, val[k])
            if (val or {}).get("meaning"):
                e.meaning, e.curated = f"{e.name} ({e.code}): {val['meaning']}", True
    return sorted(set(curated) - set(by_name))


def main(argv: list[str] | None = None) -> int:
    """Mine, merge curated knowledge, write the catalog; prints a summary and stale curated names."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cuda_root", type=Path)
    ap.add_argument("tag")
    ap.add_argument("--out", type=Path, default=ROOT / "src/infergap/data/messages/cuda.yaml")
    ap.add_argument("--curated", type=Path, default=ROOT / "tools/messages/curated/cuda.yaml")
    ap.add_argument("--also-tag", nargs=2, action="append", default=[], metavar=("RUNTIME", "TAG"),
                    help="also mine the cudaGetErrorString texts of another release (a toolkit, a libcudart, "
                         "or a directory with lib/libcudart*.so*): its wording is added where it differs")
    a = ap.parse_args(argv)
    entries, codes = mine(a.cuda_root)
    rt = enum_codes((a.cuda_root / "include/driver_types.h").read_text(encoding="utf-8", errors="replace"),
                    "enum __device_builtin__ cudaError")
    for root, tag in a.also_tag:
        entries = c.union_tags(entries, a.tag, older_texts(Path(root), rt), tag)
    stale = _curate(entries, c.load_curated(a.curated))
    header = {"component": "cuda", "upstream": {"repo": "NVIDIA CUDA Toolkit", "tag": a.tag,
              "files": ["include/driver_types.h", "include/cuda.h", "lib64/libcudart.so (cudaGetErrorString)"]},
              "mined_by": "tools/messages/mine_cuda.py", "call_sites": codes,
              "sites_by_level": {"error_codes": codes}}
    if a.also_tag:
        header["upstream"]["also_tags"] = [t for _r, t in a.also_tag]
        header["upstream"]["also_files"] = [runtime_libs(Path(r))[0].name for r, _t in a.also_tag]
    c.write_catalog(a.out, header, entries)
    print(f"{a.out}: {len(entries)} messages for {codes} error codes")
    for s in stale:
        print(f"curated name not found (removed or renamed upstream: review): {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
