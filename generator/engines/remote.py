"""Servers goldens does not manage: how to reach them, and the one request the remote engines make.

A `Connection` carries what a user's server needs beyond its URL: the name it serves each golden
model under (`--served-model`), extra headers (`--header`), an API key read from an environment
variable (`--api-key-env`), and how many requests may be in flight (`--jobs`). The key and every
header value are secrets: `Remote.post` takes them out of any text it puts in an error, so a
server that echoes them back (some proxies quote the key they rejected) cannot leak them into a
report. `post` is the single place the openai and ollama engines touch HTTP.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from generator import http, redaction
from generator.engines import EngineError
from generator.errors import GoldensError, printable
from generator.json_reader import load_json

TIMEOUT = 120.0  # seconds for one request, connect to last byte (generator/http.py)
RETRIES_429 = 4  # a rate-limited request is retried this many times, honouring Retry-After
MAX_WAIT = 30.0  # seconds; a longer Retry-After is an error rather than a stalled gate
WAIT_BUDGET = 60.0  # seconds of 429 waits in one run per server; then every 429 is an error at once
REDACTED = redaction.REDACTED


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
        values = [self.api_key or "", *(v for k, v in self.headers.items() if redaction.credential_header(k))]
        return sorted({v for v in values if v}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        """`text` with every form of every configured secret replaced (generator/redaction.py),
        for any message built from what a server or a plugin said."""
        return redaction.redact(text, extra=tuple(self.secrets))

    def all_headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers


def parse_header(value: str, index: int) -> tuple[str, str]:
    """`--header "Name: value"`; the value is never echoed, it may be a credential, and nor is a
    malformed header (`Authorization=Bearer sk-...` is all value): only a valid name is named."""
    name, sep, rest = value.partition(":")
    name = name.strip()
    if not sep or not HEADER_NAME.fullmatch(name) or any(c in rest for c in "\r\n"):
        redaction.register(value.strip(), rest.strip(), name)
        shown = f" (name {name!r})" if HEADER_NAME.fullmatch(name) and len(name) <= 64 else ""
        raise GoldensError(f'--header #{index + 1}{shown}: expected "Name: value" (the rest is not shown: '
                           "it may hold a credential)")
    if redaction.credential_header(name):  # a setting (X-Debug: 1) is no secret to hunt for
        redaction.register(rest.strip())
    return name, rest.strip()


HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}")  # an HTTP token (RFC 9110)


class Remote:
    """One server through generator/http.py (a total deadline per request, kept-alive
    connections), with at most `connection.jobs` requests in flight."""

    def __init__(self, engine: str, url: str, connection: Connection,
                 transport: http.Transport | None = None):
        self.engine = engine
        self.transport = transport or http.DEFAULT.with_timeout(TIMEOUT)
        self.url = url.rstrip("/")
        self.connection = connection
        self._slots = threading.BoundedSemaphore(connection.jobs)
        self._headers = connection.all_headers()
        self._budget = WAIT_BUDGET  # a server that always answers 429 costs a minute, not --timeout
        self._budget_lock = threading.Lock()

    def close(self) -> None:
        """Nothing to release: connections are generator/http.py's."""

    def where(self, path: str) -> str:
        return f"{self.engine} at {self.url}{path}"

    def quote(self, value: Any, limit: int = 500) -> str:
        """What a server said, for an error message: secrets removed first, then shortened to
        one line (shortening first could cut a key in half and leave a piece of it)."""
        return printable(http.shorten(self.connection.redact(str(value)), limit))

    def get(self, path: str) -> Any:
        """GET a JSON document (a model listing); any failure is an EngineError."""
        return self._send("GET", path, None)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST JSON and return the JSON object replied. A 4xx or 5xx about this request
        (http.failure, the one rule) is the server refusing it (Refused, an outcome to judge);
        any other failure, or a reply that is not a JSON object, is an EngineError naming the
        engine, URL and reason."""
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
            with self._budget_lock:
                if wait > MAX_WAIT or wait > self._budget:
                    self._budget = 0.0
                    break
                self._budget -= wait
            time.sleep(wait)
        # the one place what a server sent a secret to says comes in: every value it holds is
        # redacted before anything quotes, escapes or keeps it (generator/redaction.py)
        raw, headers = self._redacted(raw), {k: self.connection.redact(v) for k, v in headers.items()}
        text = raw.decode("utf-8", errors="replace")
        if status == 429:
            raise EngineError(f"{where}: HTTP 429: still rate-limited after {WAIT_BUDGET:g} s of waiting in this "
                              f"run (or a Retry-After over {MAX_WAIT:g} s): {self.quote(text, 200)}")
        if 300 <= status < 400:
            target = self.quote(headers.get("location", "nowhere said"), 200)
            raise EngineError(f"{where}: HTTP {status}: redirects to {target} (not followed: give that "
                              "URL with --url)")
        error = http.failure(status, where, self.quote(text)) if status >= 400 else None
        if error is not None:
            raise error
        try:
            return load_json(raw, f"{where}: reply", error=EngineError)
        except EngineError as error:  # say why: cut short, nested too deep, not JSON at all
            why = str(error).removeprefix(f"{where}: reply").lstrip(": ")
            if why.startswith("not valid JSON"):
                raise EngineError(f"{where}: reply is not JSON: {self.quote(text, 200)}") from None
            raise EngineError(f"{where}: reply: {self.quote(why, 120)}") from None


    def _redacted(self, raw: bytes) -> bytes:
        """The reply with every secret taken out of its values: a JSON reply's strings as decoded
        (an escape in front of a key cannot hide it), any other reply as text."""
        if not self.connection.secrets and not redaction.secrets():
            return raw
        text = raw.decode("utf-8", errors="replace")
        try:
            value = json.loads(text)
            cleaned_value = redaction.scrub(value, tuple(self.connection.secrets))
        except (ValueError, RecursionError):  # not JSON, or nested past what Python walks
            cleaned = self.connection.redact(text)
            return raw if cleaned == text else cleaned.encode("utf-8")
        return raw if cleaned_value == value else json.dumps(cleaned_value, ensure_ascii=False).encode("utf-8")


def _retry_after(headers: dict[str, str], attempt: int) -> float:
    """Seconds to wait before retrying a 429: the server's Retry-After, else 1, 2, 4 ... s."""
    try:
        return max(0.0, float(headers.get("retry-after", "")))
    except ValueError:
        return float(2 ** attempt)



def integer(where: str, field: str, value: Any) -> int:
    """A token count exactly as sent: a bool, float, string or negative number is an error."""
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:20]}... ({len(repr(value))} characters)"
        raise EngineError(f"{where}: {field} is {shown} ({type(value).__name__}), not a token count")
    return value


MAX_COUNT = 2**31 - 1  # a prompt's length in tokens; a larger number from a server is not one


def only_model(where: str, names: list[str], model: str) -> str:
    """The one model a server lists, for a golden model given no --served-model."""
    if len(names) == 1:
        return names[0]
    listed = ", ".join(printable(http.shorten(name, 60)) for name in names[:8]) + (" ..." if len(names) > 8 else "")
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
