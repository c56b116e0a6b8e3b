"""Parsers: raw text of each source family -> typed facts. Pure functions."""
