"""Errors that reach the user as one line on stderr (exit status 2), never as a traceback."""


class UserError(Exception):
    """Bad input: names the input and what is wrong with it, in one line."""


class SnapshotError(Exception):
    """The snapshot path is missing, unreadable, or not a snapshot. The message is one line.

    Raised by :mod:`infergap.snapshot` (and importable from there); defined here so the command
    line can catch it without importing the snapshot reader."""
