"""The ``infergap`` command line (Typer). Thin: parse options, call the library, render.

Each command lives in its own module of this package and registers itself on
:data:`infergap.cli.base.app` when imported; this package imports them all below and holds the
entry point. Errors from bad input (:class:`infergap.errors.UserError`, snapshot errors) become
one line on stderr and exit status 2.
"""

from __future__ import annotations

import sys

import typer

from infergap.cli.base import _cx, app, safe_echo, usage_line

# Command modules register themselves on `app` when imported.
from infergap.cli import audit as _audit  # noqa: F401
from infergap.cli import roofline as _roofline  # noqa: F401
from infergap.cli import bench as _bench  # noqa: F401
from infergap.cli import fix as _fix  # noqa: F401
from infergap.cli import history as _history  # noqa: F401
from infergap.cli import plan as _plan  # noqa: F401
from infergap.cli import doctor as _doctor  # noqa: F401
from infergap.cli import fleet as _fleet  # noqa: F401
from infergap.cli import checks as _checks  # noqa: F401
from infergap.cli import tune as _tune  # noqa: F401

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point: run the app, turning input errors into one line and exit 2."""
    from infergap.errors import SnapshotError, UserError

    cx = _cx

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
    except cx.NoArgsIsHelpError as e:  # `infergap` or `infergap fleet` alone: the help, on stdout
        typer.echo(e.format_message())
        sys.exit(2)
    except cx.UsageError as e:
        # one line, like every other input error (Typer would draw a box)
        typer.echo(f"infergap: error: {usage_line(e)}".replace("\n", " "), err=True)
        sys.exit(2)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        typer.echo("infergap: interrupted", err=True)
        sys.exit(130)
    except (UserError, SnapshotError) as e:
        safe_echo(f"infergap: error: {e}", err=True)
        sys.exit(2)
    except BrokenPipeError:  # output piped into `head`: not an error
        sys.exit(0)
    except OSError as e:
        if e.errno in (28, 122):  # ENOSPC, EDQUOT: say so, whatever was being written
            from infergap.guard import os_reason

            typer.echo(f"infergap: error: {e.filename or 'output'}: {os_reason(e)}", err=True)
            sys.exit(2)
        raise
    except KeyboardInterrupt:
        typer.echo("infergap: interrupted", err=True)
        sys.exit(130)
