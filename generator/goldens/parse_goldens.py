"""Parse goldens: what `goldens regenerate` writes for a parse case, and which built-in parse
shapes a model's template writes.

A parse golden is the golden format with the output ids as its tokens (`goldens/<model>/parse/
<stem>.json`): its `request` is the chat body engines get (the conversation before the assistant
message, with a generation prompt), `assistant` the message as the case gives it, `expected` the
message every engine should parse the ids back to (generator/parse_reference.py), `output` how
the ids were found, `output_text` their text and `delimiters` the special tokens' text among them
(which a content or reasoning delta must never show, unless the expected text holds it).

Which built-in shapes a template writes is decided by the reference (a shape whose output drops
part of the message, or that the template refuses, or whose ids another shape already gives, is
not a case for that model) and recorded per variant in the capabilities lock under `parse`, with
what it was decided from, so the matrix stays a function of files on disk: `goldens check` lists
the cases without rendering.
"""

from __future__ import annotations

from typing import Any

from generator import parse_reference, reference
from generator.config import parse_cases, polyfill
from generator.config.cases import Case
from generator.config.models import Config, ModelSpec
from generator.goldens import golden_file
from generator.sources.source import Source


def golden(case: Case, source: Source, config: Config, stamp: dict[str, str]) -> golden_file.Golden:
    """The reference's parse golden for a parse case (one whose output cannot be made has
    outcome `error` with why: `goldens regenerate` refuses to write it, see `required`)."""
    spec = config.models[case.model].parse
    out = parse_reference.output_of(source, case.request, spec.end if spec else (), config.date)
    split = parse_cases.split(case.request)
    extra: dict[str, Any] = {"axis": parse_cases.FOLDER, "assistant": split.assistant}
    if out.error is None:
        extra.update(expected=out.expected, output=out.how, output_text=out.text,
                     delimiters=_delimiters(source, out.ids))
    return golden_file.Golden(case=case.id, request=split.chat, outcome=out.outcome, ids=out.ids,
                              pieces=out.pieces, prompt=None, error=out.error, provenance=stamp, extra=extra)


def required(item: golden_file.Golden) -> golden_file.Golden:
    """A parse golden `goldens regenerate` may write: one with output ids. A case the template
    cannot produce output for (a request file whose message it drops) is one error line, and
    nothing is written."""
    if item.outcome != "ok":
        from generator.errors import GoldensError

        raise GoldensError(f"no output ids for this parse case: {item.error}; give the text the model emitted "
                           "as `output` in its request file (docs/parse.md)")
    return item


def _delimiters(source: Source, ids: list[int]) -> list[str]:
    """The text of each added (special or control) token among the output ids, in first-seen order."""
    tokenizer = reference.load_tokenizer(source.tokenizer_dir)
    added = {i: t.content for i, t in tokenizer.added_tokens_decoder.items()}
    return list(dict.fromkeys(added[i] for i in ids if i in added))


def written(model: ModelSpec, source: Source, config: Config) -> dict[str, list[str]]:
    """Per variant, the built-in parse shapes the template writes, in catalogue order."""
    out = {}
    for variant, kwargs in model.variants.items():
        kept, seen = [], set()
        for shape in model.parse.shapes:
            request = parse_cases.build(shape, {**model.kwargs, **kwargs})
            result = parse_reference.output_of(source, request, model.parse.end, config.date)
            if result.error is None and tuple(result.ids) not in seen:
                kept.append(shape)
                seen.add(tuple(result.ids))
        out[variant] = kept
    return out


def refresh(config: Config, models: list[ModelSpec], sources: dict[str, Source]) -> list[ModelSpec]:
    """Decide the written shapes of each selected model whose lock entry was decided from
    another template, tokenizer or selection, write the lock if anything moved, and return the
    models with them attached. A no-change run renders nothing here."""
    entries = polyfill.load_lock(config.path)
    moved, out = False, []
    for model in models:
        if model.parse is None:
            out.append(model)
            continue
        source = sources[model.name]
        entry = entries.setdefault(model.name, {})
        record = entry.get("parse") or {}
        if (record.get("selection") != parse_cases.selection(model) or record.get("tokenizer_sha256") != source.tokenizer_sha256
                or record.get("template_sha256") != source.template_sha256):
            entry["parse"] = {"selection": parse_cases.selection(model), "template_sha256": source.template_sha256,
                              "tokenizer_sha256": source.tokenizer_sha256,
                              "written": written(model, source, config)}
            moved = True
        model = parse_cases.attach(model, entry)
        config.models[model.name] = model
        out.append(model)
    if moved:
        polyfill.write_lock(config.path, entries)
    return out
