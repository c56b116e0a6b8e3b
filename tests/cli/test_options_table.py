"""Every option of every command is in the README's options table, under the same name for the
same concept, and the table lists no option a command does not have.

The table is the section ``## Options`` of README.md: one row per concept, the first cell the
spellings (``-f``, ``--format``), the second the commands that take it. A command or option
added without a row fails here with the row to add.
"""

from __future__ import annotations

import re

import typer

from infergap.cli import app
from infergap.cli.options import DEPRECATED
from tests.conftest import ROOT

_SPELLING = re.compile(r"`(-{1,2}[A-Za-z0-9][A-Za-z0-9-]*)`")


def readme_table() -> list[tuple[set[str], set[str], str]]:
    """Rows of the README options table: (spellings, commands, meaning)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "\n## Options\n" in text, "README.md needs a section '## Options' with the options table"
    section = text.split("\n## Options\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        rows.append((set(_SPELLING.findall(cells[0])), {c.strip() for c in cells[1].split(",") if c.strip()}, cells[2]))
    assert rows, "README.md '## Options' has no table rows"
    return rows


def code_options() -> dict[str, list[tuple[str, set[str], str]]]:
    """Per command (the root group as ``infergap``, a nested one as ``fleet audit``): (primary
    long name, all spellings, help) of each visible option."""
    group = typer.main.get_command(app)
    out: dict[str, list[tuple[str, set[str], str]]] = {}
    cmds: dict[str, object] = {"infergap": group}

    def walk(prefix: str, g: object) -> None:  # nested groups: "fleet audit"
        for sub_name, sub in getattr(g, "commands", {}).items():
            cmds[f"{prefix}{sub_name}"] = sub
            walk(f"{prefix}{sub_name} ", sub)

    walk("", group)
    for name, cmd in cmds.items():
        if getattr(cmd, "hidden", False):
            continue
        opts = []
        for p in cmd.params:
            if getattr(p, "param_type_name", "") != "option" or p.hidden or p.name == "help":
                continue
            spellings = set(p.opts) | set(p.secondary_opts)
            long = next((o for o in p.opts if o.startswith("--")), p.opts[0])
            opts.append((long, spellings, p.help or ""))
        out[name] = opts
    return out


def test_every_option_has_a_readme_row():
    rows = readme_table()
    problems = []
    for cmd, opts in sorted(code_options().items()):
        for long, spellings, _help in opts:
            matches = [r for r in rows if long in r[0] and cmd in r[1]]
            if len(matches) == 1:
                missing = spellings - matches[0][0]
                if missing:
                    problems.append(f"{cmd} {long}: the README row lacks the spelling(s) {', '.join(sorted(missing))}")
                continue
            if len(matches) > 1:
                problems.append(f"{cmd} {long}: listed in {len(matches)} README rows; keep one")
                continue
            same_name = [r for r in rows if long in r[0]]
            spelled = ", ".join(f"`{s}`" for s in sorted(spellings, key=lambda s: (s.startswith("--"), s)))
            if same_name:
                problems.append(f"{cmd} {long}: add '{cmd}' to the commands of the README row for {long} "
                                f"(if {long} means something else in {cmd}, rename the option: one name per concept)")
            else:
                problems.append(f"{cmd} {long}: add a row to the options table in README.md ('## Options'): "
                                f"| {spelled} | {cmd} | <what it is> |")
    assert not problems, "README.md options table out of date:\n  " + "\n  ".join(problems)


def test_readme_rows_name_only_real_options():
    code = code_options()
    problems = []
    for spellings, cmds, _ in readme_table():
        for cmd in sorted(cmds):
            if cmd not in code:
                problems.append(f"README row {sorted(spellings)} names command '{cmd}', which does not exist")
                continue
            have = set().union(*(s for _, s, _ in code[cmd])) if code[cmd] else set()
            for s in sorted(spellings - have):
                problems.append(f"README row for {s} lists '{cmd}', but '{cmd}' has no option {s}")
    assert not problems, "README.md options table names options that do not exist:\n  " + "\n  ".join(problems)


def test_every_command_has_a_readme_row_and_every_option_help():
    code = code_options()
    listed = set().union(*(r[1] for r in readme_table()))
    without_row = sorted(c for c, opts in code.items() if opts and c not in listed)
    assert not without_row, f"commands with options but no row in the README options table: {without_row}"
    no_help = sorted(f"{c} {o}" for c, opts in code.items() for o, _, h in opts if not h.strip())
    assert not no_help, f"options without --help text: {no_help}"


def test_old_spellings_are_no_live_options():
    """A replaced spelling is not also a current option of that command (one name per concept),
    and it maps onto an option the command has."""
    code = code_options()
    for cmd, table in DEPRECATED.items():
        have = set().union(*(s for _, s, _ in code[cmd]))
        for old, new in table.items():
            assert old not in have, f"{cmd} {old} is deprecated but still a live option"
            assert new[0] in have, f"{cmd} {old} maps to {new[0]}, which {cmd} does not have"


def test_readme_names_every_old_spelling():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for cmd, table in DEPRECATED.items():
        for old in table:
            assert f"`{cmd} {old}`" in text, f"README.md should say that `{cmd} {old}` was replaced"


def test_shared_concepts_have_one_definition():
    """The concepts several commands share are spelled alike everywhere: ``-f/--format``,
    ``-o/--output``, ``-s/--snapshot``, ``-e/--evidence``, ``-m/--model``."""
    short = {"--format": "-f", "--output": "-o", "--snapshot": "-s", "--evidence": "-e", "--model": "-m"}
    for cmd, opts in code_options().items():
        for long, spellings, _ in opts:
            if long in short:
                assert short[long] in spellings, f"{cmd} {long} should also be spelled {short[long]}"
