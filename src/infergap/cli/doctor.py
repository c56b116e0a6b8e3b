from infergap.cli import app  # noqa: F401  (doctor is registered later)
