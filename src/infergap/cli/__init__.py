"""The ``infergap`` command line (Typer). Thin: parse options, call the library, render.

Each command lives in its own module of this package and registers itself on :data:`app`.
Errors from bad input (:class:`infergap.errors.UserError`, snapshot errors) become one line on
stderr and exit status 2.
"""

from __future__ import annotations

import logging
import sys
from enum import Enum

import typer

from infergap import __version__

app = typer.Typer(
    name="infergap",
    help="Find and close the gap between what an LLM inference host should deliver and what it does.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"infergap {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug messages to stderr."),
) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


class Fmt(str, Enum):
    """Output format of the report commands (audit, roofline, plan)."""

    text = "text"
    json = "json"
    md = "md"


def safe_echo(message: str = "", **kwargs: object) -> None:
    """``typer.echo`` of plain text that holds values from inputs: control characters shown
    escaped (:func:`infergap.guard.term_safe`), so no value can drive the terminal."""
    from infergap.guard import term_safe

    typer.echo(term_safe(message), **kwargs)  # type: ignore[arg-type]


def fail(message: str) -> "typer.Exit":
    """Print ``infergap: error: <message>`` on stderr and return the exit (status 2) to raise."""
    safe_echo(f"infergap: error: {message}", err=True)
    return typer.Exit(2)


def record(kind: str, payload: object, host: object = None) -> None:
    """Keep a run in the ledger (``$INFERGAP_DB`` or the user's data directory) after its output
    was written; a ledger that cannot be used only logs a warning, never fails the command."""
    from infergap.ledger import try_record

    try_record(kind, payload, host)  # type: ignore[arg-type]


# Command modules register themselves on `app` when imported.
from infergap.cli import audit as _audit  # noqa: E402,F401
from infergap.cli import roofline as _roofline  # noqa: E402,F401
from infergap.cli import bench as _bench  # noqa: E402,F401
from infergap.cli import fix as _fix  # noqa: E402,F401
from infergap.cli import history as _history  # noqa: E402,F401
from infergap.cli import plan as _plan  # noqa: E402,F401
from infergap.cli import doctor as _doctor  # noqa: E402,F401
from infergap.cli import checks as _checks  # noqa: E402,F401


def main() -> None:
    """Console-script entry point: run the app, turning input errors into one line and exit 2."""
    from infergap.errors import UserError
    from infergap.snapshot import SnapshotError

    try:  # recent Typer vendors its own click
        from typer._click import exceptions as cx
    except ImportError:  # pragma: no cover - older Typer on the real click
        from click import exceptions as cx

    import signal

    def _terminated(signum: int, frame: object) -> None:
        # SIGTERM ends the command like Ctrl-C does, so that every `finally` runs: temporary
        # directories (unpacked archives, spooled evidence) are removed, outputs stay whole.
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, _terminated)
    except ValueError:  # not the main thread (embedded use): leave signals alone
        pass
    try:
        rc = app(standalone_mode=False)  # returns the status of typer.Exit(status) raised by a command
        sys.exit(rc if isinstance(rc, int) else 0)
    except cx.NoArgsIsHelpError:
        sys.exit(2)
    except cx.UsageError as e:
        # one line, like every other input error (Typer would draw a box)
        opt = f"{e.ctx.command_path}: " if e.ctx is not None else ""
        typer.echo(f"infergap: error: {opt}{e.format_message()}".replace("\n", " "), err=True)
        sys.exit(2)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        typer.echo("infergap: interrupted", err=True)
        sys.exit(130)
    except (UserError, SnapshotError) as e:
        safe_echo(f"infergap: error: {e}", err=True)
        sys.exit(2)
    except OSError as e:
        if e.errno in (28, 122):  # ENOSPC, EDQUOT: say so, whatever was being written
            from infergap.guard import os_reason

            typer.echo(f"infergap: error: {e.filename or 'output'}: {os_reason(e)}", err=True)
            sys.exit(2)
        raise
    except BrokenPipeError:  # output piped into `head`: not an error
        sys.exit(0)
    except KeyboardInterrupt:
        typer.echo("infergap: interrupted", err=True)
        sys.exit(130)
