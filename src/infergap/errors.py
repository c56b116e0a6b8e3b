"""Errors that reach the user as one line on stderr (exit status 2), never as a traceback."""


class UserError(Exception):
    """Bad input: names the input and what is wrong with it, in one line."""
