"""The matrix and the engine registry as data: the `--json` documents of `goldens models` and
`goldens engines` (generator/documents.py writes them; commands/listing.py prints them)."""

from __future__ import annotations

from typing import Any


def models_document(config, resolved: dict[str, Any] | None = None) -> dict[str, Any]:
    """The matrix: engine pins, and per model its sources, shapes, variants, engines, pins (and,
    with `resolved`, the hashes its sources have now); beside it the built-in families
    (generator/config/families.py), which are not in the matrix."""
    from generator.config.cases import model_cases, parse_cases_of

    out = []
    for model in config.models.values():
        spec, template = model.tokenizer, model.template
        item = {
            "name": model.name,
            "cases": [case.id for case in model_cases(model)],
            "parse_cases": [case.id for case in parse_cases_of(model)],
            "tokenizer": {"kind": spec.kind, "value": spec.value, "revision": spec.revision,
                          "tokenizer_config": dict(spec.config) if spec.config else None},
            "template": {"kind": template.kind, "value": template.value, "name": template.name},
            "shapes": list(model.shapes),
            "variants": {name or "default": kwargs for name, kwargs in model.variants.items()},
            "engines": list(model.engines),
            "processor": model.processor.origin if model.processor is not None else None,
            "pins": dict(sorted(model.pins.items())),
            # the references its goldens are rendered by: the template through Transformers, and
            # the vendor's encoder where models.yaml names one (docs/references.md)
            "references": {"template": "transformers", "encoder": model.encoder,
                           "disputes": [{"cases": list(d.cases), "right": d.right, "reason": d.reason}
                                        for d in model.disputes]},
        }
        if spec.family is not None:  # a built-in family (docs/families.md)
            item["family"] = {"name": spec.family, "source": model.template.value,
                              "tokenizer": "surrogate" if spec.surrogate else "real",
                              "nearest": spec.value, "adds": list(spec.adds)}
        if resolved is not None:
            source = resolved[model.name]
            item["resolved"] = {"origin": source.origin, "template_origin": source.template_origin,
                                "template_sha256": source.template_sha256,
                                "tokenizer_sha256": source.tokenizer_sha256}
        out.append(item)
    from generator.config import engine_registry, families

    in_matrix: dict[str, list[str]] = {}
    for model in config.models.values():
        if model.tokenizer.family is not None:
            in_matrix.setdefault(model.tokenizer.family, []).append(model.name)
    listed = []
    for family in families.builtin():
        item = family.as_dict()
        models = [config.models[name] for name in in_matrix.get(family.name, [])]
        # what replays it here: the matrix's models that are this family, their reference and engines
        item["models"] = [model.name for model in models]
        item["reference"] = engine_registry.REFERENCE if models else None
        # a second reference beside the template where a model of it has one (docs/references.md)
        item["encoder"] = next((model.encoder for model in models if model.encoder is not None), None)
        item["engines"] = sorted({engine for model in models for engine in model.engines
                                  if engine != engine_registry.REFERENCE})
        listed.append(item)
    return {"config": str(config.path), "date": config.date.isoformat(),
            "engine_versions": dict(config.engine_versions), "models": out, "families": listed}


def engines_document(infos) -> dict[str, Any]:
    """The engine registry as data (`goldens.engines/1`)."""
    return {"engines": [{"name": info.name, "origin": info.origin, "summary": info.summary,
                         "any_model": info.any_model, "usable": info.problem is None, "problem": info.problem}
                        for info in infos]}
