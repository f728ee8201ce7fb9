"""The atlas: the built-in matrix's release history, committed as data and as a page.

One JSON file per engine under docs/atlas/ (`goldens.atlas/1`): the range searched, every
release asked, and each change point as `goldens history` finds it, with a reviewed one-line
explanation (the stage that changed and the upstream pull request) kept by release across
updates. `goldens history --update-atlas` reruns every range (answers come from the cache, so
only releases never asked cost anything), extends a range that follows the newest release, and
rewrites the files and docs/atlas.md from them. A file is rewritten only when its content
changed, so an update that finds nothing new writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from generator import documents
from generator.config import engine_registry
from generator.config.models import Config
from generator.errors import GoldensError
from generator.files import atomic_write, read_text
from generator.replay import history as search

SCHEMA = "goldens.atlas/1"
PAGE = "atlas.md"  # beside the atlas folder: docs/atlas.md


def load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(read_text(path))
    except ValueError as error:
        raise GoldensError(f"{path}: not JSON ({error})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise GoldensError(f"{path}: not a {SCHEMA} document")
    return data


def update(config: Config, folder: Path, engine: str | None, first: str | None, last: str | None, *,
           jobs: int = 1, exhaustive: bool = False, echo: Callable[[str], None] = print,
           note: Callable[[str], None] | None = None) -> list[Path]:
    """Rerun the atlas's ranges (or set one engine's with `first`/`last`), write what changed."""
    folder.mkdir(parents=True, exist_ok=True)
    existing = {path.stem: load(path) for path in sorted(folder.glob("*.json"))}
    if engine is not None:
        if engine not in existing and first is None:
            raise GoldensError(f"the atlas has no {engine} range yet: give --from (and --to, else it "
                               f"follows the newest release)")
        targets = [engine]
    else:
        if first is not None or last is not None:
            raise GoldensError("--from and --to set one engine's atlas range: give --engine too")
        if not existing:
            raise GoldensError(f"{folder}: no atlas yet; start one with --update-atlas --engine E --from V1 --to V2")
        targets = list(existing)
    written = []
    for name in targets:
        old = existing.get(name, {})
        versions = engine_registry.version_line(engine_registry.lookup(name))
        start = first or old["from"]
        follow = old.get("follows_newest", True) if last is None else False
        end = last or (versions.published()[-1] if follow else old["to"])
        result = search.history(config, name, start, end, jobs=jobs, exhaustive=exhaustive, echo=echo, note=note)
        for text in search.summary_lines(result, versions):
            echo(text)
        data = entry(result, versions, old, follow)
        path = folder / f"{name}.json"
        if atomic_write(path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"):
            written.append(path)
        existing[name] = data
    page = folder.parent / PAGE
    if atomic_write(page, markdown(existing, folder.name)):
        written.append(page)
    echo(f"atlas: {len(written)} file(s) written" + "".join(f"\n  {path}" for path in written))
    return written


def entry(result: search.History, versions, old: dict[str, Any], follows_newest: bool) -> dict[str, Any]:
    """The atlas file of one engine: what stays the same between runs that find the same (no
    timings, no cache state), and the reviewed explanations kept by release."""
    explained = old.get("explanations", {})
    document = documents.history(result, versions)
    changes = []
    for change in document["change_points"]:
        for group in change["groups"]:
            group.pop("detail")
        changes.append(change)
    return {
        "schema": SCHEMA, "engine": result.engine, "from": result.span[0], "to": result.span[-1],
        "follows_newest": follows_newest, "note": old.get("note", ""),
        "releases": document["releases"], "asked": [a["label"] for a in document["asked"]],
        "unavailable": {u["label"]: u["reason"] for u in document["unavailable"]},
        "cases": len(result.cases), "models": sorted({case.model for case in result.cases}),
        "change_points": changes,
        "explanations": {c["label"]: explained.get(c["label"], {"stage": "", "line": "", "upstream": []})
                         for c in changes},
        "floor": document["cost"]["floor"],
    }


def markdown(atlases: dict[str, dict[str, Any]], folder: str) -> str:
    """docs/atlas.md, written from the atlas files."""
    out = ["# The atlas: which release changed which tokens", "",
           "Every release of an engine, within the ranges below, after which one of the built-in matrix's",
           "cases renders different token ids than on the release before, found by `goldens history`",
           "(docs/history.md) and explained. Written by `goldens history --update-atlas` from the data in",
           f"`{folder}/` (one `goldens.atlas/1` file per engine: "
           + ", ".join(f"[{name}.json]({folder}/{name}.json)" for name in sorted(atlases))
           + "); the explanations are",
           "reviewed by hand and kept across updates.", ""]
    for name, data in sorted(atlases.items()):
        releases = data["releases"]
        out += [f"## {name}: {releases[0]} to {releases[-1]}", "",
                f"{len(releases)} published releases, {data['cases']} cases of {', '.join(data['models'])}; "
                f"{len(data['asked'])} releases asked (any search asks at least {data['floor']}); "
                f"{len(data['change_points'])} change point(s)."]
        if data.get("note"):
            out += ["", data["note"]]
        if data.get("unavailable"):
            out += ["", f"Not asked ({len(data['unavailable'])} release(s) that cannot be asked here):", ""]
            out += [f"- {release}: {_cell(why)}" for release, why in data["unavailable"].items()]
        out += ["", "| release | before | cases changed | first divergence | stage | explanation |",
                "| --- | --- | --- | --- | --- | --- |"]
        for change in data["change_points"]:
            why = data["explanations"].get(change["label"], {})
            groups = "<br>".join(_group(group) for group in change["groups"])
            links = " ".join(f"[{_short(url)}]({url})" for url in why.get("upstream", []))
            release = f"[{change['label']}]({change['url']})" if change.get("url") else change["label"]
            if change.get("skipped"):
                release += " (or " + ", ".join(change["skipped"]) + ", not asked)"
            out.append(f"| {release} | {change['before_label']} | {len(change['cases'])} | {groups} | "
                       f"{why.get('stage', '')} | {_cell(why.get('line', ''))} {links} |".replace("  |", " |"))
        out.append("")
    return "\n".join(out)


def _group(group: dict[str, Any]) -> str:
    cases = ", ".join(f"`{c}`" for c in group["cases"][:3])
    more = f" +{len(group['cases']) - 3}" if len(group["cases"]) > 3 else ""
    edit = ""
    if group["first_divergent_token"] is not None:
        removed = " ".join(_piece(p) for _, p in group["removed"]) or "nothing"
        added = " ".join(_piece(p) for _, p in group["added"]) or "nothing"
        edit = f": {removed} → {added}"
    summary = group["summary"].replace("<", "&lt;")  # a refusal's text (<server>) is not HTML
    return _cell(f"{cases}{more}: {summary}{edit}")


def _piece(piece: str) -> str:
    return "`" + repr(piece)[1:-1].replace("`", "'") + "`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _short(url: str) -> str:
    """github.com/ggml-org/llama.cpp/pull/19476 -> llama.cpp#19476."""
    parts = url.rstrip("/").split("/")
    if len(parts) >= 2 and parts[-2] in ("pull", "issues"):
        return f"{parts[-3]}#{parts[-1]}"
    return url
