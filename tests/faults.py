"""A misbehaving HTTP server on 127.0.0.1, for the faults a real engine can show a client.

No real server misbehaves on demand, so this one speaks HTTP/1.1 over a real socket and answers
every POST with one fault: `drip` (headers, then a byte a second), `400` (HTTP 400 to all),
`html` (200 with an HTML page), `nested` (200 with JSON nested 100,000 deep), `close` (reads the
request and closes the connection), `hang` (reads the request, never answers), `ok` (a fixed
JSON reply). GET answers 200 (`{"data": [{"id": "m"}]}`, enough for a health probe and for
vLLM's /v1/models), so the fault is met on the engine's own endpoints. Every connection is
served by its own daemon thread and every loop is bounded; `close()` ends them all.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

FAULTS = ("drip", "400", "html", "nested", "close", "cut", "hang", "ok")
NESTED = b"[" * 100_000 + b"]" * 100_000


class FaultServer:
    def __init__(self, fault: str, reply: bytes = b'{"ok": true}'):
        assert fault in FAULTS, fault
        self.fault = fault
        self.reply = reply
        self.posts = 0
        self.targets: list[str] = []  # each request line's target, as sent (a proxy gets absolute URLs)
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._serve, daemon=True)
        self._accept.start()

    def __enter__(self) -> FaultServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self._accept.join(5)
        self._listener.close()
        for thread in self._threads:
            thread.join(5)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._connection, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _read_request(self, conn: socket.socket, buffer: bytes) -> tuple[str, bytes] | None:
        """One request off the connection: (method, leftover bytes), or None when it closed."""
        while b"\r\n\r\n" not in buffer:
            chunk = self._recv(conn)
            if chunk is None:
                return None
            buffer += chunk
        head, _, rest = buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method = lines[0].split(" ", 1)[0]
        self.targets.append(lines[0].split(" ")[1] if " " in lines[0] else "")
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        while len(rest) < length:
            chunk = self._recv(conn)
            if chunk is None:
                return None
            rest += chunk
        return method, rest[length:]

    def _recv(self, conn: socket.socket) -> bytes | None:
        conn.settimeout(0.2)
        while not self._stop.is_set():
            try:
                chunk = conn.recv(65536)
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return None
            return chunk or None
        return None

    def _connection(self, conn: socket.socket) -> None:
        buffer = b""
        with conn:
            while not self._stop.is_set():
                request = self._read_request(conn, buffer)
                if request is None:
                    return
                method, buffer = request
                if method != "POST":
                    self._send(conn, 200, b'{"data": [{"id": "m"}]}')
                    continue
                self.posts += 1
                if not self._answer(conn):
                    return

    def _answer(self, conn: socket.socket) -> bool:
        """Answer one POST with the fault; False when the connection is done."""
        if self.fault == "ok":
            self._send(conn, 200, self.reply)
        elif self.fault == "400":
            self._send(conn, 400, b'{"error": "refused"}')
        elif self.fault == "html":
            self._send(conn, 200, b"<html><body>502 Bad Gateway</body></html>", "text/html")
        elif self.fault == "nested":
            self._send(conn, 200, NESTED)
        elif self.fault == "close":
            return False
        elif self.fault == "cut":  # a Content-Length the body never reaches, then the socket closes
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
                         b'{"tokens": [1, 2')
            return False
        elif self.fault == "hang":
            self._stop.wait(600)
            return False
        elif self.fault == "drip":
            body = b'{"prompt": "' + b"x" * 600 + b'"}'
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
            for byte in body:
                if self._stop.wait(1.0):
                    return False
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return False
        return True

    @staticmethod
    def _send(conn: socket.socket, status: int, body: bytes, kind: str = "application/json") -> None:
        reason = {200: "OK", 400: "Bad Request"}[status]
        head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        try:
            conn.sendall(head + body)
        except OSError:
            pass


def wait_for(predicate, timeout: float, step: float = 0.05) -> bool:
    """Poll `predicate` until true or `timeout` seconds pass; its last value."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


def processes() -> Iterator[tuple[int, str, int, str]]:
    """(pid, state, parent pid, command line) of each process /proc lists now; one that ends
    while it is read is left out."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        yield int(entry.name), fields[0], int(fields[1]), argv
