"""Renderers: turn results into terminal text, Markdown, JSON, HTML and plots. No I/O beyond the output."""
