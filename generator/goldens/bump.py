"""What a model bump changed beside the ids: the template's text, the special tokens, BOS/EOS,
and what that does to ids a client re-encodes.

`goldens diff` lists the tokens that moved. A bump that moves none can still change what
serving does: Llama 3.1's tokenizer files add a BOS when a prompt is encoded with the defaults,
and the template already writes one, so a client that re-encodes the prompt sends two (27 ids
become 28), while every golden's ids stay put and its template changes only by sha. For each
model whose goldens name another template or tokenizer sha256 than at REV, this says:

- the template's text diff, where its text is in the repository (a `dir:` tokenizer folder or a
  `file:` template, read at REV with git and from the working tree);
- the special tokens that changed: bos/eos tokens, add_bos_token/add_eos_token, the
  post-processor that adds them, special tokens added or removed;
- the effect on ids: how the goldens' round trip (`roundtrip.defaults`: encode(decode(ids)),
  what a client that re-encodes sends) moved, e.g. 'same' -> '27 -> 28' with the token added.
"""

from __future__ import annotations

import difflib
import json
import subprocess
from pathlib import Path

TEMPLATE_ROWS = 60  # lines of the template's diff shown before the rest is counted


def _git_show(top: Path, rev: str, path: str) -> str | None:
    result = subprocess.run(["git", "-C", str(top), "show", f"{rev}:{path}"], capture_output=True, timeout=60)
    return result.stdout.decode("utf-8", "replace") if result.returncode == 0 else None


def _working(top: Path, path: str) -> str | None:
    full = top / path
    return full.read_text(encoding="utf-8", errors="replace") if full.is_file() else None


def _files(read, directory: str) -> dict[str, object]:
    """A tokenizer folder's chat template and special-token settings, as `read` gives its files."""
    out: dict[str, object] = {}
    config_text = read(f"{directory}/tokenizer_config.json")
    config = json.loads(config_text) if config_text else {}
    template = read(f"{directory}/chat_template.jinja")
    if template is None and isinstance(config.get("chat_template"), str):
        template = config["chat_template"]
    out["template"] = template

    def token(value):
        return value.get("content") if isinstance(value, dict) else value

    for key in ("bos_token", "eos_token", "add_bos_token", "add_eos_token"):
        if key in config:
            out[key] = token(config[key])
    tokenizer_text = read(f"{directory}/tokenizer.json")
    if tokenizer_text:
        data = json.loads(tokenizer_text)
        post = data.get("post_processor") or {}
        single = post.get("single") if isinstance(post, dict) else None
        if post.get("type") == "Sequence":
            single = next((p.get("single") for p in post.get("processors", []) if p.get("single")), None)
        out["post_processor"] = " ".join(
            item.get("SpecialToken", {}).get("id", "") or f"${item.get('Sequence', {}).get('id', 'A')}"
            for item in single or []) or (post.get("type") or "none")
        out["special tokens"] = sorted(t["content"] for t in data.get("added_tokens", []) if t.get("special"))
    return out


def _source_dir(provenance: dict) -> str | None:
    source = str(provenance.get("source", ""))
    return source[len("dir:"):] if source.startswith("dir:") else None


def _template_file(provenance: dict) -> str | None:
    template = str(provenance.get("template", ""))
    return template[len("file:"):] if template.startswith("file:") else None


def model_lines(top: Path, base: Path, rev: str, model: str, changes: list) -> list[str]:
    """The lines for one model whose template or tokenizer sha moved (none otherwise)."""
    pairs = [(c.old, c.new) for c in changes if c.old is not None and c.new is not None and not c.ledger]
    moved = [(old, new) for old, new in pairs
             if any(old.provenance.get(k) != new.provenance.get(k) for k in ("template_sha256", "tokenizer_sha256"))]
    if not moved:
        return []
    old, new = moved[0]
    lines = [f"{model}: its sources changed ("
             + ", ".join(f"{k} {str(old.provenance.get(k))[:12]}… → {str(new.provenance.get(k))[:12]}…"
                         for k in ("template_sha256", "tokenizer_sha256")
                         if old.provenance.get(k) != new.provenance.get(k)) + ")"]
    relative = base.relative_to(top) if base.is_relative_to(top) else Path()

    def at(path: str) -> str:
        return str((relative / path).as_posix())

    before: dict[str, object] = {}
    after: dict[str, object] = {}
    directory_old, directory_new = _source_dir(old.provenance), _source_dir(new.provenance)
    if directory_old and directory_new:
        before = _files(lambda p: _git_show(top, rev, at(p)), directory_old)
        after = _files(lambda p: _working(top, at(p)), directory_new)
    for side, provenance, read in ((before, old.provenance, lambda p: _git_show(top, rev, at(p))),
                                   (after, new.provenance, lambda p: _working(top, at(p)))):
        template_file = _template_file(provenance)
        if template_file:
            side["template"] = read(template_file)
    if old.provenance.get("template_sha256") != new.provenance.get("template_sha256"):
        if before.get("template") is not None and after.get("template") is not None:
            rows = list(difflib.unified_diff(str(before["template"]).splitlines(), str(after["template"]).splitlines(),
                                             f"template at {rev}", "template now", n=1, lineterm=""))
            lines.append(f"  the template's text ({len(rows)} diff lines):")
            lines += [f"    {row}" for row in rows[:TEMPLATE_ROWS]]
            if len(rows) > TEMPLATE_ROWS:
                lines.append(f"    … {len(rows) - TEMPLATE_ROWS} more lines")
        else:
            lines.append(f"  the template's text is not in this repository ({new.provenance.get('template')}): "
                         "only its sha256 is compared")
    for key in ("bos_token", "eos_token", "add_bos_token", "add_eos_token", "post_processor"):
        if before.get(key) != after.get(key) and (key in before or key in after):
            lines.append(f"  {key}: {before.get(key, '(not set)')!r} → {after.get(key, '(not set)')!r}")
    added = sorted(set(after.get("special tokens", [])) - set(before.get("special tokens", [])))
    removed = sorted(set(before.get("special tokens", [])) - set(after.get("special tokens", [])))
    if added or removed:
        lines.append(f"  special tokens: {len(added)} added {added[:8]}, {len(removed)} removed {removed[:8]}")
    lines += _round_trip_lines(pairs, after.get("bos_token", before.get("bos_token")))
    return lines


def _round_trip_lines(pairs: list, bos: object = None) -> list[str]:
    """How re-encoding the goldens' ids moved: the ids a client that re-encodes a prompt sends.
    Goldens whose round trip moved alike are one line: how many ids it adds or drops and what it
    inserts where (a second BOS named as such), with one golden's counts as the example. One the
    template now refuses has no ids to re-encode, and is said so; an effect that stays the same
    in words while the prompt's length moved is said once, as still there."""
    moved: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for old, new in pairs:
        a = _side(old)
        b = _side(new)
        if a == b:
            continue
        key = (_effect(a, bos), _effect(b, bos))
        moved.setdefault(key, []).append((new.case, _counts(a), _counts(b)))
    out = []
    head = "  effect on ids a client re-encodes (encode(decode(ids)) with the defaults), in"
    for (a, b), cases in moved.items():
        n = f"{len(cases)} of {len(pairs)} golden{'s' if len(pairs) != 1 else ''}"
        case, before, after = cases[0]
        said = f"; e.g. {case}: {before} before, {after} now"
        out.append(f"{head} {n}: still {b}{said}" if a == b else f"{head} {n}: was {a}; now {b}{said}")
    return out


def _side(golden) -> object:
    """A golden's round trip with the defaults, or 'refused' where the template refused the case."""
    if getattr(golden, "outcome", "ok") == "error":
        return "refused"
    return (golden.extra.get("roundtrip") or {}).get("defaults", "same")


def _counts(value) -> str:
    """'27 -> 28' (ids, then re-encoded), 'same' or 'refused'."""
    return str(value.get("tokens", "")) if isinstance(value, dict) else str(value)


def _effect(value, bos: object = None) -> str:
    """A round trip's difference in words: 'the same ids', or '1 id more: re-encoding inserts
    '<|begin_of_text|>' at id 1, after '<|begin_of_text|>' (a second BOS)'."""
    if not isinstance(value, dict):
        return {"same": "the same ids", "refused": "refused by the template (no ids)"}.get(str(value), str(value))
    counts = str(value.get("tokens", ""))
    try:
        old_n, new_n = (int(n) for n in counts.split(" -> "))
        delta = new_n - old_n
        size = f"{abs(delta)} id{'s' if abs(delta) != 1 else ''} {'more' if delta > 0 else 'fewer'}" if delta else \
            "as many ids"
    except ValueError:
        delta, size = 0, "other ids"
    golden, again, before = (str(value.get(k, "")) for k in ("golden", "round_trip", "shared"))
    what = ""
    if delta > 0:  # the shortest start of the re-encoded text after which the golden's text resumes
        cut = next((i for i in range(1, len(again) + 1) if golden and again[i:].startswith(golden[:8])), None)
        if cut:
            what = f"re-encoding inserts {again[:cut]!r}"
    elif delta < 0:
        cut = next((i for i in range(1, len(golden) + 1) if again and golden[i:].startswith(again[:8])), None)
        if cut:
            what = f"re-encoding drops {golden[:cut]!r}"
    if not what:
        what = f"re-encoded {again[:40]!r} where the golden has {golden[:40]!r}"
    where = f" at id {value.get('at')}" + (f", after {before[-40:]!r}" if before else "")
    second = ""
    if isinstance(bos, str) and bos and delta > 0 and what.endswith(repr(bos)) and before.endswith(bos):
        second = " (a second BOS: the template writes one and encoding with the defaults adds another)"
    return f"{size}: {what}{where}{second}"


def by_model(root: Path, rev: str, changes: list) -> dict[str, list[str]]:
    """Each model whose sources changed -> its lines (the text view's; `diff --json`'s `sources`)."""
    top = Path(subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True,
                              text=True, timeout=60).stdout.strip() or root)
    base = Path(root).resolve().parent  # models.yaml's folder: where its relative paths start
    grouped: dict[str, list] = {}
    for change in changes:
        grouped.setdefault(change.model, []).append(change)
    out: dict[str, list[str]] = {}
    for model, items in grouped.items():
        said = model_lines(top.resolve(), base, rev, model, items)
        if said:
            out[model] = said
    return out


def lines(root: Path, rev: str, changes: list) -> list[str]:
    """Every model's source changes, for `goldens diff`."""
    return [line for said in by_model(root, rev, changes).values() for line in said]
