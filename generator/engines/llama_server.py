"""llama-server engines: the server's own render, and a client that renders for itself.

`LlamaServerEngine` asks the server for its half of the render: /apply-template runs the
server's request parser and its own Jinja engine on the GGUF's template, and /tokenize with
add_special and parse_special on tokenizes the prompt the way the chat path does. `confirm`
checks that stand-in against the real thing: /completion with the golden ids and
/v1/chat/completions with the messages must both evaluate exactly the golden's tokens.

`ClientCompletionEngine` is a client that renders the prompt itself and posts the string,
tokenized as /completion tokenizes a string (add_special on), which is where a second BOS
comes from.

Both share one keep-alive httpx.Client (thread-safe), so ids() may be called from threads.
Every failure is an EngineError naming the engine, the URL and the reason.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import httpx

from generator.engines import EngineError, Ids, Refused, Request, strict_ids

TIMEOUT = httpx.Timeout(60.0, connect=5.0)

_client: httpx.Client | None = None
_client_lock = threading.Lock()


def shared_client() -> httpx.Client:
    """The one keep-alive client every llama-server engine in this process uses."""
    global _client
    with _client_lock:
        if _client is None or _client.is_closed:
            _client = httpx.Client(timeout=TIMEOUT, limits=httpx.Limits(max_keepalive_connections=8))
        return _client


def _post(engine: str, client: httpx.Client, url: str, body: dict) -> dict:
    """POST JSON, return the JSON object; anything else is an EngineError that says why."""
    try:
        response = client.post(url, json=body)
    except httpx.TimeoutException as error:
        raise EngineError(f"{engine}: POST {url} timed out ({type(error).__name__})") from None
    except httpx.HTTPError as error:
        reason = str(error) or type(error).__name__
        raise EngineError(f"{engine}: POST {url} failed: {reason}") from None
    if response.status_code >= 400:
        # 400 is the server answering that it will not render this request (a template that
        # raises, a content type its parser rejects): an outcome to compare, not an outage.
        # Older builds (b9093) answer a template's own raise_exception ("Jinja Exception: ...")
        # with HTTP 500 instead: the same answer, from an older build.
        refused = response.status_code == 400 or (
            response.status_code == 500 and "Jinja Exception:" in response.text
        )
        error = Refused if refused else EngineError
        raise error(f"{engine}: POST {url} returned HTTP {response.status_code}: {_short(response.text)}")
    try:
        data = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise EngineError(f"{engine}: POST {url} returned malformed JSON: {_short(response.text)}") from None
    if not isinstance(data, dict):
        raise EngineError(f"{engine}: POST {url} returned {type(data).__name__}, expected an object")
    return data


def build_info(engine: str, client: httpx.Client, base: str) -> str:
    """The build the server reports in GET /props (`build_info`, e.g. "b11434-<commit>")."""
    url = f"{base}/props"
    try:
        response = client.get(url)
        info = response.json().get("build_info") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError) as error:
        raise EngineError(f"{engine}: GET {url} failed: {error}") from None
    if not isinstance(info, str) or not info:
        raise EngineError(f"{engine}: GET {url} names no build_info")
    return info


def _short(text: str, limit: int = 500) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _field(engine: str, url: str, data: dict, *path: str) -> Any:
    value: Any = data
    for key in path:
        if not isinstance(value, dict) or key not in value:
            raise EngineError(f"{engine}: {url} reply has no {'.'.join(path)}: {_short(json.dumps(data))}")
        value = value[key]
    return value


def _tokenize(engine: str, client: httpx.Client, base: str, prompt: str) -> Ids:
    """/tokenize as the chat path and /completion tokenize a string: BOS added if the model
    says so, special-token text parsed as special tokens."""
    url = f"{base}/tokenize"
    body = {"content": prompt, "add_special": True, "parse_special": True, "with_pieces": True}
    tokens = _field(engine, url, _post(engine, client, url, body), "tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, dict) and "id" in t for t in tokens):
        raise EngineError(f"{engine}: {url} returned tokens without ids: {_short(json.dumps(tokens))}")
    ids = strict_ids(engine, [t["id"] for t in tokens])
    return Ids(ids, prompt=prompt, pieces=[_piece(t.get("piece")) for t in tokens])


def _piece(piece: Any) -> str:
    """A piece is text, or a list of byte values when it is not valid UTF-8 on its own."""
    if isinstance(piece, str):
        return piece
    if isinstance(piece, list) and all(type(b) is int and 0 <= b < 256 for b in piece):
        return bytes(piece).decode("utf-8", errors="backslashreplace")
    return repr(piece)


def _chat_body(engine: str, url: str, request: Request) -> dict:
    """The request as llama-server's chat parser takes it. tools go in the request field (not
    the template kwargs) so the server's own tool parsing runs, as on a real chat request.
    llama-server refuses add_generation_prompt and continue_final_message both true; so does
    this body, by passing both through."""
    if not isinstance(request.get("messages"), list):
        raise EngineError(f"{engine}: {url}: the request has no messages list")
    body: dict[str, Any] = {"messages": request["messages"]}
    if request.get("tools"):
        body["tools"] = request["tools"]
    if request.get("chat_template_kwargs"):
        body["chat_template_kwargs"] = request["chat_template_kwargs"]
    body["add_generation_prompt"] = bool(request.get("add_generation_prompt", True))
    if request.get("continue_final_message"):
        body["continue_final_message"] = True
    return body


class LlamaServerEngine:
    """llama-server's own render (/apply-template) and tokenizer (/tokenize)."""

    name = "llama-server"

    def __init__(self, url: str, client: httpx.Client | None = None):
        self.url = url.rstrip("/")
        self.client = client or shared_client()

    def __repr__(self) -> str:
        return f"<LlamaServerEngine {self.url}>"

    def version(self) -> str:
        return build_info(self.name, self.client, self.url)

    def prompt(self, request: Request) -> str:
        """The prompt string the server's chat path renders for this request."""
        url = f"{self.url}/apply-template"
        reply = _post(self.name, self.client, url, _chat_body(self.name, url, request))
        prompt = _field(self.name, url, reply, "prompt")
        if not isinstance(prompt, str):
            raise EngineError(f"{self.name}: {url} returned a {type(prompt).__name__} prompt")
        return prompt

    def ids(self, request: Request) -> Ids:
        return _tokenize(self.name, self.client, self.url, self.prompt(request))

    def confirm(self, request: Request, golden_ids: list[int]) -> dict:
        """How many prompt tokens the real endpoints evaluate: /completion given the golden ids
        (a token list gets no BOS added) and /v1/chat/completions given the messages. Both
        must equal len(golden_ids) for the /apply-template + /tokenize stand-in to be trusted;
        `matches` says whether they do. One token is generated; the prompt cache is off so
        the whole prompt is counted."""
        golden = strict_ids(self.name, list(golden_ids))
        url = f"{self.url}/completion"
        body = {"prompt": golden, "n_predict": 1, "cache_prompt": False, "temperature": 0}
        evaluated = _field(self.name, url, _post(self.name, self.client, url, body), "tokens_evaluated")

        chat_url = f"{self.url}/v1/chat/completions"
        chat = {
            **_chat_body(self.name, chat_url, request),
            "max_tokens": 1, "cache_prompt": False, "temperature": 0,
        }
        prompt_tokens = _field(
            self.name, chat_url, _post(self.name, self.client, chat_url, chat), "usage", "prompt_tokens"
        )
        for label, value in (("tokens_evaluated", evaluated), ("usage.prompt_tokens", prompt_tokens)):
            if type(value) is not int:
                raise EngineError(f"{self.name}: {label} is {value!r}, not an int")
        return {
            "golden_tokens": len(golden),
            "completion_tokens_evaluated": evaluated,
            "chat_prompt_tokens": prompt_tokens,
            "matches": evaluated == prompt_tokens == len(golden),
        }


class ClientCompletionEngine:
    """A client that renders the prompt itself (`render(request) -> str`, e.g. Transformers
    with tokenize=False) and posts the string to llama-server's /completion, which tokenizes
    it with add_special on: what /tokenize returns here is what that client's model sees."""

    name = "client-completion"

    def __init__(self, url: str, render: Callable[[Request], str], client: httpx.Client | None = None):
        self.url = url.rstrip("/")
        self.render = render
        self.client = client or shared_client()

    def __repr__(self) -> str:
        return f"<ClientCompletionEngine {self.url}>"

    def version(self) -> str:
        return build_info(self.name, self.client, self.url)

    def ids(self, request: Request) -> Ids:
        try:
            prompt = self.render(request)
        except Exception as error:  # the client's own renderer: any failure is its answer
            raise Refused(f"{self.name}: rendering the prompt failed: {error}") from None
        if not isinstance(prompt, str):
            raise EngineError(f"{self.name}: render returned {type(prompt).__name__}, not a string")
        return _tokenize(self.name, self.client, self.url, prompt)
