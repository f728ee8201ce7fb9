"""The render: one case -> its golden, by the reference and its analyses.

Everything here shapes golden bytes, and so does every module whose code it runs (measured:
generator/goldens/index.py RENDER): the regenerate index hashes them, so an edit to the
orchestration around a render (generator/goldens/regenerate.py and the steps it joins: inputs,
the worker pool, the writes, the review) renders nothing again.
"""

from __future__ import annotations

import contextlib

from generator import encoder, installed, reference
from generator.config import polyfill
from generator.config.cases import EXPANDED_VIEW, PARSE, Case, all_cases
from generator.config.models import Config, ModelSpec
from generator.errors import GoldensError
from generator.goldens import golden_file, parse_goldens
from generator.sources import processor
from generator.sources.source import Source

REFERENCE_PACKAGES = ("transformers", "tokenizers", "jinja2")


def versions() -> dict[str, str]:
    return {name: installed.version(name) for name in REFERENCE_PACKAGES}


def provenance(source: Source, config: Config) -> dict[str, str]:
    """What every golden of a model was rendered from: a built-in family's also names the family
    and whether its tokenizer is the model's own (`real`) or a `surrogate` (docs/families.md); a
    model with an encoder reference names it too (the wheel and module it is pinned by), the only
    line its agreeing goldens add."""
    family = {"family": source.family, "tokenizer": "surrogate" if source.surrogate else "real"} if source.family else {}
    return {
        **family,
        "source": source.origin,
        "template": source.template_origin,
        "template_sha256": source.template_sha256,
        "tokenizer_sha256": source.tokenizer_sha256,
        "date": config.date.isoformat(),
        **versions(),
        **({"encoder": source.encoder_origin} if source.encoder_origin is not None else {}),
    }


def reference_golden(case: Case, source: Source, config: Config, stamp: dict[str, str]) -> golden_file.Golden:
    """The case's golden. A render this machine could not finish (the render deadline, memory:
    generator/budget.py), the case's own or one of its analyses', is no outcome of the
    template's: it ends the run, naming the case, and nothing is written."""
    try:
        return _reference_golden(case, source, config, stamp)
    except GoldensError as error:
        raise GoldensError(f"{case.id}: {error}; nothing written") from None


def _reference_golden(case: Case, source: Source, config: Config, stamp: dict[str, str]) -> golden_file.Golden:
    if case.axis == PARSE:
        return parse_goldens.required(parse_goldens.golden(case, source, config, stamp))
    result = reference.render_request(source, case.request, config.date)
    item = golden_file.Golden(
        case=case.id, request=case.request, outcome=result.outcome, ids=result.ids,
        pieces=result.pieces, prompt=result.prompt, error=result.error, provenance=stamp,
    )
    if result.normalization is not None:
        item.extra["normalization"] = result.normalization
    if source.encoder is not None and case.view != EXPANDED_VIEW:
        disputed = encoder.dispute(result, encoder.render(reference.load_tokenizer(source.tokenizer_dir),
                                                          source.encoder, source.encoder_file, case.request))
        if disputed is not None:
            item.extra["disputed"] = disputed
    if case.polyfills:
        item.extra["polyfilled"] = {"from": case.shape.removesuffix(polyfill.SUFFIX), "applied": list(case.polyfills)}
    annotate(case, source, config, item)
    return item


def annotate(case: Case, source: Source, config: Config, item: golden_file.Golden) -> None:
    """The analyses a golden records beside its ids, all by the reference: `roundtrip` on every
    golden; `control_tokens` where a user message spells control-token text; `requests` and
    `prefix_breaks` (+ `prefix_tail` when declared) where the request stands for a multi-turn
    conversation; `cache_busters` on the multi-turn shape; `invariants` where a message, a tool
    call or a turn delimiter of the request is not in the prompt as it should be, or reasoning
    was dropped by design (generator/analysis/).
    An expanded-view golden names its view and its processor instead: the analyses are about
    the template's text, which its template-view sibling already covers."""
    if case.view == EXPANDED_VIEW:
        spec = config.models[case.model].processor
        item.extra["view"] = EXPANDED_VIEW
        if spec is not None:
            item.extra["processor"] = {"origin": spec.origin, "sha256": processor.fingerprint(spec)}
        return
    if item.outcome != "ok":
        return
    from generator.analysis import busters, control_tokens, invariants, prefix, roundtrip

    found = invariants.of(source.template, case.request, item.prompt or "").record()
    if found is not None:
        item.extra["invariants"] = found
    from generator.engines.transformers.engine import TransformersEngine

    tokenizer = reference.load_tokenizer(source.tokenizer_dir)
    engine = TransformersEngine(source, config.date)
    item.extra["roundtrip"] = roundtrip.record(tokenizer, item.ids)
    if control_tokens.spelled_markers(case.request):
        item.extra["control_tokens"] = {engine.name: control_tokens.record(engine, case.request, tokenizer)}
    tail = config.models[case.model].prefix_tails.get(case.variant)
    if prefix.is_multi_request(case.request):
        points = len(prefix.request_points(case.request["messages"]))
        requests = prefix.requests_of(case.request, at_most=prefix.MAX_REQUESTS)
        with _long(case, len(case.request["messages"]), len(requests)) as advance:
            result = prefix.check(engine, requests, tail, advance=advance)
        item.extra["requests"] = result.requests_record()
        if len(requests) < points:  # said in the golden: which requests were rendered, of how many
            item.extra["prefix_sampled"] = {"rendered": len(requests), "of": points}
        item.extra["prefix_breaks"] = [b.record() for b in result.breaks]
        if tail is not None:
            item.extra["prefix_tail"] = {"tokens": tail.tokens, "reason": tail.reason}
    if case.shape == "multi-turn":
        kwargs = case.request.get("chat_template_kwargs") or {}
        item.extra["cache_busters"] = {
            r.buster.name: busters.record(r) for r in busters.cache_busters(engine, kwargs, tail)
        }


LONG_CONVERSATION = 256  # messages from which a golden's analyses print a progress line


@contextlib.contextmanager
def _long(case: Case, messages: int, requests: int):
    """`advance(i)` for a conversation's prefix analysis: a progress line (live on a terminal,
    every few seconds elsewhere) when the conversation is long, else nothing."""
    if messages < LONG_CONVERSATION:
        yield None
        return
    from generator import progress

    with progress.long_work(f"{case.id}: prefix analysis of a {messages}-message conversation") as work:
        yield lambda i: work.update(f"request {i + 1} of {requests}")


def render_model(model: ModelSpec, source: Source, config: Config) -> list[golden_file.Golden]:
    """A model's goldens in case order (loads its tokenizer: the cost a regenerate avoids)."""
    stamp = provenance(source, config)
    return [reference_golden(case, source, config, stamp) for case in all_cases(model)]
