"""`goldens prefix`: a conversation's requests checked to extend each other
(generator/analysis/prefix_command.py runs it)."""

from __future__ import annotations

from pathlib import Path

from generator.analysis.prefix_command import parse_kwargs, run
from generator.errors import GoldensError


def command(config_path: Path, model_name: str, engine_names: tuple[str, ...], kwargs_json: str | None,
            conversation_file, url: str | None, busters: bool) -> None:
    """`goldens prefix`: check that every request of a conversation starts with the one before
    it; exit 1 on a break outside the tail models.yaml declares for the model and kwargs."""
    import sys

    import click

    from generator.analysis.prefix import load_conversation
    from generator.config import models

    config = models.load(config_path)
    if url and len(engine_names) != 1:
        raise GoldensError("--url needs exactly one --engine")
    kwargs = parse_kwargs(kwargs_json)
    conversation, name = None, "conversation"
    if conversation_file is not None:
        from generator.config.request import read_body

        data, name = read_body(conversation_file)
        conversation = load_conversation(data, name)
    code = run(
        config, model_name, engine_names, kwargs, conversation, name, url, busters,
        echo=click.echo, note=lambda message: click.echo(message, err=True),
    )
    sys.exit(code)
