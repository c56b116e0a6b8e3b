"""``infergap audit`` and ``infergap collect``."""

from __future__ import annotations

from pathlib import Path

import typer

from infergap.cli import app


@app.command()
def collect(
    output: Path = typer.Option(Path("infergap-snapshot.tar.gz"), "--output", "-o", help="Snapshot directory, or a .tar.gz file."),
) -> None:
    """Write a snapshot of this host (files/, cmds/, probes/, meta.json) for later or elsewhere."""
    from infergap.snapshot.collect import collect as do_collect

    try:
        meta = do_collect(output)
    except OSError as e:
        from infergap.cli import fail

        raise fail(f"--output {output}: cannot write ({e.strerror or e})")
    failed = meta["failed"]
    typer.echo(f"wrote {output} in {meta['duration_s']:.2f} s ({len(meta['sources'])} sources, {len(failed)} unavailable)")
