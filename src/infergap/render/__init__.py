"""Renderers: terminal (rich), Markdown, JSON (and HTML for reports)."""
