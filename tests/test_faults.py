"""Fault injection: a misbehaving server behind `goldens check --url` is exit 2, within the
deadline, with one line naming the fault; and generator/http.py holds its total deadline.

The server is tests/faults.py: real HTTP over a real socket on 127.0.0.1, one fault per run.
"""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner
from conftest import CONFIG, GOLDENS, ROOT
from faults import FaultServer

from generator import http
from generator.cli import main
from generator.config.cases import model_cases
from generator.engines import EngineError, Refused, Unreachable
from generator.engines.llama_server.engine import LlamaServerEngine
from generator.engines.vllm.engine import VllmEngine

DEADLINE = 3.0
CASES = len(model_cases(CONFIG.models["qwen3"]))  # qwen3's render cases: the faults are on the render path
SLACK = 12.0  # loading the model's tokenizer, resolving its source, writing the reports


def check(server: FaultServer, engine: str, tmp_path, *args):
    report = tmp_path / "out.md"
    started = time.monotonic()
    result = CliRunner().invoke(main, [
        "check", "--config", str(ROOT / "models.yaml"), "--goldens", str(GOLDENS), "--engine", engine,
        "--model", "qwen3", "--url", f"{engine}={server.url}", "--report", str(report), "--axis", "render", *args,
    ])
    return result, time.monotonic() - started, report


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("goldens: error:")]


FAULTS = [
    ("llama-server", "drip", "/apply-template: timed out: no complete reply within 3s (a reply had started)"),
    ("llama-server", "hang", "/apply-template: timed out: no complete reply within 3s"),
    ("llama-server", "close", "/apply-template: the server closed the connection without a reply"),
    ("llama-server", "cut", "/apply-template: the reply was cut short (16 of 100 bytes read)"),
    ("llama-server", "html", "/apply-template: reply is not JSON: '<html><body>502 Bad Gateway</body></html>'"),
    ("llama-server", "nested", "/apply-template: reply: nested deeper than 100 levels"),
    ("llama-server", "400", f"llama-server refused every case of qwen3 ({CASES} of {CASES}), so nothing was judged"),
    ("vllm", "drip", "/tokenize: timed out: no complete reply within 3s (a reply had started)"),
    ("vllm", "close", "/tokenize: the server closed the connection without a reply"),
    ("vllm", "nested", "/tokenize: reply: nested deeper than 100 levels"),
    ("vllm", "400", f"vllm refused every case of qwen3 ({CASES} of {CASES}), so nothing was judged"),
]


@pytest.mark.parametrize("engine, fault, expected", FAULTS, ids=[f"{e}-{f}" for e, f, _ in FAULTS])
@pytest.mark.slow
def test_a_misbehaving_server_is_exit_2_with_one_line_naming_the_fault(engine, fault, expected, tmp_path):
    with FaultServer(fault) as server:
        result, elapsed, report = check(server, engine, tmp_path, "--request-timeout", DEADLINE)
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr, result.exception)
    (line,) = error_lines(result)
    assert expected in line and server.url in line, line
    assert f"[{engine}]" in line and f"({CASES} cases, from qwen3/" in line
    assert elapsed < DEADLINE + SLACK, elapsed
    text = report.read_text(encoding="utf-8")
    assert f"failed ({CASES} error)" in text  # the report is still written, every case an error


@pytest.mark.slow
def test_the_run_has_an_overall_timeout(tmp_path):
    """A drip that each request's own deadline (60 s) would allow still ends the run at --timeout."""
    with FaultServer("drip") as server:
        result, elapsed, report = check(server, "llama-server", tmp_path, "--timeout", 4)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert elapsed < 4 + SLACK, elapsed
    lines = error_lines(result)
    assert any("timed out: no complete reply within" in line for line in lines), lines
    assert report.exists()


def test_an_unreachable_url_is_one_line_before_the_run(tmp_path):
    with FaultServer("ok") as server:
        url = server.url
    result, _, report = check(type("Gone", (), {"url": url})(), "llama-server", tmp_path)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"goldens: error: llama-server: cannot reach {url}: connection failed (Connection refused)"]
    assert not report.exists()


# ------------------------------------------------------------------------- generator/http.py itself

@pytest.mark.slow
def test_a_drip_cannot_outlast_the_total_deadline():
    with FaultServer("drip") as server:
        started = time.monotonic()
        with pytest.raises(Unreachable, match=r"timed out: no complete reply within 1.5s \(a reply had started\)"):
            http.post_json(f"{server.url}/x", {}, where="engine", timeout=1.5)
        assert time.monotonic() - started < 2.5


@pytest.mark.slow
def test_the_run_deadline_caps_every_request():
    """A transport bounded by a 1 s run holds a request asking for 60 s to the run's end."""
    with FaultServer("hang") as server:
        started = time.monotonic()
        transport = http.Transport.bounded(run=1.0).with_timeout(60)
        with pytest.raises(Unreachable, match="timed out"):
            VllmEngine(server.url, "m", transport=transport).ids({"messages": [{"role": "user", "content": "hi"}]})
        assert time.monotonic() - started < 2.0


def test_400_is_a_refusal_and_other_faults_are_engine_errors():
    with FaultServer("400") as server:
        with pytest.raises(Refused, match=r"llama-server at .*/apply-template: HTTP 400: \{\"error\": \"refused\"\}"):
            LlamaServerEngine(server.url).ids({"messages": [{"role": "user", "content": "hi"}]})
    with FaultServer("ok", b'{"tokens": [1, 2], "token_strs": ["a", "b"]}') as server:
        assert VllmEngine(server.url, "m").ids({"messages": [{"role": "user", "content": "hi"}]}) == [1, 2]
    with FaultServer("ok", b'{"tokens": [1, ' + b"9" * 200 + b"]}") as server:
        with pytest.raises(EngineError, match="an integer of 200 digits"):
            VllmEngine(server.url, "m").ids({"messages": [{"role": "user", "content": "hi"}]})
    with FaultServer("ok", b'{"tokens": ["\\ud800"]}') as server:
        with pytest.raises(EngineError, match="lone surrogate"):
            VllmEngine(server.url, "m").ids({"messages": [{"role": "user", "content": "hi"}]})


def test_connections_are_kept_alive_and_reused():
    with FaultServer("ok") as server:
        for _ in range(20):
            assert http.post_json(f"{server.url}/x", {}, where="engine") == {"ok": True}
        assert server.posts == 20
        assert len(server._threads) == 1  # one connection served all twenty


def test_a_proxy_in_the_environment_carries_the_request(monkeypatch):
    """HTTP_PROXY names a real proxy socket (the fault server answering `ok`): a request for a
    host that does not resolve reaches it in absolute form; NO_PROXY for that host, or a
    loopback host, goes direct."""
    with FaultServer("ok") as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.delenv("http_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        assert http.post_json("http://engine.invalid:8000/v1/x?y=1", {}, where="engine") == {"ok": True}
        assert proxy.targets == ["http://engine.invalid:8000/v1/x?y=1"]
        with FaultServer("ok") as direct:  # a loopback server is never proxied
            assert http.post_json(f"{direct.url}/x", {}, where="engine") == {"ok": True}
            assert direct.targets == ["/x"]
        monkeypatch.setenv("NO_PROXY", "engine.invalid")
        with pytest.raises(Unreachable, match="connection failed"):
            http.post_json("http://engine.invalid:8000/v1/x", {}, where="engine", timeout=5)
    assert proxy.targets == ["http://engine.invalid:8000/v1/x?y=1"]


def test_a_4xx_or_5xx_about_the_request_is_a_refusal_and_one_about_the_server_is_an_error():
    """One status mapping for every engine: the remote engines' and generator/http.py's. The
    engine's answer to this request (400, 422, llama-server's 500 to a tool call it cannot
    parse) is a refusal; the route, credentials, rate and a server not serving are errors."""
    for status in (400, 409, 413, 422, 500, 501):
        assert isinstance(http.failure(status, "engine", "said"), Refused), status
    for status in (401, 403, 404, 405, 407, 408, 429, 502, 503, 504, 302):
        error = http.failure(status, "engine", "said")
        assert type(error) is EngineError, status
        assert str(error) == f"engine: HTTP {status}: said"
    assert http.failure(200, "engine", "") is None


def test_a_handler_transport_answers_in_process_with_the_wire_s_rules():
    """http.HandlerTransport (httpx's MockTransport): the handler sees the request as encoded,
    its reply goes through the same checks as a socket's, and a timeout or a refused connection
    it raises is the same one-line EngineError."""
    seen = []

    def handler(exchange: http.Exchange):
        seen.append(exchange)
        if exchange.path == "/slow":
            raise TimeoutError
        if exchange.path == "/down":
            raise ConnectionRefusedError(111, "Connection refused")
        return 200, {"tokens": [1, 2]}, {"X-Served": "here"}

    transport = http.HandlerTransport(handler=handler).with_timeout(2)
    assert isinstance(transport, http.HandlerTransport) and transport.timeout == 2
    assert transport.post_json("http://e.invalid/tokenize?x=1", {"a": ("b",)}, where="e") == {"tokens": [1, 2]}
    assert (seen[0].method, seen[0].path, seen[0].body) == ("POST", "/tokenize?x=1", {"a": ["b"]})
    assert transport.exchange("GET", "http://e.invalid/", where="e")[1] == {"x-served": "here"}
    with pytest.raises(Unreachable, match=r"^e: timed out: no complete reply within 2s$"):
        transport.get_json("http://e.invalid/slow", where="e")
    with pytest.raises(Unreachable, match=r"^e: connection failed \(Connection refused\)$"):
        transport.get_json("http://e.invalid/down", where="e")
    with pytest.raises(EngineError, match="is not an http"):
        transport.get_json("ftp://e.invalid/", where="e")
