"""`goldens diff [REV]`: what changed in the goldens against a git revision, token by token.

What changed is read from git (changes.py) and each golden's two sides aligned token by token
(alignment.py); this module tells it, every change as rows of position, id and piece with a few
tokens of context:

    qwen3/tools: 9 tokens removed at 106-114
      @@ old 103-117, new 103-108 @@
          103    330 ' {"'
        - 106   1313 'type'
        ...
      text at character 412: 31 characters removed
        - …'"name": "get_weather", "type": "function"'…
        + …'"name": "get_weather"'…

A reviewer reads what moved first: the goldens whose tokens moved (ids, outcome, added or
removed), each with its token-level change (a change already shown for another golden is named,
not repeated; a long one is folded), then those whose text or request changed with the same ids,
and last, one line per model for the goldens where only provenance or analyses changed (a
template bump touches every golden's provenance, and only some of their tokens). `--markdown`
gives the same for a pull request, long changes folded in `<details>`.
"""

from __future__ import annotations

import re
from typing import Any

from generator import markdown as md
from generator.goldens import golden_file
from generator.goldens.alignment import count_of, describe_tokens, opcodes, text_rows, token_rows
from generator.goldens.changes import Change

FOLD_ROWS = 30  # rows of a change shown before it is folded (Markdown) or cut (terminal, unless --full)
MARKDOWN_BUDGET = 40_000  # characters of diff blocks in the Markdown; a PR comment holds 65,536
VALUE_LIMIT = 48  # characters of a provenance value shown in a per-model line


def _field_changes(old: golden_file.Golden, new: golden_file.Golden) -> list[str]:
    """Top-level fields that differ besides tokens and prompt; provenance by key."""
    out = []
    if old.request != new.request:
        out.append("request")
    if old.outcome != new.outcome:
        out.append("outcome")
    if old.error != new.error:
        out.append("error")
    for key in sorted(set(old.provenance) | set(new.provenance)):
        if old.provenance.get(key) != new.provenance.get(key):
            out.append(f"provenance.{key}")
    for key in sorted(set(old.extra) | set(new.extra)):
        if old.extra.get(key) != new.extra.get(key):
            out.append(key)
    return out


def summary(change: Change, provenance: bool = True) -> str:
    """The one line for a file: `qwen3/tools: 9 tokens removed at 106-114`; without
    `provenance`, provenance keys are left to the model's line (see model_line)."""
    kind = "ledger entry" if change.ledger else "golden"
    old, new = change.old, change.new
    if old is None:
        what = f"refusal: {new.error}" if new.outcome == "error" else count_of(len(new.ids))
        return f"{change.name}: new {kind} ({what})"
    if new is None:
        return f"{change.name}: {kind} removed (had {count_of(len(old.ids))})"
    if old.outcome == "ok" and new.outcome == "error":
        text = f"now refused by the reference ({new.error}); had {count_of(len(old.ids))}"
    elif old.outcome == "error" and new.outcome == "ok":
        text = f"now renders ({count_of(len(new.ids))}); was refused ({old.error})"
    elif old.ids != new.ids:
        text = describe_tokens(opcodes(old.ids, new.ids))
    elif old.pieces != new.pieces:
        at = next(i for i, (a, b) in enumerate(zip(old.pieces, new.pieces)) if a != b)
        text = f"same ids, pieces changed from token {at}"
    elif (old.prompt or "") != (new.prompt or ""):
        text = "same tokens, rendered text changed"
    else:
        text = ""
    others = [f for f in _field_changes(old, new) if f not in ("outcome", "error")
              and (provenance or not f.startswith("provenance."))]
    if not text:
        text = f"tokens unchanged; changed: {', '.join(others) or 'nothing the reader keeps'}"
    elif others:
        text += f" (also changed: {', '.join(others)})"
    return f"{change.name}: {text}"


def body(change: Change, context: int = 3) -> list[str]:
    """Everything under a file's summary line."""
    old, new = change.old, change.new
    if old is None or new is None:
        return []
    rows = []
    if old.outcome != new.outcome or old.error != new.error:  # first: it says why the tokens went
        rows += [f"- outcome {old.outcome}" + (f": {old.error}" if old.error else ""),
                 f"+ outcome {new.outcome}" + (f": {new.error}" if new.error else "")]
    return rows + token_rows(old, new, context) + text_rows(old.prompt, new.prompt)


def moved(change: Change) -> bool:
    """Tokens moved: the golden is new or gone, its outcome changed, or its ids did."""
    old, new = change.old, change.new
    return old is None or new is None or old.outcome != new.outcome or old.ids != new.ids


def metadata_only(change: Change) -> bool:
    """Only provenance or analyses changed: ids, pieces, text, request and outcome all equal."""
    old, new = change.old, change.new
    return (not moved(change) and old.pieces == new.pieces and (old.prompt or "") == (new.prompt or "")
            and old.request == new.request and old.error == new.error)


def first_moved_token(change: Change) -> int | None:
    """Where the new side's tokens first differ from the old side's (None: nothing to point at)."""
    if change.old is None or change.new is None:
        return 0 if change.new is not None and change.new.ids else None
    return next((j1 for tag, _, _, j1, _ in opcodes(change.old.ids, change.new.ids) if tag != "equal"), None)


def change_key(change: Change) -> tuple | None:
    """What a change does, apart from where: the ids each edit removes and adds, the text span and
    the outcome. Two goldens with one key show the same edit (a template sentence in every tool
    shape); None when there is nothing to compare."""
    old, new = change.old, change.new
    if old is None or new is None:
        return None
    edits = tuple((tuple(old.ids[i1:i2]), tuple(new.ids[j1:j2]))
                  for tag, i1, i2, j1, j2 in opcodes(old.ids, new.ids) if tag != "equal")
    text = text_rows(old.prompt, new.prompt)[1:]  # the spans with their context, not the offset
    return edits, tuple(text), (old.outcome, old.error, new.outcome, new.error)


def _value(value: object) -> str:
    if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value):
        return value[:12] + "…"
    text = repr(value)
    return text if len(text) <= VALUE_LIMIT else text[:VALUE_LIMIT - 1] + "…"


def model_line(model: str, changes: list[Change]) -> str:
    """One line for a model: how many of its goldens changed only in provenance or analyses, and
    each field that changed, with `old → new` when it is one value across the model's goldens:
    `qwen3: 18 goldens with tokens unchanged · provenance.template 'a' → 'b' in 28 · ...`.
    Provenance counts over every changed golden of the model (their token lines leave it out),
    analyses over the tokens-unchanged ones (a golden whose tokens moved names its own)."""
    quiet = [c for c in changes if c.old is not None and c.new is not None and metadata_only(c)]
    seen: dict[str, list[tuple[object, object]]] = {}
    for change in changes:
        if change.old is None or change.new is None:
            continue
        for field in _field_changes(change.old, change.new):
            if field.startswith("provenance."):
                key = field.split(".", 1)[1]
                seen.setdefault(field, []).append((change.old.provenance.get(key), change.new.provenance.get(key)))
            elif change in quiet:
                seen.setdefault(field, []).append((change.old.extra.get(field), change.new.extra.get(field)))
    parts = []
    if quiet:
        goldens = sum(1 for c in quiet if not c.ledger)
        entries = len(quiet) - goldens
        counted = " and ".join(x for x in (count_of(goldens, "golden") if goldens else "",
                                           count_of(entries, "ledger entry", "ledger entries") if entries else "")
                               if x)
        parts.append(f"{counted} with tokens unchanged")
    for field, pairs in seen.items():
        text = field
        if len(set(map(repr, pairs))) == 1 and all(isinstance(v, (str, int, bool)) or v is None
                                                   for v in pairs[0]):
            text += f" {_value(pairs[0][0])} → {_value(pairs[0][1])}"
        parts.append(f"{text} in {len(pairs)}")
    return f"{model}: {' · '.join(parts)}"


def arrange(changes: list[Change]) -> tuple[list[Change], list[Change], dict[str, list[Change]]]:
    """(tokens moved, same tokens but text or request changed, changes by model for the model
    lines): what a reviewer must read first, first. Within each, file order."""
    first = [c for c in changes if moved(c)]
    second = [c for c in changes if not moved(c) and not metadata_only(c)]
    by_model: dict[str, list[Change]] = {}
    for change in changes:
        by_model.setdefault(change.model, []).append(change)
    lines = {model: items for model, items in by_model.items()
             if any(not moved(c) and metadata_only(c) for c in items)
             or any(f.startswith("provenance.") for c in items if c.old and c.new
                    for f in _field_changes(c.old, c.new))}
    return first, second, lines


def _entries(changes: list[Change], context: int):
    """(change, its summary line, its rows, the name of the golden already showing the same change)."""
    shown: dict[tuple, str] = {}
    for change in changes:
        key = change_key(change)
        same = shown.get(key) if key is not None else None
        if key is not None and same is None:
            shown[key] = change.name
        yield change, summary(change, provenance=False), [] if same else body(change, context), same


def _tally(changes: list[Change], against: str) -> str:
    """'28 goldens changed against HEAD: 10 with tokens moved, 18 with tokens unchanged'."""
    quiet = sum(1 for c in changes if not moved(c) and metadata_only(c))
    line = f"{count_of(len(changes), 'golden')} changed" + (f" {against}" if against else "")
    if quiet:
        line += f": {sum(1 for c in changes if moved(c))} with tokens moved, {quiet} with tokens unchanged"
    return line


def render_text(changes: list[Change], rev: str, context: int = 3, full: bool = False,
                sources: list[str] | None = None) -> str:
    if not changes:
        return f"no golden changed against {rev}\n"
    first, second, models = arrange(changes)
    lines = [*sources, ""] if sources else []  # a bump's template, special tokens and their effect first
    for change, line, rows, same in _entries(first + second, context):
        lines.append(line + (f", the same change as {same}" if same else ""))
        if not full and len(rows) > FOLD_ROWS:
            rows = rows[:FOLD_ROWS] + [f"… {len(rows) - FOLD_ROWS} more rows (--full shows them)"]
        lines += [f"  {row}" for row in rows] + ([""] if rows else [])
    if lines and lines[-1]:
        lines.append("")
    for model, items in models.items():
        lines.append(model_line(model, items))
    if models:
        lines.append("")
    lines.append(_tally(changes, f"against {rev}"))
    return "\n".join(lines) + "\n"


def render_markdown(changes: list[Change], rev: str, context: int = 3, sources: list[str] | None = None) -> str:
    title = f"**goldens diff against {md.code(rev)}**"
    if not changes:
        return f"{title}: no golden changed\n"
    first, second, models = arrange(changes)
    lines = [f"{title}: {_tally(changes, '')}"]
    if sources:
        lines += ["", "#### Model sources changed", "", *md.fenced("\n".join(sources), "diff")]
    budget = MARKDOWN_BUDGET
    for heading, part in (("Tokens moved", first), ("Same tokens, text or request changed", second)):
        if not part:
            continue
        lines += ["", f"#### {heading} ({len(part)})", ""]
        for change, line, rows, same in _entries(part, context):
            name, _, what = line.partition(": ")
            lines.append(f"- **{md.escape(name)}**: {md.escape(what)}"
                         + (f", the same change as {md.escape(same)}" if same else ""))
            if not rows:
                continue
            block = md.fenced("\n".join(rows), "diff")
            size = sum(len(x) + 1 for x in block)
            if size > budget:
                lines += ["", "  (rows not shown: the report is at its size limit; `goldens diff` shows them)", ""]
                continue
            budget -= size
            shown = md.fold(f"{len(rows)} rows", block) if len(rows) > FOLD_ROWS else block
            lines += ["", *(f"  {x}" if x else "" for x in "\n".join(shown).split("\n")), ""]
    if models:
        lines += ["", "#### Tokens unchanged: provenance or analyses", ""]
        for model, items in models.items():
            _, _, what = model_line(model, items).partition(": ")
            lines.append(f"- **{md.escape(model)}**: {md.escape(what)}")
        quiet = [c.name for c in changes if not moved(c) and metadata_only(c)]
        if quiet:
            lines += ["", *md.fold(f"the {count_of(len(quiet), 'golden')} with tokens unchanged",
                                   [", ".join(md.escape(name) for name in quiet)])]
    while lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def document(changes, rev: str, sources: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """`goldens diff --json` (`goldens.diff/1`): every golden (or ledger entry) changed against `rev`, in the order the text view reads
    them: tokens moved first."""
    first, second, _ = arrange(changes)
    ordered = first + second + [c for c in changes if c not in first and c not in second]
    shown: dict[tuple, str] = {}
    items = []
    for change in ordered:
        old, new = change.old, change.new
        key = change_key(change)
        same = shown.get(key) if key is not None else None
        if key is not None and same is None:
            shown[key] = change.name
        items.append({
            "name": change.name,
            "path": change.path,
            "kind": "ledger entry" if change.ledger else "golden",
            "status": "added" if old is None else "removed" if new is None else "changed",
            "tokens_moved": moved(change),
            "metadata_only": old is not None and new is not None and metadata_only(change),
            "first_moved_token": first_moved_token(change),
            "old_tokens": None if old is None else len(old.ids),
            "new_tokens": None if new is None else len(new.ids),
            "fields": _field_changes(old, new) if old is not None and new is not None else [],
            "summary": summary(change),
            "same_change_as": same,
        })
    return {"against": rev, "changed": len(changes), "tokens_moved": sum(1 for c in changes if moved(c)),
            "goldens": items,
            # each model whose template or tokenizer changed: the text view's lines (template diff,
            # BOS/EOS and special tokens, the effect on ids a client re-encodes)
            "sources": sources or {}}
