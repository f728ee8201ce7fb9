"""A capturing OpenAI-compatible server for the fourth outside batch (bench/outside/bodies4/): it
records every POST /v1/chat/completions body verbatim and answers with a canned ChatCompletion, so a
client library's own code runs its whole loop against it and what it sends is what real clients
send, not what someone wrote down from a test.

The answer: a request that declares tools and carries no assistant turn yet gets an assistant call to
the first tool (or the one `tool_choice` names), its required arguments filled from the tool's schema;
otherwise, if a tool named `final_answer` is declared and not yet called (smolagents' loop ends only
through it), a call to it; otherwise a final text answer (JSON built from the schema when
`response_format` asks for one). So an agent loop sends a second request with the assistant call
and the tool result in its history. `stream: true` is answered as server-sent events.

    python server.py --port 8765 --out /tmp/capture/NAME    # bodies as NAME/001.json, 002.json ...
"""
from __future__ import annotations

import argparse
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def sample(schema: dict, defs: dict, depth: int = 0):
    """A plausible value for a JSON schema (the first enum value, else one per type)."""
    if not isinstance(schema, dict) or depth > 6:
        return "x"
    if "$ref" in schema:
        return sample(defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), defs, depth + 1)
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            options = [s for s in schema[key] if s.get("type") != "null"] or schema[key]
            return sample(options[0], defs, depth + 1)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        props = schema.get("properties", {})
        required = schema.get("required", list(props))   # what a model would fill: the required ones
        return {name: sample(sub, defs, depth + 1) for name, sub in props.items() if name in required}
    if kind == "array":
        return [sample(schema.get("items", {"type": "string"}), defs, depth + 1)]
    return {"integer": 2, "number": 1.5, "boolean": True, "null": None}.get(kind, "Paris")


def arguments(tool: dict) -> str:
    params = (tool.get("function") or {}).get("parameters") or {}
    defs = {**params.get("definitions", {}), **params.get("$defs", {})}
    return json.dumps(sample(params, defs))


def answer(body: dict, counter: int) -> dict:
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("function")]
    messages = body.get("messages") or []
    # a conversation's first request has no assistant turn yet (smolagents writes its calls and
    # observations as assistant and user text, so a tool message is no sign of the second)
    answered = any(isinstance(m, dict) and m.get("role") in ("assistant", "tool") for m in messages)
    called = {c.get("function", {}).get("name") for m in messages if isinstance(m, dict)
              for c in m.get("tool_calls") or []}
    choice = body.get("tool_choice")
    pick = None
    if tools and choice != "none":
        named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
        if not answered:
            pick = next((t for t in tools if t["function"]["name"] == named), tools[0])
        else:
            pick = next((t for t in tools if t["function"]["name"] == "final_answer"
                         and "final_answer" not in called), None)
    if pick is not None:
        name = pick["function"]["name"]
        args = arguments(pick) if name != "final_answer" else json.dumps({"answer": "It is sunny in Paris."})
        message = {"role": "assistant", "content": None,
                   "tool_calls": [{"id": f"call_{counter:04d}", "type": "function",
                                   "function": {"name": name, "arguments": args}}]}
        finish = "tool_calls"
    else:
        content = "It is sunny in Paris."
        fmt = body.get("response_format") or {}
        if fmt.get("type") == "json_schema":
            schema = (fmt.get("json_schema") or {}).get("schema") or {}
            content = json.dumps(sample(schema, {**schema.get("$defs", {}), **schema.get("definitions", {})}))
        elif fmt.get("type") == "json_object":
            content = json.dumps({"answer": "It is sunny in Paris."})
        message = {"role": "assistant", "content": content}
        finish = "stop"
    return {"id": f"chatcmpl-{counter}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "goldens"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def chunks(reply: dict):
    """The same answer as stream chunks: the role, the text or each call, the finish, usage."""
    message, base = reply["choices"][0]["message"], {k: reply[k] for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"
    deltas = [{"role": "assistant", "content": ""}]
    if message.get("tool_calls"):
        deltas += [{"tool_calls": [{"index": i, **call}]} for i, call in enumerate(message["tool_calls"])]
    else:
        deltas.append({"content": message["content"]})
    for delta in deltas:
        yield {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    yield {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": reply["choices"][0]["finish_reason"]}]}
    yield {**base, "choices": [], "usage": reply["usage"]}


class Handler(BaseHTTPRequestHandler):
    out: Path
    count = 0

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:   # /v1/models, which some clients ask first
        self.reply(200, {"object": "list", "data": [{"id": "goldens", "object": "model", "owned_by": "capture"}]})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self.reply(404, {"error": {"message": f"no route {self.path}"}})
            return
        Handler.count += 1
        n = Handler.count
        (self.out / f"{n:03d}.json").write_bytes(raw)
        body = json.loads(raw)
        reply = answer(body, n)
        if body.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for chunk in chunks(reply):
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            return
        self.reply(200, reply)

    def reply(self, code: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    Handler.out = args.out
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
