"""Every HTTP caller takes the transport it speaks through (httpx's MockTransport): `goldens
check` against a llama-server answered in this process (every chat rendered to one prompt, every
body with tools refused) at a URL no socket could reach; the package index's listing, a redirect
and a streamed download; a server's health polls; the --url probe."""

from __future__ import annotations

import pytest
from conftest import CONFIG, GOLDENS, render_count

from generator import http
from generator.replay.running import check

URL = "http://llama.invalid:8080"  # nothing listens there: a request on a socket would be an error
IDS = [151644, 872, 198]


class Server:
    """llama-server's routes as its engine meets them, each exchange kept."""

    def __init__(self):
        self.seen: list[http.Exchange] = []

    def __call__(self, exchange: http.Exchange):
        self.seen.append(exchange)
        if exchange.path == "/props":
            return 200, {"build_info": "b11434-handler"}
        if exchange.path == "/apply-template":
            if exchange.body.get("tools"):
                return 400, {"error": {"code": 400, "message": "refused", "type": "invalid_request_error"}}
            return 200, {"prompt": "<|im_start|>user"}
        if exchange.path == "/tokenize":
            return 200, {"tokens": [{"id": i, "piece": str(i)} for i in IDS]}
        return 404, {"error": {"code": 404, "message": "File Not Found"}}


def test_check_sends_every_engine_request_through_the_transport_it_is_given():
    server = Server()
    results = check.run(CONFIG, GOLDENS, engines=("llama-server",), models=("qwen3",),
                        urls={"llama-server": URL}, confirm=False,
                        transport=http.HandlerTransport(handler=server), axis="render")
    outcomes = results.outcomes
    assert len(outcomes) >= render_count("qwen3")  # invariant and dispute lines may join them
    assert not [o for o in outcomes if o.status == "error"], [o.detail for o in outcomes if o.status == "error"][:3]
    rendered = [o for o in outcomes if o.engine == "llama-server" and o.divergence is not None]
    assert rendered and all(o.status in ("drift", "known") for o in rendered)
    templates = [e for e in server.seen if e.path == "/apply-template"]
    assert len(templates) == render_count("qwen3") and all(e.url.startswith(URL) for e in server.seen)
    assert {o.version for o in rendered} == {"b11434-handler"}
    refused = {o.case for o in outcomes if o.refused}
    assert refused and len(refused) == sum(1 for e in templates if e.body.get("tools"))


def test_a_transport_that_cannot_connect_is_the_engine_unreachable_not_a_verdict():
    def down(exchange):
        raise ConnectionError("connection refused")

    results = check.run(CONFIG, GOLDENS, engines=("llama-server",), models=("qwen3",),
                        urls={"llama-server": URL}, confirm=False,
                        transport=http.HandlerTransport(handler=down), axis="render")
    judged = [o for o in results.outcomes if o.engine == "llama-server"]
    assert judged and all(o.status == "error" for o in judged)
    assert any("connection failed" in o.detail for o in judged)


@pytest.mark.parametrize("timeout", [None, 30.0])
def test_the_runs_bounds_are_put_on_the_given_transport(timeout):
    given = http.HandlerTransport(handler=Server())
    bounded = given.bounded_by(run=timeout, request=5.0)
    assert isinstance(bounded, http.HandlerTransport) and bounded.handler is given.handler
    assert bounded.cap == 5.0 and (bounded.until is None) == (timeout is None)


# ------------------------------------------------ the package index and the servers' health pages

def test_the_package_index_is_read_and_downloaded_through_the_transport(tmp_path, monkeypatch):
    """A listing (the simple JSON API), a redirect to the file and the file streamed into its
    sink, all answered in this process; the file's sha256 is checked against the listing's.
    (The light tier refuses index look-ups; this one never leaves the process.)"""
    monkeypatch.delenv("GOLDENS_LIGHT", raising=False)
    import hashlib

    from generator.sources import registry

    payload = b"wheel bytes"
    digest = hashlib.sha256(payload).hexdigest()
    index = registry.simple_index()
    seen = []

    def pypi(exchange: http.Exchange):
        seen.append(exchange.path)
        if exchange.url == f"{index}/goldens-seam-probe/":
            return 200, {"meta": {"api-version": "1.1"}, "versions": ["1.0"], "files": [
                {"filename": "goldens_seam_probe-1.0-py3-none-any.whl", "url": "https://files.invalid/old",
                 "hashes": {"sha256": digest}}]}
        if exchange.path == "/old":
            return 302, b"", {"Location": "https://files.invalid/new"}
        if exchange.path == "/new":
            return 200, payload, {"Content-Length": str(len(payload))}
        return 404, b""

    transport = http.HandlerTransport(handler=pypi)
    (file,) = registry.files("goldens-seam-probe", transport)
    path = registry.download(file, tmp_path, transport)
    assert path.read_bytes() == payload and seen[-2:] == ["/old", "/new"]
    with pytest.raises(Exception, match="not on the package index"):
        registry.files("goldens-seam-absent", transport)


def test_a_servers_health_page_is_polled_through_its_transport(monkeypatch):
    """A process whose health page the transport answers 503 and then 200 is healthy at the
    third poll; nothing else is asked. (The process is a sleeping Python, not a server: the
    light tier's refusal of server starts is lifted for it.)"""
    monkeypatch.delenv("GOLDENS_LIGHT", raising=False)
    import sys

    from generator.servers.process import ManagedServer

    answers = iter([503, 503, 200])
    polled = []

    def health(exchange: http.Exchange):
        polled.append(exchange.path)
        return next(answers), b""

    process = ManagedServer([sys.executable, "-c", "import time; time.sleep(30)"], name="sleeper",
                             health_path="/ready", startup_timeout=20.0,
                             transport=http.HandlerTransport(handler=health))
    try:
        process.start()
        assert polled == ["/ready"] * 3
    finally:
        process.stop()


def test_a_url_is_probed_through_the_transport():
    from generator.errors import GoldensError
    from generator.replay.running import remote_options

    remote_options.probe({"llama-server": URL}, 5.0, http.HandlerTransport(handler=Server()))
    down = http.HandlerTransport(handler=lambda exchange: (_ for _ in ()).throw(ConnectionError("refused")))
    with pytest.raises(GoldensError, match="llama-server: cannot reach .*connection failed"):
        remote_options.probe({"llama-server": URL}, 5.0, down)
