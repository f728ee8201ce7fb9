"""mistral-common: Mistral's own request encoder, the path vLLM takes for Mistral models.

No chat template is involved: vLLM (tokenizer_mode=mistral) hands the request to
`MistralTokenizer.encode_chat_completion`, which lays out [AVAILABLE_TOOLS], [INST], [TOOL_CALLS]
and [TOOL_RESULTS] in code. Comparing it with the reference (the model's Jinja template through
Transformers) shows where the template and Mistral's encoder disagree.

The OpenAI-style request is converted the way vLLM prepares it for mistral-common: a
`reasoning_content` is dropped, a final assistant message with continue_final_message becomes a
prefix, tool-call arguments given as a dict are serialised with json.dumps (what mistral-common's
FunctionCall does), tool functions keep name/description/parameters (vLLM's request model keeps
no more). chat_template_kwargs and add_generation_prompt have no meaning here and are ignored.
What mistral-common cannot express (media parts without media, documents, an unknown role) is a
`Refused` that says which part; so is anything its validator rejects (e.g. a tool call id that
is not 9 alphanumerics on a v3 tokenizer).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from generator.config.request import engine_fields
from generator.engines import EngineBase, EngineContext, EngineError, Ids, Refused, Request
from generator.errors import first_line
from generator.sources.source import Source


@functools.lru_cache(maxsize=None)
def load_tekken(path: str):
    """One MistralTokenizer per tekken file: loading one takes most of a second of CPU, and an
    engine is opened again for each model, run and pool (encoding keeps no state between calls)."""
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    return MistralTokenizer.from_file(path)


class MistralCommonEngine(EngineBase):
    name = "mistral-common"

    def __init__(self, source: Source):
        """Encodes with the tekken file the source's tokenizer was built from, so the reference
        and mistral-common read the same vocabulary."""
        if source.tekken is None:
            raise EngineError(f"{self.name}: {source.model}: its tokenizer is not built from a tekken file "
                              "(use tokenizer: {pack: \"mistral-common:tekken\"})")
        self.source = source
        try:
            self.tokenizer = load_tekken(str(source.tekken))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise EngineError(f"{self.name}: {source.tekken}: cannot load the tekken file ({first_line(error)})") from None

    def version(self) -> str:
        from importlib.metadata import version

        return version("mistral-common")

    def request(self, request: Request):
        """The mistral-common ChatCompletionRequest for an OpenAI-style request (or Refused)."""
        from mistral_common.exceptions import MistralCommonException
        from mistral_common.protocol.instruct.request import ChatCompletionRequest
        from pydantic import ValidationError

        if request.get("documents"):
            raise Refused(f"{self.name}: documents cannot be expressed in a mistral-common request")
        messages = request["messages"]
        prefix = bool(request.get("continue_final_message"))
        if prefix and (not messages or messages[-1].get("role") != "assistant"):
            raise Refused(f"{self.name}: continue_final_message needs a final assistant message")
        try:
            converted = [
                self._message(m, i, prefix=prefix and i == len(messages) - 1) for i, m in enumerate(messages)
            ]
            tools = request.get("tools")  # as sent, [] too: the request model decides what it means
            tools = None if tools is None else [self._tool(t, i) for i, t in enumerate(tools)]
            # tool_choice, parallel_tool_calls, response_format as sent: the request model validates them
            return ChatCompletionRequest(messages=converted, tools=tools, **engine_fields(request))
        except ValidationError as error:
            raise Refused(f"{self.name}: request rejected: {_first_error(error)}") from None
        except MistralCommonException as error:
            raise Refused(f"{self.name}: request rejected: {type(error).__name__}: {error}") from None

    def ids(self, request: Request) -> Ids:
        from mistral_common.exceptions import MistralCommonException

        chat = self.request(request)
        try:
            tokenized = self.tokenizer.encode_chat_completion(chat)
        except MistralCommonException as error:
            raise Refused(f"{self.name}: request rejected: {type(error).__name__}: {error}") from None
        tokens = list(tokenized.tokens)
        return Ids(tokens, prompt=self.decode(tokens), pieces=self.pieces(tokens))

    def decode(self, ids: list[int]) -> str:
        """The prompt as text, control tokens written out (what Tokenized.text, now deprecated, gave)."""
        from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy

        return self.tokenizer.instruct_tokenizer.tokenizer.decode(ids, special_token_policy=SpecialTokenPolicy.KEEP)

    def pieces(self, ids: list[int]) -> list[str]:
        from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy

        inner = self.tokenizer.instruct_tokenizer.tokenizer
        out = []
        for token_id in ids:
            text = inner.decode([token_id], special_token_policy=SpecialTokenPolicy.KEEP)
            out.append(inner.id_to_piece(token_id) if "\ufffd" in text else text)
        return out

    # ------------------------------------------------------------ conversion

    def _message(self, message: dict[str, Any], index: int, prefix: bool):
        from mistral_common.protocol.instruct.messages import (
            AssistantMessage,
            SystemMessage,
            ToolMessage,
            UserMessage,
        )

        role = message.get("role")
        where = f"message {index} ({role})"
        if role in ("system", "developer"):
            return SystemMessage(content=self._text(message.get("content"), where))
        if role == "user":
            return UserMessage(content=self._user_content(message.get("content"), where))
        if role == "assistant":
            # vLLM drops reasoning_content before mistral-common: a v3 request has no place for it.
            content = self._text(message.get("content"), where) if message.get("content") is not None else None
            calls = [self._tool_call(call, f"{where} tool call {k}")
                     for k, call in enumerate(message.get("tool_calls") or [])]
            if calls and not content:
                content = None  # "" beside tool calls is no content, not an empty text
            return AssistantMessage(content=content, tool_calls=calls or None, prefix=prefix)
        if role == "tool":
            return ToolMessage(content=self._text(message.get("content"), where),
                               tool_call_id=message.get("tool_call_id"), name=message.get("name"))
        raise Refused(f"{self.name}: {where}: role {role!r} cannot be expressed in a mistral-common request")

    def _text(self, content: Any, where: str) -> str:
        """Text content: a string, or a list of text parts joined (anything else is refused)."""
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            texts = []
            for part in content:
                if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                    kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                    raise Refused(f"{self.name}: {where}: a {kind!r} part where only text can go")
                texts.append(part["text"])
            return "\n".join(texts)
        raise Refused(f"{self.name}: {where}: content {type(content).__name__} is not text")

    def _user_content(self, content: Any, where: str):
        from mistral_common.protocol.instruct.chunk import ImageURLChunk, TextChunk

        if isinstance(content, str):
            return content
        if not isinstance(content, list):
            raise Refused(f"{self.name}: {where}: content {type(content).__name__} is not text or parts")
        chunks = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                chunks.append(TextChunk(text=part.get("text", "")))
            elif kind in ("image", "image_url"):
                url = part.get("image_url")
                url = url.get("url") if isinstance(url, dict) else url
                if not url:
                    raise Refused(f"{self.name}: {where}: an image part with no image (mistral-common "
                                  "encodes the pixels, a placeholder cannot be tokenized)")
                chunks.append(ImageURLChunk(image_url=url))
            else:
                raise Refused(f"{self.name}: {where}: a {kind!r} part cannot be expressed in a mistral-common request")
        return chunks

    def _tool_call(self, call: dict[str, Any], where: str):
        from mistral_common.protocol.instruct.tool_calls import FunctionCall, ToolCall

        function = call.get("function") or {}
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments)  # mistral-common's FunctionCall does exactly this
        elif not isinstance(arguments, str):
            raise Refused(f"{self.name}: {where}: arguments must be a dict or a JSON string")
        fields: dict[str, Any] = {"function": FunctionCall(name=function.get("name"), arguments=arguments)}
        if call.get("id") is not None:
            fields["id"] = call["id"]
        return ToolCall(**fields)

    def _tool(self, tool: dict[str, Any], index: int):
        from mistral_common.protocol.instruct.tool_calls import Function, Tool

        if tool.get("type", "function") != "function" or not isinstance(tool.get("function"), dict):
            raise Refused(f"{self.name}: tool {index}: only function tools can be expressed")
        function = tool["function"]
        kept = {k: function[k] for k in ("name", "description", "parameters") if k in function}
        kept.setdefault("parameters", {})  # vLLM adds the empty schema mistral-common requires
        return Tool(function=Function(**kept))


def _first_error(error) -> str:
    first = error.errors()[0] if error.errors() else {}
    where = ".".join(str(part) for part in first.get("loc", ()))
    return f"{where}: {first.get('msg', str(error))}" if where else first.get("msg", str(error))


def open_engine(context: EngineContext) -> MistralCommonEngine:
    """The registry's factory (config/engine_registry.py)."""
    return MistralCommonEngine(context.source)
