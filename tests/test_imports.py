"""Imports on demand: ``infergap --help`` imports no command's implementation, and an audit never
imports the bench client, aiohttp, numpy, matplotlib or the HTML templates. Read from
``python -X importtime`` of the real entry point in a subprocess (every module imported, however
indirectly, is listed there), so an import added anywhere on the path fails here."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import HOSTS, ROOT

#: Never imported by an audit (a snapshot or this host): the benchmark side and the plots, and
#: Typer's pydantic coercion layer (the command line coerces the audit's options itself:
#: :mod:`infergap.cli.coercion`).
NOT_IN_AUDIT = ("numpy", "aiohttp", "matplotlib", "jinja2", "uvloop", "orjson", "infergap.bench", "infergap.render.plots",
                "infergap.render.html", "asyncio", "typer._adapters")


def imported(*args: str) -> tuple[set[str], str]:
    """The modules a run of ``python -m infergap ARGS`` imports, and what it printed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "infergap", *args], capture_output=True, text=True,
                       env=env, timeout=120, stdin=subprocess.DEVNULL)
    mods = {line.split("|")[2].strip() for line in p.stderr.splitlines()
            if line.startswith("import time:") and line.count("|") == 2 and "self [us]" not in line}
    assert mods, f"no -X importtime output: {p.stderr[-500:]}"
    return mods, p.stdout + "".join(x for x in p.stderr.splitlines(keepends=True) if not x.startswith("import time:"))


def _hits(mods: set[str], banned: tuple[str, ...]) -> list[str]:
    return sorted(m for m in mods for b in banned if m == b or m.startswith(b + "."))


def test_help_imports_only_the_command_line():
    mods, out = imported("--help")
    assert "audit" in out and "bench" in out  # the commands are listed
    ours = sorted(m for m in mods if m.split(".")[0] == "infergap")
    allowed = {"infergap", "infergap.errors", "infergap.cli"}
    extra = [m for m in ours if m not in allowed and not m.startswith("infergap.cli.")]
    assert not extra, f"--help imported command implementations: {extra}"
    assert not _hits(mods, NOT_IN_AUDIT + ("pydantic.main", "infergap.snapshot", "sqlite3")), _hits(mods, NOT_IN_AUDIT)


@pytest.mark.parametrize("args", [
    ["audit", "--snapshot", str(HOSTS / "seed-8x-rtxpro6000")],
    ["audit", "--snapshot", str(HOSTS / "h200-2gpu-collect.tar.gz"), "--format", "json"],
    ["audit", "--format", "md"],
], ids=["seed", "h200-2gpu-json", "live-md"])
def test_audit_never_imports_the_bench_side(args, tmp_path):
    mods, out = imported(*args, "-o", str(tmp_path / "report"))
    assert (tmp_path / "report").stat().st_size > 0, out
    assert "infergap.audit" in mods and "infergap.investigators" in mods  # it did run an audit
    hits = _hits(mods, NOT_IN_AUDIT)
    assert not hits, f"audit {' '.join(args[1:2])} imported {hits}"


def test_the_reader_sees_a_banned_import():
    """The check can fail: a run that does use the bench side shows numpy and aiohttp."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-X", "importtime", "-c", "import infergap.bench.runner"], capture_output=True,
                       text=True, env=env, timeout=120)
    mods = {line.split("|")[2].strip() for line in p.stderr.splitlines() if line.count("|") == 2}
    assert _hits(mods, NOT_IN_AUDIT)[:1] and {"numpy", "aiohttp", "infergap.bench.runner"} <= mods


def test_the_nvml_check_agrees_with_pynvml():
    """:func:`infergap.snapshot.probes.nvml_library_missing` says what ``pynvml.nvmlInit`` finds:
    the library missing exactly when NVML fails with NVML_ERROR_LIBRARY_NOT_FOUND."""
    import pynvml

    from infergap.snapshot.probes import nvml_library_missing, nvml_probe

    try:
        pynvml.nvmlInit()
        missing = False
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as e:
        missing = isinstance(e, pynvml.NVMLError_LibraryNotFound)
    assert nvml_library_missing() is missing
    if missing:
        assert nvml_probe() == {"available": False, "error": "NVML init failed: NVML Shared Library Not Found"}


def test_a_live_audit_without_the_nvml_library_does_not_import_pynvml(tmp_path):
    """Importing the NVML bindings costs about 0.1 s: a host without the driver's library skips it."""
    from infergap.snapshot.probes import nvml_library_missing

    if not nvml_library_missing():
        pytest.skip("this host has libnvidia-ml: the probe imports pynvml, as it must")
    mods, out = imported("audit", "--format", "json", "-o", str(tmp_path / "report.json"))
    assert "infergap.snapshot.probes" in mods and (tmp_path / "report.json").stat().st_size > 0, out
    assert "pynvml" not in mods


def test_the_entry_point_tunes_the_collector_before_the_imports():
    """``infergap`` (``infergap.__main__:run``) sets the young-generation threshold before it
    imports the command line, so Typer's and pydantic's imports run with it too."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    code = ("import atexit, gc, sys\n"
            "atexit.register(lambda: print(gc.get_threshold()[0], 'typer' in sys.modules))\n"
            "from infergap.__main__ import GC_GEN0_THRESHOLD, run\n"
            "assert 'typer' not in sys.modules and gc.get_threshold()[0] != GC_GEN0_THRESHOLD\n"
            "sys.argv = ['infergap', '--version']\n"
            "run()\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    from infergap.__main__ import GC_GEN0_THRESHOLD

    assert p.returncode == 0 and p.stdout.splitlines()[-1] == f"{GC_GEN0_THRESHOLD} True", p.stdout + p.stderr
    assert "infergap " in p.stdout  # the command ran
