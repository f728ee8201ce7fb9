"""User-supplied chat requests: an OpenAI-style body, checked before any engine sees it."""

from __future__ import annotations

import json
from typing import Any

from generator.errors import GoldensError

ROLES = {"system", "developer", "user", "assistant", "tool"}
KEYS = {"model", "messages", "tools", "chat_template_kwargs", "documents",
        "add_generation_prompt", "continue_final_message"}


def load_json(text: str, where: str) -> Any:
    """JSON a user handed us (a request, a conversation, a golden); bad JSON is one line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise GoldensError(f"{where}: not valid JSON (line {error.lineno}: {error.msg})") from None


def parse_request(text: str, where: str) -> dict[str, Any]:
    return validate_request(load_json(text, where), where)


def validate_request(body: Any, where: str) -> dict[str, Any]:
    """Check a chat body; unknown top-level keys of a chat body (temperature, ...) are dropped."""
    if not isinstance(body, dict):
        raise GoldensError(f"{where}: expected a JSON object with `messages`")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise GoldensError(f"{where}: `messages` must be a non-empty list")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise GoldensError(f"{where}: messages[{i}]: needs a role ({', '.join(sorted(ROLES))})")
    if "tools" in body and not (isinstance(body["tools"], list) and all(isinstance(t, dict) for t in body["tools"])):
        raise GoldensError(f"{where}: `tools` must be a list of tool objects")
    kwargs = body.get("chat_template_kwargs", {})
    if not isinstance(kwargs, dict):
        raise GoldensError(f"{where}: `chat_template_kwargs` must be an object")
    request = {key: body[key] for key in KEYS - {"model"} if key in body}
    request.setdefault("add_generation_prompt", True)
    request.setdefault("continue_final_message", False)
    request["chat_template_kwargs"] = dict(kwargs)
    return request


# OpenAI content parts that carry media data (the bare {"type": "image"} placeholder carries none).
MEDIA_PARTS = ("image_url", "input_audio", "video_url")


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
