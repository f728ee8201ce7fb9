"""Engines by name, for one model: against a user's URL, or a server this process manages.

Tests and `goldens check` get engines from here. A managed engine builds what it needs from the
model's resolved source (a tiny GGUF for llama-server, a tiny model directory for vLLM, both
carrying the real tokenizer and template), starts one server per (server kind, model) and stops
them all when the pool closes.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
from collections.abc import Callable

from generator.config import engine_spec
from generator.config.engine_spec import EngineSpec
from generator.config.models import ENGINE_NAMES, ModelSpec
from generator.engines import Engine
from generator.errors import GoldensError
from generator.sources.source import Source

SERVER_ENGINES = {"llama-server": "llama-server", "client-completion": "llama-server", "vllm": "vllm"}


def check_url(engine: str, url: str) -> str:
    """A --url must be an http(s) URL; say so in one line rather than failing on connect."""
    import httpx

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        raise GoldensError(f"{engine}: {url!r} is not a URL") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise GoldensError(f"{engine}: {url!r} is not an http(s) URL")
    return url.rstrip("/")


def check_available(spec: EngineSpec, versions: dict[str, str] | None = None) -> None:
    """Refuse in one line, before any server starts, an engine version that was never published
    or cannot be installed here (vllm@0.16.0: its torch pin); a bare name checks the pin."""
    pinned = (versions or {}).get("llama-server" if spec.name == "client-completion" else spec.name)
    version = spec.version or pinned
    if version is None:
        return
    if spec.name in ("llama-server", "client-completion"):
        from generator.servers.llama_cpp import require_available

        require_available(int(version))
    elif spec.name == "transformers":
        from importlib.metadata import version as installed

        from generator.servers.transformers_venv import require_available

        if version != installed("transformers"):
            require_available(version)
    elif spec.name == "vllm":
        from generator.servers.vllm import require_available

        require_available(version)


class EnginePool:
    """Opens engines on demand and owns the servers it started (a context manager).

    An engine is named by an EngineSpec (or its text, `llama-server@11000`); a bare name runs
    the version `versions` pins (models.yaml `engines:`), else the one goldens was made with.
    Servers are keyed by (kind, version, model), so two builds of llama-server run side by side.
    """

    def __init__(self, date: _dt.date, urls: dict[str, str] | None = None,
                 on_start: Callable[[str], None] | None = None,
                 versions: dict[str, str] | None = None):
        self.date = date
        self.urls = {name: check_url(name, url) for name, url in (urls or {}).items()}
        self.on_start = on_start or (lambda message: None)
        self.versions = dict(versions or {})
        self._servers: dict[tuple[str, str, str], object] = {}
        self._workers: dict[str, object] = {}
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> EnginePool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._stack.close()
        self._servers.clear()

    def release(self, model: str) -> None:
        """Stop this model's servers now (a matrix run keeps at most one model's servers up)."""
        for key in [k for k in self._servers if k[2] == model]:
            server = self._servers.pop(key)
            server.stop()

    def engine(self, name: str | EngineSpec, model: ModelSpec, source: Source) -> Engine:
        spec = name if isinstance(name, EngineSpec) else engine_spec.parse(name, ENGINE_NAMES)
        name = spec.name
        if spec.version is not None and name in self.urls:
            raise GoldensError(f"--engine {spec.label}: a --url for {name} already names the server")
        if name == "transformers":
            return self._transformers(spec, source)
        if name == "minijinja":
            from generator.engines.minijinja import MinijinjaEngine

            return MinijinjaEngine(source, self.date)
        if name == "mistral-common":
            from generator.engines.mistral_common import MistralCommonEngine

            return MistralCommonEngine(source)
        if name in ("llama-server", "client-completion"):
            from generator.engines.llama_server import (
                ClientCompletionEngine,
                LlamaServerEngine,
            )

            url = self.urls.get(name) or self.urls.get("llama-server")
            if url is None or spec.version is not None:
                url = self._llama_server(model, source, self._build(spec))
            if name == "llama-server":
                return LlamaServerEngine(url)
            from generator import reference

            tokenizer = reference.load_tokenizer(source.tokenizer_dir)
            return ClientCompletionEngine(
                url, lambda request: reference.render_prompt(tokenizer, source.template, request, self.date)
            )
        from generator.engines.vllm import VllmEngine

        if "vllm" in self.urls:
            return VllmEngine(self.urls["vllm"], self._served_model(self.urls["vllm"]))
        url, served = self._vllm(model, source, spec.version or self.versions.get("vllm"))
        return VllmEngine(url, served)

    def _build(self, spec: EngineSpec) -> int:
        from generator.sources import pack

        return int(spec.version or self.versions.get("llama-server") or pack.LLAMA_CPP_BUILD)

    def _transformers(self, spec: EngineSpec, source: Source) -> Engine:
        """The installed Transformers, or another release through a worker in its own venv."""
        from importlib.metadata import version as installed

        from generator.engines.transformers import TransformersEngine, WorkerTransformersEngine

        release = spec.version or self.versions.get("transformers")
        if release is None or release == installed("transformers"):
            return TransformersEngine(source, self.date)
        if release not in self._workers:
            from generator.servers.transformers_venv import TransformersWorker

            self.on_start(f"starting a Transformers {release} worker (its venv is installed once, about a minute)")
            worker = TransformersWorker(release)
            self._stack.callback(worker.stop)
            self._workers[release] = worker.start()
        return WorkerTransformersEngine(self._workers[release], source, self.date)

    def _llama_server(self, model: ModelSpec, source: Source, build: int) -> str:
        key = ("llama-server", str(build), model.name)
        if key not in self._servers:
            from generator.servers.llama_cpp import LlamaServer
            from generator.servers.tiny_gguf import tiny_gguf

            self.on_start(f"building a tiny GGUF and starting llama-server b{build} for {model.name}")
            if source.gguf is not None:
                gguf = tiny_gguf(model.name, None, source.template, vocab_gguf=source.gguf)
            else:
                gguf = tiny_gguf(model.name, source.tokenizer_dir, source.template)
            server = LlamaServer(gguf, build=build)
            self._stack.callback(server.stop)
            self._servers[key] = server.start()
        return self._servers[key].url

    def _vllm(self, model: ModelSpec, source: Source, version: str | None) -> tuple[str, str]:
        from generator.servers.vllm import VLLM_VERSION, VllmServer

        version = version or VLLM_VERSION
        key = ("vllm", version, model.name)
        if key not in self._servers:
            from generator.servers.tiny_model import tiny_hf_model

            self.on_start(f"building a tiny model and starting vLLM {version} for {model.name} (about a minute)")
            directory = tiny_hf_model(model.name, source.tokenizer_dir, source.template)
            server = VllmServer(directory, served_model_name=model.name, version=version)
            self._stack.callback(server.stop)
            self._servers[key] = server.start()
        server = self._servers[key]
        return server.url, server.model_name

    @staticmethod
    def _served_model(url: str) -> str:
        """The model a user's vLLM serves (its /v1/models), so --url needs no model name."""
        import httpx

        try:
            data = httpx.get(f"{url}/v1/models", timeout=10).json()
            return data["data"][0]["id"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as error:
            raise GoldensError(f"vllm: cannot list models at {url}/v1/models ({type(error).__name__}: {error})") from None
