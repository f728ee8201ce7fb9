"""What a client changed between two requests of a conversation, and what it should do instead.

A prefix break (prefix.py) is either the template's doing (it renders an earlier turn
differently once later turns follow) or the client's: a reordered tool list, changed template
kwargs, a tool call's arguments sent back retyped, reasoning dropped, an earlier message edited.
`diagnose` compares the two request bodies and names the first such change.
"""

from __future__ import annotations

from typing import Any

from generator.engines import Request


def diagnose(earlier: Request, later: Request) -> str:
    """What the client changed between two requests, and what it should do instead. When the
    later request repeats the earlier one's body and messages unchanged, the template itself
    renders an earlier turn differently once more turns follow."""
    before, after = earlier.get("tools") or [], later.get("tools") or []
    if before != after:
        if _names(before) != _names(after) and sorted(_names(before)) == sorted(_names(after)):
            return ("the tool list was reordered between requests; send the tools in one fixed order "
                    "on every request (sorted by name, or the order first sent)")
        return ("the tool list changed between requests; every change to it moves the system turn, "
                "so keep the list fixed for the whole conversation")
    if (earlier.get("chat_template_kwargs") or {}) != (later.get("chat_template_kwargs") or {}):
        return "chat_template_kwargs changed between requests; keep them fixed for a conversation"
    old_messages, new_messages = earlier["messages"], later["messages"]
    for index, (old, new) in enumerate(zip(old_messages, new_messages)):
        if old == new:
            continue
        calls_old, calls_new = old.get("tool_calls") or [], new.get("tool_calls") or []
        for a, b in zip(calls_old, calls_new):
            args_a = (a.get("function") or {}).get("arguments")
            args_b = (b.get("function") or {}).get("arguments")
            if type(args_a) is not type(args_b):
                kinds = f"{_kind(args_a)} in one request, {_kind(args_b)} in the next"
                return (f"messages[{index}] tool-call arguments were sent as {kinds}; send the call back "
                        "exactly as the server returned it (the same JSON string) on every request")
        if ("reasoning_content" in old) != ("reasoning_content" in new) or (
                old.get("reasoning_content") != new.get("reasoning_content")):
            return (f"messages[{index}] reasoning_content was kept in one request and dropped in the next; "
                    "send every assistant turn back as it came, reasoning included, and let the template "
                    "decide what to drop")
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        return (f"messages[{index}] changed between requests ({', '.join(changed)}); send earlier turns "
                "back exactly as they were sent")
    if len(new_messages) < len(old_messages):
        return "the later request drops messages the earlier one sent; the whole prefix is recomputed"
    return ("the client repeated the earlier request unchanged: the template renders an earlier turn "
            "differently once later turns follow (by design? declare a prefix tail in models.yaml)")


def _names(tools: list[dict]) -> list[str]:
    return [str((t.get("function") or t).get("name")) for t in tools]


def _kind(value: Any) -> str:
    return {str: "a JSON string", dict: "an object"}.get(type(value), type(value).__name__)
