"""`goldens models` and `goldens engines`: the matrix and the engine registry as text tables
(or their JSON documents, built by config/listing.py); cli.py only parses their options.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from generator import locks
from generator.config.cases import model_cases, parse_cases_of


def models_command(config_path: Path, do_resolve: bool, as_json: bool) -> None:
    """The matrix: each model's sources, shapes, variants, engines and pins; then the built-in
    families (generator/config/families.py), which are listed beside it, not in it."""
    from generator.config import models
    from generator.sources.source import resolve

    config = models.load(config_path)
    if as_json:
        from generator import documents
        from generator.config import listing

        resolved = {m.name: resolve(m, config) for m in config.models.values()} if do_resolve else None
        click.echo(documents.dumps("models", listing.models_document(config, resolved)), nl=False)
        return
    if config.engine_versions:
        pins = ", ".join(f"{name} {'b' if name == 'llama-server' else ''}{version}"
                         for name, version in config.engine_versions.items())
        click.echo(f"engine versions: {pins}")
    for model in config.models.values():
        spec = model.tokenizer
        where = f"{spec.kind}:{spec.value}" + (f"@{spec.revision}" if spec.revision else "")
        if spec.family is not None:
            where = (f"family {spec.family}: " + (f"surrogate, {spec.value} + {len(spec.adds)} special tokens of "
                     "its template (findings are about templates and request layers, never tokenizers)"
                     if spec.surrogate else f"real, {spec.value}"))
        if spec.config:
            where += f" with tokenizer_config {json.dumps(spec.config, sort_keys=True)}"
        template = model.template.kind if model.template.kind == "tokenizer" else f"{model.template.kind}:{model.template.value}"
        variants = ", ".join(v or "default" for v in model.variants)
        parses = f", {len(parse_cases_of(model))} parse cases" if model.parse is not None else ""
        click.echo(f"{model.name}: {len(model_cases(model))} cases{parses}")
        click.echo(f"  tokenizer: {where}")
        click.echo(f"  template:  {template}" + (f" (name {model.template.name})" if model.template.name else ""))
        click.echo(f"  shapes:    {', '.join(model.shapes)}")
        click.echo(f"  variants:  {variants}")
        if model.dialects:
            kept = ("not chosen yet (goldens regenerate chooses them)" if model.dialect_cases is None
                    else f"{len(model.dialect_cases)} cases kept of {len(model.dialects)} selected "
                         f"({locks.DIALECTS.path(config.path).name})")
            click.echo(f"  dialects:  {kept}")
        click.echo(f"  engines:   {', '.join(model.engines)}")
        if model.processor is not None:
            click.echo(f"  processor: {model.processor.origin}")
        for key, value in sorted(model.pins.items()):
            click.echo(f"  pin {key}: {value}")
        if do_resolve:
            source = resolve(model, config)
            click.echo(f"  resolved:  {source.origin}; template from {source.template_origin}")
            click.echo(f"  now template_sha256: {source.template_sha256}")
            click.echo(f"  now tokenizer_sha256: {source.tokenizer_sha256}")
    _echo_families(config)


def _echo_families(config) -> None:
    """One line per built-in family, naming the matrix's models that are it (`family:` in
    models.yaml); the others are catalogue only (docs/families.md)."""
    from generator.config import families

    catalogue = families.builtin()
    real = sum(family.tokenizer.kind == "real" for family in catalogue)
    in_matrix = {}
    for model in config.models.values():
        if model.tokenizer.family is not None:
            in_matrix.setdefault(model.tokenizer.family, []).append(model.name)
    click.echo(f"families: {len(catalogue)} built-in ({real} real, {len(catalogue) - real} surrogate), "
               f"from llama.cpp's templates; {len(in_matrix)} in this matrix (`family:`), the rest "
               "catalogue only (docs/families.md)")
    for family in catalogue:
        tokenizer = family.tokenizer
        added = f" + {len(tokenizer.adds)} special tokens" if tokenizer.adds else ""
        also = f" (also {', '.join(family.checkpoints[1:])})" if len(family.checkpoints) > 1 else ""
        models = f"; in the matrix as {', '.join(in_matrix[family.name])}" if family.name in in_matrix else ""
        click.echo(f"  {family.name}: {tokenizer.kind} {tokenizer.source}{added}; "
                   f"template {family.template_file}{also}{models}")


def engines_command(config_path: Path, as_json: bool, as_matrix: bool) -> None:
    """The engines goldens can replay through: built-in, and those installed packages register
    in the `goldens.engines` entry-point group, each with where it came from."""
    from generator.config import engine_registry

    if as_matrix:
        from generator.config import engine_matrix, models

        config = models.load(config_path)
        labels = engine_matrix.labels(config)
        click.echo(engine_matrix.markdown(engine_matrix.matrix(config), labels=labels), nl=False)
        click.echo("\nThe output side (parse cases: output ids -> message, docs/parse.md):\n")
        click.echo(engine_matrix.markdown(engine_matrix.parse_matrix(config), engine_matrix.PARSED, labels),
                   nl=False)
        return
    if as_json:
        from generator import documents
        from generator.config import listing

        click.echo(documents.dumps("engines", listing.engines_document(engine_registry.registered())), nl=False)
        return

    rows = [(info.name, info.origin, info.summary + engine_registry.declares(info)
             + (f" [not usable: {info.problem}]" if info.problem else ""))
            for info in engine_registry.registered()]
    widths = [max(len(row[i]) for row in rows) for i in (0, 1)]
    for name, origin, summary in rows:
        click.echo(f"{name.ljust(widths[0])}  {origin.ljust(widths[1])}  {summary}")
