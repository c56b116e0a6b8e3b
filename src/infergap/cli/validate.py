"""Validation of command-line values at the edge: every numeric option of every command goes
through one of these parsers, so that a value is finite, in range and of the right type before
any work starts, and a bad one is one line naming the option and the value.

The parsers are given to Typer as ``parser=``; they receive the text typed (or the default, which
may already be a number) and raise :class:`ValueError` with ``"<value>: <problem>"``. The
command line's error handler (:func:`infergap.cli.usage_line`) prefixes the option name, giving
for example ``infergap: error: --timeout nan: expected a finite number``.

Caps exist where a value drives memory or time before anything is measured (``--num-prompts``
builds every prompt up front; a sweep of a million trials never ends); each cap's message says
why the limit is there.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

#: The largest run id SQLite can store (a signed 64-bit integer).
MAX_RUN_ID = 2**63 - 1

_INT_TEXT = re.compile(r"^[+-]?\d+$")


def _fmt(x: float) -> str:
    """A bound as written in a message: ``1``, ``0.5``, ``100000``."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _range_text(gt: float | None, ge: float | None, lt: float | None, le: float | None) -> str:
    lo = f"greater than {_fmt(gt)}" if gt is not None else (f"at least {_fmt(ge)}" if ge is not None else "")
    hi = f"less than {_fmt(lt)}" if lt is not None else (f"at most {_fmt(le)}" if le is not None else "")
    return " and ".join(p for p in (lo, hi) if p)


def check_number(value: Any, *, integer: bool = False, gt: float | None = None, ge: float | None = None,
                 lt: float | None = None, le: float | None = None, cap_reason: str | None = None) -> int | float:
    """Parse and check one number. ``value`` is the text given (``"1e3"``, ``"nan"``) or a number.

    Returns an ``int`` when ``integer`` (text such as ``1e3`` that names a whole number is
    accepted), else a finite ``float``. Raises :class:`ValueError` ``"<value>: <problem>"`` for
    text that is not a number, NaN or infinity, a fraction where a whole number is needed, and a
    value outside the bounds (``cap_reason`` is added when the upper bound ``le`` is exceeded).
    """
    full = str(value).strip() if value is not None else ""
    shown = full if len(full) <= 40 else full[:37] + "…"
    kind = "a whole number" if integer else "a number"
    if isinstance(value, bool):
        raise ValueError(f"{shown}: expected {kind}")
    if isinstance(value, (int, float)):
        x = float(value) if not isinstance(value, int) else value
    else:
        text = full.replace("_", "")
        if integer and _INT_TEXT.match(text):
            if len(text.lstrip("+-")) > 30:  # beyond any bound, and beyond what int() converts quickly
                raise ValueError(f"{shown}: must be {_range_text(None, None, lt, le) or 'smaller'}")
            x = int(text)
        else:
            try:
                x = float(text)
            except ValueError:
                raise ValueError(f"{shown or repr(value)}: expected {kind}") from None
    if isinstance(x, float) and not math.isfinite(x):
        raise ValueError(f"{shown}: expected a finite number")
    if integer and isinstance(x, float):
        if not x.is_integer():
            raise ValueError(f"{shown}: expected a whole number")
        x = int(x)
    if (gt is not None and x <= gt) or (ge is not None and x < ge):
        raise ValueError(f"{shown}: must be {_range_text(gt, ge, None, None)}")
    if (lt is not None and x >= lt) or (le is not None and x > le):
        raise ValueError(f"{shown}: must be {_range_text(None, None, lt, le)}" + (f" ({cap_reason})" if cap_reason else ""))
    return x


def number(*, integer: bool = False, gt: float | None = None, ge: float | None = None, lt: float | None = None,
           le: float | None = None, cap_reason: str | None = None) -> Callable[[Any], Any]:
    """A Typer ``parser=`` for one number (see :func:`check_number`); ``None`` passes through."""

    def parse(value: Any) -> Any:
        if value is None:
            return None
        return check_number(value, integer=integer, gt=gt, ge=ge, lt=lt, le=le, cap_reason=cap_reason)

    return parse


def number_list(*, integer: bool = False, gt: float | None = None, ge: float | None = None,
                lt: float | None = None, le: float | None = None, cap_reason: str | None = None,
                max_items: int = 64) -> Callable[[Any], Any]:
    """A Typer ``parser=`` for comma-separated numbers (``1,2,4,8``): each checked as by
    :func:`check_number`; an empty list and more than ``max_items`` values are refused.
    Returns a list; ``None`` passes through."""

    def parse(value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, (list, tuple)):
            parts = list(value)
        else:
            parts = [p.strip() for p in str(value).split(",")]
            if any(not p for p in parts) and any(parts):
                raise ValueError(f"{value!s}: an empty value between commas")
            parts = [p for p in parts if p]
        if not parts:
            raise ValueError(f"{value!s}: expected comma-separated numbers")
        if len(parts) > max_items:
            raise ValueError(f"{value!s}: at most {max_items} values")
        out = []
        for p in parts:
            try:
                out.append(check_number(p, integer=integer, gt=gt, ge=ge, lt=lt, le=le, cap_reason=cap_reason))
            except ValueError as e:
                if len(parts) == 1 and not isinstance(value, (list, tuple)) and str(value).strip() == p:
                    raise
                raise ValueError(f"{value!s}: {e}") from None
        return out

    return parse


def run_id(value: Any) -> Any:
    """A ledger run id: ``last`` or a whole number from 1 to 2**63-1 (what SQLite can hold).
    Returns ``"last"`` or an ``int``; ``None`` passes through."""
    if value is None or str(value).strip().lower() == "last":
        return None if value is None else "last"
    text = str(value).strip()
    shown = text if len(text) <= 40 else text[:37] + "…"
    if not _INT_TEXT.match(text):
        raise ValueError(f"run id {shown}: expected a number that infergap history lists, or 'last'")
    if len(text.lstrip("+-")) > 19 or not 1 <= int(text) <= MAX_RUN_ID:
        raise ValueError(f"run id {shown}: no such run (run ids are whole numbers from 1 to {MAX_RUN_ID})")
    n = int(text)
    return n


def choice(*choices: str) -> Callable[[Any], Any]:
    """A Typer ``parser=`` for one of ``choices``, compared case-insensitively; returns the
    choice as spelled in ``choices``, or raises :class:`ValueError` listing them. ``None`` passes."""

    def parse(value: Any) -> Any:
        if value is None:
            return None
        v = str(value).strip().lower()
        for c in choices:
            if v == c.lower():
                return c
        shown = ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else choices[0]
        raise ValueError(f"{value}: expected {shown}")

    return parse


# -- the checks every command shares -------------------------------------------------------------

#: Seconds: a timeout or duration that is finite and positive, at most one day.
seconds = number(gt=0, le=86400, cap_reason="one day")
#: Whole numbers of GPUs or parallel ranks.
gpu_count = number(integer=True, ge=1, le=4096)
#: A fraction in (0, 1].
fraction = number(gt=0, le=1)
#: Tokens in a prompt, an output or a context.
tokens = number(integer=True, ge=1, le=10_000_000, cap_reason="ten million tokens")


_URL_BAD_CHARS = re.compile(r"[\x00-\x20\x7f]")


def server_url(value: Any) -> str | None:
    """``--url``: an ``http(s)://host[:port][/path]`` URL, checked before anything is sent: no
    blank or control character (a newline would end an HTTP header line), a host, and a port in
    1..65535. Raises :class:`ValueError` ``"<value>: <problem>"`` (the message shows the value
    with ``repr`` escapes, so a newline in it stays on one line)."""
    from urllib.parse import urlsplit

    if value is None:
        return None
    text = str(value)
    shown = repr(text)[1:-1]
    if _URL_BAD_CHARS.search(text):
        raise ValueError(f"{shown}: a URL cannot contain blanks or control characters")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as e:
        raise ValueError(f"{shown}: not a valid URL ({e})") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{shown}: expected http://HOST:PORT or https://HOST:PORT")
    if not parts.hostname:
        raise ValueError(f"{shown}: no host in the URL")
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"{shown}: port {port} is not in 1..65535")
    return text
