"""Any server that answers OpenAI's /v1/chat/completions: vLLM, SGLang, llama-server, TGI,
LM Studio, LiteLLM in front of anything, hosted providers.

Each golden's request goes out as a real chat completion of one token at temperature 0, and
the strongest evidence in the reply is read back:

- the prompt's token ids, where the server returns them: vLLM with `return_token_ids` (in the
  top-level `prompt_token_ids`, with `return_prompt_text` giving `prompt_text`), SGLang with
  `return_prompt_token_ids` (in `choices[0].prompt_token_ids`). These are judged token by token
  like every other engine;
- otherwise `usage.prompt_tokens`, returned as a PromptCount and judged as a count.

The extension flags go out with every request; servers that do not know them ignore them. A
server that rejects unknown fields instead (OpenAI's own API answers 400 naming the field) gets
them dropped from then on, and the request is sent again. Likewise tool_choice: left to the
server's default ("auto"), which renders the tools everywhere, except that vLLM refuses "auto"
unless started with --enable-auto-tool-choice; on that refusal "none" is sent from then on
(vLLM still renders the tools with "none"; SGLang would drop them, which is why it is not the
first choice).
"""

from __future__ import annotations

from typing import Any

from generator import http
from generator.config.request import engine_fields
from generator.engines import (
    EngineBase,
    EngineError,
    Ids,
    PromptCount,
    Refused,
    Request,
    strict_ids,
    sent_tools,
)
from generator.engines.remote import Connection, Remote, integer, open_remote

# Which extension asks which server for what (docs/engines.md lists the servers):
ID_FLAGS = {
    "return_token_ids": True,  # vLLM: top-level prompt_token_ids
    "return_prompt_token_ids": True,  # SGLang: choices[i].prompt_token_ids
    "return_prompt_text": True,  # vLLM: prompt_text, the rendered prompt (for the drift report)
}


class OpenAIEngine(EngineBase):
    """A user's OpenAI-compatible server at `url` (with or without the trailing /v1), serving
    the golden model as `served_model`."""

    name = "openai"

    def __init__(self, url: str, served_model: str, connection: Connection | None = None,
                 transport: http.Transport | None = None):
        url = url.rstrip("/")
        self.url = url
        self.path = "/chat/completions" if url.endswith("/v1") else "/v1/chat/completions"
        self.served_model = served_model
        self.remote = Remote(self.name, url, connection or Connection(), transport)
        self.flags = dict(ID_FLAGS)  # emptied once a server rejects them
        self.tool_choice: str | None = None  # "none" once a server refuses its default "auto"

    def __repr__(self) -> str:
        return f"<OpenAIEngine {self.url} {self.served_model}>"

    def close(self) -> None:
        self.remote.close()

    def body(self, request: Request) -> dict[str, Any]:
        """The golden's request as a chat completion of one token. Fields a default would cover
        are left out, so a server that knows no template kwargs still takes a plain request."""
        if not isinstance(request.get("messages"), list):
            raise EngineError(f"{self.remote.where(self.path)}: the request has no messages list")
        body: dict[str, Any] = {"model": self.served_model, "messages": request["messages"]}
        body.update(sent_tools(request))
        if request.get("tools") and self.tool_choice:
            body["tool_choice"] = self.tool_choice
        if request.get("documents"):  # vLLM passes them to the template; most servers ignore them
            body["documents"] = request["documents"]
        if request.get("chat_template_kwargs"):
            body["chat_template_kwargs"] = request["chat_template_kwargs"]
        if not request.get("add_generation_prompt", True):
            body["add_generation_prompt"] = False
        if request.get("continue_final_message"):
            body["continue_final_message"] = True
        body.update(engine_fields(request))  # the request's own tool_choice wins over the fallback
        body.update({"max_tokens": 1, "temperature": 0, "stream": False})
        return body

    def ids(self, request: Request) -> Ids | PromptCount:
        for _ in range(3):  # at most: drop the flags, then set tool_choice
            body, flags = self.body(request), self.flags
            try:
                return self.read(self.remote.post(self.path, {**body, **flags}))
            except Refused as refusal:
                # decided on what was sent: another thread may have learnt the same meanwhile
                if flags and any(flag in str(refusal) for flag in flags):
                    self.flags = {}  # this server validates fields strictly: plain requests from now on
                elif "tools" in body and "tool_choice" not in body and "--enable-auto-tool-choice" in str(refusal):
                    self.tool_choice = "none"
                else:
                    raise
        raise EngineError(f"{self.remote.where(self.path)}: the server refused every form of this request")

    def read(self, reply: dict[str, Any]) -> Ids | PromptCount:
        where = self.remote.where(self.path)
        choices = reply.get("choices")
        first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        ids = reply.get("prompt_token_ids")
        if ids is None:
            ids = first.get("prompt_token_ids")
        if ids is not None:
            prompt = reply.get("prompt_text")
            return Ids(strict_ids(where, ids), prompt=prompt if isinstance(prompt, str) else None)
        usage = reply.get("usage")
        if not isinstance(usage, dict) or "prompt_tokens" not in usage:
            raise EngineError(f"{where}: reply has neither prompt_token_ids nor usage.prompt_tokens: "
                              f"{self.remote.quote(reply, 300)}")
        return PromptCount(integer(where, "usage.prompt_tokens", usage["prompt_tokens"]), where,
                           "usage.prompt_tokens")

    def models(self) -> list[str]:
        """The model ids the server lists (/v1/models), for a golden model given no --served-model."""
        path = "/models" if self.url.endswith("/v1") else "/v1/models"
        reply = self.remote.get(path)
        data = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(data, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in data):
            raise EngineError(f"{self.remote.where(path)}: not a model list: {self.remote.quote(reply, 200)}")
        return [m["id"] for m in data]


def open_engine(context) -> OpenAIEngine:
    """The registry's factory (config/engine_registry.py)."""
    return open_remote(OpenAIEngine, context)
