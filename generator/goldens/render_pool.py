"""Rendering many models: in this process, or each in a worker process of a pool whose start and
Ctrl-C are handled so that nothing is left rendering and no helper prints a traceback.

A model's render itself is render.py's `render_model`; this module decides where it runs and
refuses a model whose every case the template refuses before anything is written.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from collections.abc import Callable
from multiprocessing import resource_tracker

from generator import machine
from generator.config.models import Config, ModelSpec
from generator.errors import GoldensError
from generator.goldens import golden_file
from generator.goldens.render import render_model
from generator.sources.source import Source

Progress = Callable[[str], None]

# `goldens regenerate` renders in worker processes from this many stale models on.
AUTO_WORKERS_FROM = 3

# What a render imports, imported once by the fork server so that every worker forked from it
# starts warm (about a second of imports each otherwise). A name a future Transformers moves is
# skipped by the fork server; its workers then import it themselves.
WORKER_PRELOAD = (
    "generator.goldens.render_pool", "generator.goldens.render", "generator.analysis.prefix", "generator.analysis.roundtrip",
    "generator.engines.transformers.engine", "transformers.models.auto.tokenization_auto",
    "transformers.tokenization_utils_tokenizers", "transformers.utils.chat_template_utils",
)


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


def refuse_all_refused(rendered: dict[str, list[golden_file.Golden]]) -> None:
    """A model whose every case the template refuses would golden nothing and let every check
    pass on nothing: an error, before anything is written."""
    for model, items in rendered.items():
        if items and all(item.outcome == "error" for item in items):
            raise GoldensError(
                f"{model}: the template refused every case ({len(items)} of {len(items)}), so its "
                f"goldens would check nothing; the first: {items[0].case}: {items[0].error}"
            )

