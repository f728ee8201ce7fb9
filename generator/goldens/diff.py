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

A one-line summary heads each file, so a template bump that touched every golden reads in a
minute; `--markdown` gives the same as a summary table and `diff` code blocks for a PR comment.
"""

from __future__ import annotations

import difflib
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from generator import markdown as md
from generator.errors import GoldensError
from generator.goldens import golden_file

TEXT_CONTEXT = 24  # characters shown either side of the rendered text's changed span
SPAN_LIMIT = 240  # characters of a changed span shown before it is cut
ROW_LIMIT = 400  # token rows per file before the rest is summarised
SUMMARY_PARTS = 3  # token changes spelled out in a summary line before they are counted instead


@dataclass
class Change:
    name: str  # "qwen3/tools", or "qwen3/tools.vllm" for a ledger entry
    path: str  # relative to the repository top
    old: golden_file.Golden | None
    new: golden_file.Golden | None

    @property
    def ledger(self) -> bool:
        return "." in self.name.rsplit("/", 1)[-1]


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
                old = golden_file.loads(old_text, f"{rev}:{path}")
        file = top / path
        if file.exists():
            new = golden_file.read(file)
        if old is None and new is None:
            continue
        if old is not None and new is not None and golden_file.dumps(old) == golden_file.dumps(new):
            continue  # only reformatted
        rel = Path(path).relative_to(where) if where != "." else Path(path)
        changes.append(Change(name=rel.with_suffix("").as_posix(), path=path, old=old, new=new))
    return changes


# ----------------------------------------------------------------------------- token alignment

def opcodes(old_ids: list[int], new_ids: list[int]) -> list[tuple[str, int, int, int, int]]:
    return difflib.SequenceMatcher(None, old_ids, new_ids, autojunk=False).get_opcodes()


def _span(a: int, b: int) -> str:
    return f"{a}" if b - a == 1 else f"{a}-{b - 1}"


def _n(count: int, word: str = "token") -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


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


def summary(change: Change) -> str:
    """The one line for a file: `qwen3/tools: 9 tokens removed at 106-114`."""
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
    others = [f for f in _field_changes(old, new) if f not in ("outcome", "error")]
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
    rows = token_rows(old, new, context) + text_rows(old.prompt, new.prompt)
    if old.outcome != new.outcome or old.error != new.error:
        rows += [f"- outcome {old.outcome}" + (f": {old.error}" if old.error else ""),
                 f"+ outcome {new.outcome}" + (f": {new.error}" if new.error else "")]
    return rows


# ---------------------------------------------------------------------------------- rendering

def render_text(changes: list[Change], rev: str, context: int = 3) -> str:
    if not changes:
        return f"no golden changed against {rev}\n"
    lines = []
    for change in changes:
        lines.append(summary(change))
        lines += [f"  {row}" for row in body(change, context)]
        lines.append("")
    lines.append(f"{_n(len(changes), 'golden')} changed against {rev}")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "\\<").replace("`", "\\`")


def render_markdown(changes: list[Change], rev: str, context: int = 3) -> str:
    if not changes:
        return f"**goldens diff against `{rev}`**: no golden changed\n"
    lines = [f"**goldens diff against `{rev}`**: {_n(len(changes), 'golden')} changed", ""]
    rows = [[_cell(part) for part in summary(change).split(": ", 1)] for change in changes]
    lines += md.table(["golden", "change"], rows)
    for change in changes:
        rows = body(change, context)
        if not rows:
            continue
        block = "\n".join(rows)
        fence = "`" * max(3, 1 + max((len(r) for r in re.findall(r"`+", block)), default=0))
        lines += ["", f"#### {_cell(change.name)}", "", f"{fence}diff", block, fence]
    return "\n".join(lines) + "\n"


def diff(root: Path, rev: str = "HEAD", markdown: bool = False, context: int = 3) -> str:
    changes = changed(Path(root), rev)
    return (render_markdown if markdown else render_text)(changes, rev, context)
