"""How much of a chat template a set of reference renders executes.

Jinja compiles a template into Python; Transformers' apply_chat_template runs the compiled
template it caches (`_compile_jinja_template`), so tracing the lines of that compiled code while
the reference renders is a measure of the template itself, on the reference's own path. Jinja
records which template line each stretch of generated code came from (`Template.debug_info`),
so every line of compiled code maps back to a template line. The unit counted is a line of
compiled code (a template line holding `{% if %}a{% else %}b{% endif %}` is two or more), and
only code that runs at render time counts: the function bodies, never the module preamble, and
never the guards Jinja's compiler adds that no request can reach (see `GUARDS`).
"""

from __future__ import annotations

import functools
import re
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


# Compiled lines Jinja adds around the template's own code that only the template's own text,
# never a request, could reach: the raise behind every `{% set ns.x = ... %}` (the template made
# `ns` with namespace() itself), and a macro parameter's "was not provided" default (whether a
# call site passes an argument is fixed in the template's text). Counting them would hold
# coverage below 100% for every template that uses a namespace or a macro.
GUARDS = re.compile(
    r'raise TemplateRuntimeError\("cannot assign attribute on non-namespace object"\)'
    r"|l_\d+_\w+ = undefined\(\"parameter '\w+' was not provided\", name='\w+'\)"
)


@dataclass(frozen=True)
class TemplateCode:
    """A compiled template: its code objects, and each executable compiled line's template line
    (`guards`: how many compiled lines GUARDS left out)."""

    template: str
    codes: frozenset
    lines: dict[int, int]  # compiled line -> template line
    guards: int = 0

    def text(self, line: int) -> str:
        rows = self.template.splitlines()
        return rows[line - 1] if 0 < line <= len(rows) else ""


def _nested(code) -> Iterable:
    yield code
    for const in code.co_consts:
        if hasattr(const, "co_lines"):
            yield from _nested(const)


def compiled(template: str) -> TemplateCode:
    """The compiled code of a template, the very object apply_chat_template renders with."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    return _code_of(_compile_jinja_template(template), template)


@functools.lru_cache(maxsize=64)
def _code_of(compiled_template, template: str) -> TemplateCode:
    functions = [compiled_template.root_render_func, *compiled_template.blocks.values()]
    codes = {code for fn in functions for code in _nested(fn.__code__)}
    marks = sorted((code_line, template_line) for template_line, code_line in compiled_template.debug_info)
    lines: dict[int, int] = {}
    for code in codes:
        for _, _, lineno in code.co_lines():
            if lineno is None or lineno == code.co_firstlineno:
                continue  # the `def` line: entering a function is not template code
            owner = None
            for code_line, template_line in marks:
                if code_line > lineno:
                    break
                owner = template_line
            if owner is not None:  # before the first mark: the function's preamble
                lines[lineno] = owner
    # Jinja opens every block body with `pass`: it is the body's first line, not the line of
    # the `if`/`for` above it, so it takes the template line of the body statement after it.
    source = compiled_template.environment.compile(template, raw=True).splitlines()
    for lineno in sorted(lines):
        row = source[lineno - 1] if lineno <= len(source) else ""
        if row.strip() == "pass" and lineno + 1 in lines:
            after = source[lineno]
            if len(after) - len(after.lstrip()) == len(row) - len(row.lstrip()):
                lines[lineno] = lines[lineno + 1]
    guards = [lineno for lineno in lines if lineno <= len(source) and GUARDS.fullmatch(source[lineno - 1].strip())]
    for lineno in guards:
        del lines[lineno]
    return TemplateCode(template=template, codes=frozenset(codes), lines=lines, guards=len(guards))


_TRACE_LOCK = threading.Lock()


def run_traced(code: TemplateCode, action: Callable[[], Any]) -> tuple[Any, set[int]]:
    """Run `action` (a reference render) and return its result and the compiled lines of the
    template it executed. Only frames of the template's own code are traced line by line."""
    hits: set[int] = set()
    codes = code.codes

    def local(frame, event, arg):
        if event == "line":
            hits.add(frame.f_lineno)
        return local

    def calls(frame, event, arg):
        return local if frame.f_code in codes else None

    with _TRACE_LOCK:
        previous = sys.gettrace()
        sys.settrace(calls)
        try:
            result = action()
        finally:
            sys.settrace(previous)
    return result, hits & code.lines.keys()


@dataclass
class Coverage:
    """The union of what several renders of one template executed."""

    code: TemplateCode
    hits: set[int] = field(default_factory=set)
    cases: int = 0  # the renders measured (model_coverage)
    rendered: int = 0  # of those, the ones the reference rendered (the rest refused)

    @property
    def executable(self) -> int:
        return len(self.code.lines)

    @property
    def executed(self) -> int:
        return len(self.hits)

    @property
    def percent(self) -> float:
        return 100.0 * self.executed / self.executable if self.executable else 100.0

    def missed_template_lines(self) -> list[int]:
        """Template lines holding compiled code that never ran."""
        return sorted({t for c, t in self.code.lines.items() if c not in self.hits})

    def spans(self) -> list[dict[str, Any]]:
        """Never-executed code as runs of consecutive template lines, each with its text
        (`partly`: some of the code of those lines did run)."""
        missed = self.missed_template_lines()
        ran = {t for c, t in self.code.lines.items() if c in self.hits}
        out: list[dict[str, Any]] = []
        for line in missed:
            if out and out[-1]["lines"][1] == line - 1:
                out[-1]["lines"][1] = line
            else:
                out.append({"lines": [line, line]})
        for span in out:
            first, last = span["lines"]
            span["text"] = "\n".join(self.code.text(n) for n in range(first, last + 1))
            span["partly"] = any(n in ran for n in range(first, last + 1))
        return out

    def gain(self, hits: set[int]) -> int:
        return len(hits - self.hits)

    def record(self) -> dict[str, Any]:
        return {
            "executed": self.executed, "executable": self.executable,
            "percent": round(self.percent, 1), "never_executed": self.spans(),
            "cases": self.cases, "rendered": self.rendered,
        }


def render_traced(source, request: dict[str, Any], date, rendered_only: bool = False) -> tuple[Any, set[int]]:
    """The reference's render of one request (generator.reference.render_request, the very
    call regenerate makes, normalization and the as-sent render included) and the compiled
    lines of the template it executed. With `rendered_only`, only what rendered counts: a
    refusal covers nothing (the lines it ran up to its raise checked no output), and of a
    normalized body whose as-sent render refused, only the normalized render's lines count."""
    from generator import reference

    code = compiled(source.template)
    result, hits = run_traced(code, lambda: reference.render_request(source, request, date))
    if not rendered_only:
        return result, hits
    if result.error is not None:
        return result, set()
    as_sent = (result.normalization or {}).get("as_sent") or {}
    if as_sent.get("outcome") == "error":
        normalized, _ = reference.normalize(request, reference.content_format(source.template))
        hits = run_traced(code, lambda: reference.render_request(source, normalized, date))[1]
    return result, hits


def coverage_records(config, model_names) -> dict[str, dict[str, Any]]:
    """Each named model's coverage record, in the given order (what `check --coverage` reports)."""
    from generator.sources.source import resolve

    return {model.name: model_coverage(model, resolve(model, config), config).record()
            for model in config.select(tuple(model_names))}


def model_coverage(model, source, config, rendered_only: bool = True) -> Coverage:
    """What every case of a model's matrix executes of its template: by default only the cases
    the reference renders count (a refusal checks no output); `rendered_only=False` counts
    the code refusals ran too (the search's baseline: a refusal's branch is still reached)."""
    from generator.config.cases import model_cases

    coverage = Coverage(compiled(source.template))
    for case in model_cases(model):
        result, hits = render_traced(source, case.request, config.date, rendered_only)
        coverage.hits |= hits
        coverage.cases += 1
        coverage.rendered += result.error is None
    return coverage
