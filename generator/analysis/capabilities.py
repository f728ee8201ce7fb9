"""What a chat template takes, probed as minja's chat_template_caps probes it: small requests
with a marker the prompt must show (a system text, a tool's name, a call's argument, a tool's
result, two calls' arguments), rendered by the reference. Each capability comes out "yes",
"ignored" (rendered, marker absent) or "refused" (the template raised), which
generator/config/polyfill.py turns into polyfilled shapes."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Callable

from generator.config.polyfill import CAPABILITIES
from generator.errors import GoldensError

_USER = {"role": "user", "content": "Hey"}
_TOOL = {"type": "function", "function": {
    "name": "probe_tool_marker", "description": "A probe.",
    "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}, "required": ["arg"]}}}


def _call(call_id: str, marker: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": "probe_tool_marker", "arguments": {"arg": marker}}}


def _calls(*markers: str) -> dict[str, Any]:
    ids = ("call1abcd", "call2abcd")  # nine alphanumerics: what Mistral's templates require
    return {"role": "assistant", "content": "", "tool_calls": [_call(i, m) for i, m in zip(ids, markers)]}


# capability -> (request, the markers its prompt must show)
PROBES: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "system_role": ({"messages": [{"role": "system", "content": "probe_system_marker"}, _USER]},
                    ("probe_system_marker",)),
    "tools": ({"messages": [_USER], "tools": [_TOOL]}, ("probe_tool_marker",)),
    "tool_calls": ({"messages": [_USER, _calls("probe_call_marker")], "tools": [_TOOL]},
                   ("probe_call_marker",)),
    "tool_responses": ({"messages": [_USER, _calls("probe_call_marker"),
                                     {"role": "tool", "tool_call_id": "call1abcd", "name": "probe_tool_marker",
                                      "content": "probe_result_marker"}], "tools": [_TOOL]},
                       ("probe_result_marker",)),
    "parallel_tool_calls": ({"messages": [_USER, _calls("probe_first_marker", "probe_second_marker")],
                             "tools": [_TOOL]}, ("probe_first_marker", "probe_second_marker")),
}
assert tuple(PROBES) == CAPABILITIES


def probe(render: Callable[[dict[str, Any]], tuple[str | None, str | None]],
          kwargs: dict[str, Any] | None = None) -> dict[str, str]:
    """Each capability's state; `render(request)` gives (prompt, error); `kwargs` are the
    model's own chat_template_kwargs (a date string some templates need). Nothing ({}) when the
    template refuses even one user message: then nothing is polyfilled."""
    base, error = render({"messages": [_USER], "add_generation_prompt": True, "chat_template_kwargs": dict(kwargs or {})})
    if error is not None:  # a template that refuses a lone user turn: no probe can say what it lacks
        return {}
    out = {}
    for name, (request, markers) in PROBES.items():
        prompt, error = render({**request, "add_generation_prompt": True, "chat_template_kwargs": dict(kwargs or {})})
        if error is not None:
            out[name] = "refused"
        else:
            out[name] = "yes" if all(m in (prompt or "") for m in markers) else "ignored"
    return out


def of_source(source, date: _dt.date, kwargs: dict[str, Any] | None = None) -> dict[str, str]:
    """The capabilities of a resolved source's template, rendered by the reference."""
    from generator import reference

    tokenizer = reference.load_tokenizer(source.tokenizer_dir)

    def render(request: dict[str, Any]) -> tuple[str | None, str | None]:
        result = reference.render(tokenizer, source.template, request, date)
        return result.prompt, result.error

    return probe(render, kwargs)


def refresh(config, models: list, sources: dict, full: bool) -> list:
    """Probe each selected model whose template the lock has not seen (its sha256 differs or
    it has no entry), write the lock if anything moved, and return the models with their
    capabilities. A no-change run renders nothing here. `full`: every model of the config is
    selected, so entries of models it no longer has are dropped."""
    import dataclasses

    from generator.config import polyfill

    entries = polyfill.load_lock(config.path)
    kept = {name: entry for name, entry in entries.items() if not full or name in config.models}
    out = []
    for model in models:
        source = sources[model.name]
        entry = kept.get(model.name)
        if entry is None or entry.get("template_sha256") != source.template_sha256:
            try:
                found = of_source(source, config.date, model.kwargs)
            except GoldensError as error:  # the render deadline, memory: this machine's, no capability
                raise GoldensError(f"{model.name}: probing what its template takes: {error}; nothing written") from None
            entry = {"template_sha256": source.template_sha256, "capabilities": found}
            kept[model.name] = entry
        model = dataclasses.replace(model, capabilities=dict(entry["capabilities"]))
        config.models[model.name] = model
        out.append(model)
    if kept != entries:
        polyfill.write_lock(config.path, kept)
    return out
