"""Runs are never lost to an optional step or a bad ledger (class 7 of docs/security.md): a
ledger file with damaged pages and a full disk are one line each, the command still prints its
report and exits with its own status saying the run was "not recorded"; bench records its run
before the plot, and a plot that cannot be drawn is one warning."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess

import pytest
from hostile_helpers import SNAPSHOT, cli, no_traceback
from test_hostile_markup import EvilServer

from infergap.ledger import Ledger


def _audit(db, *extra):
    return cli("audit", "--snapshot", str(SNAPSHOT), "--format", "json", "--db", str(db), *extra)


def _warnings(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if x.strip()]


def _damage(db) -> None:
    """Overwrite every page after the first two of a real ledger with random bytes (the header
    page stays valid, so SQLite opens the file and meets the damage on reading or writing)."""
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big") or 65536
    rng = random.Random(7)
    for off in range(2 * page, len(data), page):
        data[off:off + page] = rng.randbytes(min(page, len(data) - off))
    db.write_bytes(bytes(data))


def test_damaged_ledger_audit_prints_its_report_and_says_not_recorded(tmp_path):
    db = tmp_path / "ledger.sqlite3"
    for _ in range(3):
        assert _audit(db).returncode == 0
    _damage(db)
    p = _audit(db)
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["schema"] == "infergap.audit/1"
    lines = _warnings(p.stderr)
    assert len(lines) == 1 and "not recorded" in lines[0] and str(db) in lines[0] and "damaged" in lines[0], lines
    p = _audit(db, "--fail-on", "P2")  # the command's own status is kept
    no_traceback(p)
    assert p.returncode == 1 and "not recorded" in p.stderr
    h = cli("history", "--db", str(db))
    no_traceback(h)
    assert h.returncode == 2 and len(_warnings(h.stderr)) == 1 and "damaged" in h.stderr, h.stderr


@pytest.fixture
def small_disk(tmp_path):
    """A 512 KiB tmpfs under tmp_path (needs root and mount); unmounted at teardown."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs")
    d = tmp_path / "small"
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(d)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


def _fill(d) -> None:
    """Write zeros into ``d`` until its file system is full."""
    fd = os.open(d / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def test_full_disk_is_one_line_and_the_audit_keeps_its_status(small_disk):
    db = small_disk / "ledger.sqlite3"
    with Ledger(db) as led:
        led.record("audit", {"schema": "infergap.audit/1", "findings": []}, "abcd")
    _fill(small_disk)
    p = _audit(db)
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["schema"] == "infergap.audit/1"
    lines = _warnings(p.stderr)
    assert len(lines) == 1 and "not recorded" in lines[0] and "disk full" in lines[0], lines
    assert "no transaction is active" not in p.stderr


def _bench(srv, tmp_path, db, plot):
    return cli("bench", "--url", srv.url, "--concurrency", "1", "--num-prompts", "2", "--trials", "1", "--warmup", "0",
               "--output-len", "4", "--format", "json", "--output", str(tmp_path / "b.json"), "--plot", str(plot),
               "--db", str(db), timeout=180)


def test_bench_plots_a_model_id_matplotlib_would_typeset(tmp_path):
    """A ``$`` starts matplotlib's math text: a model id ``m$\\frac{x}{$`` ended bench with a
    traceback after the sweep, and the run was not recorded."""
    srv = EvilServer(model="m$\\frac{x}{$ [/]")
    db = tmp_path / "ledger.sqlite3"
    p = _bench(srv, tmp_path, db, tmp_path / "p.png")
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    with Ledger(db, readonly=True) as led:
        assert [r.kind for r in led.runs()] == ["bench"]


def test_bench_records_before_the_plot_and_a_failed_plot_is_one_warning(tmp_path):
    srv = EvilServer()
    db = tmp_path / "ledger.sqlite3"
    plot = tmp_path / "p.png"
    plot.mkdir()  # the plot cannot be written: it names a directory
    p = _bench(srv, tmp_path, db, plot)
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    with Ledger(db, readonly=True) as led:
        assert [r.kind for r in led.runs()] == ["bench"]
    lines = [x for x in _warnings(p.stderr) if "--plot" in x]
    assert len(lines) == 1 and "warning" in lines[0] and "not written" in lines[0], p.stderr
