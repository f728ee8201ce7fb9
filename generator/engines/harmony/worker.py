"""gpt-oss requests rendered by openai-harmony the way vLLM's chat path does: run in its venv.

    python worker.py                (TIKTOKEN_ENCODINGS_BASE names o200k_base.tiktoken's folder)

It runs as a script in the openai-harmony venv (standard library + openai_harmony only) and
speaks JSON lines: the first line it writes names its versions ({"openai-harmony": ...}); each
request line {"request": <chat body>, "date": "YYYY-MM-DD"} gets one answer line {"ids",
"pieces", "prompt"} or {"refused": "..."}.

The conversion follows vLLM 0.32.0 line for line where it matters (the serving path a gpt-oss
model type takes): `renderers/online_renderer.py` `_make_request_with_harmony` and
`entrypoints/openai/parser/harmony_utils.py` (`extract_instructions_from_messages`,
`build_harmony_preamble`, `parse_chat_input_to_harmony_message`, `auto_drop_analysis_messages`,
`render_for_completion`), with its request parser's renaming of `reasoning_content` to
`reasoning` (`chat_completion/protocol.py`). vLLM's defaults apply: the system instructions go
to the developer message (VLLM_GPT_OSS_HARMONY_SYSTEM_INSTRUCTIONS off), tools are rendered
(tool_choice "auto"), reasoning effort is the request's top-level `reasoning_effort` (the
template kwargs are not read), and the start date is pinned to the matrix's date (what
VLLM_SYSTEM_START_DATE does; otherwise vLLM writes today's).
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version


class Refusal(Exception):
    """What vLLM answers with HTTP 400 for this request."""


def main() -> None:
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    encoding = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    out = sys.stdout
    out.write(json.dumps({"openai-harmony": version("openai-harmony")}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        if "output" in job:  # the output side: {"output": [ids], "chunks": [sizes] | null}
            out.write(json.dumps(parse(encoding, job["output"], job.get("chunks")), ensure_ascii=False) + "\n")
            out.flush()
            continue
        try:
            ids = render(encoding, job["request"], job["date"])
            answer = {"ids": ids, "prompt": encoding.decode_utf8(ids),
                      "pieces": [encoding.decode([token]) for token in ids]}
        except Refusal as error:
            answer = {"refused": str(error)}
        except Exception as error:  # noqa: BLE001 - harmony raising on a request is its answer
            answer = {"refused": f"{type(error).__name__}: {error}"}
        out.write(json.dumps(answer, ensure_ascii=False) + "\n")
        out.flush()


REASONING_EFFORTS = ("high", "medium", "low")
STOPS = ("<|return|>", "<|call|>")  # the tokens a gpt-oss turn ends on (harmony's stop tokens)


def _kind(channel, recipient) -> str:
    """What an assistant message is to a chat client, by its channel and recipient: a call to a
    function (`functions.NAME`), reasoning (analysis), content (final, or commentary to no one)."""
    if recipient and recipient.startswith("functions."):
        return "tool"
    if channel == "analysis":
        return "reasoning"
    if channel == "final" or (channel == "commentary" and not recipient):
        return "content"
    return "ignore"


def _finish(encoding, output: list, calls: bool) -> str:
    ended = bool(output) and encoding.decode([output[-1]]) in STOPS
    return "tool_calls" if calls else "stop" if ended else "length"


def parse(encoding, output: list, chunks) -> dict:
    """Harmony's own parse of output ids: whole with `parse_messages_from_completion_tokens`, or
    one `StreamableParser.process` per id, a chunk's deltas being what `last_content_delta` gave
    on its channel (a call's name when its recipient first shows)."""
    from openai_harmony import HarmonyError, Role, StreamableParser

    if chunks is None:
        try:
            messages = encoding.parse_messages_from_completion_tokens(output, Role.ASSISTANT)
        except HarmonyError as error:
            return {"refused": f"HarmonyError: {error}"}
        out = {"content": None, "reasoning_content": None, "tool_calls": []}
        for message in messages:
            text = "".join(getattr(part, "text", "") for part in message.content)
            kind = _kind(message.channel, message.recipient)
            if kind == "tool":
                out["tool_calls"].append({"function": {"name": message.recipient.removeprefix("functions."),
                                                       "arguments": text}})
            elif kind in ("reasoning", "content") and text:
                key = "reasoning_content" if kind == "reasoning" else "content"
                out[key] = text if out[key] is None else out[key] + "\n" + text
        return {"message": out, "finish_reason": _finish(encoding, output, bool(out["tool_calls"]))}
    parser = StreamableParser(encoding, role=Role.ASSISTANT)
    steps, at, index, recipient, calls = [], 0, -1, None, False
    for size in chunks:
        deltas = []
        for token in output[at:at + size]:
            try:
                parser.process(token)
            except HarmonyError as error:
                return {"refused": f"HarmonyError: {error}"}
            kind = _kind(parser.current_channel, parser.current_recipient)
            delta = parser.last_content_delta or ""
            if kind == "tool":
                if parser.current_recipient != recipient:
                    index, recipient, calls = index + 1, parser.current_recipient, True
                    deltas.append({"tool_calls": [{"index": index, "function": {
                        "name": recipient.removeprefix("functions."), "arguments": delta}}]})
                elif delta:
                    deltas.append({"tool_calls": [{"index": index, "function": {"arguments": delta}}]})
            elif kind in ("reasoning", "content") and delta:
                deltas.append({"reasoning_content" if kind == "reasoning" else "content": delta})
        at += size
        steps.append(deltas)
    steps[-1].append({"finish_reason": _finish(encoding, output, calls)})
    return {"deltas": steps}


def render(encoding, request: dict, date: str) -> list[int]:
    """_make_request_with_harmony: preamble, then each chat message, then the completion render."""
    from openai_harmony import Conversation, RenderConversationConfig, Role

    # The request model's check_generation_prompt; past it, the harmony path reads neither flag:
    # it always renders for a new assistant message.
    if request.get("continue_final_message") and request.get("add_generation_prompt", True):
        raise Refusal("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
    messages = [_renamed(message) for message in request.get("messages") or []]
    instructions, messages = _instructions(messages)
    effort = request.get("reasoning_effort")
    if effort is not None and effort not in REASONING_EFFORTS:
        raise Refusal(f"reasoning_effort={effort!r} is not supported by Harmony")
    tools = request.get("tools") or None
    rendered = _preamble(instructions, tools, effort, date)
    names = {call.get("id"): (call.get("function") or {}).get("name")
             for message in messages for call in message.get("tool_calls") or []}
    for message in messages:
        rendered.extend(_message(message, names, date))
    rendered = _drop_analysis(rendered)
    return list(encoding.render_conversation_for_completion(
        Conversation.from_messages(rendered), Role.ASSISTANT,
        config=RenderConversationConfig(auto_drop_analysis=False)))


def _renamed(message: dict) -> dict:
    """The request parser's rename: `reasoning_content` becomes `reasoning` unless that is set."""
    message = dict(message)
    reasoning_content = message.pop("reasoning_content", None)
    if reasoning_content is not None and message.get("reasoning") is None:
        message["reasoning"] = reasoning_content
    for call in message.get("tool_calls") or []:
        arguments = (call.get("function") or {}).get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            raise Refusal("tool_calls[].function.arguments: the OpenAI schema wants a string")
    return message


def _text(content) -> str | None:
    """flatten_input_text_content: a string as is, text parts joined with no separator."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = [item if isinstance(item, str) else item.get("text") for item in content
             if isinstance(item, str) or isinstance(item, dict)]
    texts = [text for text in texts if text is not None]
    return "".join(texts) if texts else None


def _instructions(messages: list[dict]) -> tuple[str | None, list[dict]]:
    """extract_instructions_from_messages: a leading system or developer message's text."""
    if messages and messages[0].get("role") in ("system", "developer"):
        return _text(messages[0].get("content")), messages[1:]
    return None, messages


def _system(date: str, effort: str | None):
    from openai_harmony import Message, ReasoningEffort, Role, SystemContent

    content = SystemContent.new()
    if effort is not None:
        content = content.with_reasoning_effort(ReasoningEffort(effort.capitalize()))
    return Message.from_role_and_content(Role.SYSTEM, content.with_conversation_start_date(date))


def _developer(instructions: str | None, tools: list | None):
    from openai_harmony import DeveloperContent, Message, Role, ToolDescription

    content = DeveloperContent.new()
    if instructions is not None:
        content = content.with_instructions(instructions)
    if tools is not None:
        functions = []
        for tool in tools:
            kind = tool.get("type", "function")  # vLLM's ChatCompletionToolsParam defaults it
            if kind in ("web_search_preview", "code_interpreter", "container"):
                continue
            if kind != "function":
                raise Refusal(f"tool type {kind!r} is not supported.")
            function = tool.get("function") or {}
            functions.append(ToolDescription.new(name=function.get("name"),
                                                 description=function.get("description") or "",
                                                 parameters=function.get("parameters")))
        if functions:
            content = content.with_function_tools(functions)
    return Message.from_role_and_content(Role.DEVELOPER, content)


def _preamble(instructions: str | None, tools: list | None, effort: str | None, date: str) -> list:
    """build_harmony_preamble: the system message, and a developer message when there are
    instructions or tools."""
    messages = [_system(date, effort)]
    if instructions or tools:
        messages.append(_developer(instructions, tools))
    return messages


def _message(chat: dict, names: dict, date: str) -> list:
    """parse_chat_input_to_harmony_message."""
    from openai_harmony import Author, Message, Role, TextContent

    role = chat.get("role")
    out = []
    calls = chat.get("tool_calls") or []
    if role == "assistant" and calls:
        content = _text(chat.get("content"))
        if content:
            out.append(Message.from_role_and_content(Role.ASSISTANT, content).with_channel("commentary"))
        if chat.get("reasoning"):
            out.append(Message.from_role_and_content(Role.ASSISTANT, chat["reasoning"]).with_channel("analysis"))
        for call in calls:
            function = call.get("function") or {}
            out.append(Message.from_role_and_content(Role.ASSISTANT, function.get("arguments") or "")
                       .with_channel("commentary").with_recipient(f"functions.{function.get('name', '')}")
                       .with_content_type("json"))
        return out
    if role == "tool":
        name = names.get(chat.get("tool_call_id", ""), "")
        content = _text(chat.get("content")) or ""
        return [Message.from_author_and_content(Author.new(Role.TOOL, f"functions.{name}"), content)
                .with_channel("commentary").with_recipient("assistant")]
    if role == "assistant" and chat.get("reasoning"):
        out.append(Message.from_role_and_content(Role.ASSISTANT, chat["reasoning"]).with_channel("analysis"))
    content = chat.get("content") or ""
    if isinstance(content, str):
        contents = [TextContent(text=content)]
    else:
        contents = [TextContent(text=part.get("text", "")) for part in content]
    if role == "assistant" and contents and contents[0].text:
        out.append(Message.from_role_and_contents(Role.ASSISTANT, contents).with_channel("final"))
    elif role in ("system", "developer"):
        instructions = _text(chat.get("content"))
        if instructions is not None:  # get_system_or_developer_message: a developer message
            out.append(_developer(instructions, None))
    elif role != "assistant":
        try:
            out.append(Message.from_role_and_contents(Role(role), contents))
        except ValueError:
            raise Refusal(f"role {role!r} is not a harmony role") from None
    return out


def _drop_analysis(messages: list) -> list:
    """auto_drop_analysis_messages (0.32.0): every analysis message before the last assistant
    message to the final channel is dropped (harmony's own auto-drop is turned off)."""
    last_final = -1
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].author.role == "assistant" and messages[index].channel == "final":
            last_final = index
            break
    return [message for index, message in enumerate(messages)
            if not (index < last_final and message.channel == "analysis")]


if __name__ == "__main__":
    main()
