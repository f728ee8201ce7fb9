"""models.yaml's pins: a template or tokenizer whose sha256 moved is an error naming both hashes
until the user re-pins on purpose (`goldens regenerate --update-pins`), and then exactly the
pinned scalars are rewritten in place, comments and layout kept."""

from __future__ import annotations

import yaml

from generator import files
from generator.config.models import Config, ModelSpec
from generator.errors import GoldensError
from generator.sources.source import Source


def moved(model: ModelSpec, source: Source, config: Config, update: bool) -> list[tuple[str, str, str]]:
    """Pins that no longer match: an error naming both hashes unless the user re-pins on purpose;
    with --update-pins, the (model, key, new hash) to write once every source has resolved."""
    actual = {"template_sha256": source.template_sha256, "tokenizer_sha256": source.tokenizer_sha256}
    moved = []
    for key, pinned in model.pins.items():
        if pinned == actual[key]:
            continue
        if not update:
            what = source.template_origin if key == "template_sha256" else source.origin
            raise GoldensError(
                f"{config.path.name}: models.{model.name}.pins.{key}: pinned {pinned} but {what} "
                f"is now {actual[key]}; review the change, then re-pin with --update-pins"
            )
        moved.append((model.name, key, actual[key]))
    return moved


def rewrite(config: Config, moved: list[tuple[str, str, str]]) -> None:
    """Replace exactly the pinned scalars in models.yaml (comments and layout kept), atomically."""
    if not moved:
        return
    text = config.path.read_text(encoding="utf-8")
    root = yaml.compose(text)
    spans = []
    for model, key, value in moved:
        node = _child(_child(_child(_child(root, "models"), model), "pins"), key)
        spans.append((node.start_mark.index, node.end_mark.index, value))
        config.models[model].pins[key] = value
    for start, end, value in sorted(spans, reverse=True):
        text = text[:start] + value + text[end:]
    files.atomic_write(config.path, text)


def _child(node, key: str):
    for key_node, value_node in node.value:
        if key_node.value == key:
            return value_node
    raise GoldensError(f"models.yaml: cannot find {key!r} to re-pin")
