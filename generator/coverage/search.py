"""Coverage-guided shapes: the request variations that execute template code the matrix does
not, reduced by greedy cover to a minimal set and written as request files.

Each variation is rendered by the reference (traced) under every kwargs variant the model's
matrix renders a shape with, since a request file becomes one case per variant. The greedy
cover takes, again and again, the variation that adds the most not-yet-executed compiled lines
(ties: catalogue order), until none adds any. A variation the template refuses (its
raise_exception, or an error of its own) is kept like any other when it reaches new code: its
golden records that refusal as the outcome.

With engines (`--engine E`, engine.py), a variation is also sent through each engine the model
replays through, and the lines of the engine's request layer it reaches count beside template
lines: a variation is kept when it reaches template code or engine code nothing else reaches."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator import files
from generator.config.request import validate_request
from generator.coverage import variations
from generator.coverage.trace import Coverage, model_coverage, render_traced


@dataclass
class Candidate:
    name: str
    body: dict[str, Any]
    hits: set[int] = field(default_factory=set)
    outcomes: list[str] = field(default_factory=list)  # per variant: "ok" or the error
    requests: list[dict[str, Any]] = field(default_factory=list)  # per variant, as the matrix sends it
    engine_hits: set[tuple] = field(default_factory=set)  # (engine, file, line)

    def reaches(self) -> set:
        """What the greedy cover counts: template lines (ints) and engine keys (tuples)."""
        return self.hits | self.engine_hits


@dataclass
class Search:
    model: str
    before: Coverage
    after: Coverage
    kept: list[tuple[Candidate, int]]  # each keeper with the lines it added
    tried: int
    engines: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # name -> EngineCoverage before, after


def evaluate(model, source, config, name: str, body: dict[str, Any]) -> Candidate:
    """A variation's hits over every variant the matrix would render it with."""
    request = validate_request(json.loads(json.dumps(body)), name)
    candidate = Candidate(name=name, body=body)
    for kwargs in model.variants.values():
        rendered = dict(request, chat_template_kwargs={**request["chat_template_kwargs"], **model.kwargs, **kwargs})
        result, hits = render_traced(source, rendered, config.date)
        candidate.hits |= hits
        candidate.requests.append(rendered)
        candidate.outcomes.append(result.outcome if result.error is None else result.error)
    return candidate


def greedy(base: set, candidates: list, covers=lambda candidate: candidate.hits) -> list[tuple[Any, int]]:
    """The greedy set cover: repeatedly the candidate that `covers` most not yet covered (the
    first of equals, so the order of `candidates` decides ties), with how much it added; stops
    when none adds anything. Used by the search (template lines) and the log import (features)."""
    covered, kept = set(base), []
    remaining = list(candidates)
    while remaining:
        gains = [len(covers(c) - covered) for c in remaining]
        best = max(range(len(remaining)), key=lambda i: (gains[i], -i))
        if gains[best] == 0:
            break
        chosen = remaining.pop(best)
        kept.append((chosen, gains[best]))
        covered |= covers(chosen)
    return kept


def search(model, source, config, catalogue: dict[str, dict[str, Any]] | None = None,
           prefix: str = "cov-", engines: tuple[str, ...] = ()) -> Search:
    before = model_coverage(model, source, config, rendered_only=False)  # a refusal's branch is reached
    catalogue = variations.all_variations(source.template) if catalogue is None else catalogue
    # a variation already in the matrix under its name is never rewritten (its golden stands)
    candidates = [evaluate(model, source, config, prefix + name, body) for name, body in catalogue.items()
                  if prefix + name not in model.shapes]
    measured = {name: engine_signal(name, model, source, config, candidates)
                for name in engines if name in model.engines}
    base = set(before.hits) | {(name, *key) for name, cov in measured.items() for key in cov.hits}
    kept = greedy(base, candidates, covers=Candidate.reaches)
    after = Coverage(before.code, set(before.hits))
    for candidate, _ in kept:
        after.hits |= candidate.hits
    result = Search(model=model.name, before=before, after=after, kept=kept, tried=len(candidates))
    for name, cov in measured.items():
        grown = copy.copy(cov)
        grown.hits = set(cov.hits) | {key[1:] for c, _ in kept for key in c.engine_hits if key[0] == name}
        result.engines[name] = (cov, grown)
    return result


def engine_signal(name: str, model, source, config, candidates: list[Candidate]):
    """The matrix's coverage of engine `name`'s request layer, and each candidate's reached
    engine keys (every variant's request) added to it, all in one engine session."""
    from generator.config.cases import model_cases
    from generator.coverage import engine_layers
    from generator.measure import engine

    chosen = engine_layers.layer(name)
    flat = [request for candidate in candidates for request in candidate.requests]
    with chosen.session(model, source, config) as session:
        matrix = session.run([case.request for case in model_cases(model)], each=False)
        reached = session.run(flat)
    coverage = engine.EngineCoverage(name, chosen.version(config), session.files, models=[model.name],
                                     setup=set(session.setup), language=chosen.language)
    for keys in matrix:
        coverage.hits |= keys
    coverage.requests = len(model_cases(model))
    at = 0
    for candidate in candidates:
        for keys in reached[at:at + len(candidate.requests)]:
            candidate.engine_hits |= {(name, *key) for key in keys}
        at += len(candidate.requests)
    return coverage


def request_bytes(body: dict[str, Any]) -> str:
    """A request file's bytes: the body's own key order, two-space indent, LF, final newline."""
    return json.dumps(body, indent=2, ensure_ascii=False) + "\n"


def write_keepers(result: Search, out: Path) -> list[Path]:
    """Each keeper as out/<model>/<name>.json (written only when its bytes changed)."""
    written = []
    for candidate, _ in result.kept:
        path = out / result.model / f"{candidate.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        files.atomic_write(path, request_bytes(candidate.body))
        written.append(path)
    return written
