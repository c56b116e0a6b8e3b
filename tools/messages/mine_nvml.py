"""Mine NVML's return codes into ``src/infergap/data/messages/nvml.yaml``.

Usage: ``python tools/messages/mine_nvml.py PYNVML_PY VERSION [--out FILE]`` where PYNVML_PY is
the ``pynvml.py`` of NVIDIA's nvidia-ml-py package (https://pypi.org/project/nvidia-ml-py/) and
VERSION its release (``13.615.71``). That module carries the ``nvmlReturn_t`` codes of ``nvml.h``
(``NVML_ERROR_* = N``) and the text of each known code (``NVMLError._errcode_to_string``, the
strings ``nvmlErrorString`` returns).

For every code (``NVML_SUCCESS`` left out) it writes an entry matching the constant
(``NVML_ERROR_GPU_IS_LOST``), one matching the exception class pynvml raises for it
(``NVMLError_GpuIsLost``, the name a Python traceback shows) and, for a text of three words or
more, one matching the text (``Uninitialized`` or ``Not Supported`` alone would match unrelated
lines, so the names carry those). Curated knowledge: ``tools/messages/curated/nvml.yaml`` keyed by
constant name.
"""

from __future__ import annotations

import argparse
import ast
import string
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.messages import common as c  # noqa: E402
from tools.messages.mine_cuda import _curate  # noqa: E402  (curated fields keyed by enum name)

ROOT = Path(__file__).resolve().parents[2]


def codes_and_texts(text: str) -> tuple[dict[str, tuple[int, int]], dict[str, str]]:
    """(constant -> (code, line)), (constant -> text) read from pynvml.py's source with :mod:`ast`."""
    tree = ast.parse(text)
    codes: dict[str, tuple[int, int]] = {}
    texts: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.startswith("NVML_ERROR_") and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int):
                codes[name] = (node.value.value, node.lineno)
            if name == "_errcode_to_string" and isinstance(node.value, ast.Dict):
                for k, v in zip(node.value.keys, node.value.values):
                    if isinstance(k, ast.Name) and isinstance(v, ast.Constant):
                        texts[k.id] = str(v.value)
    return codes, texts


def class_name(const: str) -> str:
    """pynvml's exception class of a constant: ``NVML_ERROR_GPU_IS_LOST`` → ``NVMLError_GpuIsLost``."""
    return "NVMLError_" + string.capwords(const.replace("NVML_ERROR_", ""), "_").replace("_", "")


def mine(text: str) -> list[c.Entry]:
    """Entries of every NVML error code (constant, exception class, text)."""
    codes, texts = codes_and_texts(text)
    taken: set[str] = set()
    out = []
    for const, (code, line) in sorted(codes.items(), key=lambda kv: kv[1][0]):
        desc = texts.get(const, "")
        where = f"pynvml.py:{line}"
        meaning = f"{const} ({code})" + (f": {desc}" if desc else "")
        cls = c.classify(f"{const} {desc}".replace("_", " "), "internal")
        forms = [const, class_name(const)] + ([desc] if len(desc.split()) >= 3 else [])
        for form in forms:
            out.append(c.Entry(id=c.make_id("nvml", "return", form, "literal", taken), level="error", template=form,
                               where=where, style="literal", cls=cls, meaning=meaning, name=const, code=code))
    return out


def main(argv: list[str] | None = None) -> int:
    """Mine, merge curated knowledge, write the catalog."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pynvml", type=Path)
    ap.add_argument("version")
    ap.add_argument("--out", type=Path, default=ROOT / "src/infergap/data/messages/nvml.yaml")
    ap.add_argument("--curated", type=Path, default=ROOT / "tools/messages/curated/nvml.yaml")
    a = ap.parse_args(argv)
    entries = mine(a.pynvml.read_text(encoding="utf-8"))
    stale = _curate(entries, c.load_curated(a.curated))
    for e in entries:
        e.meaning = e.meaning.replace(f"{e.name} ({e.code}): {e.name} ({e.code})", f"{e.name} ({e.code})")
    n = len({e.name for e in entries})
    header = {"component": "nvml", "upstream": {"repo": "pypi:nvidia-ml-py", "tag": a.version, "files": ["pynvml.py"]},
              "mined_by": "tools/messages/mine_nvml.py", "call_sites": n, "sites_by_level": {"error_codes": n}}
    c.write_catalog(a.out, header, entries)
    print(f"{a.out}: {len(entries)} messages for {n} return codes")
    for s in stale:
        print(f"curated name not found (review): {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
