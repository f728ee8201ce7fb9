"""Engines by name, for one model: against a user's URL, or a server this process manages.

Tests and `goldens check` get engines from here. A managed engine builds what it needs from the
model's resolved source (a tiny GGUF for llama-server, a tiny model directory for vLLM, both
carrying the real tokenizer and template), starts one server per (server kind, version, model)
and stops them all when the pool closes.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
from collections.abc import Callable

from generator.config import engine_registry, engine_spec
from generator.config.engine_spec import EngineSpec
from generator.config.models import ModelSpec
from generator.engines import Engine, EngineContext
from generator.engines.remote import Connection, only_model
from generator.errors import GoldensError
from generator.sources.source import Source

def check_url(engine: str, url: str) -> str:
    """A --url must be an http(s) URL; say so in one line rather than failing on connect."""
    import httpx

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        raise GoldensError(f"{engine}: {url!r} is not a URL") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise GoldensError(f"{engine}: {url!r} is not an http(s) URL")
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise GoldensError(f"{engine}: {url!r}: port {parsed.port} is out of range (1 to 65535)")
    return url.rstrip("/")


def _framing(model: ModelSpec) -> tuple[str, str, str] | None:
    """llama.cpp's image framing for the model's projector (None for a text-only model)."""
    if model.processor is None:
        return None
    from generator.engines.llama_server import MTMD_FRAMING
    from generator.servers.tiny_mmproj import projector_type

    return MTMD_FRAMING.get(projector_type(model.processor))


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
                 on_start: Callable[[str], None] | None = None, connection: Connection | None = None,
                 versions: dict[str, str] | None = None):
        self.date = date
        self.urls = {name: check_url(name, url) for name, url in (urls or {}).items()}
        self.on_start = on_start or (lambda message: None)
        self.connection = connection or Connection()
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

    def release(self, model: str, kind: str | None = None) -> None:
        """Stop this model's servers now, or only its `kind` one ("llama-server", "vllm"): a
        matrix run keeps at most one model's servers up."""
        for key in [k for k in self._servers if k[2] == model and kind in (None, k[0])]:
            server = self._servers.pop(key)
            server.stop()

    def server(self, kind: str, model: ModelSpec, source: Source):
        """The managed server of `kind` ("llama-server" or "vllm") for the model, started on first
        use and kept until released or the pool closes."""
        if kind == "llama-server":
            build = self._build(EngineSpec("llama-server"))
            self._llama_server(model, source, build)
            return self._servers[(kind, str(build), model.name)]
        if kind == "vllm":
            from generator.servers.vllm import VLLM_VERSION

            version = self.versions.get("vllm") or VLLM_VERSION
            self._vllm(model, source, version)
            return self._servers[(kind, version, model.name)]
        raise GoldensError(f"no managed server kind {kind!r} (known: llama-server, vllm)")

    def engine(self, name: str | EngineSpec, model: ModelSpec, source: Source) -> Engine:
        spec = name if isinstance(name, EngineSpec) else engine_spec.parse(name)
        name = spec.name
        info = engine_registry.lookup(name)
        if spec.version is not None and name in self.urls:
            raise GoldensError(f"--engine {spec.label}: a --url for {name} already names the server")
        if name in ("openai", "ollama"):
            return self._remote(name, model)
        if info.entry_point is not None:
            return self._plugin(info, model, source)
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
                return LlamaServerEngine(url, media=_framing(model))
            from generator import reference

            tokenizer = reference.load_tokenizer(source.tokenizer_dir)
            return ClientCompletionEngine(
                url, lambda request: reference.render_prompt(tokenizer, source.template, request, self.date)
            )
        from generator.engines.vllm import VllmEngine

        if "vllm" in self.urls:
            return VllmEngine(self.urls["vllm"], self._served_model(self.urls["vllm"]))
        from generator.servers.vllm import VLLM_VERSION

        url, served = self._vllm(model, source, spec.version or self.versions.get("vllm") or VLLM_VERSION)
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

    def _remote(self, name: str, model: ModelSpec) -> Engine:
        """A server the user runs (openai, ollama): --url is required, the served model name is
        --served-model's or, failing that, the one model the server lists."""
        if name not in self.urls:
            raise GoldensError(f"{name}: give the server with --url {name}=URL (goldens does not start one)")
        if name == "openai":
            from generator.engines.openai import OpenAIEngine as engine_class
        else:
            from generator.engines.ollama import OllamaEngine as engine_class

        served = self.connection.served.get(model.name)
        engine = engine_class(self.urls[name], served or "", self.connection)
        self._stack.callback(engine.close)
        if not served:
            engine.served_model = only_model(f"{name} at {self.urls[name]}", engine.models(), model.name)
        return engine

    def _plugin(self, info: engine_registry.EngineInfo, model: ModelSpec, source: Source) -> Engine:
        """An engine another package registers: its entry point is called with an EngineContext."""
        where = f"engine {info.name!r} ({info.summary} from {info.origin})"
        try:
            factory = info.entry_point.load()
        except Exception as error:  # noqa: BLE001 - a plugin's import may raise anything: one line
            raise GoldensError(f"{where}: cannot load: {type(error).__name__}: "
                               f"{self.connection.redact(str(error))}") from None
        context = EngineContext(
            name=info.name, model=model.name, source=source, date=self.date,
            url=self.urls.get(info.name), served_model=self.connection.served.get(model.name),
            headers=self.connection.all_headers(), jobs=self.connection.jobs,
        )
        try:
            engine = factory(context)
        except GoldensError:
            raise
        except Exception as error:  # noqa: BLE001 - so may its constructor
            raise GoldensError(f"{where}: failed to start: {type(error).__name__}: "
                               f"{self.connection.redact(str(error))}") from None
        if not isinstance(engine, Engine) or engine.name != info.name:
            raise GoldensError(f"{where}: returned {type(engine).__name__} named "
                               f"{getattr(engine, 'name', None)!r}, not an Engine named {info.name!r}")
        close = getattr(engine, "close", None)
        if callable(close):
            self._stack.callback(close)
        return engine

    def _llama_server(self, model: ModelSpec, source: Source, build: int) -> str:
        key = ("llama-server", str(build), model.name)
        if key not in self._servers:
            from generator.servers.llama_cpp import LlamaServer
            from generator.servers.tiny_gguf import tiny_gguf

            self.on_start(f"building a tiny GGUF and starting llama-server b{build} for {model.name}")
            extra: list[str] = []
            if source.gguf is not None:
                gguf = tiny_gguf(model.name, None, source.template, vocab_gguf=source.gguf)
            elif model.processor is None:
                gguf = tiny_gguf(model.name, source.tokenizer_dir, source.template)
            else:  # a vision model: its image token in the vocab, and a projector (--mmproj)
                from generator.servers.tiny_gguf_writer import N_EMBD  # the text model the projector feeds
                from generator.servers.tiny_mmproj import tiny_mmproj, vocab_with_added

                gguf = tiny_gguf(model.name, source.tokenizer_dir, source.template,
                                 vocab_size=vocab_with_added(source.tokenizer_dir))
                extra = ["--mmproj", str(tiny_mmproj(model.name, model.processor, N_EMBD))]
            server = LlamaServer(gguf, extra_args=extra, build=build)
            self._stack.callback(server.stop)
            self._servers[key] = server.start()
        return self._servers[key].url

    def _vllm(self, model: ModelSpec, source: Source, version: str) -> tuple[str, str]:
        key = ("vllm", version, model.name)
        if key not in self._servers:
            from generator.servers.tiny_model import tiny_hf_model
            from generator.servers.vllm import VllmServer

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
        from generator.engines import EngineError, http

        try:
            data = http.get_json(f"{url}/v1/models", where=f"vllm at {url}/v1/models", timeout=30)
            model = data["data"][0]["id"]
        except EngineError as error:
            raise GoldensError(f"vllm: cannot list models: {error}") from None
        except (KeyError, IndexError, TypeError):
            raise GoldensError(f"vllm: {url}/v1/models lists no model") from None
        if not isinstance(model, str):
            raise GoldensError(f"vllm: {url}/v1/models lists a model id that is not a string")
        return model
