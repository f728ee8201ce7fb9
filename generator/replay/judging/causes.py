"""Reviewed causes: one ledger entry for a divergence many cases share.

A per-case ledger entry (replay/judging/ledger.py) re-fires on every new case an engine treats the same
way: phi3.5's extra `<s>` on llama-server needs one entry per request file. A cause names the
edit instead, as data, with the engines and models it covers and why it is accepted:

    goldens/causes/<name>.json
    {"format": 1, "cause": "<name>", "engines": ["llama-server"], "models": ["phi3.5"],
     "edit": {"at": "start", "replace": [], "with": [[1, "<s>"]]},
     "reason": "...", "engine_version": "b11434-..."}

The edit language is one exact rewrite of token ids (pieces are written beside each id for the
reader; only ids are matched):

- `at: "start"`: the ids begin with `replace` (empty: nothing), which becomes `with`;
- `at: "end"`: the ids end with `replace`, which becomes `with`;
- `at: "every"`: every occurrence of `replace` (not empty), left to right and not overlapping,
  becomes `with`; there must be at least one.

A cause explains an engine's answer to a case when applying its edit to the golden's ids gives
the engine's ids exactly; never a near match. Spelled on the command line
(`goldens ledger --cause NAME --edit TEXT`) an edit is `insert IDS at start|end`,
`delete IDS at start|end|every` or `replace IDS with IDS at start|end|every`, IDS comma-separated
token ids, `ID*N` for N of one id (`insert 1 at start`, `replace 5*3,7 with 5,7 at every`). `first_edit` is the edit between two id lists a drift reports
(their common prefix and suffix taken off), so drifts that share it are grouped as one cause.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from generator import files
from generator.errors import GoldensError
from generator.json_reader import load_json

FOLDER = "causes"  # goldens/causes/<name>.json; `causes` is not a model name
FORMAT = 2
FORMATS = (1, 2)  # format 1: one `edit`, no class (read as before)
KEYS = {"format", "cause", "class", "engines", "models", "edits", "refusal", "render", "reason", "upstream",
        "report", "engine_version", "cases"}
PLACES = ("start", "end", "every")
NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,79}")

Token = tuple[int, str]  # (id, piece)


@dataclass(frozen=True)
class Edit:
    """Replace the run `replace` with `with_` at `at` ("start", "end" or "every")."""

    at: str
    replace: tuple[Token, ...]
    with_: tuple[Token, ...]

    def apply(self, ids: Sequence[int]) -> list[int] | None:
        """The ids with this edit made, or None where it does not apply."""
        old = [t for t, _ in self.replace]
        new = [t for t, _ in self.with_]
        ids = list(ids)
        n = len(old)
        if self.at == "start":
            return new + ids[n:] if ids[:n] == old else None
        if self.at == "end":
            return ids[:len(ids) - n] + new if (n == 0 or ids[len(ids) - n:] == old) and n <= len(ids) else None
        out, i, found = [], 0, False
        while i < len(ids):
            if ids[i:i + n] == old:
                out += new
                i += n
                found = True
            else:
                out.append(ids[i])
                i += 1
        return out if found else None

    def data(self) -> dict:
        return {"at": self.at, "replace": [list(t) for t in self.replace], "with": [list(t) for t in self.with_]}

    def key(self) -> tuple:
        """What makes two edits the same: where, and the ids and pieces of both runs."""
        return (self.at, self.replace, self.with_)

    def describe(self) -> str:
        """'insert [1 '<s>'] at start', 'replace [29871 ' '] with [] at every'."""
        def run(tokens: tuple[Token, ...]) -> str:
            """A run of one repeated token is said once with its count (an image's soft tokens);
            a long run keeps its ends."""
            parts: list[str] = []
            i = 0
            while i < len(tokens):
                j = i
                while j < len(tokens) and tokens[j] == tokens[i]:
                    j += 1
                parts.append(f"{tokens[i][0]} {tokens[i][1]!r}" + (f" x{j - i}" if j - i > 1 else ""))
                i = j
            if len(parts) > 12:
                parts = parts[:6] + [f"... {len(parts) - 10} more ..."] + parts[-4:]
            return "[" + ", ".join(parts) + "]"

        if not self.replace:
            return f"insert {run(self.with_)} at {self.at}"
        if not self.with_:
            return f"delete {run(self.replace)} at {self.at}"
        return f"replace {run(self.replace)} with {run(self.with_)} at {self.at}"

    def spelled(self) -> str:
        """The edit as `--edit` takes it: 'insert 1 at start'."""
        def ids(tokens: tuple[Token, ...]) -> str:
            parts, i = [], 0
            while i < len(tokens):
                j = i
                while j < len(tokens) and tokens[j][0] == tokens[i][0]:
                    j += 1
                parts.append(f"{tokens[i][0]}" + (f"*{j - i}" if j - i > 1 else ""))
                i = j
            return ",".join(parts)

        if not self.replace:
            return f"insert {ids(self.with_)} at {self.at}"
        if not self.with_:
            return f"delete {ids(self.replace)} at {self.at}"
        return f"replace {ids(self.replace)} with {ids(self.with_)} at {self.at}"


def edit_from(data, where: str) -> Edit:
    """An edit read from a cause file; one line naming the file for anything malformed."""
    if not isinstance(data, dict) or set(data) != {"at", "replace", "with"}:
        raise GoldensError(f"{where}: `edit` must be an object with exactly at, replace, with")
    if data["at"] not in PLACES:
        raise GoldensError(f"{where}: edit.at must be one of {', '.join(PLACES)}, not {data['at']!r}")
    runs = []
    for name in ("replace", "with"):
        run = data[name]
        if not isinstance(run, list) or not all(
                isinstance(t, list) and len(t) == 2 and type(t[0]) is int and t[0] >= 0 and isinstance(t[1], str)
                for t in run):
            raise GoldensError(f"{where}: edit.{name} must be a list of [id, piece] pairs")
        runs.append(tuple((t[0], t[1]) for t in run))
    edit = Edit(data["at"], runs[0], runs[1])
    _check(edit, where)
    return edit


def _check(edit: Edit, where: str) -> None:
    if edit.replace == edit.with_:
        raise GoldensError(f"{where}: the edit changes nothing")
    if edit.at == "every" and not edit.replace:
        raise GoldensError(f"{where}: an edit at every place needs a run to replace (insert only at start or end; "
                           "to insert between tokens, replace the tokens around the place)")


_SPELLING = re.compile(
    r"\s*(?:(?P<insert>insert)\s+(?P<ins>[\d,*\s]+?)|(?P<delete>delete)\s+(?P<del>[\d,*\s]+?)|"
    r"replace\s+(?P<old>[\d,*\s]+?)\s+with\s+(?P<new>[\d,*\s]*?))\s+at\s+(?P<at>\w+)\s*")


def parse(text: str, pieces: Callable[[list[int]], list[str]] = lambda ids: [""] * len(ids)) -> Edit:
    """`--edit TEXT`: 'insert 1 at start', 'delete 220 at every', 'replace 5,6 with 7 at end'
    (an empty `with` deletes); `pieces` spells the ids (the model's reference tokenizer)."""
    match = _SPELLING.fullmatch(text)
    if match is None or match["at"] not in PLACES:
        raise GoldensError(f"--edit {text!r}: expected `insert IDS at start|end`, `delete IDS at start|end|every` "
                           "or `replace IDS with IDS at start|end|every` (IDS: token ids, comma-separated)")

    def ids(value: str | None) -> tuple[Token, ...]:
        if value is None or not value.strip():
            return ()
        try:
            numbers = []
            for part in value.replace(" ", "").split(","):
                token, _, times = part.partition("*")
                numbers += [int(token)] * (int(times) if times else 1)
        except ValueError:
            raise GoldensError(f"--edit {text!r}: {value.strip()!r} is not a list of token ids") from None
        return tuple(zip(numbers, pieces(numbers)))

    if match["insert"]:
        edit = Edit(match["at"], (), ids(match["ins"]))
    elif match["delete"]:
        edit = Edit(match["at"], ids(match["del"]), ())
    else:
        edit = Edit(match["at"], ids(match["old"]), ids(match["new"]))
    _check(edit, f"--edit {text!r}")
    return edit


def first_edit(expected: Sequence[int], expected_pieces: Sequence[str],
               actual: Sequence[int], actual_pieces: Sequence[str]) -> Edit | None:
    """The one edit turning `expected` into `actual`: what lies between their common prefix and
    suffix, at the start or end where it touches one, else at every place of that run widened
    by one shared token on each side (a run to anchor on). None when they are equal. The edit
    fully explains this pair (applying it gives `actual`) or is None."""
    if list(expected) == list(actual):
        return None
    p = 0
    while p < min(len(expected), len(actual)) and expected[p] == actual[p]:
        p += 1
    s = 0
    while (s < min(len(expected), len(actual)) - p
           and expected[len(expected) - 1 - s] == actual[len(actual) - 1 - s]):
        s += 1
    a = list(zip(expected, expected_pieces))
    b = list(zip(actual, actual_pieces))
    if p == 0:
        edit = Edit("start", tuple(a[:len(a) - s]), tuple(b[:len(b) - s]))
    elif s == 0:
        edit = Edit("end", tuple(a[p:]), tuple(b[p:]))
    else:
        edit = Edit("every", tuple(a[p - 1:len(a) - s + 1]), tuple(b[p - 1:len(b) - s + 1]))
    return edit if edit.apply(expected) == list(actual) else None


CLASSES = {
    "engine-defect": "a bug in the engine: report it upstream (an upstream link, or the report goldens writes)",
    "policy": "the engine's documented or deliberate behaviour",
    "reference": "the reference is the one that is wrong",
}
UNCLASSIFIED = "unclassified"  # an entry or cause that names no class (format 1, before classes)
ANY_MODEL = "*"  # `models: ["*"]`: an engine-level cause, for every model (a team's own too)
RENDERS = {"as-sent": "the template's render of the body as sent, before the normalization serving engines do"}


def check_class(value, where: str) -> str:
    if value not in CLASSES:
        raise GoldensError(f"{where}: `class` must be one of {', '.join(CLASSES)}, not {value!r}")
    return value


@dataclass
class Cause:
    """A reviewed cause: what it accepts on which engines and models, its class, and why.

    It explains an engine's answer through any of its matchers: an edit of the golden's ids
    (`edit`, `edits`), a refusal whose text holds `refusal`, or the template's render of the
    body as sent (`render: as-sent`, which the golden records). A cause with none of them only
    names what the per-case ledger entries that refer to it (`"cause": NAME`) share: their
    reason and class, said once."""

    name: str
    edit: Edit | None
    engines: list[str]
    models: list[str]
    reason: str
    path: Path | None = None
    engine_version: str | None = None
    extra: dict = field(default_factory=dict)
    klass: str = UNCLASSIFIED
    edits: tuple[Edit, ...] = ()
    refusal: str | None = None
    render: str | None = None
    upstream: tuple[str, ...] = ()
    report: str | None = None  # the ready-to-file report beside it (`<name>.report.md`)
    builtin: bool = False  # shipped with goldens: an engine's behaviour on any model
    cases: tuple[str, ...] = ()  # the cases it explained when it was reviewed (check names today's)

    @property
    def all_edits(self) -> list[Edit]:
        return ([self.edit] if self.edit is not None else []) + list(self.edits)

    @property
    def matches(self) -> bool:
        """Whether it explains cases by itself (else only entries that name it)."""
        return bool(self.all_edits or self.refusal or self.render)

    def covers(self, engine: str, model: str) -> bool:
        """`engine` is a name or a label (`llama-server@10429`: judged like its name)."""
        return engine.partition("@")[0] in self.engines and (model in self.models or ANY_MODEL in self.models)

    def explains(self, golden_ids: Sequence[int], ids: Sequence[int], golden=None) -> bool:
        """The engine's ids are the golden's with one of the edits made, or (`render`) the
        template's render of the body as sent, which the golden records (`golden`)."""
        if any(edit.apply(golden_ids) == list(ids) for edit in self.all_edits):
            return True
        if self.render == "as-sent" and golden is not None:
            as_sent = as_sent_record(golden)
            return as_sent.get("outcome") == "ok" and as_sent.get("ids_sha256") == ids_digest(ids)
        return False

    def explains_refusal(self, message: str, golden=None) -> bool:
        """A refusal holding `refusal`; or (`render: as-sent`) any refusal where the template
        refuses the body as sent too."""
        if self.refusal and self.refusal in message:
            return True
        return self.render == "as-sent" and golden is not None and as_sent_record(golden).get("outcome") == "error"

    def describe(self) -> str:
        """What it accepts, in words: its edits, its refusal, its render."""
        parts = [edit.describe() for edit in self.all_edits[:3]]
        if len(self.all_edits) > 3:
            parts.append(f"and {len(self.all_edits) - 3} more edits")
        if self.refusal:
            parts.append(f"a refusal holding {self.refusal[:80]!r}")
        if self.render:
            parts.append(f"the template's render of the body {self.render}")
        return "; ".join(parts) or "the ids its ledger entries record"


def as_sent_record(golden) -> dict:
    """What the template made of the body as sent, where the reference normalized it first
    (the golden's `normalization.as_sent`); {} for a body that needed nothing."""
    record = golden.extra.get("normalization") if golden is not None else None
    as_sent = record.get("as_sent") if isinstance(record, dict) else None
    return as_sent if isinstance(as_sent, dict) else {}


def ids_digest(ids: Sequence[int]) -> str:
    """The sha256 of ids written `1,2,3`: what a golden records of a render it does not keep."""
    import hashlib

    return hashlib.sha256(",".join(str(int(i)) for i in ids).encode()).hexdigest()


def path_of(root: Path, name: str) -> Path:
    return Path(root) / FOLDER / f"{name}.json"


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise GoldensError(f"--cause {name!r}: a cause's name is lowercase letters, digits, '.', '_' and '-'")
    return name


def read(path: Path, builtin: bool = False) -> Cause:
    where = str(path)
    data = load_json(files.read_bytes(path, f"{path}: cause"), where)
    if not isinstance(data, dict) or data.get("format") not in FORMATS:
        raise GoldensError(f"{where}: not a cause file of format {' or '.join(map(str, FORMATS))}")
    name = data.get("cause")
    if name != path.stem:
        raise GoldensError(f"{where}: `cause` must be {path.stem!r}, the file's name")
    for key in ("engines", "models"):
        value = data.get(key)
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise GoldensError(f"{where}: `{key}` must be a non-empty list of names")
    reason = data.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise GoldensError(f"{where}: a cause needs a non-empty `reason`")
    if data["format"] == 1:
        return Cause(name=name, edit=edit_from(data.get("edit"), where), engines=list(data["engines"]),
                     models=list(data["models"]), reason=reason, path=path,
                     engine_version=data.get("engine_version"), builtin=builtin)
    unknown = set(data) - KEYS
    if unknown:
        raise GoldensError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (a cause has {', '.join(sorted(KEYS))})")
    edits = data.get("edits", [])
    if not isinstance(edits, list):
        raise GoldensError(f"{where}: `edits` must be a list of edits")
    refusal, render = data.get("refusal"), data.get("render")
    if refusal is not None and (not isinstance(refusal, str) or len(refusal.strip()) < 8):
        raise GoldensError(f"{where}: `refusal` must be a text of 8 characters or more that the refusal holds")
    if render is not None and render not in RENDERS:
        raise GoldensError(f"{where}: `render` must be one of {', '.join(RENDERS)}")
    upstream = data.get("upstream", [])
    if not isinstance(upstream, list) or not all(isinstance(u, str) and u.startswith("https://") for u in upstream):
        raise GoldensError(f"{where}: `upstream` must be a list of https:// links")
    klass = check_class(data.get("class"), where)
    cases = data.get("cases", [])
    if not isinstance(cases, list) or not all(isinstance(c, str) and c.count("/") == 1 for c in cases):
        raise GoldensError(f"{where}: `cases` must be a list of case ids (model/shape)")
    report = data.get("report")
    if report is not None and report != report_name(name):
        raise GoldensError(f"{where}: `report` must be {report_name(name)!r}, beside the cause")
    if klass == "engine-defect" and not upstream and report is None:
        raise GoldensError(f"{where}: an engine-defect names its upstream issue (`upstream`) or has a report "
                           f"to file (goldens ledger --report {name})")
    return Cause(name=name, edit=None, engines=list(data["engines"]), models=list(data["models"]), reason=reason,
                 path=path, engine_version=data.get("engine_version"), klass=klass,
                 edits=tuple(edit_from(e, f"{where}: edits[{i}]") for i, e in enumerate(edits)),
                 refusal=refusal, render=render, upstream=tuple(upstream), report=report, builtin=builtin,
                 cases=tuple(cases))


def report_name(name: str) -> str:
    return f"{name}.report.md"


_memo: dict[tuple, list[Cause]] = {}
BUILTIN = Path(__file__).resolve().parents[2] / "data" / FOLDER  # engine-level causes shipped with goldens


def load(root: Path, builtin: bool = True) -> list[Cause]:
    """Every cause under `root` (read again when a file changes), sorted by name, then the
    engine-level causes goldens ships (generator/data/causes/) that `root` does not hold itself:
    an engine's reviewed behaviour on any model, a team's own too."""
    found = _load_folder(Path(root) / FOLDER, False)
    if builtin and BUILTIN.is_dir():
        own = {c.name for c in found}
        found = found + [c for c in _load_folder(BUILTIN, True) if c.name not in own]
    return found


def _load_folder(folder: Path, builtin: bool) -> list[Cause]:
    if not folder.is_dir():
        return []
    paths = sorted(p for p in folder.glob("*.json") if p.is_file())
    key = (str(folder.resolve()), tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in paths))
    found = _memo.get(key)
    if found is None:  # replay's threads may race here: each keeps the list it read
        found = [read(p, builtin) for p in paths]
        if len(_memo) > 8:
            _memo.clear()
        _memo[key] = found
    return found


def named(root: Path, name: str) -> Cause | None:
    return next((c for c in load(root) if c.name == name), None)


def covering(root: Path, engine: str, model: str) -> list[Cause]:
    """The causes that explain cases by themselves on this engine and model: the repository's
    first, then goldens' engine-level ones."""
    return [c for c in load(root) if c.matches and c.covers(engine, model)]


def dumps(cause: Cause) -> str:
    if cause.klass == UNCLASSIFIED and cause.edit is not None and not (cause.edits or cause.refusal or cause.render):
        return _dumps_v1(cause)
    data: dict = {"format": FORMAT, "cause": cause.name, "class": cause.klass, "engines": cause.engines,
                  "models": cause.models}
    if cause.all_edits:
        data["edits"] = [edit.data() for edit in cause.all_edits]
    if cause.refusal:
        data["refusal"] = cause.refusal
    if cause.render:
        data["render"] = cause.render
    data["reason"] = cause.reason
    if cause.upstream:
        data["upstream"] = list(cause.upstream)
    if cause.report:
        data["report"] = cause.report
    data["engine_version"] = cause.engine_version
    if cause.cases:
        data["cases"] = sorted(cause.cases)
    return _layout(data)


def _dumps_v1(cause: Cause) -> str:
    """A cause of format 1 (one edit, no class), as written before classes."""
    return _layout({"format": 1, "cause": cause.name, "engines": cause.engines, "models": cause.models,
                    "edit": cause.edit.data(), "reason": cause.reason, "engine_version": cause.engine_version})


def _layout(data: dict) -> str:
    text = json.dumps(data, indent=2, ensure_ascii=False)
    # one token a line, `[1, "<s>"]`, and the name lists on one line, as a reviewer reads them
    text = _PAIR.sub(lambda m: f"[{m[1]}, {m[2]}]", text)
    text = _NAMES.sub(lambda m: f'"{m[1]}": ' + json.dumps(data[m[1]], ensure_ascii=False), text)
    return text + "\n"


_PAIR = re.compile(r'\[\n\s+(\d+),\n\s+("(?:[^"\\]|\\.)*")\n\s+\]')
_NAMES = re.compile(r'"(engines|models|upstream)": \[[^\]]*\]')


def write(root: Path, cause: Cause) -> Path:
    path = path_of(root, cause.name)
    files.atomic_write(path, dumps(cause), within=root)
    return path
