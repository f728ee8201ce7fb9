"""Ready-to-file reports for engine defects, and the ledger's count of causes and classes.

A reviewed cause of class `engine-defect` (replay/judging/causes.py) names its upstream issue, or has a
report beside it (`<name>.report.md`) that `goldens ledger --report NAME` writes: what the
engine does wrong in one paragraph, the first release that has it (read from the atlas,
docs/atlas/<engine>.json: the change point whose cases or refusal text are the cause's), the
request body as a client sends it, the tokens the reference renders and what the engine gave
instead. It is written from one case's answer, so it can be filed as it is. A parse cause
(goldens/causes/parse/, the output side) gets the same report from a `ParseExample`: the output
ids and text as the model emitted them, the request the parser was configured with, the
engine's parse route (its parser names and the API called), the chunking plan where the defect
is streamed, and the expected message beside the whole parse and the stream it gave.

`summary` is what `goldens ledger` prints with no case and no cause: how many causes the
ledger holds over how many cases, per class and per engine, and the per-case entries that
share one (`--json`: a `goldens.ledger/1` document).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator import files
from generator.goldens import golden_file
from generator.replay.judging import causes

SCHEMA = "goldens.ledger/1"
SHOWN = 40  # tokens of each side a report lists around the first difference
SHOWN_PROBLEMS = 5  # of a parse report's problems (the whole parse's first, then each plan's)


@dataclass
class Example:
    """One case of a cause as the engine answered it: its golden, and the engine's ids or refusal."""

    golden: golden_file.Golden
    ids: list[int]
    pieces: list[str]
    refused: str | None = None
    version: str | None = None


@dataclass
class ParseExample:
    """One parse case of a cause as the engine answered it: its golden (output ids, expected
    message), what the engine made of it whole and in every plan, and its parse route."""

    golden: golden_file.Golden
    observed: Any  # parse/observation.py's Observed
    route: str
    version: str | None = None
    others: list[str] | None = None  # the other reviewed causes this case also shows


def first_release(atlas_dir: Path, engine: str, cause: Any, cases: list[str]) -> str:
    """The first release that has it, as the atlas says: the change point whose groups hold one of
    the cause's cases or its refusal text; else every release the atlas searched, where it asked
    any of them; "not known" where it asked none (a model added after the atlas ran)."""
    path = Path(atlas_dir) / f"{engine}.json"
    if not path.is_file():
        return f"not known: the atlas has no {engine} range ({path})"
    data = json.loads(files.read_text(path))
    releases = data.get("releases", [])
    span = f"{releases[0]} to {releases[-1]}" if releases else "its range"
    # what the atlas asked: its case list where it records one, else the cases of its models
    searched = data.get("searched")
    asked = [c for c in cases if (c in searched if searched is not None
                                  else c.partition("/")[0] in set(data.get("models", [])))]
    if not asked:
        return (f"not known: the atlas's {engine} range ({span}) never asked these cases "
                f"(`goldens history --update-atlas --engine {engine}` asks them)")
    if hasattr(cause, "findings"):
        return _parse_first_release(data, engine, cause, cases, span)
    needle = (getattr(cause, "refusal", None) or "").split('"message":"')[-1][:60]
    for change in data.get("change_points", []):
        for group in change.get("groups", []):
            shown = set(group.get("cases", [])) & set(cases)
            if shown or (needle and needle in group.get("summary", "")):
                which = ", ".join(sorted(shown)) or group["cases"][0]
                url = f" ({change['url']})" if change.get("url") else ""
                return (f"{change['label']}{url}: the atlas finds it there, after {change['before_label']} "
                        f"(on {which})")
    return (f"before {releases[0] if releases else 'the atlas range'}: every release the atlas searched ({span}, "
            f"{len(data.get('asked', []))} asked, {data.get('cases', 0)} cases) answers these cases the same way")


def _parse_first_release(data: dict, engine: str, cause: Any, cases: list[str], span: str) -> str:
    """For a parse cause a change point on one of its cases is its own only where the change is in
    a field its findings name (the group's summary, `whole <field>: was ..., now ...` or `streams of
    N plans`): the latest such is where it appeared. A release that could not parse the model at
    all (no such parser yet) marks the first that can; anything else is said to be not known."""
    fields = {f.split(" ", 1)[1].split(":", 1)[0] if f.startswith("whole ") else "streams"
              for f in cause.findings if f.startswith(("whole ", "stream "))}
    found, opened, touched = None, None, []
    for change in data.get("change_points", []):
        for group in change.get("groups", []):
            shown = sorted(set(group.get("cases", [])) & set(cases))
            if not shown:
                continue
            summary = group.get("summary", "")
            said = summary.partition(" differently: ")[2]
            field = "streams" if said.startswith("streams") else said.partition(":")[0].removeprefix("whole ")
            if said and field in fields:
                found = (change, shown, summary)
            elif "could not answer" in summary and opened is None:
                opened = (change, shown, summary)
            else:
                touched.append(change["label"])
    for hit, how in ((found, "the atlas finds the change there"),
                     (opened, "the first release the atlas finds that parses it at all")):
        if hit is not None:
            change, shown, summary = hit
            url = f" ({change['url']})" if change.get("url") else ""
            return (f"{change['label']}{url}: {how}, after {change['before_label']} (on {', '.join(shown[:4])}"
                    f"{', ...' if len(shown) > 4 else ''}: {summary if len(summary) <= 160 else summary[:157] + '...'})")
    if touched:
        return (f"not known: the atlas's {engine} range ({span}) changes these cases only in other fields "
                f"(at {', '.join(dict.fromkeys(touched))}); it has not told this behaviour's start apart")
    return (f"before {data.get('releases', ['the atlas range'])[0]}: every release the atlas searched ({span}, "
            f"{len(data.get('asked', []))} asked, {data.get('cases', 0)} cases) parses these cases the same way")


def _head(cause: Any, example: Example | ParseExample, atlas_dir: Path, all_cases: list[str]) -> list[str]:
    """The report's title, what is wrong, and where: engine, first release, the cases."""
    engine = cause.engines[0]
    return [f"# {engine}: {cause.name.replace('-', ' ')}", "",
            cause.reason, "",
            f"- Engine: {engine}" + (f" {example.version}" if example.version else ""),
            f"- First release with it: {first_release(atlas_dir, engine, cause, all_cases)}",
            f"- Cases that show it in goldens' matrix ({len(all_cases)}): {', '.join(sorted(all_cases)[:12])}"
            + (f", and {len(all_cases) - 12} more" if len(all_cases) > 12 else ""),
            f"- Found by goldens (`goldens check`); this report: `goldens ledger --report {cause.name}`", ""]


def report(cause: Any, example: Example | ParseExample, atlas_dir: Path, all_cases: list[str]) -> str:
    """The Markdown report of an engine defect, from one case's answer (a render cause's
    `Example`, or a parse cause's `ParseExample`)."""
    if isinstance(example, ParseExample):
        return parse_report(cause, example, atlas_dir, all_cases)
    golden = example.golden
    engine = cause.engines[0]
    body = json.dumps(golden.request, indent=2, ensure_ascii=False)
    lines = [*_head(cause, example, atlas_dir, all_cases),
             f"## Reproduce ({golden.case})", "",
             "The chat request, as a client sends it to `/v1/chat/completions`:", "",
             "```json", body, "```", "",
             "## Expected", ""]
    if golden.outcome == "ok":
        lines += [f"The reference (Transformers' `apply_chat_template` on the same template and tokenizer) "
                  f"renders {len(golden.ids)} tokens:", "", "```", *_tokens(golden.ids, golden.pieces,
                                                                              _first(golden.ids, example.ids)), "```"]
    else:
        lines += [f"The reference refuses it: {golden.error}"]
    lines += ["", "## Actual", ""]
    if example.refused is not None:
        lines += [f"{engine} refuses it:", "", "```", example.refused, "```"]
    else:
        index = _first(golden.ids, example.ids)
        lines += [f"{engine} gives {len(example.ids)} tokens, the first difference at token {index}:", "", "```",
                  *_tokens(example.ids, example.pieces, index), "```"]
    return "\n".join(lines) + "\n"


def parse_report(cause: Any, example: ParseExample, atlas_dir: Path, all_cases: list[str]) -> str:
    """The report of a parse cause: the output as the model emitted it, through the engine's
    parse route; the expected message; the whole parse and, where a plan differs, that plan's
    chunking and what its stream assembled."""
    from generator.replay.judging.parse import observation

    golden, observed = example.golden, example.observed
    engine = cause.engines[0]
    expected = golden.extra.get("expected") or {}
    text = "".join(golden.pieces)
    lines = [*_head(cause, example, atlas_dir, all_cases),
             f"## Reproduce ({golden.case})", "",
             f"Parsed through: {example.route}", "",
             "The chat request the parser is configured with (the body the output answers):", "",
             "```json", json.dumps(golden.request, indent=2, ensure_ascii=False), "```", "",
             f"The model's output as emitted ({len(golden.ids)} ids after the generation prompt, its end "
             "token included):", "", "```json", json.dumps(list(golden.ids)), "```", "",
             "Its text (the ids' pieces, joined):", "", "```json", json.dumps(text, ensure_ascii=False), "```", ""]
    streamed = [name for name in observed.order if _plan_shows(cause, observed, name)]
    if streamed:
        name = streamed[0]
        sizes = list(observed.sizes[name])
        lines += [f"Streamed: plan `{name}` sends the output in {len(sizes)} chunk{'s' if len(sizes) != 1 else ''} "
                  f"of {sizes} ids, one parse step each ({len(streamed)} of {len(observed.order)} plans show it).", ""]
    found = observation.problems(golden, observed)
    mine = any(f.startswith("whole ") or f.startswith("refused") for f in cause.findings)
    found.sort(key=lambda p: not ((p.startswith(("whole: ", "refused: ")) and mine)
                                  or p.partition(": ")[0].removeprefix("plan ") in streamed))
    lines += ["What goldens finds (this cause's first):", "", *[f"- {p}" for p in found[:SHOWN_PROBLEMS]]]
    if len(found) > SHOWN_PROBLEMS:
        lines.append(f"- and {len(found) - SHOWN_PROBLEMS} more plans the same way or near it")
    if example.others:
        lines += ["", f"Part of that is another reviewed cause's ({', '.join(example.others)}); this report is "
                  f"about {', '.join(cause.findings)}."]
    lines += ["", "## Expected", "",
              "The message the output carries (the parse golden's expected message):", "",
              "```json", _message_json(expected), "```", "", "## Actual", ""]
    if observed.refused is not None:
        lines += [f"{engine} refuses it:", "", "```", observed.refused, "```"]
        return "\n".join(lines) + "\n"
    lines += [f"{engine}'s whole (non-streamed) parse:", "", "```json", _message_json(observed.whole or {}), "```"]
    if streamed:
        name = streamed[0]
        result = observed.plans[name]
        lines += ["", f"What a client assembles from its stream in plan `{name}` (OpenAI's accumulation rule):",
                  "", "```json", _message_json(result["message"]), "```"]
        if result["violations"]:
            lines += ["", *[f"- {v}" for v in result["violations"]]]
    return "\n".join(lines) + "\n"


def _plan_shows(cause: Any, observed: Any, name: str) -> bool:
    """Whether a streamed plan differs from the whole parse in a way the cause's findings name
    (`stream (every plan|some plans) <kind>`), not only in another cause's."""
    from generator.replay.judging.parse import findings as parse_findings

    return any(f"stream (every plan) {k}" in cause.findings or f"stream (some plans) {k}" in cause.findings
               for k in parse_findings.plan_kinds(observed, name))


def _message_json(message: dict) -> str:
    """A message as the report shows it: its fields in a fixed order, call ids never."""
    shown = {key: message.get(key) for key in ("reasoning_content", "content", "tool_calls", "finish_reason")}
    shown["tool_calls"] = [{"name": c.get("name"), "arguments": c.get("arguments")}
                           for c in message.get("tool_calls") or []]
    return json.dumps(shown, indent=2, ensure_ascii=False)


def _first(a: list[int], b: list[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _tokens(ids: list[int], pieces: list[str], around: int) -> list[str]:
    low = max(0, around - SHOWN // 2)
    high = min(len(ids), low + SHOWN)
    rows = [f"{i:>5}  {ids[i]:>7}  {pieces[i]!r}" + ("   <- first difference" if i == around else "")
            for i in range(low, high)]
    if low:
        rows.insert(0, f"  ... {low} tokens before")
    if high < len(ids):
        rows.append(f"  ... {len(ids) - high} tokens after")
    return rows


def write_report(folder: Path, cause: Any, example: Example | ParseExample, atlas_dir: Path,
                 all_cases: list[str]) -> Path:
    path = Path(folder) / causes.report_name(cause.name)
    files.atomic_write(path, report(cause, example, atlas_dir, all_cases))
    return path


# ------------------------------------------------------------------------- the ledger's count

def summary(root: Path) -> dict:
    """Causes and classes over the ledger: the reviewed causes (goldens/causes/ and goldens'
    engine-level ones), each per-case entry with a reason of its own (a cause of one case), and
    the entries that name a cause; how many cases each covers."""
    from generator.replay.judging import ledger

    root = Path(root)
    own, shared = [], Counter()
    for path in sorted(root.glob("*/*.*.json")):
        if path.parent.name == causes.FOLDER or not path.is_file():
            continue
        model, (stem, engine, *rest) = path.parent.name, path.name[:-len(".json")].split(".")
        entry = ledger.read(root, f"{model}/{stem}", engine, stand_in=bool(rest))
        if entry is None:
            continue
        if entry.cause:
            for name in entry.cause:
                shared[name] += 1
        else:
            own.append({"case": entry.case, "engine": engine, "class": entry.klass,
                        "stand_in": bool(rest), "entry": str(path.relative_to(root))})
    found = []
    from generator.replay.judging.parse import causes as parse_causes

    for cause in parse_causes.load_causes(root):  # the output side's reviewed causes (goldens/causes/parse/)
        found.append({"cause": cause.name, "class": cause.klass or causes.UNCLASSIFIED, "engines": list(cause.engines),
                      "models": list(cause.models), "builtin": False, "cases": len(cause.explains), "entries": 0,
                      "matches": "parse findings: " + "; ".join(cause.findings), "upstream": list(cause.upstream),
                      "report": cause.report})
    for cause in causes.load(root):
        # goldens' own engine-level causes list the built-in matrix's cases: counted where they are here
        listed = [c for c in cause.cases if not cause.builtin or (root / c.partition("/")[0]).is_dir()]
        cases = len(listed) + shared[cause.name]
        if cause.builtin and not cases:
            continue  # an engine-level cause this matrix never shows
        found.append({"cause": cause.name, "class": cause.klass, "engines": cause.engines, "models": cause.models,
                      "builtin": cause.builtin, "cases": cases, "entries": shared[cause.name],
                      "matches": cause.describe(), "upstream": list(cause.upstream), "report": cause.report})
    classes = Counter(c["class"] for c in found) + Counter(e["class"] for e in own)
    return {"schema": SCHEMA, "causes": len(found) + len(own),
            "cases": sum(c["cases"] for c in found) + len(own),
            "classes": dict(sorted(classes.items())),
            "reviewed_causes": found, "single_entries": own}


def summary_lines(data: dict) -> list[str]:
    classes = ", ".join(f"{n} {name}" for name, n in data["classes"].items())
    lines = [f"ledger: {data['causes']} causes over {data['cases']} cases ({classes})",
             f"  {len(data['reviewed_causes'])} reviewed causes (goldens/causes/, and goldens' own engine-level ones), "
             f"{len(data['single_entries'])} single-case entries with a reason of their own"]
    for cause in sorted(data["reviewed_causes"], key=lambda c: (-c["cases"], c["cause"])):
        where = "built in" if cause["builtin"] else "/".join(cause["engines"])
        shown = cause["report"] or (cause["upstream"] or ["no upstream issue or report yet"])[0]
        link = f"; {shown}" if cause["class"] == "engine-defect" else ""
        lines.append(f"  {cause['cases']:>4}  {cause['class']:<13}  {cause['cause']} ({where}{link})")
    return lines
