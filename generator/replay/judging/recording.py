"""`goldens ledger`: record what an engine gives as reviewed, a per-case ledger entry or a cause.

Recording asks the engine as `check` judges it (answers.py: the serving path's answer where it
returns ids) and writes only what a later check would accept: nothing where the engine matches
the reference or refuses as it does, no cause that no case shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from generator.config import engine_registry
from generator.engines import Engine, Ids, PromptCount, Refused, pieces_of, reported_version
from generator.errors import GoldensError, stable_line
from generator.goldens import golden_file
from generator.replay.judging import causes as causes_, ledger, stand_in as stand_ins
from generator.replay.judging.answers import answer, judged, serve


def record(engine: Engine, item: golden_file.Golden, root: Path, reason: str, stand_in: bool = False,
           klass: str | None = None, upstream: Sequence[str] = ()) -> Path:
    """Record what `engine` gives for a golden as a reviewed divergence (a ledger entry): its own
    ids, or its refusal, as `check` judges them (the serving path's where it returns ids, as
    vLLM's does). Nothing is recorded where the engine matches the reference. With `stand_in`,
    record instead the engine's stand-in endpoint where it disagrees with the serving path."""
    if not reason.strip():
        raise GoldensError("a reviewed divergence needs a --reason that says why it is accepted")
    if golden_file.is_parse(item):
        from generator.replay.judging.parse import judge as parse_judge

        if stand_in:
            raise GoldensError(f"{item.case}: a parse case has no stand-in endpoint")
        return parse_judge.record(engine, item, root, reason)
    if item.outcome != "ok" and stand_in:
        raise GoldensError(f"{item.case}: the reference refused this case; there are no ids to diverge from")
    got = answer(engine, item.request)
    served = serve(engine, item.request, got)
    endpoint = engine_registry.capabilities(engine.name).stand_in or None
    if stand_in:
        if served is None or endpoint is None:
            raise GoldensError(f"{item.case}: {engine.name} has no stand-in endpoint beside a serving path")
        if stand_ins.finding(item.case, engine, got, served, engine.name) is None:
            raise GoldensError(f"{item.case}: {engine.name}'s {endpoint} agrees with its serving path; "
                               "nothing to record")
    else:
        endpoint = None
        serving = served.answer() if served is not None else None
        got = serving if serving is not None else got
    if isinstance(got, Refused) and item.outcome != "ok":
        raise GoldensError(f"{item.case}: {engine.name} refuses it as the reference does; nothing to record")
    if isinstance(got, Refused):
        message = stable_line(got)
        return ledger.write(root, item, engine.name, reason.strip(), [], [], None, refused=message,
                            engine_version=reported_version(engine), stand_in=endpoint, klass=klass, upstream=upstream)
    if isinstance(got, PromptCount):
        raise GoldensError(f"{item.case}: {engine.name} reports only a prompt token count; there are no ids to record")
    if list(got) == item.ids and not stand_in:
        raise GoldensError(f"{item.case}: {engine.name} matches the reference; nothing to record")
    return ledger.write(root, item, engine.name, reason.strip(), list(got), pieces_of(got),
                        Ids.of(got).prompt, engine_version=reported_version(engine), stand_in=endpoint,
                        klass=klass, upstream=upstream)


def record_cause(root: Path, name: str, edit: causes_.Edit, engine: str,
                 per_model: Sequence[tuple[str, Engine, Sequence[golden_file.Golden]]], reason: str,
                 replace_entries: bool = False, klass: str | None = None,
                 upstream: Sequence[str] = ()) -> tuple[Path, list[str], list[Path]]:
    """Record a reviewed cause: `edit` accepted on `engine` for these models, with `reason`,
    after replaying every golden the reference renders through the engine as `check` judges it.
    Returns the cause's path, the cases it explains (applying the edit to the golden's ids gives
    the engine's ids exactly) and the per-case ledger entries it makes redundant (removed with
    `replace_entries`). A cause no case shows is refused: nothing is written."""
    causes_.check_name(name)
    if not reason.strip():
        raise GoldensError("a reviewed cause needs a --reason that says why it is accepted")
    explained: list[str] = []
    redundant: list[Path] = []
    version = ""
    for model, engine_, goldens in per_model:
        version = version or reported_version(engine_)
        for item in goldens:
            if item.outcome != "ok":
                continue
            got = judged(engine_, item.request)
            if isinstance(got, (Refused, PromptCount)) or edit.apply(item.ids) != list(got):
                continue
            explained.append(item.case)
            entry = ledger.read(root, item.case, engine_.name)
            if entry is not None and entry.refused is None and entry.ids == list(got):
                redundant.append(entry.path)
    models = [model for model, _, _ in per_model]
    if not explained:
        raise GoldensError(f"no case of {', '.join(models)} on {engine} shows the edit {edit.describe()}; "
                           "nothing recorded")
    cause = causes_.Cause(name=name, edit=None, edits=(edit,), engines=[engine], models=models,
                          reason=reason.strip(), engine_version=version or None,
                          klass=klass or causes_.UNCLASSIFIED, upstream=tuple(upstream), cases=tuple(explained))
    if cause.klass == causes_.UNCLASSIFIED:
        cause = causes_.Cause(name=name, edit=edit, engines=[engine], models=models, reason=reason.strip(),
                              engine_version=version or None)
    path = causes_.write(root, cause)
    if replace_entries:
        for entry_path in redundant:
            entry_path.unlink()
    return path, explained, redundant

