"""`goldens diff [REV]`: what changed in the goldens against a git revision, token by token.

The old side of each golden is `git show REV:path`, the new side the working tree (so staged,
unstaged and untracked goldens all count). Token ids are aligned with difflib's SequenceMatcher,
and every change is shown as rows of position, id and piece with a few tokens of context:

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

import difflib
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator import files
from generator import markdown as md
from generator.errors import GoldensError, printable
from generator.goldens import golden_file

TEXT_CONTEXT = 24  # characters shown either side of the rendered text's changed span
SPAN_LIMIT = 240  # characters of a changed span shown before it is cut
ROW_LIMIT = 400  # token rows per file before the rest is summarised
SUMMARY_PARTS = 3  # token changes spelled out in a summary line before they are counted instead
FOLD_ROWS = 30  # rows of a change shown before it is folded (Markdown) or cut (terminal, unless --full)
MARKDOWN_BUDGET = 40_000  # characters of diff blocks in the Markdown; a PR comment holds 65,536
VALUE_LIMIT = 48  # characters of a provenance value shown in a per-model line


@dataclass
class Change:
    name: str  # "qwen3/tools", or "qwen3/tools.vllm" for a ledger entry
    path: str  # relative to the repository top
    old: golden_file.Golden | None
    new: golden_file.Golden | None
    file: Path | None = None  # the working-tree file, when the golden still exists

    @property
    def ledger(self) -> bool:
        return "." in self.name.rsplit("/", 1)[-1]

    @property
    def model(self) -> str:
        return self.name.split("/", 1)[0]


# ---------------------------------------------------------------------------------------- git

def _git(top: Path | str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(["git", "-C", str(top), *args], capture_output=True)
    except FileNotFoundError:
        raise GoldensError("git is not installed (goldens diff reads the old goldens from git)") from None
    if check and result.returncode != 0:
        message = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GoldensError(f"git {args[0]} failed: {message[-1] if message else result.returncode}")
    return result


def changed(root: Path, rev: str = "HEAD") -> list[Change]:
    """Every golden (and ledger entry) under root that differs between `rev` and the working tree."""
    root = Path(root)
    if rev.startswith("-") or not rev.strip():
        raise GoldensError(f"{rev!r} is not a git revision")
    if not root.is_dir():
        raise GoldensError(f"{root}: no such directory of goldens")
    found = _git(root, "rev-parse", "--show-toplevel", check=False)
    if found.returncode != 0:
        raise GoldensError(f"{root}: not inside a git repository (goldens diff compares against git)")
    top = Path(found.stdout.decode().strip()).resolve()
    if _git(top, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False).returncode != 0:
        raise GoldensError(f"unknown git revision {rev!r}")
    where = root.resolve().relative_to(top).as_posix() or "."

    listed = _git(top, "-c", "core.quotepath=off", "diff", "--name-status", "-z", "--no-renames",
                  "--no-ext-diff", rev, "--", where).stdout.decode("utf-8").split("\0")
    paths = {path: status for status, path in zip(listed[::2], listed[1::2]) if path}
    untracked = _git(top, "ls-files", "-z", "--others", "--exclude-standard", "--", where).stdout
    for path in untracked.decode("utf-8").split("\0"):
        if path:
            paths.setdefault(path, "A")

    changes = []
    for path in sorted(paths):
        name = Path(path).name
        if not name.endswith(".json") or name.startswith("."):
            continue
        old = new = None
        if not paths[path].startswith("A"):
            shown = _git(top, "show", f"{rev}:{path}", check=False)
            if shown.returncode == 0:
                old_text = shown.stdout.decode("utf-8", "replace")
                old = golden_file.loads(old_text, f"{rev}:{path}") if _is_golden(old_text) else None
        file = top / path
        if file.exists() and _is_golden(files.read_bytes(file)):
            new = golden_file.read(file)
        if old is None and new is None:  # gone from both, or a file of the user's (regenerate leaves it too)
            continue
        if old is not None and new is not None and golden_file.dumps(old) == golden_file.dumps(new):
            continue  # only reformatted
        rel = Path(path).relative_to(where) if where != "." else Path(path)
        # a name is printed on stdout: a newline in a folder's name must not start a line of its
        # own (under Actions, `::warning ...` there would be a workflow command)
        changes.append(Change(name=printable(rel.with_suffix("").as_posix()), path=path, old=old, new=new,
                              file=file if new is not None else None))
    return changes


def _is_golden(data: str | bytes) -> bool:
    """Whether a JSON file under goldens/ is in the golden format (a JSON object with a `case`),
    rather than a file of the user's that `regenerate` leaves alone too (a broken golden still
    says why when it is read)."""
    try:
        value = json.loads(data)
    except ValueError:
        return True  # not JSON at all: reading it as a golden says so
    return isinstance(value, dict) and "case" in value


# ----------------------------------------------------------------------------- token alignment

def opcodes(old_ids: list[int], new_ids: list[int]) -> list[tuple[str, int, int, int, int]]:
    return difflib.SequenceMatcher(None, old_ids, new_ids, autojunk=False).get_opcodes()


def _span(a: int, b: int) -> str:
    return f"{a}" if b - a == 1 else f"{a}-{b - 1}"


def _n(count: int, word: str = "token", plural: str | None = None) -> str:
    return f"{count} {word if count == 1 else plural or word + 's'}"


def describe_tokens(ops: list[tuple[str, int, int, int, int]]) -> str:
    """'9 tokens removed at 106-114', '3 tokens changed at 40-42', '2 tokens added at 7-8', ..."""
    parts = []
    removed = added = 0
    for tag, i1, i2, j1, j2 in ops:
        if tag == "delete":
            parts.append(f"{_n(i2 - i1)} removed at {_span(i1, i2)}")
        elif tag == "insert":
            parts.append(f"{_n(j2 - j1)} added at {_span(j1, j2)}")
        elif tag == "replace" and i2 - i1 == j2 - j1:
            parts.append(f"{_n(i2 - i1)} changed at {_span(i1, i2)}")
        elif tag == "replace":
            parts.append(f"{_n(i2 - i1)} replaced by {j2 - j1} at {_span(i1, i2)}")
        else:
            continue
        removed += i2 - i1
        added += j2 - j1
    if len(parts) <= SUMMARY_PARTS:
        return "; ".join(parts)
    first = next(i1 for tag, i1, *_ in ops if tag != "equal")
    return f"{len(parts)} changes from token {first}: {removed} old tokens replaced by {added} new"


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
        what = f"refusal: {new.error}" if new.outcome == "error" else _n(len(new.ids))
        return f"{change.name}: new {kind} ({what})"
    if new is None:
        return f"{change.name}: {kind} removed (had {_n(len(old.ids))})"
    if old.outcome == "ok" and new.outcome == "error":
        text = f"now refused by the reference ({new.error}); had {_n(len(old.ids))}"
    elif old.outcome == "error" and new.outcome == "ok":
        text = f"now renders ({_n(len(new.ids))}); was refused ({old.error})"
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


# ----------------------------------------------------------------------------------- the rows

def token_rows(old: golden_file.Golden, new: golden_file.Golden, context: int = 3) -> list[str]:
    """Aligned rows around each change: `- 106 1313 'type'` (old), `+ 106 ...` (new), context."""
    groups = list(difflib.SequenceMatcher(None, old.ids, new.ids, autojunk=False)
                  .get_grouped_opcodes(context))
    if not groups or old.ids == new.ids:
        return []
    pos_width = len(str(max(len(old.ids), len(new.ids))))
    id_width = max(len(str(t)) for t in [*old.ids, *new.ids])

    def row(mark: str, pos: int, ids: list[int], pieces: list[str]) -> str:
        return f"{mark} {pos:>{pos_width}} {ids[pos]:>{id_width}} {pieces[pos]!r}"

    rows = []
    for group in groups:
        i1, j1 = group[0][1], group[0][3]
        i2, j2 = group[-1][2], group[-1][4]
        rows.append(f"@@ old {_range(i1, i2)}, new {_range(j1, j2)} @@")
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                rows += [row(" ", i, old.ids, old.pieces) for i in range(a1, a2)]
                continue
            rows += [row("-", i, old.ids, old.pieces) for i in range(a1, a2)]
            rows += [row("+", j, new.ids, new.pieces) for j in range(b1, b2)]
    if len(rows) > ROW_LIMIT:
        rest = len(rows) - ROW_LIMIT
        rows = rows[:ROW_LIMIT] + [f"… {rest} more rows"]
    return rows


def _range(a: int, b: int) -> str:
    return f"{a}-{b - 1}" if b > a else f"{a} (none)"


def _cut(text: str) -> str:
    if len(text) <= SPAN_LIMIT:
        return repr(text)
    return f"{text[:SPAN_LIMIT // 2]!r} … {text[-SPAN_LIMIT // 2:]!r} ({len(text)} characters)"


def text_rows(old: str | None, new: str | None) -> list[str]:
    """The rendered prompt's changed span (common prefix and suffix cut), with some context."""
    if old is None or new is None or old == new:
        return []
    start = 0
    limit = min(len(old), len(new))
    while start < limit and old[start] == new[start]:
        start += 1
    end = 0
    while end < limit - start and old[-1 - end] == new[-1 - end]:
        end += 1
    removed, added = old[start:len(old) - end], new[start:len(new) - end]
    if removed and added:
        what = f"{_n(len(removed), 'character')} replaced by {len(added)}"
    elif removed:
        what = f"{_n(len(removed), 'character')} removed"
    else:
        what = f"{_n(len(added), 'character')} added"
    lo = max(0, start - TEXT_CONTEXT)
    lines = [f"@@ text at character {start}: {what} @@"]
    for mark, text, span in (("-", old, removed), ("+", new, added)):
        before = text[lo:start]
        after = text[start + len(span):start + len(span) + TEXT_CONTEXT]
        lead = "…" if lo > 0 else ""
        tail = "…" if start + len(span) + TEXT_CONTEXT < len(text) else ""
        lines.append(f"{mark} {lead}{before!r} {_cut(span) if span else '(nothing)'} {after!r}{tail}")
    return lines


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


# ----------------------------------------------------------------------------- what moved first

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
        counted = " and ".join(x for x in (_n(goldens, "golden") if goldens else "",
                                           _n(entries, "ledger entry", "ledger entries") if entries else "")
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
    line = f"{_n(len(changes), 'golden')} changed" + (f" {against}" if against else "")
    if quiet:
        line += f": {sum(1 for c in changes if moved(c))} with tokens moved, {quiet} with tokens unchanged"
    return line


# ---------------------------------------------------------------------------------- rendering

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
            lines += ["", *md.fold(f"the {_n(len(quiet), 'golden')} with tokens unchanged",
                                   [", ".join(md.escape(name) for name in quiet)])]
    while lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def diff(root: Path, rev: str = "HEAD", markdown: bool = False, context: int = 3, full: bool = False) -> str:
    from generator.goldens import bump

    changes = changed(Path(root), rev)
    sources = bump.lines(Path(root), rev, changes) if changes else []
    if markdown:
        return render_markdown(changes, rev, context, sources)
    return render_text(changes, rev, context, full, sources)


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
