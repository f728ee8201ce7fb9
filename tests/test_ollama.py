"""The ollama engine against a stand-in Ollama on 127.0.0.1 (Ollama cannot be installed here).

The stand-in speaks Ollama's /api/chat and /api/tags shapes (api/types.go: ChatRequest, Message,
ChatResponse with prompt_eval_count; errors as {"error": ...}): to the engine in this process
through a HandlerTransport (generator/http.py), and over a real socket to `goldens check --url`. It reads the
request the way Ollama's Go decoder does (a tool function keeps only name, description and
parameters: get_json_schema's `return` key is dropped) and counts the prompt with the reference
tokenizer and template, so its counts are real token counts of what it was sent. Also here:
malformed and hostile replies, the bound on requests in flight, 429 retries, and the API key
kept out of every output and report.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import CONFIG, GOLDENS, ROOT, refusal_count, render_count, source_of

from generator import http, reference
from generator.cli import main
from generator.engines import EngineError, PromptCount, Refused
from generator.engines.ollama.engine import OllamaEngine
from generator.engines.remote import Connection
from generator.goldens import golden_file
from generator.replay.judging.judge import judge, replay

KEY = "sk-goldens-test-9f8e7d6c5b4a"
SERVED = "qwen3:0.6b"


def to_reference(body: dict) -> dict:
    """An Ollama ChatRequest read back into the reference's request, as Ollama's decoder sees it."""
    messages = []
    for message in body["messages"]:
        out = {"role": message["role"], "content": message.get("content", "")}
        if "thinking" in message:
            out["reasoning_content"] = message["thinking"]
        if "tool_calls" in message:
            out["tool_calls"] = [{"type": "function", "function": call["function"]} for call in message["tool_calls"]]
        if "tool_name" in message:
            out["name"] = message["tool_name"]
        messages.append(out)
    tools = [{"type": t.get("type"), "function": {k: v for k, v in t["function"].items()
                                                  if k in ("name", "description", "parameters")}}
             for t in body.get("tools") or []]
    continues = messages[-1]["role"] == "assistant"
    think = body.get("think")  # a bool, or a level that Ollama passes to the template as one
    kwargs = ({} if think is None else {"enable_thinking": think} if isinstance(think, bool)
              else {"enable_thinking": True, "reasoning_effort": think})
    request = {"messages": messages, "add_generation_prompt": not continues, "continue_final_message": continues,
               "chat_template_kwargs": kwargs}
    if tools:
        request["tools"] = tools
    return request


class StandIn:
    """The stand-in Ollama. `reply` overrides the answer: a (status, bytes, headers) tuple, or a
    function of the request body (None for a GET) returning one, or None to answer normally.
    An engine given `transport` reaches it with no socket; with `listen`, it also serves `url`
    on 127.0.0.1 (for `goldens check --url`, which makes its own transport)."""

    def __init__(self, listen: bool = True):
        source = source_of("qwen3")
        self.tokenizer = reference.load_tokenizer(source.tokenizer_dir)
        self.template = source.template
        self.reply = None
        self.delay = 0.0
        self.bodies: list[dict] = []
        self.auth: list[str | None] = []
        self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()
        self.transport = http.HandlerTransport(handler=self.handle)
        self.server = None
        self.url = "http://ollama.invalid:11434"  # what the engine names; nothing listens there
        if listen:
            self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
            self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
            threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()  # shutdown within 0.05 s

    def stop(self):
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def handle(self, exchange: http.Exchange) -> tuple[int, bytes, dict]:
        """One request, from the socket or a HandlerTransport: recorded, then answered."""
        body = exchange.body
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            if body is not None:
                self.auth.append(next((v for k, v in exchange.headers.items() if k.lower() == "authorization"), None))
                self.bodies.append(body)
        try:
            time.sleep(self.delay)
            return self.answer(exchange.method, exchange.path, body)
        finally:
            with self.lock:
                self.in_flight -= 1

    def count(self, body: dict) -> int:
        rendered = reference.render(self.tokenizer, self.template, to_reference(body), CONFIG.date)
        assert rendered.error is None, rendered.error
        return len(rendered.ids)

    def answer(self, method: str, path: str, body: dict | None) -> tuple[int, bytes, dict]:
        override = self.reply(body) if callable(self.reply) else self.reply
        if override is not None:
            return override
        if method == "GET" and path == "/api/tags":
            return 200, json.dumps({"models": [{"name": SERVED, "model": SERVED, "size": 1}]}).encode(), {}
        if method == "GET":
            return 200, b"Ollama is running", {}
        if path != "/api/chat":
            return 404, b"404 page not found", {}
        if body.get("model") != SERVED:
            return 404, json.dumps({"error": f"model '{body.get('model')}' not found"}).encode(), {}
        reply = {"model": SERVED, "created_at": "2026-01-15T12:00:00Z",
                 "message": {"role": "assistant", "content": "4"}, "done": True, "done_reason": "length",
                 "total_duration": 1000, "prompt_eval_count": self.count(body), "prompt_eval_duration": 500,
                 "eval_count": 1, "eval_duration": 100}
        return 200, json.dumps(reply).encode(), {}

    def _handler(self):
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, method):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length)) if length else None
                status, data, headers = stand_in.handle(http.Exchange(
                    method, stand_in.url + self.path, self.path, body, dict(self.headers.items())))
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                self._serve("POST")

            def do_GET(self):
                self._serve("GET")

            def log_message(self, *args):
                pass

        return Handler


@pytest.fixture
def ollama():
    """The stand-in on a socket: for `goldens check --url`."""
    stand_in = StandIn()
    yield stand_in
    stand_in.stop()


@pytest.fixture
def here():
    """The stand-in in this process: the engine's requests reach it through its transport."""
    return StandIn(listen=False)


def engine_on(stand_in: StandIn, connection: Connection | None = None) -> OllamaEngine:
    return OllamaEngine(stand_in.url, SERVED, connection, transport=stand_in.transport)


def golden(case: str) -> golden_file.Golden:
    return golden_file.read(golden_file.golden_path(GOLDENS, case))


def invoke(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def check(url: str, tmp_path: Path, *args, env=None):
    return invoke("check", "--config", ROOT / "models.yaml", "--goldens", GOLDENS, "--engine", "ollama",
                  "--url", f"ollama={url}", "--junit", tmp_path / "out.xml", "--report", tmp_path / "out.md",
                  *args, env=env)


# ------------------------------------------------------------------------------- the engine


def test_the_request_is_ollamas_shape(here):
    item = golden("qwen3/tool-result-json-args--thinking-off")
    engine = engine_on(here)
    count = engine.ids(item.request)
    assert isinstance(count, PromptCount) and count.field == "prompt_eval_count"
    body = here.bodies[-1]
    assert body["stream"] is False and body["truncate"] is False and body["think"] is False
    assert body["options"] == {"num_predict": 1, "temperature": 0}
    call = body["messages"][2]["tool_calls"][0]
    assert call["function"] == {"name": "get_weather", "arguments": {"city": "Paris"}}  # a string no more
    result = body["messages"][3]
    assert result["role"] == "tool" and result["tool_name"] == "get_weather" and "name" not in result
    assert "chat_template_kwargs" not in body


def test_reasoning_effort_is_sent_as_think(here):
    """Ollama's field for both: `none` turns thinking off, a level goes as the level string, and
    an enable_thinking the body's kwargs set wins (qwen3/plain_effort-none then counts as its
    golden, the empty think block included)."""
    engine = engine_on(here)
    item = golden("qwen3/plain_effort-none")
    assert judge(engine, item, GOLDENS).status == "count"
    assert here.bodies[-1]["think"] is False
    assert engine.body({**item.request, "reasoning_effort": "high"})["think"] == "high"
    kept = engine.body({**item.request, "chat_template_kwargs": {"enable_thinking": True}})
    assert kept["think"] is True


def test_counts_are_judged_as_counts_and_say_so(here):
    engine = engine_on(here)
    plain = judge(engine, golden("qwen3/plain"), GOLDENS)
    assert (plain.status, plain.level) == ("count", "count") and plain.ok
    assert "the golden's length" in plain.detail and "not returned" in plain.detail
    tools = judge(engine, golden("qwen3/tools"), GOLDENS)
    assert (tools.status, tools.level) == ("drift", "count")
    assert tools.detail == "count only: prompt_eval_count 168, 9 tokens shorter than the golden's 177"


def test_reading_a_count_as_ids_is_an_engine_error(here):
    count = engine_on(here).ids(golden("qwen3/plain").request)
    with pytest.raises(EngineError, match=r"returns only a prompt token count \(prompt_eval_count 25\), not token ids"):
        list(count)


@pytest.mark.parametrize("change, message", [
    ({"chat_template_kwargs": {"date_string": "15 Jan 2026"}}, "no field for chat_template_kwargs date_string"),
    ({"documents": [{"text": "x"}]}, "no field for documents"),
    ({"messages": [{"role": "user", "content": [{"type": "video"}]}]}, "'video' content part"),
    ({"add_generation_prompt": False}, "always adds the generation prompt"),
])
def test_what_ollama_cannot_express_is_refused_not_dropped(here, change, message):
    request = {**golden("qwen3/plain").request, **change}
    with pytest.raises(Refused, match=message):
        engine_on(here).ids(request)
    assert here.bodies == []


@pytest.mark.parametrize("status, body, message", [
    (200, b"<html>oops</html>", "reply is not JSON: <html>oops</html>"),
    (200, b"[1, 2]", "reply is list, not a JSON object"),
    (200, b'{"done": true}', "reply has no prompt_eval_count"),
    (200, b'{"done": true, "prompt_eval_count": "25"}', "prompt_eval_count is '25' (str), not a token count"),
    (200, b'{"done": true, "prompt_eval_count": true}', "prompt_eval_count is True (bool)"),
    (200, b'{"done": true, "prompt_eval_count": -1}', "prompt_eval_count is -1 (int)"),
    (200, b'{"done": true, "prompt_eval_count": 2.5}', "prompt_eval_count is 2.5 (float)"),
    (200, b'{"error": "an error was encountered while running the model"}', "an error was encountered"),
    (404, b'{"error": "model \'qwen3:0.6b\' not found"}', "HTTP 404: {\"error\": \"model 'qwen3:0.6b' not found\"}"),
    (503, b'{"error": "server busy, please try again"}', "HTTP 503"),
    (200, b"[" * 100_000 + b"]" * 100_000, "reply: nested deeper than 100 levels"),
])
def test_malformed_replies_are_one_line_engine_errors(here, status, body, message):
    here.reply = (status, body, {})
    with pytest.raises(EngineError) as error:
        engine_on(here).ids(golden("qwen3/plain").request)
    assert not isinstance(error.value, Refused)
    text = str(error.value)
    assert text.startswith(f"ollama at {here.url}/api/chat: ") and message in text and "\n" not in text


def test_requests_in_flight_are_bounded(here):
    """--jobs bounds the engine itself: eight replay threads, two requests at a time."""
    here.delay = 0.05
    items = [golden(f"qwen3/{stem}") for stem in ("plain", "no-system", "cjk-emoji", "whitespace") * 3]
    engine = engine_on(here, Connection(jobs=2))
    outcomes = replay(engine, items, GOLDENS, jobs=8)
    assert [o.status for o in outcomes] == ["count"] * len(items)
    assert here.most_in_flight == 2


def test_rate_limits_are_retried_after_the_servers_wait(here):
    limited = [(429, b'{"error": "slow down"}', {"Retry-After": "0"})] * 2
    here.reply = lambda body: limited.pop() if limited else None
    count = engine_on(here).ids(golden("qwen3/plain").request)
    assert count.tokens == 25 and len(here.auth) == 3


def test_a_long_retry_after_is_an_error_not_a_stall(here):
    here.reply = (429, b'{"error": "rate limited"}', {"Retry-After": "3600"})
    started = time.monotonic()
    with pytest.raises(EngineError, match="HTTP 429: .*rate limited"):
        engine_on(here).ids(golden("qwen3/plain").request)
    assert time.monotonic() - started < 5 and len(here.auth) == 1


# --------------------------------------------------------------------------- goldens check


@pytest.mark.slow
def test_check_marks_every_count_verdict_in_every_report(ollama, tmp_path):
    result = check(ollama.url, tmp_path, "--served-model", f"qwen3={SERVED}")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    out = result.stdout
    assert "DRIFT qwen3/tools [ollama]: count only: prompt_eval_count 168, 9 tokens shorter than the golden's 177" in out
    assert "DRIFT qwen3/plain " not in out
    summary = out.splitlines()[-1]
    drift = sum(line.startswith("DRIFT ") for line in out.splitlines())
    cases, both = render_count("qwen3"), refusal_count("qwen3")
    assert summary == (f"{cases} checked: 0 rendered and match, {both} both refuse, 0 known divergence, {drift} drift, "
                       f"0 error, {cases - both - drift} length only (count only, ids not seen)")
    refused = sum(": engine refused: " in line for line in out.splitlines() if line.startswith("DRIFT "))
    assert refused == 4  # the documents shapes (Ollama has no field for them) and the two-assistant bodies
    assert "DRIFT qwen3/documents [ollama]: engine refused: " in out and "no field for documents" in out

    markdown = (tmp_path / "out.md").read_text()
    plain_row = next(line for line in markdown.splitlines() if line.startswith("| qwen3 | plain "))
    assert "length matches (count only)" in plain_row and " ok " not in plain_row
    assert "qwen3/tools · ollama: drift (count only)" in markdown

    xml = (tmp_path / "out.xml").read_text()
    assert f'<property name="count_only" value="{cases - both - refused}" />' in xml  # refused before a count
    assert "qwen3/plain [ollama]: length matches (count only): count only: prompt_eval_count 25" in xml
    assert 'message="drift: count only: prompt_eval_count 168, 9 tokens shorter' in xml


def test_the_served_model_is_the_one_ollama_lists(ollama, tmp_path):
    result = check(ollama.url, tmp_path, "--model", "qwen3")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert {body["model"] for body in ollama.bodies} == {SERVED}


@pytest.mark.slow
def test_malformed_replies_through_check_exit_2_one_line_each(ollama, tmp_path):
    ollama.reply = lambda body: (200, b'{"done": true}', {}) if body else None
    result = check(ollama.url, tmp_path, "--served-model", f"qwen3={SERVED}")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr
    # one stderr line for the one fault, with every case it cost: all but the reference's refusals
    # and the four refused before anything is sent (the two documents ones among them)
    errors = [line for line in result.stderr.splitlines() if line.startswith("goldens: error: ")]
    assert len(errors) == 1, result.stderr
    cases, both, refused = render_count("qwen3"), refusal_count("qwen3"), 4
    cost = cases - both - refused
    assert f"reply has no prompt_eval_count: {{'done': True}} ({cost} cases, from qwen3/" in errors[0]
    assert result.stdout.splitlines()[-1] == (f"{cases} checked: 0 rendered and match, {both} both refuse, "
                                              f"0 known divergence, {refused} drift, {cost} error")
    report = (tmp_path / "out.md").read_text()
    assert "| error " in report and f"| {cost} cases " in report  # one row for the one fault


def test_a_malformed_model_listing_is_one_line_exit_2(ollama, tmp_path):
    ollama.reply = (200, b'{"models": "qwen3"}', {})
    result = check(ollama.url, tmp_path, "--model", "qwen3")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"goldens: error: [ollama] ollama unavailable for qwen3: ollama at {ollama.url}/api/tags: "
        f"not a model list: {{'models': 'qwen3'}} ({render_count('qwen3')} cases, from qwen3/plain)"]


@pytest.mark.slow
def test_the_api_key_is_sent_and_never_shown(ollama, tmp_path):
    """A proxy in front of Ollama that quotes the key it rejects: the key is redacted from
    every error, and appears in no output, report or file goldens wrote."""
    def proxy(body):
        if body is not None and body["messages"][-1]["content"].startswith("What"):
            return 401, json.dumps({"error": f"invalid key in header {ollama.auth[-1]!r}"}).encode(), {}
        return None

    ollama.reply = proxy
    env = {"GOLDENS_TEST_KEY": KEY}
    result = check(ollama.url, tmp_path, "--served-model", f"qwen3={SERVED}", "--api-key-env", "GOLDENS_TEST_KEY",
                   "--header", "X-Team: platform-secret-header", env=env)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert set(ollama.auth) == {f"Bearer {KEY}"}
    assert "HTTP 401: {\"error\": \"invalid key in header 'Bearer [redacted]'\"}" in result.stderr
    written = [p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()]
    for text in [result.stdout, result.stderr, *written]:
        assert KEY not in text and "platform-secret-header" not in text
    assert len(written) == 2


def test_a_key_echoed_at_the_cut_leaves_no_piece_of_it(ollama):
    """Secrets are removed before a reply is shortened for a message, never after."""
    ollama.reply = (500, b"x" * 488 + KEY.encode(), {})  # the 500-character cut falls inside the key
    engine = OllamaEngine(ollama.url, SERVED, Connection(api_key=KEY))
    with pytest.raises(EngineError) as error:
        engine.ids(golden("qwen3/plain").request)
    assert "HTTP 500: " in str(error.value) and KEY[:8] not in str(error.value)


@pytest.mark.parametrize("args, env, message", [
    (["--api-key-env", "GOLDENS_NO_SUCH_VAR"], {}, "--api-key-env GOLDENS_NO_SUCH_VAR: that environment variable is not set or empty"),
    (["--api-key-env", "GOLDENS_TEST_KEY", "--header", "Authorization: Basic x"], {"GOLDENS_TEST_KEY": KEY},
     "give the API key with --api-key-env or an Authorization --header, not both"),
    (["--header", "no colon here"], {}, '--header #1: expected "Name: value" (the rest is not shown: it may '
                                       'hold a credential)'),
    (["--served-model", "nope=x"], {}, f"models.yaml: unknown model 'nope' (known: {', '.join(CONFIG.models)})"),
    (["--served-model", "x"], {}, "--served-model x: without MODEL= it needs exactly one --model"),
    ([], {}, ("nothing to check: no selected model lists the selected engine(s) in models.yaml "
             "(ollama serves any model: name it with --model)")),
])
def test_bad_connection_options_are_one_line(ollama, tmp_path, args, env, message):
    result = check(ollama.url, tmp_path, *args, env=env)
    assert result.exit_code == 2 and result.stderr.splitlines() == [f"goldens: error: {message}"]
    assert KEY not in result.stdout + result.stderr
    assert not (tmp_path / "out.md").exists() and ollama.bodies == []
