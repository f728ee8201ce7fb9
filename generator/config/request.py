"""User-supplied chat requests: an OpenAI-style body, checked before any engine sees it."""

from __future__ import annotations

from typing import Any

from generator.errors import GoldensError
from generator.json_reader import load_json

# The roles of OpenAI's chat schema, the legacy `function` (a function's result, as LangChain's
# FunctionMessage and pre-tools clients send it) included: vLLM and llama-server take it and hand
# it to the template, which decides (most drop it: an invariant finding). Another role is a typo.
ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
# Request fields engines act on: kept in request files and golden requests and sent to every
# engine that takes them (llama-server's and vLLM's chat parsers, mistral-common's
# ChatCompletionRequest). The reference renders without them, as apply_chat_template takes none,
# except reasoning_effort, which both servers turn into template kwargs (reference._effort).
ENGINE_FIELDS = ("tool_choice", "parallel_tool_calls", "response_format", "reasoning_effort")
KEYS = {"model", "messages", "tools", "chat_template_kwargs", "documents",
        "add_generation_prompt", "continue_final_message", *ENGINE_FIELDS}


def engine_fields(request: dict[str, Any]) -> dict[str, Any]:
    """The ENGINE_FIELDS a request carries, in ENGINE_FIELDS order (for an engine's body)."""
    return {name: request[name] for name in ENGINE_FIELDS if name in request}
# Names a chat-template kwarg cannot take: the request's own fields, which the template already
# receives from the request, and apply_chat_template's parameters. Either would reach the
# reference as a second value for the same argument (a TypeError recorded as the template's
# outcome) while each engine quietly did something else.
RESERVED_KWARGS = frozenset({
    "messages", "tools", "documents", "add_generation_prompt", "continue_final_message",
    "conversation", "chat_template", "tokenize", "sanitize_control_tokens", "padding", "truncation",
    "max_length", "return_tensors", "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs",
})


def check_kwargs(kwargs: dict[str, Any], where: str) -> None:
    """Chat-template kwargs must not collide with a request field or apply_chat_template's own."""
    for name in kwargs:
        if name in RESERVED_KWARGS:
            raise GoldensError(
                f"{where}.{name}: {name!r} is a request field or apply_chat_template parameter, "
                "not a chat-template kwarg"
            )


def read_body(value: str) -> tuple[bytes, str]:
    """The bytes of a body file named on the command line (`-`: stdin) and the name to show:
    a regular file of bounded size (files.read_bytes), stdin read up to the same bound."""
    import sys

    from generator import files

    if value == "-":
        data = sys.stdin.buffer.read(files.MAX_READ + 1)
        if len(data) > files.MAX_READ:
            raise GoldensError(f"<stdin>: more than the {files.MAX_READ} bytes a file here may hold")
        return data, "<stdin>"
    return files.read_bytes(value), value


def parse_request(text: str | bytes, where: str) -> dict[str, Any]:
    return validate_request(load_json(text, where), where)


def validate_request(body: Any, where: str) -> dict[str, Any]:
    """Check a chat body; unknown top-level keys of a chat body (temperature, ...) are dropped;
    the ENGINE_FIELDS are kept."""
    if not isinstance(body, dict):
        raise GoldensError(f"{where}: expected a JSON object with `messages`")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise GoldensError(f"{where}: `messages` must be a non-empty list")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise GoldensError(f"{where}: messages[{i}]: needs a role ({', '.join(sorted(ROLES))})")
    # null is as good as absent for every optional field (OpenAI's clients and llama.cpp's tests
    # send `"tools": null, "tool_choice": null`): kept as sent, an engine sends what it takes
    if body.get("tools") is not None and not (isinstance(body["tools"], list)
                                              and all(isinstance(t, dict) for t in body["tools"])):
        raise GoldensError(f"{where}: `tools` must be a list of tool objects")
    # any string: none, auto, required, or a bare tool name (TGI's spelling), which servers judge
    if body.get("tool_choice") is not None and not isinstance(body["tool_choice"], (str, dict)):
        raise GoldensError(f"{where}: `tool_choice` must be none, auto, required or a named-tool object")
    if body.get("parallel_tool_calls") is not None and not isinstance(body["parallel_tool_calls"], bool):
        raise GoldensError(f"{where}: `parallel_tool_calls` must be true or false")
    if body.get("response_format") is not None and not isinstance(body["response_format"], dict):
        raise GoldensError(f"{where}: `response_format` must be an object")
    if body.get("reasoning_effort") is not None and not isinstance(body["reasoning_effort"], str):
        raise GoldensError(f"{where}: `reasoning_effort` must be a string (none, low, medium, high, ...)")
    kwargs = body.get("chat_template_kwargs")
    kwargs = {} if kwargs is None else kwargs  # null: no kwargs, as for every other field (vLLM takes it)
    if not isinstance(kwargs, dict):
        raise GoldensError(f"{where}: `chat_template_kwargs` must be an object")
    check_kwargs(kwargs, f"{where}: chat_template_kwargs")
    # the body's own key order (a set's order changes from one process to the next)
    request = {key: value for key, value in body.items() if key in KEYS and key != "model"}
    request.setdefault("add_generation_prompt", True)
    request.setdefault("continue_final_message", False)
    request["chat_template_kwargs"] = dict(kwargs)
    return request


# OpenAI content parts that carry media data (the bare {"type": "image"} placeholder carries none).
MEDIA_PARTS = ("image_url", "input_audio", "video_url")


def media_kind(request: dict[str, Any]) -> str | None:
    """The first media part's kind as prose (`an image`, `audio`, `a video`), None when there is none."""
    for message in request.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in MEDIA_PARTS:
                return "audio" if "audio" in kind else "a video" if "video" in kind else "an image"
    return None


def carries_media(request: dict[str, Any]) -> bool:
    """True when a message holds media data: such a request is judged in the expanded view (the
    ids the model's forward pass gets, placeholders expanded), not the template view."""
    for message in request.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(part, dict) and part.get("type") in MEDIA_PARTS for part in content
        ):
            return True
    return False
