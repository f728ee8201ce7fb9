"""Regenerate: models.yaml -> cases -> reference render -> golden files on disk.

Everything is resolved and rendered in memory first and written last, so bad input or an
unreachable source leaves goldens/ untouched; each write is atomic and skipped when the bytes
are equal, so a run with nothing changed writes nothing. A model whose inputs and goldens match
the index (generator/goldens/index.py) is not rendered at all: a run with nothing changed loads no tokenizer.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing import resource_tracker
from pathlib import Path

from generator import files, machine, reference
from generator.analysis import capabilities
from generator.config import engine_registry
from generator.config.cases import EXPANDED_VIEW
from generator.config.models import Config, ModelSpec
from generator.errors import GoldensError
from generator.goldens import golden_file, index, parse_goldens, pins
from generator.goldens.render import (  # noqa: F401 (the render, re-exported for its callers)
    REFERENCE_PACKAGES,
    annotate,
    provenance,
    reference_golden,
    render_model,
    versions,
)
from generator.sources.source import Source, resolve


@dataclass
class Summary:
    written: int = 0
    unchanged: int = 0
    removed: int = 0  # goldens and ledger entries, each listed in removed_paths
    removed_paths: list[tuple[Path, str]] = field(default_factory=list)  # (path, "golden" | "ledger entry")
    left_alone: list[Path] = field(default_factory=list)  # directories of models not in the config
    invariants: list[str] = field(default_factory=list)  # the goldens' invariant findings, for a person
    proposed: dict = field(default_factory=dict)  # model -> the `invariants:` entries that would review the rest

    def __str__(self) -> str:
        return f"{self.written} written, {self.unchanged} unchanged, {self.removed} removed"

    def lines(self) -> list[str]:
        """What was removed, file by file, what was left alone, and the summary line last."""
        out = [f"removed {path} ({kind})" for path, kind in self.removed_paths]
        out += [f"left {path}/ alone: {path.name} is not in the config (--prune removes its goldens)"
                for path in self.left_alone]
        return [*out, *self.invariants, str(self)]


Progress = Callable[[str], None]

# `goldens regenerate` renders in worker processes from this many stale models on.
AUTO_WORKERS_FROM = 3

# What a render imports, imported once by the fork server so that every worker forked from it
# starts warm (about a second of imports each otherwise). A name a future Transformers moves is
# skipped by the fork server; its workers then import it themselves.
WORKER_PRELOAD = (
    "generator.goldens.regenerate", "generator.goldens.render", "generator.analysis.prefix", "generator.analysis.roundtrip",
    "generator.engines.transformers.engine", "transformers.models.auto.tokenization_auto",
    "transformers.tokenization_utils_tokenizers", "transformers.utils.chat_template_utils",
)


def resolve_sources(config: Config, models: list[ModelSpec], update_pins: bool = False) -> dict[str, Source]:
    """Every selected model's source, pins checked (and, with update_pins, rewritten)."""
    sources, moved = {}, []
    for model in models:
        sources[model.name] = resolve(model, config)
        moved += pins.moved(model, sources[model.name], config, update_pins)
    pins.rewrite(config, moved)
    return sources


def choose_dialects(config: Config, models: list[ModelSpec], sources: dict[str, Source],
                    rechoose: bool = False) -> list[ModelSpec]:
    """The selected models with their dialect cases chosen: from the lock beside models.yaml
    (models.dialects.lock), or, for a model it holds no choice for (or every model with `rechoose`), by
    rendering each candidate with the reference (config/dialects.py `choose`) and writing the
    choice to the lock. config.models is updated in place; the returned list replaces `models`."""
    import dataclasses

    from generator.config import dialects

    todo = [m for m in models if m.dialects and (rechoose or m.dialect_cases is None)]
    if not todo:
        return models
    lock = dialects.read_lock(config.path)
    for model in todo:
        source = sources[model.name]
        matrix = [model.request(shape, model.kwargs) for shape in model.requests]
        try:
            kept = dialects.choose(model.shapes, model.dialects, model.kwargs,
                                   lambda request, source=source: reference.render_request(source, request, config.date),
                                   matrix, lambda request, rendered, source=source: finding_kinds(source, request, rendered),
                                   lambda request, source=source: _template_lines(source, request, config.date))
        except GoldensError as error:  # the render deadline, memory: this machine's, no choice
            raise GoldensError(f"{model.name}: choosing its dialect cases: {error}; nothing written") from None
        lock[model.name] = {"dialects": list(model.dialects), "cases": kept}
        config.models[model.name] = dataclasses.replace(model, dialect_cases=tuple(kept))
    lock = {name: entry for name, entry in lock.items() if name in config.models}
    dialects.write_lock(config.path, lock)
    return [config.models[m.name] for m in models]


def _template_lines(source: Source, request: dict, date) -> set[int]:
    """The compiled template lines a request executes (the derived dialects' choice)."""
    from generator.coverage.trace import render_traced

    return render_traced(source, request, date)[1]


def finding_kinds(source: Source, request: dict, rendered: reference.Rendered) -> list[str]:
    """The invariant findings of the reference's prompt for a request, each as its kind and what
    it says without positions (dialects' choice: a template that drops an assistant's text is
    another finding than one that drops the system prompt, though both drop a message)."""
    from generator.analysis import invariants

    found = invariants.of(source.template, request, rendered.prompt or "").findings
    return [f'{f["kind"]}: {re.sub(r"[0-9]+", "N", f["detail"])}' for f in found]


def render_models(config: Config, jobs: list[tuple[ModelSpec, Source]], advance: Progress | None = None,
                  workers: int | None = 1) -> dict[str, list[golden_file.Golden]]:
    """Each model's goldens, keyed by model. Loading a tokenizer holds the GIL, so threads do
    not overlap two loads; with `workers` > 1, each model renders in a worker process
    (forkserver: no fork of a threaded parent) and comes back as Golden data. `None` picks: one
    per core from AUTO_WORKERS_FROM models on, else this process. Measured on 2 cores: the pool
    takes about a second to start (the fork server imports Transformers, as this process would)
    and the workers' CPU is one process's plus about 0.5 s, so the wall time of the full matrix
    drops by a fifth with a core free, and a model or two render faster here. As with any
    multiprocessing start method but fork, a script that calls this with workers needs the
    `if __name__ == "__main__":` guard."""
    if workers is None:
        workers = machine.cores() if len(jobs) >= AUTO_WORKERS_FROM else 1
    workers = min(len(jobs), workers)
    done: dict[str, list[golden_file.Golden]] = {}

    def finished(model: ModelSpec, goldens: list[golden_file.Golden]) -> None:
        done[model.name] = goldens
        if advance is not None:
            for item in goldens:
                advance(item.case)

    if workers < 2:
        for model, source in jobs:
            finished(model, render_model(model, source, config))
        return done
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(WORKER_PRELOAD))
    # Ctrl-C reaches the whole process group, and a helper process interrupted while it imports
    # prints a traceback; so does a worker still unpickling its pool's queues when this process
    # exits (it finds their semaphores unlinked: FileNotFoundError from the fork server). So:
    # the fork server and its workers start with SIGINT and SIGTERM blocked (the mask survives
    # fork and exec; the resource tracker is started first because starting it unblocks SIGINT),
    # and a signal this process gets before every worker has said it is up is held (another
    # thread may take it despite the mask, so the handler is swapped too), then answered once
    # the pool is up: exit 130 or 143, one line, the workers terminated. Workers take SIGTERM
    # again first thing (pool.terminate() stops them with it).
    resource_tracker.ensure_running()
    pool = None
    try:
        with _signals_held():
            unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            try:
                ready = context.SimpleQueue()
                pool = context.Pool(workers, initializer=_worker_up, initargs=(ready,))
                for _ in range(workers):
                    ready.get()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)
        # Biggest tokenizer first (load time follows its files' size), so no core idles at the end.
        queued = sorted(jobs, key=lambda job: -_tokenizer_bytes(job[1]))
        pending = [(model, pool.apply_async(render_model, (model, source, config))) for model, source in queued]
        for model, result in pending:
            finished(model, result.get())
    finally:
        if pool is not None:
            pool.terminate()  # after an error or Ctrl-C too: no orphan worker keeps rendering
            pool.join()
    return done


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM recorded rather than acted on for the block, then re-delivered to the
    handlers that were in place (from the main thread only; elsewhere signals are not ours)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {signum: signal.signal(signum, lambda signum, frame: held.append(signum))
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    for signum in dict.fromkeys(held):
        signal.raise_signal(signum)


def _worker_up(ready) -> None:
    """A pool worker's first act: tell the parent it has unpickled everything it was sent, then
    take SIGTERM again (pool.terminate() sends it; one already pending ends the worker here,
    after it has counted as up, so the parent never waits on it)."""
    ready.put(os.getpid())
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _tokenizer_bytes(source: Source) -> int:
    return sum(path.stat().st_size for path in source.tokenizer_dir.iterdir() if path.is_file())


def build(config: Config, models: list[ModelSpec], update_pins: bool = False,
          advance: Progress | None = None, workers: int | None = 1) -> dict[str, golden_file.Golden]:
    """Every selected case's golden, keyed by case id; nothing touches the disk but re-pins."""
    sources = resolve_sources(config, models, update_pins)
    models = choose_dialects(config, models, sources)
    rendered = render_models(config, [(model, sources[model.name]) for model in models], advance, workers)
    return {item.case: item for model in models for item in rendered[model.name]}


def write(out: Path, goldens: dict[str, golden_file.Golden | None], models: list[ModelSpec],
          all_models: bool, known_models: set[str], prune: bool = False) -> Summary:
    """Write what changed (None: a golden not rendered, as the index recorded it), then remove
    this matrix's own stale files: within the selected models' directories, goldens and ledger
    entries of cases no longer in the matrix. A file is removed only when it proves to be one
    (`owned`); anything else in --out is the user's. On a full run, directories of models
    absent from the config are left alone and reported, unless `prune` (another config pointed
    at the same --out must not empty it)."""
    from generator.config.models import RESERVED

    summary = Summary()
    # a symlink anywhere on the way is refused before anything is written: each golden to write,
    # and the folders of those not rendered (nothing is written to them; a stat per folder, not
    # per golden, keeps a no-change run's cost off the matrix's size)
    to_write = [golden_file.golden_path(out, case_id) for case_id, item in goldens.items() if item is not None]
    kept = {Path(out) / folder  # golden_path's folders, a Path per folder, not per golden
            for folder in {case_id.rpartition("/")[0] for case_id, item in goldens.items() if item is None}}
    for path in [*to_write, *sorted(kept)]:
        files.inside(path, out)
    files.inside(Path(out) / index.NAME, out)
    texts = {case_id: golden_file.dumps(item) for case_id, item in goldens.items() if item is not None}
    for case_id, text in texts.items():  # what check could not read back is refused before any write
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > files.MAX_READ:
            raise GoldensError(f"{case_id}: its golden would be {size:,} bytes, more than the {files.MAX_READ:,} "
                               "`goldens check` reads; nothing was written (make the request smaller)")
    for case_id, item in goldens.items():
        if item is None:  # not rendered: its inputs and its bytes are as the index recorded
            summary.unchanged += 1
            continue
        changed = files.atomic_write(golden_file.golden_path(out, case_id), texts[case_id], within=out)
        if changed:
            summary.written += 1
        else:
            summary.unchanged += 1
    dirs = [out / m.name for m in models]
    if all_models and out.is_dir():
        absent = [d for d in sorted(out.iterdir())  # goldens' own folders (causes/) hold no model's goldens
                  if d.name not in RESERVED and d.name not in known_models and d.is_dir() and not d.is_symlink()
                  and owned(d)]
        if prune:
            dirs += absent
        else:
            summary.left_alone = absent
    dirs = [path for directory in dirs for path in (directory / golden_file.PARSE_FOLDER, directory)]
    for directory in dirs:
        if not directory.is_dir() or directory.is_symlink():
            continue
        prefix = case_prefix(directory)
        for path, kind in owned(directory, keep=lambda stem: f"{prefix}{stem}" in goldens):
            try:
                path.unlink()
            except OSError as error:
                raise GoldensError(f"{path}: cannot remove this stale {kind} ({error.strerror})") from None
            summary.removed += 1
            summary.removed_paths.append((path, kind))
        with contextlib.suppress(OSError):  # emptied by us: tidy; anything else: leave it
            if not any(directory.iterdir()):
                directory.rmdir()
    return summary


def case_prefix(directory: Path) -> str:
    """How the case ids of a folder's goldens begin: `qwen3/`, or `qwen3/parse/` for its parse folder."""
    if directory.name == golden_file.PARSE_FOLDER:
        return f"{directory.parent.name}/{directory.name}/"
    return f"{directory.name}/"


def owned(directory: Path, keep: Callable[[str], bool] | None = None) -> list[tuple[Path, str]]:
    """The files of `directory` that are provably goldens' own: regular files named
    `<stem>.json` (a golden) or `<stem>.<engine>.json` (a ledger entry of a known engine) that
    read as valid goldens of this directory's model and case (golden_file.read checks the case
    against the path) and, for a ledger entry, name that engine. A user's notes.json is not.
    `keep(stem)` true: a file of a case still in the matrix, left out before it is read (a
    no-change run reads no golden)."""
    out = []
    with os.scandir(directory) as entries:  # what glob("*.json") lists: no hidden file
        names = sorted(e.name for e in entries if e.name.endswith(".json") and not e.name.startswith("."))
    for name in names:
        parts = name[: -len(".json")].split(".")
        if keep is not None and keep(parts[0]):
            continue  # a case of the matrix's golden or entry: no stat, no Path (a folder listed once)
        path = directory / name
        if path.is_symlink() or not path.is_file():
            continue
        if len(parts) == 1:
            kind = "golden"
        elif (len(parts) == 2 or parts[2:] == ["stand-in"]) and engine_registry.NAME.match(parts[1]):
            kind = "ledger entry"  # `<stem>.<engine>.stand-in.json` too: a stand-in endpoint's
        else:
            continue
        try:
            item = golden_file.read(path)
        except GoldensError:
            continue
        if kind == "ledger entry" and item.extra.get("engine") != parts[1]:
            continue
        out.append((path, kind))
    return out


def regenerate(config: Config, out: Path, model_names: tuple[str, ...] = (), update_pins: bool = False,
               advance: Progress | None = None, force: bool = False, workers: int | None = 1,
               prune: bool = False, rechoose_dialects: bool = False, review: bool = False) -> Summary:
    """Render the models whose inputs changed since `out`'s index (all with `force`), write
    what changed, then record the index. A model skipped counts its goldens as unchanged.
    `workers`: see render_models (the command passes None). Dialect cases come from the lock
    file (choose_dialects; chosen anew with `rechoose_dialects`).
    The invariant review of every selected golden (and the cases that render another's ids)
    is said only when a model was rendered, or asked for with `review` (--write-invariants):
    a run with nothing to render reads no golden and says one line, whatever the matrix's size."""
    models = config.select(model_names)
    sources = resolve_sources(config, models, update_pins)
    models = capabilities.refresh(config, models, sources, full=not model_names)
    models = parse_goldens.refresh(config, models, sources)
    models = choose_dialects(config, models, sources, rechoose_dialects)
    saved = index.load(out)
    code, versions, cases_code = index.code_fingerprint(), index.library_versions(), index.cases_fingerprint()
    inputs, case_ids, stale = {}, {}, []
    for model in models:  # a memo hit each when nothing changed: no case built, no request hashed
        source = sources[model.name]
        inputs[model.name], case_ids[model.name] = index.inputs_and_cases(
            model, source, config, provenance(source, config), code, versions, cases_code)
        if force or not saved.fresh(model.name, inputs[model.name], case_ids[model.name], out):
            stale.append((model, source))
    if stale and advance is not None:  # nothing to render: no bar (progress.py makes it on first use)
        rendering = {model.name for model, _ in stale}
        for name in (model.name for model in models if model.name not in rendering):
            for case_id in case_ids[name]:
                advance(case_id)
    rendered = render_models(config, stale, advance, workers)
    refuse_all_refused(rendered)
    # None: a golden whose inputs and bytes on disk are what the index recorded; not rendered.
    goldens: dict[str, golden_file.Golden | None] = {}
    for model in models:
        if model.name in rendered:
            goldens.update((item.case, item) for item in rendered[model.name])
        else:
            goldens.update(dict.fromkeys(case_ids[model.name]))
    summary = write(out, goldens, models, all_models=not model_names, known_models=set(config.models),
                    prune=prune)
    for model, _ in stale:
        written = {item.case: golden_file.dumps(item) for item in rendered[model.name]}
        saved.record(model.name, inputs[model.name], written)
    if not model_names and prune:  # as their directories: left alone unless pruned
        saved.models = {name: entry for name, entry in saved.models.items() if name in config.models}
    index.save(out, saved)
    if not stale and not review:  # nothing rendered: every finding was said when it was rendered
        return summary
    every = read_back(out, goldens)
    review = invariant_review(every, models)
    summary.invariants = review.lines() + review.paste() + same_ids(every) + disputed(every, models)
    summary.proposed = review.proposed()
    return summary


def read_back(out: Path, goldens: dict[str, golden_file.Golden | None]) -> dict[str, golden_file.Golden]:
    """Every selected golden: a golden not rendered this run (None) read back from `out`."""
    return {case_id: item if item is not None else golden_file.read(golden_file.golden_path(out, case_id))
            for case_id, item in goldens.items()}


def invariant_review(goldens: dict[str, golden_file.Golden], models: list[ModelSpec]):
    """The invariant findings every selected golden carries, judged against models.yaml's
    reviewed entries."""
    from generator.analysis import invariants

    found = {case_id: invariants.findings_of(item.extra) for case_id, item in goldens.items()}
    return invariants.review(found, {model.name: model.invariants for model in models})


def same_ids(goldens: dict[str, golden_file.Golden]) -> list[str]:
    """One line per model naming the cases that render the ids another case of the same model
    and variant renders: what they add never reached the prompt (gemma3 ignores tool
    definitions; the reference decodes string arguments), so they check nothing their twin
    does not. Said, not refused: a team may keep a twin on purpose. Dialect cases are left
    out: they spell their shape for the engines' request layers, not for the template."""
    from generator.config import dialects

    first: dict[tuple, str] = {}
    twins: dict[str, list[str]] = {}
    for case_id, item in goldens.items():
        model, _, stem = case_id.partition("/")
        if golden_file.is_parse(item):
            continue  # output ids: two parse shapes with the same ids are never both kept
        if item.outcome != "ok" or item.extra.get("view") == EXPANDED_VIEW or dialects.split(stem) is not None:
            continue  # a dialect case renders its shape's ids by design: what it adds is for the engines
        key = (model, stem.partition("--")[2], tuple(item.ids))
        if key in first:
            twins.setdefault(model, []).append(f"{stem} = {first[key].partition('/')[2]}")
        else:
            first[key] = case_id
    return [f"{model}: {len(pairs)} case{'s render' if len(pairs) != 1 else ' renders'} another case's ids "
            f"(what they add never reaches the prompt): {', '.join(pairs)}" for model, pairs in twins.items()]


def disputed(goldens: dict[str, golden_file.Golden], models: list[ModelSpec]) -> list[str]:
    """One line per model naming the cases its two references (template and encoder) render
    differently and no `references.disputes` entry reviews: `goldens check` judges them against
    no engine and exits 2 until one does (docs/references.md)."""
    reviews = {model.name: model.disputes for model in models}
    open_: dict[str, list[str]] = {}
    for case_id, item in goldens.items():
        model, _, stem = case_id.partition("/")
        if "disputed" in item.extra and not any(r.covers(case_id) for r in reviews.get(model, ())):
            open_.setdefault(model, []).append(stem)
    return [f"{model}: {len(stems)} case{'s' if len(stems) != 1 else ''} disputed between its references, "
            f"not reviewed (models.{model}.references.disputes; docs/references.md): {', '.join(stems)}"
            for model, stems in open_.items()]


def refuse_all_refused(rendered: dict[str, list[golden_file.Golden]]) -> None:
    """A model whose every case the template refuses would golden nothing and let every check
    pass on nothing: an error, before anything is written."""
    for model, items in rendered.items():
        if items and all(item.outcome == "error" for item in items):
            raise GoldensError(
                f"{model}: the template refused every case ({len(items)} of {len(items)}), so its "
                f"goldens would check nothing; the first: {items[0].case}: {items[0].error}"
            )
