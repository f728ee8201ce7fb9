"""The `--json` documents of `goldens models`, `engines`, `diff`, `bisect` and `history`: what a script reads.

One JSON document on stdout per run (human lines, if any, go to stderr), keys sorted, each
document naming its kind and version in `schema` (`goldens.models/1`): a key is never renamed or
removed within a version, only added. docs/commands.md ("Reading results from scripts") lists the keys.
"""

from __future__ import annotations

import json
from typing import Any


def dumps(kind: str, document: dict[str, Any]) -> str:
    return json.dumps({"schema": f"goldens.{kind}/1", **document}, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def models(config, resolved: dict[str, Any] | None = None) -> dict[str, Any]:
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
    from generator.config import families

    from generator.config import engine_registry

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


def engines(infos) -> dict[str, Any]:
    return {"engines": [{"name": info.name, "origin": info.origin, "summary": info.summary,
                         "any_model": info.any_model, "usable": info.problem is None, "problem": info.problem}
                        for info in infos]}


def diff(changes, rev: str, sources: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """Every golden (or ledger entry) changed against `rev`, in the order the text view reads
    them: tokens moved first."""
    from generator.goldens import diff as goldens_diff

    first, second, _ = goldens_diff.arrange(changes)
    ordered = first + second + [c for c in changes if c not in first and c not in second]
    shown: dict[tuple, str] = {}
    items = []
    for change in ordered:
        old, new = change.old, change.new
        key = goldens_diff.change_key(change)
        same = shown.get(key) if key is not None else None
        if key is not None and same is None:
            shown[key] = change.name
        items.append({
            "name": change.name,
            "path": change.path,
            "kind": "ledger entry" if change.ledger else "golden",
            "status": "added" if old is None else "removed" if new is None else "changed",
            "tokens_moved": goldens_diff.moved(change),
            "metadata_only": old is not None and new is not None and goldens_diff.metadata_only(change),
            "first_moved_token": goldens_diff.first_moved_token(change),
            "old_tokens": None if old is None else len(old.ids),
            "new_tokens": None if new is None else len(new.ids),
            "fields": goldens_diff._field_changes(old, new) if old is not None and new is not None else [],
            "summary": goldens_diff.summary(change),
            "same_change_as": same,
        })
    return {"against": rev, "changed": len(changes), "tokens_moved": sum(1 for c in changes if goldens_diff.moved(c)),
            "goldens": items,
            # each model whose template or tokenizer changed: the text view's lines (template diff,
            # BOS/EOS and special tokens, the effect on ids a client re-encodes)
            "sources": sources or {}}


def history(result, versions) -> dict[str, Any]:
    """A `goldens history` run: the range, every release asked (how it was made ready, how many
    answers came from the cache), every change point with its cases grouped by first edit and
    its release's tag, and what the search cost beside the floor any search pays."""
    from generator.replay import history as search

    label = versions.label
    order = {version: position for position, version in enumerate(result.span)}
    visits = list(result.visits.values())
    return {
        "engine": result.engine, "from": result.first, "to": result.last,
        "releases": [label(v) for v in result.span], "jobs": result.jobs, "exhaustive": result.exhaustive,
        "rounds": result.rounds, "cases": [case.id for case in result.cases],
        "asked": [{"release": v.version, "label": label(v.version), "round": v.round,
                   "ready_seconds": round(v.seconds, 1), "cache": v.cache, "answers_from_cache": v.remembered}
                  for v in sorted(visits, key=lambda v: order[v.version])],
        "unavailable": [{"release": v, "label": label(v), "reason": why}
                        for v, why in sorted(result.unavailable.items(), key=lambda item: order[item[0]])],
        "change_points": [change_point(c, versions) for c in result.changes],
        "cost": {"releases_in_range": len(result.span), "asked": len(visits),
                 "built": sum(1 for v in visits if v.made == "built"),
                 "installed": sum(1 for v in visits if v.made == "installed"),
                 "ready_seconds": round(sum(v.seconds for v in visits), 1),
                 "answers_replayed": sum(len(result.cases) - v.remembered for v in visits),
                 "answers_from_cache": sum(v.remembered for v in visits),
                 "floor": search.lower_bound(len(result.span), result.changes, order),
                 "wall_seconds": round(result.seconds, 1)},
        "exit_code": 1 if result.changes else 0,
    }


def change_point(change, versions) -> dict[str, Any]:
    """One change point as data (`goldens.history/1` and the atlas)."""
    url = getattr(versions, "release_url", lambda version: None)
    return {"release": change.release, "label": versions.label(change.release), "url": url(change.release),
            "before": change.before, "before_label": versions.label(change.before),
            "skipped": [versions.label(v) for v in change.skipped], "cases": change.cases,
            "groups": [{"cases": g.cases, "first_divergent_token": g.index,
                        "removed": [list(t) for t in g.removed], "added": [list(t) for t in g.added],
                        "summary": g.summary, "detail": g.detail} for g in change.groups]}
