"""Ollama through its own API: /api/chat with one token to predict, read as a count.

Ollama renders the chat with its own Go template for the model (not the model's Jinja one) and
returns no token ids, so the evidence is `prompt_eval_count`: the prompt's length, cached part
included (cache_n + prompt_n of the runner), compared with the golden's. The OpenAI-style
request is translated the way Ollama's own clients send it: content parts joined into one
string, images as base64 `images`, tool-call arguments as objects, a tool result's `name` as
`tool_name`, `reasoning_content` as `thinking`, `enable_thinking` as `think`, and `reasoning_effort`
as `think` too (`none`: false; a level as the level string, as Ollama's OpenAI layer sends it,
unless enable_thinking is given). What Ollama has
no field for (other template kwargs, documents, other content parts) is refused, as
mistral-common refuses what it cannot express, never silently dropped: a reviewable outcome that
a ledger entry can accept. `truncate: false` makes a prompt longer than the context an error
instead of a quietly shortened one.
"""

from __future__ import annotations

import json
from typing import Any

from generator import http
from generator.engines import EngineBase, EngineError, PromptCount, Refused, Request, sent_tools
from generator.engines.remote import Connection, Remote, integer, open_remote

PATH = "/api/chat"


class OllamaEngine(EngineBase):
    """A user's Ollama at `url`, serving the golden model as `served_model` ("qwen3:8b")."""

    name = "ollama"

    def __init__(self, url: str, served_model: str, connection: Connection | None = None,
                 transport: http.Transport | None = None):
        self.url = url.rstrip("/")
        self.served_model = served_model
        self.remote = Remote(self.name, self.url, connection or Connection(), transport)

    def __repr__(self) -> str:
        return f"<OllamaEngine {self.url} {self.served_model}>"

    def close(self) -> None:
        self.remote.close()

    def body(self, request: Request) -> dict[str, Any]:
        where = self.remote.where(PATH)
        if not isinstance(request.get("messages"), list):
            raise EngineError(f"{where}: the request has no messages list")
        body: dict[str, Any] = {
            "model": self.served_model,
            "messages": [_message(where, i, m) for i, m in enumerate(request["messages"])],
            "stream": False,
            "truncate": False,
            "options": {"num_predict": 1, "temperature": 0},
        }
        body.update(sent_tools(request))
        if request.get("documents"):
            raise Refused(f"{where}: Ollama's /api/chat has no field for documents")
        kwargs = dict(request.get("chat_template_kwargs") or {})
        if "enable_thinking" in kwargs:
            body["think"] = bool(kwargs.pop("enable_thinking"))
        elif isinstance(request.get("reasoning_effort"), str):
            effort = request["reasoning_effort"]
            body["think"] = False if effort == "none" else effort
        if kwargs:
            raise Refused(f"{where}: Ollama's /api/chat has no field for chat_template_kwargs "
                              f"{', '.join(sorted(kwargs))} (only enable_thinking, sent as think)")
        last = request["messages"][-1] if request["messages"] else {}
        continues = isinstance(last, dict) and last.get("role") == "assistant"
        if not request.get("add_generation_prompt", True) and not continues:
            raise Refused(f"{where}: Ollama always adds the generation prompt unless the last "
                              f"message is the assistant's, which it continues")
        return body

    def ids(self, request: Request) -> PromptCount:
        where = self.remote.where(PATH)
        reply = self.remote.post(PATH, self.body(request))
        if "error" in reply:
            raise EngineError(f"{where}: {self.remote.quote(reply['error'], 300)}")
        if "prompt_eval_count" not in reply:
            raise EngineError(f"{where}: reply has no prompt_eval_count: {self.remote.quote(reply, 300)}")
        return PromptCount(integer(where, "prompt_eval_count", reply["prompt_eval_count"]), where,
                           "prompt_eval_count")

    def models(self) -> list[str]:
        """The models Ollama has (/api/tags), for a golden model given no --served-model."""
        reply = self.remote.get("/api/tags")
        models = reply.get("models") if isinstance(reply, dict) else None
        if not isinstance(models, list) or not all(isinstance(m, dict) and isinstance(m.get("name"), str) for m in models):
            raise EngineError(f"{self.remote.where('/api/tags')}: not a model list: {self.remote.quote(reply, 200)}")
        return [m["name"] for m in models]


def _message(where: str, index: int, message: Any) -> dict[str, Any]:
    """One OpenAI-style message as Ollama's Message (role, content, thinking, images,
    tool_calls, tool_name, tool_call_id)."""
    if not isinstance(message, dict):
        raise EngineError(f"{where}: messages[{index}] is not an object")
    out: dict[str, Any] = {"role": message.get("role"), "content": ""}
    content = message.get("content")
    if isinstance(content, str):
        out["content"] = content
    elif isinstance(content, list):
        texts, images = [], []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif kind == "image_url" and _data_url(part.get("image_url")):
                images.append(_data_url(part.get("image_url")))
            else:
                raise Refused(f"{where}: messages[{index}] has a {kind!r} content part Ollama's "
                                  f"/api/chat cannot carry (text, and images as data: URLs, only)")
        out["content"] = "".join(texts)
        if images:
            out["images"] = images
    elif content is not None:
        raise EngineError(f"{where}: messages[{index}].content is {type(content).__name__}")
    if isinstance(message.get("reasoning_content"), str):
        out["thinking"] = message["reasoning_content"]
    if message.get("tool_calls"):
        out["tool_calls"] = [_tool_call(where, index, call) for call in message["tool_calls"]]
    if message.get("role") == "tool":
        if isinstance(message.get("name"), str):
            out["tool_name"] = message["name"]
        if isinstance(message.get("tool_call_id"), str):
            out["tool_call_id"] = message["tool_call_id"]
    return out


def _tool_call(where: str, index: int, call: Any) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise EngineError(f"{where}: messages[{index}] has a tool call without a function name")
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            raise Refused(f"{where}: messages[{index}] tool call arguments are not JSON; "
                              f"Ollama takes them as an object") from None
    if not isinstance(arguments, dict):
        raise Refused(f"{where}: messages[{index}] tool call arguments are not an object; Ollama takes an object")
    out: dict[str, Any] = {"function": {"name": function["name"], "arguments": arguments}}
    if isinstance(call.get("id"), str):
        out["id"] = call["id"]
    return out


def _data_url(image: Any) -> str | None:
    """The base64 payload of a data: URL image part, which is what Ollama's `images` holds."""
    url = image.get("url") if isinstance(image, dict) else image
    if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
        return url.split(";base64,", 1)[1]
    return None


def open_engine(context) -> OllamaEngine:
    """The registry's factory (config/engine_registry.py)."""
    return open_remote(OllamaEngine, context)
