"""Every YAML file goes through infergap.datafile: an alias bomb, deep nesting and a recursive
document are refused with one line naming the file (and the call returns), with the C loader and
with the pure one; the packaged files parse to what PyYAML's own safe loader gives, and are served
from the cache once parsed, a damaged or foreign entry being parsed again."""

from __future__ import annotations

import os

import pytest
import yaml

from infergap import datafile
from infergap.errors import UserError
from infergap.evidence.signatures import load_catalog as load_signatures
from infergap.plan import load_catalog as load_levers
from tests.conftest import HOSTS, run_cli


def _bomb() -> str:
    """The billion-laughs document as a lever catalog: 9 levels of 9 aliases, 9^9 (387 million)
    strings once expanded, in under 400 bytes."""
    rows = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    rows += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    return "levers:\n- " + "\n  ".join(rows) + "\n"


BOMB = _bomb()
DEEP_FLOW = "levers: " + "[" * 5000 + "]" * 5000
DEEP_BLOCK = "levers:\n" + "".join(" " * (i + 1) + f"k{i}:\n" for i in range(100)) + " " * 101 + "x\n"
RECURSIVE = "levers: &a [*a]\n"


@pytest.fixture(params=["C", "pure"])
def loader(request, monkeypatch):
    """Each case with libyaml's loader and with the pure-Python fallback."""
    if request.param == "C":
        if not hasattr(yaml, "CSafeLoader"):
            pytest.skip("PyYAML built without libyaml")
        monkeypatch.setattr(datafile, "LOADER", yaml.CSafeLoader)
    else:
        monkeypatch.setattr(datafile, "LOADER", yaml.SafeLoader)
    return request.param


@pytest.mark.parametrize("text,problem", [
    (BOMB, "YAML aliases are not accepted in this file"),
    (DEEP_FLOW, "nest"),
    (DEEP_BLOCK, "nested deeper than 64 levels"),
    (RECURSIVE, "YAML alias"),
])
def test_hostile_catalog_is_refused_in_one_line(tmp_path, loader, text, problem):
    p = tmp_path / "catalog.yaml"
    p.write_text(text)
    for load in (load_levers, load_signatures):
        with pytest.raises(UserError) as e:
            load(p)
        msg = str(e.value)
        assert msg.startswith(f"{p}: ") and problem in msg and "\n" not in msg, msg


def test_alias_bomb_is_refused_even_where_aliases_are_allowed(loader):
    """The packaged files may use aliases; the expansion is still capped, measured without
    expanding anything."""
    with pytest.raises(UserError, match=r"^x\.yaml: more than 4000000 YAML nodes once its aliases are expanded"):
        datafile.loads(BOMB, "x.yaml", limits=datafile.SHIPPED)
    with pytest.raises(UserError, match=r"^x\.yaml: a YAML alias inside its own anchor"):
        datafile.loads(RECURSIVE, "x.yaml", limits=datafile.SHIPPED)
    deep_by_alias = "a: &a " + "[" * 40 + "1" + "]" * 40 + "\nb: " + "[" * 30 + "*a" + "]" * 30 + "\n"
    with pytest.raises(UserError, match="nested deeper than 64 levels once its aliases are expanded"):
        datafile.loads(deep_by_alias, "x.yaml", limits=datafile.SHIPPED)
    assert datafile.loads("a: &a [1, 2]\nb: *a\n", "x.yaml", limits=datafile.SHIPPED) == {"a": [1, 2], "b": [1, 2]}


def test_plan_command_refuses_the_bomb(tmp_path):
    p = tmp_path / "bomb.yaml"
    p.write_text(BOMB)
    r = run_cli("plan", "--catalog", str(p), timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == (
        f"infergap: error: {p}: YAML aliases are not accepted in this file (an alias of the anchor at line 2, column 7); refused"), r.stderr


@pytest.mark.parametrize("data,problem", [
    (b"levers: [\xff\xfe]", "not text (not UTF-8)"),
    ("levers: [", "not valid YAML (while parsing a flow node: "),  # the rest is the loader's own wording
    ("a: 1\n---\nb: 2\n", "not valid YAML (expected a single document in the stream: but found another document at line 2, column 1)"),
    ("d: 2025-13-45\n", "not valid YAML (ValueError"),
])
def test_bad_yaml_is_one_line(tmp_path, loader, data, problem):
    p = tmp_path / "bad.yaml"
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    with pytest.raises(UserError) as e:
        datafile.read(p)
    assert str(e.value).startswith(f"{p}: ") and problem in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_size_cap(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_text("a: " + "x" * 2000 + "\n")
    with pytest.raises(UserError, match=r"big\.yaml: larger than 0 MiB"):
        datafile.read(p, limits=datafile.Limits(max_bytes=1000, max_depth=64, max_nodes=100, max_aliases=0))


def _shipped() -> list[str]:
    from importlib import resources

    base = resources.files("infergap") / "data"
    names = [p.name for p in base.iterdir() if p.name.endswith(".yaml")]
    msgs = base / "messages"
    if msgs.is_dir():
        names += [f"messages/{p.name}" for p in msgs.iterdir() if p.name.endswith(".yaml")]
    return sorted(names)


@pytest.mark.parametrize("name", _shipped())
def test_packaged_files_parse_as_pyyaml_does(name, loader, tmp_path, monkeypatch):
    monkeypatch.setenv("INFERGAP_CACHE_DIR", str(tmp_path))
    raw = datafile.packaged_bytes(name)
    assert datafile.packaged(name) == yaml.safe_load(raw.decode("utf-8"))


def test_cache_serves_unchanged_files_and_ignores_bad_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERGAP_CACHE_DIR", str(tmp_path / "c"))
    first = datafile.packaged("checks.yaml")
    entries = list((tmp_path / "c").glob("checks.yaml.*.marshal"))
    assert len(entries) == 1 and oct(os.stat(tmp_path / "c").st_mode & 0o777) == "0o700"
    key = datafile._key(datafile.packaged_bytes("checks.yaml"))
    assert datafile._cache_get(entries[0], key) == first
    assert datafile._cache_get(entries[0], "another key") is datafile._MISS  # a changed file misses
    entries[0].write_bytes(b"\x00damaged")
    assert datafile._cache_get(entries[0], key) is datafile._MISS
    assert datafile.packaged("checks.yaml") == first  # parsed again, and the entry rewritten
    assert datafile._cache_get(entries[0], key) == first
    stale = tmp_path / "c" / ("checks.yaml." + "0" * 32 + ".marshal")
    stale.write_bytes(b"old")
    entries[0].unlink()
    datafile.packaged("checks.yaml")
    assert not stale.exists()  # one entry per file: the stale one removed when the new one is written


def test_cache_off_and_unwritable(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERGAP_CACHE_DIR", "")
    assert datafile.cache_dir() is None and datafile.packaged("pcie.yaml")["generations"]
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("INFERGAP_CACHE_DIR", str(blocker / "sub"))
    assert datafile.packaged("pcie.yaml")["generations"]  # the cache is optional: no error


def test_audit_runs_from_the_cache(tmp_path):
    """A second audit of the same snapshot reads every packaged file from the cache (entries
    unchanged) and prints the same report."""
    env = {"INFERGAP_CACHE_DIR": str(tmp_path / "c")}
    a = run_cli("audit", "--snapshot", str(HOSTS / "seed-8x-rtxpro6000"), "--format", "json", env=env)
    entries = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "c").glob("*.marshal")}
    assert {"checks.yaml", "signatures.yaml", "gpus.yaml"} <= {n.split(".yaml")[0] + ".yaml" for n in entries}
    b = run_cli("audit", "--snapshot", str(HOSTS / "seed-8x-rtxpro6000"), "--format", "json", env=env)
    assert a.returncode == b.returncode and a.returncode in (0, 1), a.stderr

    def strip(s):
        import json

        d = json.loads(s)
        for k in ("generated_at", "duration_s", "started_at", "run_id"):
            d.pop(k, None)
        return d

    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "c").glob("*.marshal")} == entries
    assert strip(a.stdout).keys() == strip(b.stdout).keys()
    assert strip(a.stdout).get("findings") == strip(b.stdout).get("findings")
