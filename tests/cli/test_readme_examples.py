"""Every ``infergap`` command the README shows runs, in a fresh virtual environment that holds the
project and exactly the distributions its ``pyproject.toml`` declares (with their own requirements,
recursively) — so a dependency missing from ``pyproject.toml`` fails here, as it would for a new
user after the README's install (``roofline --weights q4_k`` needs ``gguf``). The declared
distributions are linked in from the environment running the tests rather than downloaded again
(a fresh ``pip install`` of them takes minutes on a slow registry connection); the project itself is
installed with pip, as the README does.

The README's placeholders are replaced by real inputs: snapshots and pastes from
``tests/fixtures``, a ``config.json`` and a GGUF file written here, outputs into a temporary
directory that later commands read (``plan --audit audit.json``). Commands that need a serving
engine are run against a closed port on 127.0.0.1, where each must end with one clear line (its
option spelling is what is under test; the engine paths are tested against real servers in
tests/bench and tests/plan). ``fix --apply`` is never run: it would change this host's settings.
Each command must exit 0, 1 or 2 without a traceback, and a 2 must carry a one-line reason.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, HOSTS, ROOT
from tests.roofline.test_gguf import _write as write_gguf

pytestmark = pytest.mark.slow

_NEVER = ("fix --apply",)  # changes the host it runs on


def readme_commands() -> list[str]:
    """The ``infergap …`` lines of the README's ``bash`` blocks, comments and ``sudo`` removed."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if line.startswith("sudo "):
                line = line[5:]
            if line.startswith("infergap "):
                out.append(line)
    return out


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _closure(requirements: list[str]) -> list[importlib.metadata.Distribution]:
    """The installed distributions ``requirements`` name, with their requirements, recursively
    (markers evaluated for this interpreter, extras of a requirement followed). Raises
    ``pytest.fail`` for a declared distribution that is not installed here."""
    from packaging.requirements import Requirement

    seen: dict[str, importlib.metadata.Distribution] = {}
    todo = [(Requirement(r), ()) for r in requirements]
    while todo:
        req, extras = todo.pop()
        if req.marker and not any(req.marker.evaluate({"extra": e}) for e in (extras or ("",))):
            continue
        key = req.name.lower().replace("_", "-")
        if key in seen:
            continue
        try:
            dist = importlib.metadata.distribution(req.name)
        except importlib.metadata.PackageNotFoundError:
            pytest.fail(f"{req.name}: declared by pyproject.toml (or by a dependency) but not installed where the tests run")
        seen[key] = dist
        todo += [(Requirement(r), tuple(req.extras)) for r in dist.requires or []]
    return list(seen.values())


def _link_distribution(dist: importlib.metadata.Distribution, site: Path) -> None:
    """Link each top-level entry of ``dist`` (package, module, ``.dist-info``, ``.libs``) into ``site``."""
    base = Path(dist.locate_file(""))
    for top in sorted({Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}):
        target, link = base / top, site / top
        if target.exists() and not link.exists() and not top.endswith(".pth") and top != "__pycache__":
            link.symlink_to(target)


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> Path:
    """A new virtual environment with the project (``pip install -e`` of a copy, so nothing is written
    into the checkout) and only its declared dependencies; returns the venv's ``infergap``."""
    base = tmp_path_factory.mktemp("fresh")
    src = base / "infergap"
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    venv = base / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip())
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    for dist in _closure(declared):
        _link_distribution(dist, site)
    r = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "-e", str(src)],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.fail(f"installing the project failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return venv / "bin" / "infergap"


def _inputs(tmp: Path) -> dict[str, str]:
    """README placeholder → real path (or URL)."""
    cfg = tmp / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                               "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
                               "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}))
    gguf = write_gguf(tmp / "Llama-3.1-8B-Instruct-Q4_K_M.gguf")
    ev = FIXTURES / "evidence"
    port = _closed_port()
    return {
        "--snapshot snap.tar.gz": f"--snapshot {HOSTS / 'h200-2gpu-collect.tar.gz'}",
        "--output snap.tar.gz": f"--output {tmp / 'snap.tar.gz'}",
        "topo.txt": str(ev / "topo-667-pxb-pix.txt"),
        "nccl.log": str(ev / "nccl-1817-shm-8gpu.log"),
        "sglang.log": str(ev / "sglang-26248-kv-full.log"),
        "bug-report.txt": str(ev / "nccl-1537-gdr-disabled.log"),
        "./config.json": str(cfg),
        "roofline.json": str(FIXTURES / "real-gpu" / "h200-llama-server" / "healthy" / "roofline.json"),
        "bench.json --evidence": f"{FIXTURES / 'real-gpu' / 'h200-llama-server' / 'healthy' / 'bench.json'} --evidence",
        "./Llama-3.1-8B-Instruct-Q4_K_M.gguf": str(gguf),
        "mooncake:conversation_trace.jsonl": f"mooncake:{FIXTURES / 'traces' / 'mooncake_conversation_head.jsonl'}",
        "http://127.0.0.1:8000": f"http://127.0.0.1:{port}",
        "http://127.0.0.1:30000": f"http://127.0.0.1:{port}",
    }


def _argv(line: str, subs: dict[str, str]) -> list[str]:
    """The command's arguments with the placeholders replaced; outputs named bare (audit.json,
    bench.svg) land in the working directory, which the test makes a temporary one."""
    for k, v in subs.items():
        line = line.replace(k, v)
    return shlex.split(line)[1:]


def test_readme_lists_commands() -> None:
    cmds = readme_commands()
    assert any(c.startswith("infergap audit") for c in cmds) and any("roofline" in c for c in cmds), cmds


def test_every_readme_command_runs_in_a_fresh_install(fresh_venv: Path, tmp_path: Path) -> None:
    subs = _inputs(tmp_path)
    env = {**os.environ, "INFERGAP_DB": str(tmp_path / "ledger.sqlite3"), "NO_COLOR": "1", "COLUMNS": "100"}
    failures = []
    for line in readme_commands():
        if any(n in line for n in _NEVER):
            continue
        argv = _argv(line, subs)
        r = subprocess.run([str(fresh_venv), *argv], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env,
                           stdin=subprocess.DEVNULL)
        err = r.stderr.strip()
        bad = (r.returncode not in (0, 1, 2) or "Traceback" in r.stderr + r.stdout or "No such option" in err
               or (r.returncode == 2 and (not err or len(err.splitlines()) > 3)))
        if bad:
            failures.append(f"$ {line}\n  exit {r.returncode}\n  stderr: {err[-1500:]}\n  stdout: {r.stdout.strip()[-600:]}")
    assert not failures, "README commands that fail for a new user:\n" + "\n".join(failures)
