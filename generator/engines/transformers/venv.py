"""Another Transformers release: its own venv and a worker process rendering in it.

"Would upgrading Transformers change our goldens?" is answered before upgrading: `transformers==V`
(with the tokenizers it pulls, and the reference's own jinja2 and Pillow pins so only Transformers
moves; Pillow because a media case is rendered by the model's processor, as the reference does)
is installed into `cache_dir()/transformers-V/`, and `TransformersWorker` runs
generator.engines.transformers.worker there, which renders with the project's own
generator.reference.
"""

from __future__ import annotations

from importlib.metadata import version as installed
from pathlib import Path
from typing import Any

from generator import heavy
from generator.errors import GoldensError
from generator.render_worker import RenderWorker
from generator.files import cache_dir
from generator.servers import venv
from generator.servers.transformers_reference import _import_root
from generator.sources import registry


# What the worker imports (generator.reference's Transformers and Jinja modules), imported once
# after the install: the venv is trusted only if they import, and they are compiled then.
CHECK = """import transformers, jinja2.sandbox, PIL
from transformers import AutoTokenizer, PreTrainedTokenizerFast
try:
    from transformers.utils import chat_template_utils  # not in the oldest 4.x releases
except ImportError:
    pass
print(transformers.__version__, PIL.__version__)"""


def expected(version: str) -> str:
    """What CHECK prints in a good venv of `version` (and what its marker records: a venv made
    before Pillow was part of the plan is made again)."""
    from generator.servers.transformers_reference import PINS

    return f"{version} {PINS['pillow']}"


def cached(version: str) -> bool:
    """The release's venv is installed and current (using it installs nothing)."""
    return venv.trusted(cache_dir() / f"transformers-{version}", expected(version))


def transformers_python(version: str) -> Path:
    """The python of a venv with transformers==`version`, installed on first use (seconds with
    uv, about half a minute with pip)."""
    from generator.servers.transformers_reference import PINS

    name = f"transformers-{version}"
    require_available(version)
    jinja2 = f"jinja2=={installed('jinja2')}"
    pillow = f"pillow=={PINS['pillow']}"

    def plan() -> venv.Steps:
        return [(f"install transformers=={version}", venv.INSTALL, [f"transformers=={version}", jinja2, pillow])]

    return venv.ensure(name, plan, CHECK, expected(version))


def require_available(version: str) -> None:
    """Refuse, before anything is installed, a release that was never published."""
    if not (cache_dir() / f"transformers-{version}" / venv.MARKER).exists():
        registry.require_published("transformers", version, label="transformers")


class TransformersWorker(RenderWorker):
    """One worker process for one release (generator/render_worker.py: its main thread renders
    under the render deadline, and it is killed once that deadline and a grace are past)."""

    def __init__(self, version: str):
        self.release = version
        super().__init__(transformers_python(version), f"transformers@{version}", _import_root())

    def start(self) -> TransformersWorker:
        heavy.require(f"starting the transformers@{self.release} worker")
        super().start()
        if self.versions.get("transformers") != self.release:
            self.stop()
            raise GoldensError(f"transformers@{self.release}: the worker runs {self.versions}")
        return self

    def render(self, tokenizer_dir: Path, template: str, request: dict[str, Any], date: str,
               processor_dir: Path | None = None, until: float | None = None) -> dict:
        """One request rendered by the reference in this release; with `processor_dir` (a
        request that carries media) by the model's processor, as generator.reference does; within
        the render deadline and the run's, `until`."""
        return self.ask({"tokenizer_dir": str(tokenizer_dir), "template": template, "request": request,
                         "date": date, "processor_dir": None if processor_dir is None else str(processor_dir)},
                        until)
