"""Invariants of a rendered prompt: what the template was given must be in what it wrote.

As vLLM's tests/renderers check a render, from the reference's own output only (the request as
the template saw it, see reference.template_view, and the prompt):

- every message's text is in the prompt, the turns in order (a system message is looked for
  anywhere: templates put it where the family was trained to read it, Gemma inside the first
  user turn, Mistral before the last one);
- every assistant tool call's name is in the prompt after its turn's text and before the next
  turn's, and so is every leaf of its arguments, key then value. Leaves, not a serialization:
  templates write arguments as JSON with any spacing or key order, as Python reprs, as XML
  parameters or in their own syntax (Gemma 4's `call:get_weather{city:<|"|>Paris<|"|>}`);
- turn delimiters balance: for each pair of a small table per family (PAIRS), opened minus
  closed is 1 where the prompt ends inside an open turn (a generation prompt, a continued final
  message) and 0 otherwise; pairs whose opening token the prompt never writes do not apply, and
  occurrences inside message text (a user typing `<|im_start|>`) are not counted.

Text is matched with its surrounding whitespace stripped and also in its JSON-escaped form
(templates that write content with `tojson`). Reasoning (`reasoning_content`, `reasoning`,
`thinking`, an inline `<think>` block) is exempt: templates drop it by design (Qwen3 drops it
before the last user turn; templates with no reasoning slot drop it everywhere), so reasoning
missing from the prompt is recorded as an exemption, not a finding.

A finding is `{"kind", "at", "detail"}`; kinds are KINDS. docs/invariants.md says how a
finding is reviewed (models.yaml `invariants:`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from generator.config.models import Reviewed

KINDS = ("dropped-message", "out-of-order", "dropped-tool-call", "dropped-arguments", "unbalanced-turns")
REASONING_KEYS = ("reasoning_content", "reasoning", "thinking")

# (opening tokens, closing tokens, open at the end of a generation prompt), one row per family.
PAIRS: tuple[tuple[tuple[str, ...], tuple[str, ...], bool], ...] = (
    (("<|im_start|>",), ("<|im_end|>",), True),  # ChatML: Qwen
    (("<start_of_turn>",), ("<end_of_turn>",), True),  # Gemma 2/3
    (("<|turn>",), ("<turn|>",), True),  # Gemma 4
    (("<|start_header_id|>",), ("<|eot_id|>", "<|eom_id|>"), True),  # Llama 3
    (("<|system|>", "<|user|>", "<|assistant|>"), ("<|end|>",), True),  # Phi-3
    (("<|start|>",), ("<|end|>", "<|call|>", "<|return|>"), True),  # Harmony: gpt-oss
    (("<|START_OF_TURN_TOKEN|>",), ("<|END_OF_TURN_TOKEN|>",), True),  # Command R
    (("[INST]",), ("[/INST]",), False),  # Mistral
    (("[AVAILABLE_TOOLS]",), ("[/AVAILABLE_TOOLS]",), False),
    (("[TOOL_RESULTS]",), ("[/TOOL_RESULTS]",), False),
    (("<tool_call>",), ("</tool_call>",), False),  # Qwen tool calls and results
    (("<tool_response>",), ("</tool_response>",), False),
    (("<think>",), ("</think>",), False),
    (("<|tool_call>",), ("<tool_call|>",), False),  # Gemma 4 tool calls and results
    (("<|tool_response>",), ("<tool_response|>",), False),
    (("<｜tool▁calls▁begin｜>",), ("<｜tool▁calls▁end｜>",), False),  # DeepSeek V3
    (("<｜tool▁call▁begin｜>",), ("<｜tool▁call▁end｜>",), False),
    (("<｜tool▁outputs▁begin｜>",), ("<｜tool▁outputs▁end｜>",), False),
    (("<｜tool▁output▁begin｜>",), ("<｜tool▁output▁end｜>",), False),
)


@dataclass
class Result:
    findings: list[dict[str, str]] = field(default_factory=list)
    exempt: list[str] = field(default_factory=list)

    def record(self) -> dict[str, Any] | None:
        """What a golden keeps under `invariants` (None: nothing found, nothing exempt)."""
        if not self.findings and not self.exempt:
            return None
        return {"findings": self.findings, "exempt": self.exempt}

    def add(self, kind: str, at: str, detail: str) -> None:
        self.findings.append({"kind": kind, "at": at, "detail": detail})


def text(finding: dict[str, str]) -> str:
    """A finding in one line: 'messages[2].tool_calls[0]: tool call get_weather dropped'."""
    return f"{finding['at']}: {finding['detail']}"


def _forms(value: str) -> list[str]:
    """The spellings a template may give a text: stripped, and JSON-escaped both ways."""
    stripped = value.strip()
    forms = [stripped]
    for ascii_only in (False, True):
        escaped = json.dumps(stripped, ensure_ascii=ascii_only)[1:-1]
        if escaped not in forms:
            forms.append(escaped)
    return forms


def _find(prompt: str, value: str, start: int = 0, end: int | None = None) -> tuple[int, int] | None:
    """(start, end) of the earliest spelling of `value` in prompt[start:end], else None."""
    end = len(prompt) if end is None else end
    best = None
    for form in _forms(value):
        at = prompt.find(form, start, end)
        if at >= 0 and (best is None or at < best[0]):
            best = (at, at + len(form))
    return best


# Inline reasoning markers: a block before the closing one is reasoning (Qwen's <think>, Gemma 4's
# thought channel); templates keep only what follows it in earlier turns.
INLINE_REASONING = (("<think>", "</think>"), ("<|channel>", "<channel|>"))


def _split_think(content: str) -> tuple[str, str | None]:
    """(answer, reasoning) of content with an inline reasoning block before its closing marker."""
    for opening, closing in INLINE_REASONING:
        if closing in content:
            reasoning, _, answer = content.rpartition(closing)
            return answer, reasoning.replace(opening, "", 1)
    return content, None


def _texts(message: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    """A message's texts to find, and its reasoning as (key, text)."""
    content = message.get("content")
    texts: list[str] = []
    if isinstance(content, str):
        texts = [content]
    elif isinstance(content, list):
        texts = [part["text"] for part in content
                 if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)]
    reasoning = [(key, message[key]) for key in REASONING_KEYS
                 if isinstance(message.get(key), str) and message[key].strip()]
    if message.get("role") == "assistant":
        split = [_split_think(t) for t in texts]
        texts = [answer for answer, _ in split]
        reasoning += [("content <think>", r) for _, r in split if r is not None and r.strip()]
    return [t for t in texts if t.strip()], reasoning


def _leaves(value: Any, path: str = "") -> list[tuple[str, str, Any]]:
    """(path, key, scalar) for every scalar of a JSON value, in order."""
    if isinstance(value, dict):
        out = []
        for key, item in value.items():
            sub = f"{path}.{key}" if path else str(key)
            if isinstance(item, (dict, list)):
                out += [(sub, str(key), None)] if not item else []
                out += _leaves(item, sub)
            else:
                out.append((sub, str(key), item))
        return out
    if isinstance(value, list):
        return [leaf for i, item in enumerate(value) for leaf in _leaves(item, f"{path}[{i}]")]
    return [(path, "", value)]


def _scalar_forms(value: Any) -> list[str]:
    if isinstance(value, bool):
        return ["true", "True"] if value else ["false", "False"]
    if value is None:
        return ["null", "None", "none"]
    if isinstance(value, str):
        return [value]
    return [json.dumps(value), str(value)]


def _find_any(prompt: str, values: list[str], start: int, end: int) -> tuple[int, int] | None:
    hits = [hit for v in values if v.strip() for hit in [_find(prompt, v, start, end)] if hit is not None]
    return min(hits) if hits else None


def _anchor(prompt: str, messages: list, index: int, cursor: int) -> int:
    """Where the next turn after `index` starts: its first text found from cursor (the end of the
    window a turn's tool calls must fall in), else the prompt's end."""
    for message in messages[index + 1:]:
        if not isinstance(message, dict) or message.get("role") in ("system", "developer"):
            continue
        texts, _ = _texts(message)
        if texts:
            hit = _find(prompt, texts[0], cursor)
            return hit[0] if hit is not None else len(prompt)
    return len(prompt)


def check(request: dict[str, Any], prompt: str) -> Result:
    """The invariants of one rendered prompt; `request` as the template saw it."""
    result = Result()
    messages = [m for m in request.get("messages") or []]
    cursor = 0
    counted: list[str] = []  # texts found in the prompt: their delimiters are not the template's
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        texts, reasoning = _texts(message)
        for value in texts:
            if role in ("system", "developer"):
                hit = _find(prompt, value)
                if hit is None:
                    result.add("dropped-message", f"messages[{i}]", f"{role} message text not in the prompt")
                else:
                    counted.append(value)
                continue
            hit = _find(prompt, value, cursor)
            if hit is not None:
                cursor = hit[1]
                counted.append(value)
            elif _find(prompt, value) is not None:
                counted.append(value)
                result.add("out-of-order", f"messages[{i}]", f"{role} message text appears before the turns it follows")
            else:
                result.add("dropped-message", f"messages[{i}]", f"{role} message text not in the prompt")
        for key, value in reasoning:
            if _find(prompt, value) is None:
                result.exempt.append(f"messages[{i}].{key}: reasoning not in the prompt (dropped by design)")
            else:
                counted.append(value)
        calls = message.get("tool_calls") if role == "assistant" else None
        if not isinstance(calls, list) or not calls:
            continue
        end = _anchor(prompt, messages, i, cursor)
        for j, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                continue
            name = function["name"]
            hit = _find(prompt, name, cursor, end)
            if hit is None:
                result.add("dropped-tool-call", f"messages[{i}].tool_calls[{j}]", f"tool call {name} dropped")
                continue
            # the arguments are looked for from where the name's search began: a template that
            # dumps the call's function object writes its keys in the body's order, and a client
            # may send `arguments` before `name` (Mistral NeMo: {"arguments": ..., "name": ...})
            start, cursor = cursor, hit[1]
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                if arguments.strip() and _find(prompt, arguments, start, end) is None:
                    result.add("dropped-arguments", f"messages[{i}].tool_calls[{j}]",
                               f"tool call {name}: its arguments string is not in the prompt")
                continue
            missing = []
            for path, key, value in _leaves(arguments):
                at = start
                if key:
                    found = _find(prompt, key, at, end)
                    if found is None:
                        missing.append(path)
                        continue
                    at = found[1]
                if value is None and key:
                    continue  # an empty container: its key is all there is to find
                if _find_any(prompt, _scalar_forms(value), at, end) is None:
                    missing.append(path)
            if missing:
                result.add("dropped-arguments", f"messages[{i}].tool_calls[{j}]",
                           f"tool call {name}: argument {', '.join(missing)} not in the prompt")
    _balance(request, prompt, counted, result)
    return result


def _balance(request: dict[str, Any], prompt: str, counted: list[str], result: Result) -> None:
    open_at_end = bool(request.get("add_generation_prompt", True) or request.get("continue_final_message"))
    tail = prompt.rstrip()
    for opens, closes, turn in PAIRS:

        def written(tokens: tuple[str, ...]) -> int:
            return sum(prompt.count(t) - sum(text.count(t) for text in counted) for t in tokens)

        opened, closed = written(opens), written(closes)
        if opened == 0:
            continue  # not this family's pair (or only typed by a user)
        # a turn is open at the end of a generation prompt; any other pair only when the prompt
        # ends with its opening token (Gemma 4 ends a tool call's prompt with <|tool_response>)
        expected = 1 if (turn and open_at_end) or tail.endswith(opens) else 0
        if opened - closed != expected:
            result.add("unbalanced-turns", "prompt",
                       f"{'/'.join(opens)} opened {opened} times, {'/'.join(closes)} closed {closed} "
                       f"(expected {opened - expected if expected else opened} closed)")


def of(template: str, request: dict[str, Any], prompt: str) -> Result:
    """The invariants of the reference's prompt for a request (as sent: normalized here as
    reference.render normalizes it)."""
    from generator.reference import template_view

    return check(template_view(template, request), prompt)


# --- Review: models.yaml `invariants:` ------------------------------------------------------


@dataclass
class Review:
    """Every finding of a set of goldens against the models' reviewed entries."""

    known: list[tuple[str, dict[str, str], str]] = field(default_factory=list)  # (case, finding, reason)
    unreviewed: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    stale: list[tuple[str, Reviewed]] = field(default_factory=list)  # (model, entry no finding matches)

    @property
    def cases(self) -> list[str]:
        return list(dict.fromkeys([c for c, _, _ in self.known] + [c for c, _ in self.unreviewed]))

    def lines(self) -> list[str]:
        """The findings for a person: a count line, then one line per golden, unreviewed first,
        then each stale entry (empty when there is nothing to say)."""
        if not self.known and not self.unreviewed and not self.stale:
            return []
        out = []
        if self.known or self.unreviewed:
            n = len(self.cases)
            total = len(self.known) + len(self.unreviewed)
            out.append(f"{n} golden{'s' if n != 1 else ''} carry {total} invariant finding{'s' if total != 1 else ''} "
                       f"({len(self.known)} reviewed, {len(self.unreviewed)} not; models.yaml `invariants:`, "
                       f"{docs_url()}):")
        grouped: dict[tuple[str, str], list[str]] = {}
        for case, finding in self.unreviewed:
            grouped.setdefault((case, "NOT REVIEWED"), []).append(finding["detail"])
        for case, finding, _ in self.known:
            grouped.setdefault((case, "reviewed"), []).append(finding["detail"])
        out += [f"  {case} ({'; '.join(dict.fromkeys(details))}): {state}"
                for (case, state), details in grouped.items()]
        out += [f"  stale models.yaml entry: models.{model}.invariants finding {entry.finding!r} matches no "
                f"finding any more (remove it)" for model, entry in self.stale]
        return out

    @property
    def passed(self) -> bool:
        return not self.unreviewed and not self.stale

    def proposed(self) -> dict[str, list[dict[str, object]]]:
        """model -> the `invariants:` entries that would review every unreviewed finding: one per
        finding's detail, with the cases (shape[--variant]) that carry it."""
        out: dict[str, dict[str, list[str]]] = {}
        for case, finding in self.unreviewed:
            model, _, name = case.partition("/")
            out.setdefault(model, {}).setdefault(finding["detail"], []).append(name)
        return {model: [{"finding": _glob_escape(detail), "cases": sorted(_glob_escape(n) for n in set(names)),
                         "reason": PROPOSED_REASON}
                        for detail, names in details.items()] for model, details in out.items()}

    def paste(self) -> list[str]:
        """The review to paste under each model in models.yaml (or to write with
        `goldens regenerate --write-invariants`), as lines; empty when nothing is unreviewed."""
        out = []
        for model, entries in self.proposed().items():
            out.append(f"to review {model}'s invariant findings, read each and paste under models.{model} in "
                       f"models.yaml, with your reason (or run `goldens regenerate --write-invariants`):")
            out.append("    invariants:")
            for entry in entries:
                out.append(f"      - finding: {_yaml_text(entry['finding'])}")
                out.append(f"        cases: [{', '.join(entry['cases'])}]")
                out.append(f"        reason: {_yaml_text(entry['reason'])}")
        return out


PROPOSED_REASON = ("the template itself renders the conversation this way (found by goldens regenerate); "
                   "the goldens record what the template does, and engines are judged against that")


def docs_url(page: str = "invariants.md") -> str:
    """A docs page as a team reads it: on the repository at this release's tag (a team's own
    repository has no docs/ folder of goldens). The version is the code's own, not the installed
    metadata's: in the venv at the reference's pins goldens runs from its path, uninstalled."""
    from generator import REPOSITORY, __version__

    return f"https://github.com/{REPOSITORY}/blob/v{__version__}/docs/{page}"


def _glob_escape(text: str) -> str:
    """A detail or case name as a glob matching only itself ('[' '*' '?' in brackets)."""
    return "".join(f"[{c}]" if c in "[]*?" else c for c in text)


def _yaml_text(text: str) -> str:
    import json

    return json.dumps(text, ensure_ascii=False)  # a JSON string is a YAML string


def write_review(config_path, proposed: dict[str, list[dict[str, object]]]) -> list[str]:
    """Append the proposed entries to each model's `invariants:` in models.yaml (made when the
    model has none), comments and layout kept, atomically; the models written."""
    import yaml

    from generator import files

    text = files.read_text(config_path)
    lines = text.splitlines(keepends=True)
    root = yaml.compose(text)
    models = next((v for k, v in root.value if k.value == "models"), None)
    written = []
    inserts: list[tuple[int, list[str]]] = []
    for key, node in models.value:
        if key.value not in proposed:
            continue
        indent = " " * node.value[0][0].start_mark.column if node.value else " " * (key.start_mark.column + 2)
        existing = next((v for k, v in node.value if k.value == "invariants"), None)
        body = []
        for entry in proposed[key.value]:
            body += [f"{indent}  - finding: {_yaml_text(entry['finding'])}\n",
                     f"{indent}    cases: [{', '.join(entry['cases'])}]\n",
                     f"{indent}    reason: {_yaml_text(entry['reason'])}\n"]
        if existing is not None and existing.value:
            inserts.append((_after(existing), body))
        elif existing is not None:
            from generator.errors import GoldensError

            raise GoldensError(f"{config_path}: models.{key.value}.invariants is empty; write the list by hand")
        else:
            inserts.append((_after(node), [f"{indent}invariants:  # reviewed invariant findings\n", *body]))
        written.append(key.value)
    for line, body in sorted(inserts, reverse=True):
        lines[line:line] = body
    files.atomic_write(config_path, "".join(lines))
    return written


def _after(node) -> int:
    """The line after a YAML node's last line (a block collection: its last item's)."""
    import yaml

    if isinstance(node, yaml.MappingNode) and node.value and not node.flow_style:
        return _after(node.value[-1][1])
    if isinstance(node, yaml.SequenceNode) and node.value and not node.flow_style:
        return _after(node.value[-1])
    return node.end_mark.line + 1


def review(findings: dict[str, list[dict[str, str]]], entries: dict[str, tuple[Reviewed, ...]]) -> Review:
    """Each case's findings (case id -> findings) judged against its model's reviewed entries
    (model -> entries); an entry of a model among the cases that matches none of them is stale."""
    out = Review()
    used: set[tuple[str, int]] = set()
    for case_id, found in findings.items():
        model = case_id.split("/", 1)[0]
        for finding in found:
            match = next(((i, e) for i, e in enumerate(entries.get(model, ())) if e.covers(case_id, finding)), None)
            if match is None:
                out.unreviewed.append((case_id, finding))
            else:
                used.add((model, match[0]))
                out.known.append((case_id, finding, match[1].reason))
    models = {case_id.split("/", 1)[0] for case_id in findings}
    out.stale = [(model, entry) for model in sorted(models) for i, entry in enumerate(entries.get(model, ()))
                 if (model, i) not in used]
    return out


def findings_of(extra: dict[str, Any]) -> list[dict[str, str]]:
    """The findings a golden records (none when it has no `invariants` record)."""
    record = extra.get("invariants") or {}
    return list(record.get("findings") or [])
