"""Servers goldens does not manage: how to reach them, and the one request the remote engines make.

A `Connection` carries what a user's server needs beyond its URL: the name it serves each golden
model under (`--served-model`), extra headers (`--header`), an API key read from an environment
variable (`--api-key-env`), and how many requests may be in flight (`--jobs`). The key and every
header value are secrets: `Remote.post` takes them out of any text it puts in an error, so a
server that echoes them back (some proxies quote the key they rejected) cannot leak them into a
report. `post` is the single place the openai and ollama engines touch HTTP.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from generator.config.request import load_json
from generator.engines import EngineError, http
from generator.errors import GoldensError

TIMEOUT = 120.0  # seconds for one request, connect to last byte (engines/http.py)
RETRIES_429 = 4  # a rate-limited request is retried this many times, honouring Retry-After
MAX_WAIT = 30.0  # seconds; a longer Retry-After is an error rather than a stalled gate
REDACTED = "[redacted]"


@dataclass(frozen=True)
class Connection:
    """How goldens talks to servers it does not manage (the same for every remote engine)."""

    served: dict[str, str] = field(default_factory=dict)  # golden model -> served model name
    headers: dict[str, str] = field(default_factory=dict)  # sent with every request
    api_key: str | None = None  # sent as "Authorization: Bearer <key>"
    jobs: int = 8  # requests in flight per engine, at most

    def __repr__(self) -> str:  # never the key, never a header value
        return f"Connection(served={self.served!r}, headers={sorted(self.headers)}, jobs={self.jobs})"

    @property
    def secrets(self) -> list[str]:
        values = [self.api_key or "", *self.headers.values()]
        return sorted({v for v in values if len(v) >= 4}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        """`text` with the key and every header value replaced, for any message built from
        what a server or a plugin said."""
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return text

    def all_headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers


def parse_header(value: str, index: int) -> tuple[str, str]:
    """`--header "Name: value"`; the value is never echoed, it may be a credential."""
    name, sep, rest = value.partition(":")
    name = name.strip()
    if not sep or not name or any(c in name for c in " \t\r\n") or any(c in rest for c in "\r\n"):
        raise GoldensError(f'--header #{index + 1} (name {name[:40]!r}): expected "Name: value"')
    return name, rest.strip()


class Remote:
    """One server through engines/http.py (a total deadline per request, kept-alive
    connections), with at most `connection.jobs` requests in flight."""

    def __init__(self, engine: str, url: str, connection: Connection,
                 transport: http.Transport | None = None):
        self.engine = engine
        self.transport = transport or http.DEFAULT.with_timeout(TIMEOUT)
        self.url = url.rstrip("/")
        self.connection = connection
        self._slots = threading.BoundedSemaphore(connection.jobs)
        self._headers = connection.all_headers()

    def close(self) -> None:
        """Nothing to release: connections are engines/http.py's."""

    def where(self, path: str) -> str:
        return f"{self.engine} at {self.url}{path}"

    def quote(self, value: Any, limit: int = 500) -> str:
        """What a server said, for an error message: secrets removed first, then shortened to
        one line (shortening first could cut a key in half and leave a piece of it)."""
        return http.shorten(self.connection.redact(str(value)), limit)

    def get(self, path: str) -> Any:
        """GET a JSON document (a model listing); any failure is an EngineError."""
        return self._send("GET", path, None)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST JSON and return the JSON object replied. HTTP 400 and 422 are the server
        refusing this request (Refused, an outcome to judge); any other failure, or a reply
        that is not a JSON object, is an EngineError naming the engine, URL and reason."""
        reply = self._send("POST", path, body)
        if not isinstance(reply, dict):
            raise EngineError(f"{self.where(path)}: reply is {type(reply).__name__}, not a JSON object")
        return reply

    def _send(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        where = self.where(path)
        for attempt in range(RETRIES_429 + 1):
            with self._slots:
                status, headers, raw = self.transport.exchange(method, self.url + path, body, where=where,
                                                               headers=self._headers)
            if status != 429 or attempt == RETRIES_429:
                break
            wait = _retry_after(headers, attempt)
            if wait > MAX_WAIT:
                break
            time.sleep(wait)
        text = raw.decode("utf-8", errors="replace")
        error = http.failure(status, where, self.quote(text)) if status >= 400 else None
        if error is not None:
            raise error
        try:
            return load_json(raw, f"{where}: reply", error=EngineError)
        except EngineError:
            raise EngineError(f"{where}: reply is not JSON: {self.quote(text, 200)}") from None


def _retry_after(headers: dict[str, str], attempt: int) -> float:
    """Seconds to wait before retrying a 429: the server's Retry-After, else 1, 2, 4 ... s."""
    try:
        return max(0.0, float(headers.get("retry-after", "")))
    except ValueError:
        return float(2 ** attempt)



def integer(where: str, field: str, value: Any) -> int:
    """A token count exactly as sent: a bool, float, string or negative number is an error."""
    if type(value) is not int or value < 0:
        raise EngineError(f"{where}: {field} is {value!r} ({type(value).__name__}), not a token count")
    return value


def only_model(where: str, names: list[str], model: str) -> str:
    """The one model a server lists, for a golden model given no --served-model."""
    if len(names) == 1:
        return names[0]
    listed = ", ".join(names[:8]) + (" ..." if len(names) > 8 else "")
    raise GoldensError(f"{where} serves {len(names)} models ({listed or 'none'}); "
                       f"name the one for {model} with --served-model {model}=NAME")


def open_remote(engine_class, context):
    """A server the user runs (the registry factory of openai, ollama): --url is required, the
    served model name is --served-model's or, failing that, the one model the server lists."""
    if context.url is None:
        raise GoldensError(f"{context.name}: give the server with --url {context.name}=URL (goldens does not start one)")
    engine = engine_class(context.url, context.served_model or "", context.connection,
                          context.transport.with_timeout(TIMEOUT))
    if not context.served_model:
        engine.served_model = only_model(f"{context.name} at {context.url}", engine.models(), context.model)
    return engine
