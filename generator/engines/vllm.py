"""vLLM's view of a request: the ids its OpenAI-compatible server would feed the model.

`ids` asks POST /tokenize in its chat form, which renders through the same chat-template path
as /v1/chat/completions but runs no model, so it is cheap enough to call for every case.
`serve` spends one real generated token on /v1/chat/completions and reads back the
prompt_token_ids: what the model was fed, which `goldens check` judges and holds /tokenize to.
"""

from __future__ import annotations

from typing import Any

from generator.engines import EngineError, Ids, Refused, Request, Served, http, strict_ids


class VllmEngine:
    """A running vLLM server at `url` serving `model_name` (the --served-model-name)."""

    name = "vllm"

    def __init__(self, url: str, model_name: str, *, timeout: float = http.TIMEOUT):
        self.url = url.rstrip("/")
        self.model_name = model_name
        self.timeout = timeout

    def close(self) -> None:
        """Nothing to release: connections are http.py's, kept alive per thread."""

    def __enter__(self) -> VllmEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def version(self) -> str:
        """The release the server reports at GET /version."""
        where = self._where("/version")
        value = http.get_json(f"{self.url}/version", where=where, timeout=self.timeout).get("version")
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
        if request.get("documents"):  # sent as a client would: /tokenize's chat form ignores them
            body["documents"] = request["documents"]
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

    stand_in = "/tokenize"

    def serve(self, request: Request, ids: list[int] | None = None) -> Served:
        """The prompt ids /v1/chat/completions actually fed the model (one token generated),
        with the rendered prompt text, which /tokenize cannot return."""
        body = {**self._chat_fields(request), "max_tokens": 1, "temperature": 0.0,
                "return_token_ids": True, "return_prompt_text": True}
        if request.get("tools"):
            # "auto" (the default with tools) needs --enable-auto-tool-choice; "none" still
            # renders the tools unless the server runs --exclude-tools-when-tool-choice-none.
            body["tool_choice"] = "none"
        path = "/v1/chat/completions"
        served = Served(endpoint=path)
        try:
            reply = self._post(path, body)
        except Refused as refusal:
            served.refused = str(refusal)
            return served
        prompt = reply.get("prompt_text")
        if prompt is not None and not isinstance(prompt, str):
            raise EngineError(f"{self._where(path)}: prompt_text is {type(prompt).__name__}")
        served.ids = Ids(self._ids(reply.get("prompt_token_ids"), path), prompt=prompt)
        served.counts[f"{path} prompt_token_ids"] = len(served.ids)
        return served

    def _where(self, path: str) -> str:
        return f"{self.name} at {self.url}{path}"

    def _ids(self, values: Any, path: str) -> list[int]:
        return strict_ids(self._where(path), values)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return http.post_json(f"{self.url}{path}", body, where=self._where(path), timeout=self.timeout)
