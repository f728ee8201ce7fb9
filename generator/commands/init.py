"""`goldens init`: the files generator/init.py plans, written, and what it did said."""

from __future__ import annotations

from pathlib import Path

from generator.init import init


def command(directory: Path, hf: tuple[str, ...], gguf: tuple[str, ...], dirs: tuple[str, ...],
            engines: tuple[str, ...], repository: str | None) -> None:
    """`goldens init`: `init`'s lines on stdout (existing files are never replaced: exit 2,
    nothing written)."""
    import click

    for line in init(directory, hf, gguf, dirs, engines, repository=repository):
        click.echo(line)
