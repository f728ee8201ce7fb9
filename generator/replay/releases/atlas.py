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

from generator.config import engine_registry
from generator.config.models import Config
from generator.errors import GoldensError
from generator.files import atomic_write, read_text
from generator.replay.releases import history as search

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
           note: Callable[[str], None] | None = None, models: tuple[str, ...] = ()) -> list[Path]:
    """Rerun the atlas's ranges (or set one engine's with `first`/`last`), write what changed.
    `models` searches only their cases and keeps what the atlas found on the others."""
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
        everything = searched(config, name)
        digests = {c: d for c, d in everything.items() if not models or c.partition("/")[0] in models}
        todo = incremental(old, start, end, digests, exhaustive)
        if models and todo is None:  # these models' cases anew; the others' change points kept as found
            todo = list(digests)
        if todo == []:
            echo(f"atlas {name}: every case of the matrix was searched over {start}..{end}; nothing new to ask")
            data = {**old, "searched": {**(old.get("searched") or {}), **digests}}
        else:
            if todo is not None:
                echo(f"atlas {name}: {len(todo)} case(s) new or changed since the last search; asking only those")
            result = search.history(config, name, start, end, case_ids=todo or (), jobs=jobs, exhaustive=exhaustive,
                                    echo=echo, note=note)
            for text in search.summary_lines(result, versions):
                echo(text)
            data = entry(result, versions, old, follow)
            if todo is not None:
                data = merged(old, data, everything)
            data.pop("_cases", None)
            recorded = {c: d for c, d in (old.get("searched") or {}).items() if c in everything and c not in digests}
            data["searched"] = {**recorded, **digests}
            data["cases"] = len(everything) if not models else max(len(data["searched"]), old.get("cases", 0))
            data["models"] = sorted({case_id.partition("/")[0] for case_id in everything})
        stated = getattr(versions, "stated_transformers", None)
        if stated is not None:  # vLLM: the one Transformers each release asked was installed with
            data["transformers"] = {**old.get("transformers", {}),
                                    **{v: t for v in data["asked"] if (t := stated(v)) is not None}}
        path = folder / f"{name}.json"
        if atomic_write(path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"):
            written.append(path)
        existing[name] = data
    page = folder.parent / PAGE
    if atomic_write(page, markdown(existing, folder.name)):
        written.append(page)
    echo(f"atlas: {len(written)} file(s) written" + "".join(f"\n  {path}" for path in written))
    return written


def searched(config: Config, engine: str) -> dict[str, str]:
    """case id -> the digest its answers are remembered under (releases.AnswerStore.key): what
    the atlas searched, so an update asks only the cases that are new or changed."""
    from generator.replay.releases.releases import AnswerStore, cases_for

    store = AnswerStore(config, engine)
    return {case.id: store.key(case) for case in cases_for(config, engine, (), ())}


def incremental(old: dict[str, Any], start: str, end: str, digests: dict[str, str],
                exhaustive: bool) -> list[str] | None:
    """The cases to search (None: all): over the same range as before, only the cases whose
    digest the atlas has not searched; every case when the range moved or nothing was recorded."""
    recorded = old.get("searched")
    if not recorded or old.get("from") != start or old.get("to") != end or (exhaustive and not old.get("exhaustive")):
        return None
    return [case_id for case_id, digest in digests.items() if recorded.get(case_id) != digest]


def merged(old: dict[str, Any], new: dict[str, Any], everything: dict[str, str]) -> dict[str, Any]:
    """The old search's change points, on the cases still in the matrix that this search did not
    ask again (and whose digest did not move), with the new search's, joined by release;
    releases asked and those that could not be, unioned."""
    recorded = old.get("searched") or {}
    asked_now = new_cases(new)

    def kept(case_id: str) -> bool:
        return (case_id in everything and case_id not in asked_now
                and recorded.get(case_id, everything[case_id]) == everything[case_id])

    points: dict[str, dict[str, Any]] = {}
    for source, change in [*(("old", c) for c in old.get("change_points", [])), *(("new", c) for c in new["change_points"])]:
        groups = [{**g, "cases": [c for c in g["cases"] if source == "new" or kept(c)]} for g in change["groups"]]
        groups = [g for g in groups if g["cases"]]
        if not groups:
            continue
        into = points.setdefault(change["label"], {**change, "groups": [], "cases": []})
        into["groups"] += groups
        into["cases"] = list(dict.fromkeys(into["cases"] + [c for g in groups for c in g["cases"]]))
    order = {label: i for i, label in enumerate(new["releases"])}
    changes = sorted(points.values(), key=lambda c: order.get(c["label"], len(order)))
    asked = sorted(set(old.get("asked", [])) | set(new["asked"]), key=lambda v: order.get(v, len(order)))
    explained = {**old.get("explanations", {}), **new["explanations"]}
    return {**new, "asked": asked, "change_points": changes,
            "unavailable": {**old.get("unavailable", {}), **new["unavailable"]},
            "explanations": {c["label"]: explained.get(c["label"], {"stage": "", "line": "", "upstream": []})
                             for c in changes}}


def new_cases(data: dict[str, Any]) -> set[str]:
    return set(data.get("_cases", []))


def entry(result: search.History, versions, old: dict[str, Any], follows_newest: bool) -> dict[str, Any]:
    """The atlas file of one engine: what stays the same between runs that find the same (no
    timings, no cache state), and the reviewed explanations kept by release."""
    explained = old.get("explanations", {})
    document = search.document(result, versions)
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
        "floor": document["cost"]["floor"], "exhaustive": result.exhaustive,
        "_cases": [case.id for case in result.cases],
    }


def markdown(atlases: dict[str, dict[str, Any]], folder: str) -> str:
    """docs/atlas.md, written from the atlas files."""
    out = ["# The atlas: which release changed which tokens", "",
           "Every release of an engine, within the ranges below, after which one of the built-in matrix's",
           "cases renders different token ids than on the release before (a parse case: parses its output ids",
           "into a different message; SGLang's section is all parse cases), found by `goldens history`",
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
