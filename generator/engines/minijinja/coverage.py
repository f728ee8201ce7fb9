"""minijinja's request layer, traced with coverage.py in this process: the package's own Python
(its Rust core is a stripped extension, not traced; goldens' adaptor is not counted). The
registry names LAYER (Entry.coverage); coverage/engine_layers.py runs it."""

from __future__ import annotations

import contextlib

from generator.measure import reach
from generator.measure.engine import InProcess, Layer, installed_reachable

MINIJINJA_SUMMARY = ("the minijinja package's own Python code a render reaches (its Rust core, where "
                     "rendering happens, is a stripped extension and is not traced); goldens' adaptor is not counted")
# minijinja renders in Rust (`_lowlevel.Environment.render_template`); what of its own Python a
# request reaches is the TemplateError a refusal raises and reads (the adaptor's first_line(error)).
MINIJINJA_REACH = reach.Spec(
    packages=("minijinja/__init__.py", "minijinja/_internal.py"),
    seeds=("minijinja/__init__.py:TemplateError.__init__", "minijinja/__init__.py:TemplateError.__str__"),
)


@contextlib.contextmanager
def session(model, source, config):
    from generator.engines.minijinja.engine import MinijinjaEngine

    files, code = installed_reachable("minijinja", MINIJINJA_REACH)
    yield InProcess(files, lambda: MinijinjaEngine(source, config.date), lambda engine, request: engine.ids(request),
                    code).session()


def version(config) -> str:
    from importlib.metadata import version

    return version("minijinja")


LAYER = Layer(MINIJINJA_SUMMARY, session, version)
