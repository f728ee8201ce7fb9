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
them dropped from then on, and the request is sent again.
"""

from __future__ import annotations

from typing import Any

from generator.engines import EngineError, Ids, PromptCount, Refused, Request, strict_ids
from generator.engines.remote import Connection, Remote, integer

# Which extension asks which server for what (README lists the servers):
ID_FLAGS = {
    "return_token_ids": True,  # vLLM: top-level prompt_token_ids
    "return_prompt_token_ids": True,  # SGLang: choices[i].prompt_token_ids
    "return_prompt_text": True,  # vLLM: prompt_text, the rendered prompt (for the drift report)
}


class OpenAIEngine:
    """A user's OpenAI-compatible server at `url` (with or without the trailing /v1), serving
    the golden model as `served_model`."""

    name = "openai"

    def __init__(self, url: str, served_model: str, connection: Connection | None = None):
        url = url.rstrip("/")
        self.url = url
        self.path = "/chat/completions" if url.endswith("/v1") else "/v1/chat/completions"
        self.served_model = served_model
        self.remote = Remote(self.name, url, connection or Connection())
        self.flags = dict(ID_FLAGS)  # emptied once a server rejects them

    def __repr__(self) -> str:
        return f"<OpenAIEngine {self.url} {self.served_model}>"

    def close(self) -> None:
        self.remote.close()

    def body(self, request: Request) -> dict[str, Any]:
        """The golden's request as a chat completion of one token. Fields a default would cover
        are left out, so a server that knows no template kwargs still takes a plain request;
        tool_choice is left to the server's default, which renders the tools everywhere
        ("none" makes SGLang drop them from the prompt)."""
        if not isinstance(request.get("messages"), list):
            raise EngineError(f"{self.remote.where(self.path)}: the request has no messages list")
        body: dict[str, Any] = {"model": self.served_model, "messages": request["messages"]}
        if request.get("tools"):
            body["tools"] = request["tools"]
        if request.get("chat_template_kwargs"):
            body["chat_template_kwargs"] = request["chat_template_kwargs"]
        if not request.get("add_generation_prompt", True):
            body["add_generation_prompt"] = False
        if request.get("continue_final_message"):
            body["continue_final_message"] = True
        body.update({"max_tokens": 1, "temperature": 0, "stream": False})
        return body

    def ids(self, request: Request) -> Ids | PromptCount:
        body = self.body(request)
        try:
            reply = self.remote.post(self.path, {**body, **self.flags})
        except Refused as refusal:
            rejected = [flag for flag in self.flags if flag in str(refusal)]
            if not rejected:
                raise
            self.flags = {}  # this server validates fields strictly: plain requests from now on
            reply = self.remote.post(self.path, body)
        return self.read(reply)

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
                              f"{self.remote.redact(str(reply)[:300])}")
        return PromptCount(integer(where, "usage.prompt_tokens", usage["prompt_tokens"]), where,
                           "usage.prompt_tokens")

    def models(self) -> list[str]:
        """The model ids the server lists (/v1/models), for a golden model given no --served-model."""
        path = "/models" if self.url.endswith("/v1") else "/v1/models"
        reply = self.remote.get(path)
        data = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(data, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in data):
            raise EngineError(f"{self.remote.where(path)}: not a model list: {self.remote.redact(str(reply)[:200])}")
        return [m["id"] for m in data]
