"""Renderers: turn results into terminal text, Markdown, JSON and plots. No I/O beyond the output."""
