"""Renderers: terminal text (rich), Markdown, JSON, HTML and plots. No I/O beyond the output."""
