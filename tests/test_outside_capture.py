"""The capturing server of the fourth outside batch (bench/outside/capture/server.py): on a real
socket it records each body verbatim and answers as an agent loop needs, a call to the declared
tool first and a final answer once the conversation has an assistant turn."""
import importlib.util
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "bench" / "outside" / "capture" / "server.py"

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "required": ["city", "days"],
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"enum": ["c", "f"]}}}}}


@pytest.fixture
def capture(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(SERVER), "--port", str(port), "--out", str(tmp_path)])
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)

    def post(body: dict) -> tuple[dict, bytes]:
        raw = json.dumps(body, separators=(",", ":")).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=raw,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            return json.loads(reply.read()), raw

    yield post, tmp_path
    proc.terminate()
    proc.wait()


def test_first_request_gets_a_call_with_the_required_arguments_and_is_kept_verbatim(capture):
    post, out = capture
    body = {"model": "m", "messages": [{"role": "user", "content": "weather?"}], "tools": [TOOL]}
    reply, raw = post(body)
    message = reply["choices"][0]["message"]
    assert reply["choices"][0]["finish_reason"] == "tool_calls"
    call = message["tool_calls"][0]
    assert call["function"]["name"] == "get_weather"
    assert set(json.loads(call["function"]["arguments"])) == set(TOOL["function"]["parameters"]["required"])
    assert [p.read_bytes() for p in sorted(out.glob("*.json"))] == [raw]


def test_a_conversation_with_an_assistant_turn_gets_a_final_answer(capture):
    post, out = capture
    first, _ = post({"messages": [{"role": "user", "content": "weather?"}], "tools": [TOOL]})
    call = first["choices"][0]["message"]
    second, _ = post({"messages": [{"role": "user", "content": "weather?"}, call,
                                   {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"], "content": "sunny"}],
                      "tools": [TOOL]})
    assert second["choices"][0]["finish_reason"] == "stop"
    assert second["choices"][0]["message"]["content"]
    assert len(list(out.glob("*.json"))) == 2


def test_sample_fills_a_schema_by_type_enum_and_ref():
    spec = importlib.util.spec_from_file_location("capture_server", SERVER)
    server = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(server)
    schema = {"type": "object", "properties": {"w": {"$ref": "#/$defs/W"}, "n": {"type": ["null", "number"]}},
              "$defs": {"W": {"type": "object", "properties": {"u": {"enum": ["f", "c"]}}}}}
    assert server.sample(schema, schema["$defs"]) == {"w": {"u": "f"}, "n": 1.5}
