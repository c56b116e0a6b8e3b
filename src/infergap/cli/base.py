"""What every command of the command line shares: the Typer :data:`app` each command module
registers itself on, the one-line usage errors, and the output steps (format, write, record).

The command modules import this module; the package (``infergap.cli``) imports the command
modules, so the graph runs one way: package → commands → here.
"""

from __future__ import annotations

import logging
import re
import sys
from enum import Enum
from typing import Any

import typer
from typer.core import TyperGroup

from infergap import __version__
from infergap.cli.coercion import install as install_coercion
from infergap.cli.coercion import install_param
from infergap.cli.options import rewrite_deprecated

try:  # recent Typer vendors its own click
    from typer._click import exceptions as _cx
except ImportError:  # pragma: no cover - older Typer on the real click
    from click import exceptions as _cx  # type: ignore[no-redef]

_CHOICE = re.compile(r"^'(?P<value>.*)' is not (?:one of )?(?P<choices>.*?)\.?$", re.S)


def usage_line(e: Exception, command: str | None = None) -> str:
    """One line for a usage error, in the project's words rather than the parser's:
    ``--timeout nan: expected a finite number``, ``--format xml: expected text, json or md``,
    ``bench: --url is required``, ``history: no such option --jsn``."""
    msg = getattr(e, "message", None) or str(e)
    msg = msg.replace("Value error, ", "").strip()
    where = f"{command}: " if command else ""
    if isinstance(e, _cx.MissingParameter) and e.param is not None:
        names = getattr(e.param, "opts", None) or [e.param.name or "?"]
        kind = "option" if getattr(e.param, "param_type_name", "option") == "option" else "argument"
        name = names[0] if kind == "option" else (getattr(e.param, "metavar", None) or names[0].upper())
        return f"{where}{name} is required"
    if isinstance(e, _cx.BadParameter) and e.param is not None:
        if getattr(e.param, "param_type_name", "") == "argument":
            return f"{where}{msg}"
        opts = [o for o in (getattr(e.param, "opts", None) or []) if o.startswith("--")]
        name = opts[0] if opts else (e.param.name or "?").upper()
        m = _CHOICE.match(msg)
        if m:
            enum = getattr(getattr(e.param, "type_descriptor", None), "annotation", None)
            if isinstance(enum, type) and issubclass(enum, Enum):
                choices = [str(c.value) for c in enum]
            else:
                choices = [c.strip().strip("'") for c in re.split(r",\s{0,8}|\s{1,8}or\s{1,8}", m.group("choices")) if c.strip()]
            shown = ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else "".join(choices)
            return f"{name} {m.group('value')}: expected {shown}"
        return f"{name} {msg}"
    if isinstance(e, _cx.NoSuchOption):
        poss = f" (did you mean {', '.join(e.possibilities)}?)" if getattr(e, "possibilities", None) else ""
        return f"{where}no such option {e.option_name}{poss}"
    msg = msg.rstrip(".")
    return where + (msg[:1].lower() + msg[1:] if msg[:2] != msg[:2].upper() else msg)


def _plain_flags(cmd: Any) -> None:
    """Show on/off options in ``--help`` without a value placeholder: Typer labels a flag
    ``<bool>``, which reads as if ``--apply`` took ``true``/``false``. Walks nested groups."""
    for p in getattr(cmd, "params", []):
        if getattr(p, "is_flag", False) and getattr(p, "metavar", None) is None:
            p.metavar = ""
    made = cmd.get_help_option  # --help itself is made per context

    def get_help_option(ctx: Any) -> Any:
        opt = made(ctx)
        if opt is not None and opt.metavar is None:
            opt.metavar = ""
        if opt is not None:
            install_param(opt)
        return opt

    cmd.get_help_option = get_help_option
    for sub in (getattr(cmd, "commands", None) or {}).values():
        _plain_flags(sub)


class _Group(TyperGroup):
    """The ``infergap`` group: rewrites deprecated option spellings of the command invoked (one
    warning line each) and turns usage errors and bad input into one line and exit status 2,
    also when the app is invoked directly (tests) rather than through :func:`main`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _plain_flags(self)
        install_coercion(self)  # plain values without a pydantic adapter each (infergap.cli.coercion)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, cmd, rest = super().resolve_command(ctx, args)
        return name, cmd, rewrite_deprecated(name, rest, lambda line: typer.echo(line, err=True))

    def invoke(self, ctx: Any) -> Any:
        from infergap.errors import UserError

        try:
            return super().invoke(ctx)
        except _cx.NoArgsIsHelpError:
            raise
        except _cx.UsageError as e:
            sub = ctx.invoked_subcommand
            if type(e) is _cx.BadParameter and e.param is not None and getattr(e.param, "param_type_name", "") != "argument":
                sub = None
            typer.echo(f"infergap: error: {usage_line(e, sub)}", err=True)
            raise typer.Exit(2) from None
        except UserError as e:
            safe_echo(f"infergap: error: {e}", err=True)
            raise typer.Exit(2) from None


app = typer.Typer(
    cls=_Group,
    name="infergap",
    help="Find and close the gap between what an LLM inference host should deliver and what it does.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # plain help (Click's layout), not Rich's boxes: drawing them imports typer.rich_utils with
    # rich.markdown, markdown-it and pygments, which cost more than the rest of --help together
    rich_markup_mode=None,
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


def safe_echo(message: str = "", **kwargs: object) -> None:
    """``typer.echo`` of plain text that holds values from inputs: control characters shown
    escaped (:func:`infergap.guard.term_safe`), so no value can drive the terminal."""
    from infergap.guard import term_safe

    typer.echo(term_safe(message), **kwargs)  # type: ignore[arg-type]


def fail(message: str) -> "typer.Exit":
    """Print ``infergap: error: <message>`` on stderr and return the exit (status 2) to raise."""
    safe_echo(f"infergap: error: {message}", err=True)
    return typer.Exit(2)


def terminal_width(output: object = None) -> int | None:
    """The terminal's width when the report goes to a terminal (``output`` is None and stdout is a
    tty), else ``None``: text written to a file or a pipe is not wrapped by the renderer (it is
    fitted afterwards, commands kept whole: :func:`fit_report`)."""
    if output is not None or not sys.stdout.isatty():
        return None
    import shutil

    return shutil.get_terminal_size().columns


def record(kind: str, payload: object, host: object = None, db: object = None) -> int | None:
    """Keep a run in the ledger (``--db``, else ``$INFERGAP_DB`` or the user's data directory)
    after its output was written and before anything optional (a plot, an HTML page). A ledger
    that cannot be used — damaged, full disk, read-only, foreign — is one warning line on stderr
    saying the run was not recorded and why; it never changes the command's exit status.
    Returns the run id, or None when not recorded."""
    from infergap.ledger import Ledger, LedgerError

    try:
        with Ledger(db) as led:  # type: ignore[arg-type]
            return led.record(kind, payload, host)  # type: ignore[arg-type]
    except LedgerError as e:
        safe_echo(f"infergap: warning: {kind} run not recorded: {e}", err=True)
        return None


def optional_step(what: str, step: Any) -> bool:
    """Run ``step()``, an optional output (a plot, an HTML page) made after the run was written
    and recorded: any failure — a path that cannot be written, a value the plotting library
    cannot typeset — is one warning line naming ``what`` and the reason, never a traceback nor
    a changed exit status. Returns whether it succeeded."""
    from infergap.errors import UserError

    try:
        step()
        return True
    except UserError as e:
        safe_echo(f"infergap: warning: {what} not written: {e}", err=True)
    except Exception as e:  # noqa: BLE001 - optional output: whatever failed, the run is kept
        safe_echo(f"infergap: warning: {what} not written ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})", err=True)
    return False


def render_report(fmt: Enum, output: object, *, json: Any, md: Any, text: Any) -> str:
    """The format step of a report command: ``json()`` or ``md()`` by ``fmt``, else
    ``text(width=..., color=...)`` coloured only when the report goes to a terminal
    (:func:`terminal_width`), then fitted to 100 columns with its commands whole
    (:func:`fit_report`)."""
    if fmt.value == "json":
        return json()
    if fmt.value == "md":
        return md()
    width = terminal_width(output)
    return fit_report(text(width=width, color=width is not None), json, width)


def fit_report(body: str, json: Any = None, width: int | None = None) -> str:
    """A text report fitted to 100 columns (fewer on a narrower terminal) by
    :func:`infergap.render.fit.fit_text`: prose wrapped, every command of the report's JSON
    document (``json()``, its text) and every quoted span kept whole on a line."""
    import json as _json

    from infergap.render.fit import WIDTH, commands_in, fit_text

    keep: list[str] = []
    if json is not None:
        try:
            keep = commands_in(_json.loads(json()))
        except ValueError:  # a document that is not JSON keeps no command: the prose is still fitted
            keep = []
    return fit_text(body, keep, min(width or WIDTH, WIDTH))


def echo_fit(line: str = "", keep: Any = (), **kwargs: object) -> None:
    """:func:`safe_echo` of one line of a text report, fitted to 100 columns
    (:func:`infergap.render.fit.fit_text`; ``keep``: commands to keep whole)."""
    from infergap.render.fit import fit_text

    safe_echo(fit_text(line, keep), **kwargs)


def write_report(text: str, output: Any = None, inputs: Any = ()) -> None:
    """The write step: ``text`` (ended by a newline) on stdout, or written atomically to
    ``output`` (:func:`infergap.guard.write_atomic`, which refuses to overwrite one of
    ``inputs``). A path that cannot be written becomes one line and exit status 2."""
    from infergap.errors import UserError
    from infergap.guard import write_atomic

    text = text if text.endswith("\n") else text + "\n"
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        write_atomic(output, text, inputs=[i for i in inputs if i is not None])
    except UserError as e:
        raise fail(str(e))


def emit_report(kind: str, fmt: Enum, output: Any, *, json: Any, md: Any, text: Any, payload: Any,
                host: object = None, db: object = None, inputs: Any = ()) -> None:
    """The tail every report command shares: format (:func:`render_report`), write
    (:func:`write_report`), then keep the run in the ledger as ``kind`` (:func:`record`);
    ``payload`` is the document recorded, or a callable returning it."""
    write_report(render_report(fmt, output, json=json, md=md, text=text), output, inputs)
    record(kind, payload() if callable(payload) else payload, host, db)
