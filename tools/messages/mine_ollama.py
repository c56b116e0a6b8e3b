"""Mine ollama's log messages (Go ``log/slog``) into ``data/messages/ollama.yaml``.

``python tools/messages/mine_ollama.py SOURCE TAG``: SOURCE is a clone of github.com/ollama/ollama
read at TAG (``v0.32.15``). Reads the non-test ``.go`` files of ``discover/``, ``llm/``, ``ml/``,
``runner/``, ``server/``, ``envconfig/``, ``cmd/``, ``llama/`` (its Go side) and ``fs/``: every
``slog.Warn/Error/Info`` (and ``…Context``) call whose message is a string literal — written as
``slog`` templates with their attribute keys — and ``fmt.Errorf``/``errors.New`` errors (what the
API and the CLI print) with a literal format. Selection rules: ``tools/messages/engines.py``; the
errors are counted with the error call sites.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.messages import common as c  # noqa: E402
from tools.messages.engines import Engine, Site, main  # noqa: E402

DIRS = ("discover", "llm", "ml", "runner", "server", "envconfig", "cmd", "llama", "fs")


def find(co: c.Checkout) -> list[Site]:
    """ollama's slog calls and error constructors with a literal message, in path/line order."""
    out: list[Site] = []
    for under in DIRS:
        for rel in co.files(under, (".go",)):
            if rel.endswith("_test.go") or "/vendor/" in rel:
                continue
            for m in c.go_messages(rel, co.read(rel)):
                if m.func.split(".")[-1].startswith("Debug"):
                    continue
                # a key that is not a plain word (``"len(headCount)"``) is not captured by name
                attrs = [a for a in m.attrs if re.fullmatch(r"\w+", a)]
                out.append(Site(rel, m.line, m.level, m.template, m.style, attrs))
    return out


#: ollama's info lines that tell what it found and decided: the devices it will use ("inference
#: compute"), memory estimates and the offload it chose.
INFO_KEEP = re.compile(r"inference compute|model weights|kv cache|compute graph|offload|vram|\bgpus?\b|"
                       r"library|memory|layers", re.IGNORECASE)

ENGINE = Engine(component="ollama", label="ollama", repo="ollama/ollama", find=find, info_keep=INFO_KEEP)

if __name__ == "__main__":
    sys.exit(main(ENGINE))
