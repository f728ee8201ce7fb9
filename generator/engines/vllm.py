"""vLLM's view of a request: the ids its OpenAI-compatible server would feed the model.

`ids` asks POST /tokenize in its chat form, which renders through the same chat-template path
as /v1/chat/completions but runs no model, so it is cheap enough to call for every case.
`confirm` spends one real generated token on /v1/chat/completions and reads back the
prompt_token_ids, proving /tokenize did not take a different path from serving.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from generator.engines import EngineError, Ids, Refused, Request, strict_ids


class VllmEngine:
    """A running vLLM server at `url` serving `model_name` (the --served-model-name)."""

    name = "vllm"

    def __init__(self, url: str, model_name: str, *, timeout: float = 60.0):
        self.url = url.rstrip("/")
        self.model_name = model_name
        # One keep-alive client: each case is one small request, connection setup would dominate.
        self._client = httpx.Client(base_url=self.url, timeout=timeout)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> VllmEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def version(self) -> str:
        """The release the server reports at GET /version."""
        where = self._where("/version")
        try:
            value = self._client.get("/version").json().get("version")
        except (httpx.HTTPError, ValueError, AttributeError) as error:
            raise EngineError(f"{where}: {error}") from None
        if not isinstance(value, str) or not value:
            raise EngineError(f"{where}: names no version")
        return value

    def _chat_fields(self, request: Request) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model_name,
            "messages": request["messages"],
            "chat_template_kwargs": request.get("chat_template_kwargs") or {},
            "add_generation_prompt": request.get("add_generation_prompt", True),
            "continue_final_message": request.get("continue_final_message", False),
        }
        if request.get("tools"):  # an empty tools list can change some templates' output
            body["tools"] = request["tools"]
        return body

    def ids(self, request: Request) -> Ids:
        # add_special_tokens false: the chat template already writes every special token.
        body = {**self._chat_fields(request), "add_special_tokens": False,
                "return_token_strs": True}
        reply = self._post("/tokenize", body)
        tokens = self._ids(reply.get("tokens"), "/tokenize")
        pieces = reply.get("token_strs")
        if pieces is not None and (
            not isinstance(pieces, list) or len(pieces) != len(tokens)
            or not all(isinstance(p, str) for p in pieces)
        ):
            raise EngineError(f"{self._where('/tokenize')}: token_strs does not match tokens")
        return Ids(tokens, pieces=pieces)

    def confirm(self, request: Request) -> Ids:
        """The prompt ids /v1/chat/completions actually used (generates one token), with the
        rendered prompt text, which /tokenize cannot return."""
        body = {**self._chat_fields(request), "max_tokens": 1, "temperature": 0.0,
                "return_token_ids": True, "return_prompt_text": True}
        if request.get("tools"):
            # "auto" (the default with tools) needs --enable-auto-tool-choice; "none" still
            # renders the tools unless the server runs --exclude-tools-when-tool-choice-none.
            body["tool_choice"] = "none"
        path = "/v1/chat/completions"
        reply = self._post(path, body)
        prompt = reply.get("prompt_text")
        if prompt is not None and not isinstance(prompt, str):
            raise EngineError(f"{self._where(path)}: prompt_text is {type(prompt).__name__}")
        return Ids(self._ids(reply.get("prompt_token_ids"), path), prompt=prompt)

    def _where(self, path: str) -> str:
        return f"{self.name} at {self.url}{path}"

    def _ids(self, values: Any, path: str) -> list[int]:
        return strict_ids(self._where(path), values)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        where = self._where(path)
        try:
            response = self._client.post(path, json=body)
        except httpx.TimeoutException:
            raise EngineError(f"{where}: timed out") from None
        except httpx.HTTPError as error:
            raise EngineError(f"{where}: {type(error).__name__}: {error}") from None
        if response.status_code >= 400:
            text = " ".join(response.text.split())[:500]
            # 400 is vLLM answering that it will not render this request (a template that
            # raises, a message shape its request parser rejects): an outcome, not an outage.
            error = Refused if response.status_code == 400 else EngineError
            raise error(f"{where}: HTTP {response.status_code}: {text}")
        try:
            reply = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise EngineError(f"{where}: reply is not JSON: {response.text[:200]!r}") from None
        if not isinstance(reply, dict):
            raise EngineError(f"{where}: reply is {type(reply).__name__}, not a JSON object")
        return reply
