"""Options shared by several commands: one name per concept, one definition.

==================  ===============================================================================
``--url``           the inference server's base URL (audit, plan, bench, doctor, fix)
``--served-model``  the model name sent in requests to that server (bench, doctor, fix)
``-m/--model``      the model being bounded: a config.json, a GGUF file or a built-in name
``-f/--format``     output format of what is printed or written with ``-o``
``--db``            the ledger file (every command that reads or records runs)
``-s/--snapshot``   a snapshot directory or archive instead of this machine
``--audit``         an ``infergap audit --format json`` document
==================  ===============================================================================

:data:`DEPRECATED` lists the spellings these replaced; they keep working for one release and
print one line on stderr (:func:`rewrite_deprecated`).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import typer


class Fmt(str, Enum):
    """Output format of the report commands (audit, roofline, plan, bench)."""

    text = "text"
    json = "json"
    md = "md"


class ListFmt(str, Enum):
    """Output format of the ledger commands (history, compare)."""

    text = "text"
    json = "json"


#: Old spelling per command → the tokens that replace it. Kept for one release.
DEPRECATED: dict[str, dict[str, tuple[str, ...]]] = {
    "audit": {"--server": ("--url",)},
    "plan": {"--server": ("--url",)},
    "bench": {"--model": ("--served-model",)},
    "fix": {"--verify-url": ("--url",), "--verify-model": ("--served-model",),
            "--verify-concurrency": ("--concurrency",), "--verify-trials": ("--trials",),
            "--report": ("--audit",), "--kind": ("--fix-kind",)},
    "history": {"--json": ("--format", "json")},
}


def rewrite_deprecated(command: str | None, args: list[str], warn: Any) -> list[str]:
    """Replace the deprecated spellings of ``command`` in ``args`` (``--old`` and ``--old=V``)
    by the current ones, calling ``warn(line)`` once per spelling used. Arguments after ``--``
    are left alone."""
    table = DEPRECATED.get(command or "")
    if not table:
        return args
    out: list[str] = []
    warned: set[str] = set()
    for i, tok in enumerate(args):
        if tok == "--":
            out += args[i:]
            break
        name, eq, val = tok.partition("=")
        new = table.get(name)
        if new is None or (eq and len(new) > 1):
            out.append(tok)
            continue
        if name not in warned:
            warned.add(name)
            warn(f"infergap: warning: {command} {name} is deprecated and will be removed in the next release; "
                 f"use {' '.join(new)}")
        out += [*new[:-1], new[-1] + eq + val] if eq else list(new)
    return out


# -- option definitions shared by several commands -------------------------------------------------

def db_option() -> Any:
    """``--db PATH``: the ledger database."""
    return typer.Option(None, "--db", metavar="PATH",
                        help="Ledger database (default: $INFERGAP_DB or the user data directory).")


def format_option(default: Enum, choices: str = "text, json or md") -> Any:
    """``-f/--format``: output format, case-insensitive."""
    return typer.Option(default, "--format", "-f", case_sensitive=False, help=f"Output format: {choices}.")


def url_option(required: bool, help: str) -> Any:
    """``--url URL``: the inference server's base URL."""
    from infergap.cli.validate import server_url

    return typer.Option(... if required else None, "--url", metavar="URL", help=help, parser=server_url)


def served_model_option(help: str = "Model name to request from the server (default: the first one /v1/models lists).") -> Any:
    """``--served-model NAME``: the model name sent in requests."""
    return typer.Option(None, "--served-model", metavar="NAME", help=help)


def snapshot_option(help: str) -> Any:
    """``-s/--snapshot``: a snapshot directory or .tar.gz."""
    return typer.Option(None, "--snapshot", "-s", help=help)


def output_option(help: str = "Write the report to this file instead of stdout.") -> Any:
    """``-o/--output FILE``."""
    return typer.Option(None, "--output", "-o", help=help)
