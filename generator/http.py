"""The one way goldens talks HTTP: to an engine, JSON in, JSON out, within one total deadline;
to a package index, its pages and files (`fetch`: streamed, redirects followed, file: URLs).

httpx (like most clients) times each socket operation on its own, so its read timeout restarts
on every byte: a server that sends its headers and then a byte a second holds a request forever.
Here a request has one deadline covering connect, send and the whole reply, and every socket
operation may wait only for the time left. A Transport carries those bounds as values: an
engine is given one (the pool's, from its EngineContext), and `goldens check --timeout/
--request-timeout` hands the pool a Transport bounded by the run, so no process global holds
a deadline. Replies are bounded in size and parsed by the
hardened JSON reader (nesting depth, lone surrogates, huge integers), so a misbehaving server
is always an EngineError naming the engine, the URL and the fault; an HTTP 4xx or 5xx about the
request (400, 422, 500, ...; not 401, 404, 429, 503, ...) is `Refused`, the engine's answer that
it will not render this request (`failure`, the one status mapping every engine uses).

Every request goes through one method, `Transport.exchange` (what httpx calls a transport's
handle_request): a subclass that overrides it changes how all of them are answered and keeps
everything above it (status mapping, JSON checks, retries, redaction). `HandlerTransport` is the
one tests use (httpx's MockTransport): a function answers each exchange in this process, so a
test of an engine's request and reply shapes opens no socket and starts no thread. A test about
the socket itself (a slow byte, a cut reply, a reset) keeps a real server.

Connections are kept alive and shared by the threads replay runs requests from, at most
MAX_IDLE idle per server, so a run does not pay a connection per request. HTTP_PROXY,
HTTPS_PROXY and NO_PROXY are honoured as curl and httpx do (http through the proxy in
absolute form, https through a CONNECT tunnel), except for loopback hosts: the servers goldens
manages listen on 127.0.0.1 and no proxy can reach them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import io
import json
import math
import os
import socket
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from generator.json_reader import load_json
from generator.errors import EngineError, Refused, Unreachable

TIMEOUT = 60.0  # seconds for one request, connect to last byte of the reply
MAX_REPLY = 64 * 1024 * 1024
_SHOWN = 300  # characters of a bad reply quoted in an error



@dataclass(frozen=True)
class Transport:
    """How an engine's requests are sent: each within `timeout` seconds (connect to last byte),
    never longer than `cap` seconds, and all ended by `until` (a time.monotonic() value: the
    run's deadline). The connections themselves are this module's, shared."""

    timeout: float = TIMEOUT
    cap: float | None = None
    until: float | None = None

    @classmethod
    def bounded(cls, run: float | None = None, request: float | None = None) -> Transport:
        """A transport for a run of `run` seconds from now whose requests last at most `request`."""
        return cls().bounded_by(run, request)

    def bounded_by(self, run: float | None = None, request: float | None = None) -> Transport:
        """This transport (of whatever kind) for a run of `run` seconds from now whose requests
        last at most `request`."""
        return dataclasses.replace(self, cap=request, until=None if run is None else time.monotonic() + run)

    def with_timeout(self, timeout: float) -> Transport:
        """The same bounds (and the same kind of transport), with another per-request timeout
        (a health probe, a model listing)."""
        return dataclasses.replace(self, timeout=timeout)

    def budget(self) -> float:
        """Seconds the next request may take."""
        budget = self.timeout if self.cap is None else min(self.timeout, self.cap)
        return budget if self.until is None else min(budget, self.until - time.monotonic())

    def request(self, method: str, url: str, body: Any = None, *, where: str) -> tuple[int, bytes]:
        status, _, raw = self.exchange(method, url, body, where=where)
        return status, raw

    def exchange(self, method: str, url: str, body: Any = None, *, where: str,
                 headers: dict[str, str] | None = None, accept: str = "application/json",
                 sink: Callable[[dict[str, str], bytes], None] | None = None) -> tuple[int, dict[str, str], bytes]:
        """One exchange: (status, the reply's headers lower-cased, body). Every request made
        through a Transport comes here (engines, health polls, the package index's pages and
        files); override it to answer them another way. With `sink`, a 2xx body is handed to it
        (with the reply's headers) and not returned."""
        return _exchange(method, url, body, where=where, budget=self.budget(), headers=headers,
                         accept=accept, sink=sink)

    def post_json(self, url: str, body: dict[str, Any], *, where: str) -> dict[str, Any]:
        """POST a JSON body and return the JSON object that comes back. A status `failure` calls
        a refusal raises Refused (the engine declines the request: an outcome to compare); any
        other failure an EngineError."""
        status, raw = self.request("POST", url, body, where=where)
        return _reply(status, raw, where)

    def get_json(self, url: str, *, where: str) -> dict[str, Any]:
        status, raw = self.request("GET", url, where=where)
        return _reply(status, raw, where)


DEFAULT = Transport()


@dataclass(frozen=True)
class Exchange:
    """A request as a HandlerTransport's handler sees it: `body` is the JSON value sent (None
    for none), `headers` what the caller added (auth), `path` the URL's path and query."""

    method: str
    url: str
    path: str
    body: Any
    headers: dict[str, str]


Reply = tuple  # (status, body) or (status, body, headers); body: bytes, or a JSON value to encode


@dataclass(frozen=True)
class HandlerTransport(Transport):
    """A Transport whose exchanges `handler` answers in this process (httpx's MockTransport):
    handler(Exchange) -> (status, body[, headers]). The request body goes through the same JSON
    encoding as on the wire and the reply through the same size bound, so what an engine does
    with a reply is what it does over a socket. A handler that raises TimeoutError is a timeout,
    ConnectionError a failed connection, as a socket would report them."""

    handler: Callable[[Exchange], Reply] | None = None

    def exchange(self, method: str, url: str, body: Any = None, *, where: str,
                 headers: dict[str, str] | None = None, accept: str = "application/json",
                 sink: Callable[[dict[str, str], bytes], None] | None = None) -> tuple[int, dict[str, str], bytes]:
        assert self.handler is not None, "HandlerTransport needs a handler"
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EngineError(f"{where}: {url!r} is not an http(s) URL")
        sent = None if body is None else json.loads(json.dumps(body, ensure_ascii=False))  # as encoded
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            reply = self.handler(Exchange(method, url, path, sent, dict(headers or {})))
        except TimeoutError:
            raise Unreachable(f"{where}: timed out: no complete reply within {max(self.budget(), 0):g}s") from None
        except ConnectionError as error:
            raise Unreachable(f"{where}: connection failed ({error.strerror or error or type(error).__name__})") from None
        status, raw, replied = (*reply, {}) if len(reply) == 2 else reply
        if not isinstance(raw, bytes):
            raw = json.dumps(raw, ensure_ascii=False).encode("utf-8")
        replied = {str(k).lower(): str(v) for k, v in replied.items()}
        if sink is not None and 200 <= status < 300:  # streamed: no size bound, nothing kept
            sink(replied, raw)
            return status, replied, b""
        if len(raw) > MAX_REPLY:
            raise EngineError(f"{where}: reply larger than {MAX_REPLY // 2**20} MB")
        return status, replied, raw


_idle: dict[tuple, list[http.client.HTTPConnection]] = {}  # route -> idle connections
_busy: set[http.client.HTTPConnection] = set()
_lock = threading.Lock()
_cancels = 0  # how many times cancel_all ran; a request cut by it is never retried
MAX_IDLE = 8  # kept-alive connections per server (llama-server holds a worker per connection)


def cancel_all() -> None:
    """Cut every request in flight in this process, so threads blocked on a slow engine return
    at once (an interrupted run must not wait out their deadlines before it can exit)."""
    global _cancels
    with _lock:
        _cancels += 1
        busy = list(_busy)
    for connection in busy:
        with contextlib.suppress(OSError, AttributeError):
            connection.sock.sock.shutdown(socket.SHUT_RDWR)


LOOPBACK = ("localhost", "127.0.0.1", "::1")


def proxy_for(scheme: str, host: str) -> tuple[str, int] | None:
    """The (host, port) of the proxy the environment names for this URL, or None: direct."""
    if host in LOOPBACK or host.startswith("127.") or urllib.request.proxy_bypass(host):
        return None
    proxy = urllib.request.getproxies().get(scheme)
    if not proxy:
        return None
    parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if not parts.hostname:
        return None
    return parts.hostname, parts.port or 80


def _take(route: tuple, fresh: bool = False) -> http.client.HTTPConnection:
    """A kept-alive connection on the route (scheme, host, port, proxy) if one is idle (unless
    `fresh`), else a new one (not yet connected). A fresh one also drops the idle ones: the
    server closed one of them, so it has likely closed them all."""
    scheme, host, port, proxy = route
    with _lock:
        idle = _idle.get(route)
        if fresh and idle:
            stale, idle[:] = list(idle), []
            for old in stale:
                old.close()
        connection = idle.pop() if idle else None
        if connection is None:
            kind = _HTTPSConnection if scheme == "https" else _HTTPConnection
            if proxy is None:
                connection = kind(host, port)
            elif scheme == "https":  # a CONNECT tunnel through the proxy, then TLS to the host
                connection = kind(*proxy)
                connection.set_tunnel(host, port)
            else:  # the proxy is asked for the absolute URL
                connection = _HTTPConnection(*proxy)
        _busy.add(connection)
    return connection


def _give_back(route: tuple, connection: http.client.HTTPConnection, keep: bool) -> None:
    with _lock:
        _busy.discard(connection)
        idle = _idle.setdefault(route, [])
        if keep and connection.sock is not None and len(idle) < MAX_IDLE:
            idle.append(connection)
            return
    connection.close()


class _Deadline:
    """The socket of one connection, seen through the deadline of the request using it: every
    send and every receive first sets the socket's timeout to the time left.

    Like socket.makefile, a reader keeps the socket open: http.client closes the connection as
    soon as it sees a reply that ends the connection (HTTP/1.0, `Connection: close`) and reads
    the body afterwards, so the socket is closed only once its last reader is."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.deadline = math.inf
        self.readers = 0
        self.closing = False

    def arm(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        self.sock.settimeout(left)

    def sendall(self, data) -> None:
        self.arm()
        self.sock.sendall(data)

    def makefile(self, mode: str, *args, **kwargs) -> io.BufferedReader:
        self.readers += 1
        return io.BufferedReader(_Reader(self))

    def close(self) -> None:
        self.closing = True
        if self.readers == 0:
            self.sock.close()

    def reader_closed(self) -> None:
        self.readers -= 1
        if self.closing and self.readers == 0:
            self.sock.close()


class _Reader(io.RawIOBase):
    def __init__(self, owner: _Deadline):
        self.owner = owner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self.owner.arm()
        return self.owner.sock.recv_into(buffer)

    def close(self) -> None:
        if not self.closed:
            self.owner.reader_closed()
        super().close()


class _Armed:
    """Mixin: after connecting (and after TLS, for https) the socket sits behind a _Deadline."""

    sock: Any
    timeout: float | None
    _deadline = math.inf

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        self.sock = _Deadline(self.sock)
        self.sock.deadline = self._deadline

    def set_deadline(self, deadline: float) -> None:
        self._deadline = deadline
        self.timeout = max(0.001, deadline - time.monotonic())  # bounds connect and TLS handshake
        if isinstance(self.sock, _Deadline):
            self.sock.deadline = deadline


class _HTTPConnection(_Armed, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_Armed, http.client.HTTPSConnection):
    pass


def request(method: str, url: str, body: Any = None, *, where: str,
            timeout: float = TIMEOUT) -> tuple[int, bytes]:
    """One HTTP exchange within `timeout` seconds, bounded by nothing else: (status, body)."""
    return DEFAULT.with_timeout(timeout).request(method, url, body, where=where)


def _exchange(method: str, url: str, body: Any = None, *, where: str, budget: float,
              headers: dict[str, str] | None = None, accept: str = "application/json",
              sink: Callable[[dict[str, str], bytes], None] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One HTTP exchange that must end within `budget` seconds, with extra request `headers`
    (auth: never put in a message): (status, the reply's headers lower-cased, body). With
    `sink`, a 2xx reply's body is handed to it chunk by chunk (with the reply's headers), not
    kept, and has no size bound. Any transport failure is an EngineError that starts with
    `where`."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EngineError(f"{where}: {url!r} is not an http(s) URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    route = (parts.scheme, parts.hostname, port, proxy_for(parts.scheme, parts.hostname))
    if route[3] is not None and parts.scheme == "http":
        path = urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
    headers = {**(headers or {}), "Accept": accept}
    if data is not None:
        headers["Content-Type"] = "application/json"
    deadline = time.monotonic() + budget
    cancels = _cancels
    for attempt in (1, 2):
        connection = _take(route, fresh=attempt > 1)
        reused = connection.sock is not None
        received, started, keep = 0, False, False
        try:
            if budget <= 0:
                raise TimeoutError("the run's deadline passed")
            connection.set_deadline(deadline)
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            started = True
            replied = {k.lower(): v for k, v in response.getheaders()}
            streamed = sink is not None and 200 <= response.status < 300
            chunks = []
            while True:
                chunk = response.read(1 << 20 if streamed else 65536)
                if not chunk:
                    break
                received += len(chunk)
                if streamed:
                    sink(replied, chunk)
                    continue
                if received > MAX_REPLY:
                    raise EngineError(f"{where}: reply larger than {MAX_REPLY // 2**20} MB")
                chunks.append(chunk)
            expected = replied.get("content-length", "")
            if expected.isdigit() and received < int(expected) and method != "HEAD":
                # http.client ends a read at a closed socket without complaint: a body short of
                # its Content-Length would otherwise be parsed, and called "not JSON"
                raise http.client.IncompleteRead(b"".join(chunks), int(expected) - received)
            keep = not response.will_close
            return response.status, replied, b"".join(chunks)
        except (TimeoutError, socket.timeout):
            begun = " (a reply had started)" if started else ""
            raise Unreachable(f"{where}: timed out: no complete reply within {max(budget, 0):g}s{begun}") from None
        except (http.client.RemoteDisconnected, OSError) as error:
            if reused and attempt == 1 and not started and cancels == _cancels:
                continue  # a kept-alive connection the server had already closed: retry once, fresh
            if isinstance(error, http.client.RemoteDisconnected):
                raise Unreachable(f"{where}: the server closed the connection without a reply") from None
            if isinstance(error, (ConnectionResetError, BrokenPipeError)):
                raise Unreachable(f"{where}: connection lost ({type(error).__name__})") from None
            reason = error.strerror or str(error) or type(error).__name__
            raise Unreachable(f"{where}: connection failed ({reason})") from None
        except http.client.IncompleteRead as error:
            expected = f" of {len(error.partial) + error.expected}" if isinstance(error.expected, int) else ""
            raise Unreachable(f"{where}: the reply was cut short ({len(error.partial)}{expected} bytes read)") from None
        except http.client.HTTPException as error:
            reason = f"{type(error).__name__}: {shorten(str(error))}"
            raise EngineError(f"{where}: not a valid HTTP reply ({reason})") from None
        finally:
            _give_back(route, connection, keep)
    raise AssertionError("unreachable")


DOWNLOAD_TIMEOUT = 3600.0  # a 100+ MB llama.cpp sdist on a slow CI network
REDIRECTS = (301, 302, 303, 307, 308)
MAX_REDIRECTS = 5


def fetch(url: str, *, where: str, accept: str = "*/*", timeout: float = DOWNLOAD_TIMEOUT,
          sink: Callable[[dict[str, str], bytes], None] | None = None,
          transport: Transport = DEFAULT) -> tuple[int, bytes]:
    """GET what is not an engine's JSON (a package index page, a file of 100+ MB streamed into
    `sink`) the way every request here is made: one deadline, the proxy settings, kept-alive
    connections; redirects followed (at most MAX_REDIRECTS); file: URLs read from disk (pip's
    local indexes and find-links). (status, body: empty when streamed)."""
    deadline = time.monotonic() + timeout  # one for the whole chain of redirects
    for _ in range(MAX_REDIRECTS + 1):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme == "file":
            return _read_file(url, where=where, sink=sink)
        left = transport.with_timeout(max(0.001, deadline - time.monotonic()))
        status, headers, raw = left.exchange("GET", url, where=where, accept=accept, sink=sink)
        if status not in REDIRECTS or not headers.get("location"):
            return status, raw
        url = urllib.parse.urljoin(url, headers["location"])
    raise EngineError(f"{where}: more than {MAX_REDIRECTS} redirects")


def _read_file(url: str, *, where: str, sink: Callable[[dict[str, str], bytes], None] | None) -> tuple[int, bytes]:
    """A file: URL as a reply: 200 and its bytes (streamed into `sink`), 404 when it is missing."""
    path = urllib.request.url2pathname(urllib.parse.urlsplit(url).path)
    try:
        with open(path, "rb") as handle:
            if sink is None:
                raw = handle.read(MAX_REPLY + 1)
                if len(raw) > MAX_REPLY:
                    raise EngineError(f"{where}: reply larger than {MAX_REPLY // 2**20} MB")
                return 200, raw
            headers = {"content-length": str(os.fstat(handle.fileno()).st_size)}
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                sink(headers, chunk)
            return 200, b""
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return 404, b""
    except OSError as error:
        raise Unreachable(f"{where}: cannot read {path} ({error.strerror or error})") from None


def post_json(url: str, body: dict[str, Any], *, where: str, timeout: float = TIMEOUT) -> dict[str, Any]:
    """Transport.post_json within `timeout` seconds, bounded by nothing else."""
    return DEFAULT.with_timeout(timeout).post_json(url, body, where=where)


def get_json(url: str, *, where: str, timeout: float = TIMEOUT) -> dict[str, Any]:
    return DEFAULT.with_timeout(timeout).get_json(url, where=where)


# Statuses that speak of the server or the route, never of one request: a wrong URL or method,
# credentials, a rate limit, a gateway or a server not (yet) serving. Any other 4xx or 5xx is the
# engine's answer to this request (vLLM's 400 naming a template error, llama-server's 500 to a
# tool call it cannot parse): a refusal, judged against the reference like a template's raise.
SERVER_STATUSES = frozenset({401, 403, 404, 405, 407, 408, 429, 502, 503, 504})


def refuses(status: int) -> bool:
    """Whether an HTTP status is the engine's answer to one request (Refused) rather than a
    fault of the server or the route (EngineError): every 4xx and 5xx but SERVER_STATUSES."""
    return 400 <= status < 600 and status not in SERVER_STATUSES


def failure(status: int, where: str, said: str) -> EngineError | None:
    """What a reply's status means, the same for every engine (the one rule): None for 2xx;
    Refused when `refuses(status)`; any other status an EngineError. `said` is the server's
    words, already shortened (and redacted, where the caller holds secrets). An engine that
    refuses every case of a model judged nothing: replay/running/check.py makes that an error."""
    if 200 <= status < 300:
        return None
    return (Refused if refuses(status) else EngineError)(f"{where}: HTTP {status}: {said}")


def _reply(status: int, raw: bytes, where: str) -> dict[str, Any]:
    error = failure(status, where, shorten(raw.decode("utf-8", errors="replace")))
    if error is not None:
        raise error
    text = raw.decode("utf-8", errors="replace")
    if not text.lstrip().startswith(("{", "[")):
        raise EngineError(f"{where}: reply is not JSON: {shorten(text)!r}")
    reply = load_json(raw, f"{where}: reply", error=EngineError)
    if not isinstance(reply, dict):
        raise EngineError(f"{where}: reply is {type(reply).__name__}, not a JSON object")
    return reply


def shorten(text: str, limit: int = _SHOWN) -> str:
    """A server's words for an error message: one line, cut at `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."
