"""Engines by name, for one model: against a user's URL, or a server this process manages.

Tests and `goldens check` get engines from here. A managed engine builds what it needs from the
model's resolved source (a tiny GGUF for llama-server, a tiny model directory for vLLM, both
carrying the real tokenizer and template), starts one server per (server kind, version, model)
and stops them all when the pool closes.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as _dt
import inspect
import os
import sys
import threading
from collections.abc import Callable, Iterable

from generator import http
from generator.config import engine_registry, engine_spec
from generator.config.engine_spec import EngineSpec
from generator.config.models import ModelSpec
from generator.engines import Engine, EngineContext, StandIn
from generator.engines.parse import Parser
from generator.engines.remote import Connection
from generator.errors import EngineError, GoldensError, Refused
from generator.sources.source import Source


def check_url(engine: str, url: str) -> str:
    """A --url must be an http(s) URL; say so in one line rather than failing on connect. Parsed
    as generator/http.py parses every URL it is given."""
    import urllib.parse

    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.netloc.rpartition("@")[2]  # the port as written: .port raises on one out of range
        port = host.partition("]")[2].removeprefix(":") if host.startswith("[") else host.partition(":")[2]
    except (ValueError, TypeError, AttributeError):
        raise GoldensError(f"{engine}: {url!r} is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise GoldensError(f"{engine}: {url!r} is not an http(s) URL")
    if port:
        if not port.isdigit():
            raise GoldensError(f"{engine}: {url!r} is not a URL (port {port!r} is not a number)")
        if not 0 < int(port) < 65536:
            raise GoldensError(f"{engine}: {url!r}: port {int(port)} is out of range (1 to 65535)")
    if "@" in parts.netloc:  # userinfo: never sent (generator/http.py sends no credentials from a
        # URL) and never kept, so no message built from the URL can carry it
        url = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    return url.rstrip("/")


def check_available(spec: EngineSpec, versions: dict[str, str] | None = None) -> None:
    """Refuse in one line, before any server starts, an engine version that was never published
    or cannot be installed here (vllm@0.16.0: its torch pin); a bare name checks the pin. How is
    the engine's version line's to say (config/engine_registry.py)."""
    info = engine_registry.capabilities(spec.name)  # a plugin that cannot load says so when opened
    version = spec.version or (versions or {}).get(info.pinned_as)
    if info.versions is None or version is None:
        return
    engine_registry.version_line(info).require(version)


class EnginePool:
    """Opens engines on demand and owns the servers it started (a context manager).

    An engine is named by an EngineSpec (or its text, `llama-server@11000`) and built by the
    factory its registry entry names, from an EngineContext; a bare name runs the version
    `versions` pins (models.yaml `engines:`), else its version line's default. Servers are keyed
    by (kind, version, model), so two builds of llama-server run side by side.
    """

    def __init__(self, date: _dt.date, urls: dict[str, str] | None = None,
                 on_start: Callable[[str], None] | None = None, connection: Connection | None = None,
                 versions: dict[str, str] | None = None, transport: http.Transport = http.DEFAULT):
        self.date = date
        self.urls = {name: check_url(name, url) for name, url in (urls or {}).items()}
        self.on_start = on_start or (lambda message: None)
        self.connection = connection or Connection()
        self.versions = dict(versions or {})
        self.transport = transport  # every engine's requests, with the run's deadlines
        self._servers: dict[tuple[str, str, str], object] = {}
        self._preparing: set[tuple[str, str]] = set()  # (kind, version) made ready in the background
        self._stack = contextlib.ExitStack()
        self._open_most = open_most()
        self._leases: collections.OrderedDict[int, _Lease] = collections.OrderedDict()  # open ones, least recent first
        self._lock = threading.RLock()

    def __enter__(self) -> EnginePool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._stack.close()
        self._servers.clear()
        self._preparing.clear()

    def running(self) -> frozenset[tuple[str, str, str]]:
        """The (kind, version, model) of every server up now."""
        return frozenset(self._servers)

    def release(self, model: str, kind: str | None = None, *,
                keep: frozenset[tuple[str, str, str]] = frozenset()) -> None:
        """Stop this model's servers now, or only its `kind` one ("llama-server", "vllm"), but
        none of `keep`: a matrix run keeps at most one model's servers up."""
        for key in [k for k in self._servers if k[2] == model and kind in (None, k[0]) and k not in keep]:
            server = self._servers.pop(key)
            server.stop()

    def prepare(self, specs: Iterable[EngineSpec]) -> list[str]:
        """Start making ready, each in a background process, what the managed servers of `specs`
        need whatever the model (a llama.cpp build, vLLM's venv: a registry Server that declares
        `prepare`) and is not made yet, so that work runs beside the cases that need none; what
        was started, as labels. A start that needs it waits on the same lock; the processes are
        stopped with the pool."""
        from generator.servers.process import Background

        started = []
        for spec in specs:
            info = engine_registry.lookup(spec.name)
            server = info.server
            if server is None or not server.prepare or info.versions is None:
                continue
            if spec.version is None and (spec.name in self.urls or info.pinned_as in self.urls):
                continue
            version = str(self._version(info, spec.version))
            line = engine_registry.version_line(info)
            if (server.kind, version) in self._preparing or line.cached(version):
                continue
            job = Background([sys.executable, "-m", "generator.engines.prepare", info.name, version],
                             env={"GOLDENS_PROGRESS": "lines"})
            self._stack.callback(job.start().stop)
            self._preparing.add((server.kind, version))
            started.append(f"{server.kind} {line.label(version)}")
        return started

    def server(self, kind: str, model: ModelSpec, source: Source):
        """The managed server of `kind` (a registry Server's kind: "llama-server", "vllm") for the
        model at the pinned version, started on first use and kept until released or closed."""
        owners = [info for info in engine_registry.BUILT_IN
                  if info.server is not None and info.server.kind == kind and info.follows is None]
        if not owners:
            kinds = sorted({info.server.kind for info in engine_registry.BUILT_IN if info.server is not None})
            raise GoldensError(f"no managed server kind {kind!r} (known: {', '.join(kinds)})")
        info = owners[0]
        return self._server(info.server, model, source, self._version(info, None))

    def engine(self, name: str | EngineSpec, model: ModelSpec, source: Source,
               transport: http.Transport | None = None) -> Engine:
        """The engine, built from its registry entry; `transport` (a run's, carrying its deadlines)
        replaces the pool's own, so a lent pool's engines keep to the run that asks for them."""
        spec = name if isinstance(name, EngineSpec) else engine_spec.parse(name)
        if spec.version is not None and spec.name in self.urls:
            raise GoldensError(f"--engine {spec.label}: a --url for {spec.name} already names the server")
        try:
            info = engine_registry.declared(spec.name)
        except GoldensError as error:  # a plugin that cannot be imported: its message may hold a secret
            raise GoldensError(self.connection.redact(str(error))) from None
        version = self._version(info, spec.version)
        url = None if spec.version is not None else self.urls.get(spec.name) or self.urls.get(info.pinned_as)
        server = info.server
        context = EngineContext(
            name=info.name, model=model.name, source=source, date=self.date, url=url,
            served_model=self.connection.served.get(model.name), headers=self.connection.all_headers(),
            jobs=self.connection.jobs, version=version, processor=model.processor,
            server=None if server is None else (lambda: self._server(server, model, source, version)),
            connection=self.connection, transport=transport or self.transport, on_start=self.on_start,
            parsers={kind: name for kind in ("tool", "reasoning", "response")
                     if (name := model.parser(info.name, kind)) is not None},
            end=model.parse.end if model.parse is not None else (),
        )
        factory = engine_registry.factory(info)
        engine = factory(context) if info.entry_point is None else self._plugin(info, factory, context)
        wanted = StandIn if info.stand_in else Engine if info.renders else Parser
        if not isinstance(engine, wanted) or engine.name != info.name:
            what = ("a StandIn engine (it declares stand_in)" if info.stand_in else "an Engine" if info.renders
                    else "a Parser (it declares renders=False)")
            raise GoldensError(f"{engine_registry.describe(info)}: returned {type(engine).__name__} named "
                               f"{getattr(engine, 'name', None)!r}, not {what} named {info.name!r}")
        if info.entry_point is not None:  # a plugin is sent the secrets: what it says is redacted
            engine = _Redacting(engine, self.connection.redact)
        lease = _Lease(self, engine, lambda: factory(context) if info.entry_point is None
                       else _Redacting(self._plugin(info, factory, context), self.connection.redact))
        self._stack.callback(lease.close)
        with self._lock:
            self._used(lease)
        return lease

    def open_engines(self) -> int:
        """How many engines hold their worker, process or connection now (at most the cap)."""
        with self._lock:
            return len(self._leases)

    def _used(self, lease: _Lease) -> None:
        """`lease` was just used: it goes last, and the least recently used open engines beyond
        the cap are closed (they open again on their next use). Called under the lock; only open
        leases are kept, so a use costs the same however many engines a run has opened."""
        self._leases[id(lease)] = lease
        self._leases.move_to_end(id(lease))
        while len(self._leases) > self._open_most:
            _, oldest = self._leases.popitem(last=False)  # never `lease`: it is last, the cap is 1 or more
            oldest.close()

    def _version(self, info: engine_registry.EngineInfo, wanted: str | None) -> str | None:
        """The version to run: --engine NAME@V's, else the pin, else the line's default."""
        if info.versions is None:
            return None
        return wanted or self.versions.get(info.pinned_as) or engine_registry.version_line(info).default()

    def _plugin(self, info: engine_registry.EngineInfo, factory, context: EngineContext) -> Engine:
        """An engine another package registers, built from the same EngineContext; whatever its
        code raises is one line naming it and its package."""
        where = engine_registry.describe(info)
        try:
            engine = factory(context)
        except GoldensError:
            raise
        except Exception as error:  # noqa: BLE001 - a plugin's constructor may raise anything
            raise GoldensError(f"{where}: failed to start: {type(error).__name__}: "
                               f"{self.connection.redact(str(error))}") from None
        return engine

    def _server(self, server: engine_registry.Server, model: ModelSpec, source: Source, version: str):
        """The started managed server, made and started on first use."""
        key = (server.kind, str(version), model.name if server.per_model else "")
        if key not in self._servers:
            make = engine_registry.load(server.make)
            # a server whose clock the model's template reads takes the matrix's date
            dated = "date" in inspect.signature(make).parameters
            made = make(model, source, version, self.on_start, **({"date": self.date} if dated else {}))
            self._stack.callback(made.stop)
            self._servers[key] = made.start()
        return self._servers[key]


OPEN_MOST = "GOLDENS_ENGINES_OPEN"
OPEN_MOST_DEFAULT = 4


def open_most() -> int:
    """The cap on engines a pool keeps open at once (GOLDENS_ENGINES_OPEN, 4 by default).

    One engine can hold a worker process (a transformers.js Node worker is 100-340 MB, a
    Transformers or SGLang venv worker more): a check over every model and engine that kept them
    all would grow with the matrix (70 families: over 10 GB). The least recently used beyond the
    cap is closed, and opens again on its next use."""
    text = os.environ.get(OPEN_MOST, "").strip()
    if not text:
        return OPEN_MOST_DEFAULT
    if not text.isdigit() or int(text) < 1:
        raise GoldensError(f"{OPEN_MOST}={text[:40]!r}: expected how many engines may be open at once, 1 or more")
    return int(text)


class _Lease:
    """An engine as the pool lends it: the same protocol, passed through, but the pool may close
    the engine while it waits (the cap, `open_most`) and it opens again on its next use, so no
    caller has to give an engine back."""

    def __init__(self, pool: EnginePool, engine: Engine, reopen: Callable[[], Engine]):
        self._pool = pool
        self._engine: Engine | None = engine
        self._reopen = reopen
        self._kind = type(engine)
        self.name = engine.name

    @property
    def __class__(self):  # noqa: D105 - isinstance() sees the engine's class, as without a lease
        return self._kind

    @property
    def is_open(self) -> bool:
        return self._engine is not None

    def _live(self) -> Engine:
        with self._pool._lock:
            if self._engine is None:
                self._engine = self._reopen()
            self._pool._used(self)
            return self._engine

    def __getattr__(self, name: str):
        return getattr(self._live(), name)

    def close(self) -> None:
        """Release what the engine holds now; the lease opens it again if it is used."""
        engine, self._engine = self._engine, None
        self._pool._leases.pop(id(self), None)
        if engine is not None:
            engine.close()


class _Redacting:
    """A plugin's engine, which is handed the configured secrets (its context's headers): what it
    says comes back with them taken out, wherever they stand, as a server's replies do (Remote):
    its errors and refusals, the prompt it returns, its version. Anything else it is, it still is."""

    def __init__(self, engine: Engine, redact: Callable[[str], str]):
        self._engine, self._redact = engine, redact
        self.name = engine.name

    def __getattr__(self, name: str):
        return getattr(self._engine, name)

    def ids(self, request):
        from generator.engines import Ids

        try:
            got = self._engine.ids(request)
        except GoldensError as error:
            said = self._redact(str(error))
            try:
                raise type(error)(said) from None
            except TypeError:  # a subclass of its own that takes other arguments
                raise (Refused if isinstance(error, Refused) else EngineError)(said) from None
        if isinstance(got, Ids) and isinstance(got.prompt, str):
            got.prompt = self._redact(got.prompt)
        return got

    def version(self) -> str:
        return self._redact(str(self._engine.version() or ""))

    def close(self) -> None:
        self._engine.close()
