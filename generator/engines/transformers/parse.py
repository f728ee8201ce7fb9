"""Transformers' output side: what `transformers serve` sends back for a model's output ids.

`transformers serve` parses with a declarative response template: the tokenizer's own
`response_template`, else the fallback its serving code keeps per model_type
(cli/serving/utils.py `_RESPONSE_TEMPLATE_FALLBACKS`: the qwen2/qwen3/qwen3_5 and gemma4
families). models.yaml names the model_type as `parsers: {transformers: {response: qwen3}}`.
Both paths run here as the server runs them, in this process on the installed Transformers:

- whole: chat_completion.py `_non_streaming` -> utils.py `parse_assistant_message` (the ids
  decoded with special tokens, parsed with the prompt as `prefix`); finish_reason "tool_calls"
  when it found calls, "length" when generation hit its token limit, else "stop";
- streamed: utils.py `DirectStreamer` (Rust `DecodeStream` per id, each decoded piece fed to a
  `ResponseParser`, whose events `response_events_to_chunks` turns into content, reasoning and
  whole tool calls), one `put` per chunk, `end` after the last; chat_completion.py `_streaming`
  numbers the calls and adds the finish chunk.

The server's model is not loaded (no weights): the only thing its code reads of it is
`config.model_type`. Whether generation "hit its token limit" is what the ids say: an output
that does not end in one of the model's end tokens (models.yaml `parse.end`) was cut.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from generator import reference
from generator.engines import EngineError, Refused
from generator.engines import parse as parse_api


class _Step(list):
    """One decode step's new ids, as `model.generate()` hands them to a streamer (`tolist()`)."""

    def tolist(self) -> list[int]:
        return list(self)


def _serving():
    """transformers serve's utils (its chat_completion module needs the `openai` package for its
    wire types: the code it runs around a parse is followed in this module instead)."""
    from transformers.cli.serving import utils

    return None, utils


class TransformersParser:
    """The parse path of `transformers serve` for one model (its tokenizer, template and
    model_type)."""

    def __init__(self, source, date, model_type: str | None, end: tuple[str, ...], until: float | None = None):
        self.source = source
        self.date = date
        self.until = until  # the run's deadline, for the reference's render of the prompt
        self.tokenizer = reference.load_tokenizer(source.tokenizer_dir)
        self.model = SimpleNamespace(config=SimpleNamespace(model_type=model_type or ""))
        self.ends = parse_api.end_ids(source, end)
        self._prompts: dict[str, list[int]] = {}  # every plan of a case asks with the same request

    def template(self):
        _, utils = _serving()
        found = utils.get_response_template(self.tokenizer, self.model)
        if found is None:
            raise Refused(f"transformers: no response template for model_type {self.model.config.model_type!r} "
                          "(transformers serve streams such a model's text unparsed)")
        return found

    def _prompt_ids(self, request: dict[str, Any]) -> list[int]:
        from generator import canonical

        key = canonical.digest(request)
        if key not in self._prompts:
            rendered = reference.render_request(self.source, request, self.date, self.until)
            if rendered.error is not None:
                raise Refused(f"transformers: template refused the request: {rendered.error}")
            self._prompts = {key: rendered.ids}
        return self._prompts[key]

    def parse(self, request: dict[str, Any], output: Sequence[int], chunks: Sequence[int] | None) -> parse_api.Parsed:
        self.template()
        prompt = self._prompt_ids(request)
        tools = request.get("tools") or None
        hit_max = parse_api.generation_finish(output, self.ends) == "length"
        if chunks is None:
            return parse_api.Parsed(message=self._whole(prompt, list(output), tools, hit_max))
        return parse_api.Parsed(deltas=self._stream(prompt, list(output), chunks, tools, hit_max))

    def _whole(self, prompt: list[int], output: list[int], tools, hit_max: bool) -> parse_api.Message:
        _, utils = _serving()
        cleaned = self.tokenizer.decode(output, skip_special_tokens=True)
        try:
            content, reasoning, calls = utils.parse_assistant_message(
                self.tokenizer, self.model, output, input_ids=prompt, cleaned_content=cleaned, tools=tools)
        except (ValueError, RuntimeError, KeyError, TypeError) as error:
            raise Refused(f"transformers: parse_assistant_message raised {type(error).__name__}: {error}") from None
        finish = "tool_calls" if calls else "length" if hit_max else "stop"
        message = {"content": content, "reasoning_content": reasoning,
                   "tool_calls": [{"function": {"name": c.name, "arguments": c.arguments}} for c in calls or []]}
        return parse_api.message_of(message, finish, "transformers")

    def _stream(self, prompt: list[int], output: list[int], chunks: Sequence[int], tools,
                hit_max: bool) -> list[list[parse_api.Delta]]:
        _, utils = _serving()
        loop = asyncio.new_event_loop()
        try:
            queue: asyncio.Queue = asyncio.Queue()
            parser = utils.ResponseParser(self.template(), prefix=self.tokenizer.decode(prompt), tools=tools)
            streamer = utils.DirectStreamer(self.tokenizer._tokenizer, loop, queue, response_parser=parser)
            streamer.put(_Step(prompt))  # generate's first put is the prompt: the streamer skips it
            state = {"index": 0, "calls": False}
            out = []
            for i, step in enumerate(parse_api.split(output, chunks)):
                try:
                    streamer.put(_Step(step))
                    if i == len(chunks) - 1:
                        streamer.end()
                except (ValueError, RuntimeError) as error:
                    raise Refused(f"transformers: the stream's parser raised {type(error).__name__}: {error}") from None
                out.append(self._drain(loop, queue, state, utils))
            out[-1].append({"finish_reason": "tool_calls" if state["calls"] else "length" if hit_max else "stop"})
            return out
        finally:
            loop.close()

    @staticmethod
    def _drain(loop, queue: asyncio.Queue, state: dict, utils) -> list[parse_api.Delta]:
        """What the server's SSE loop sends for the items queued by one step (chat_completion.py
        `_streaming`): a call as one delta with its index, reasoning text, content text."""
        loop.run_until_complete(asyncio.sleep(0))  # run the call_soon_threadsafe puts
        deltas: list[parse_api.Delta] = []
        while not queue.empty():
            item = queue.get_nowait()
            if item is None:
                break
            if isinstance(item, utils.ToolCall):
                state["calls"] = True
                arguments = item.arguments if isinstance(item.arguments, str) else json.dumps(item.arguments)
                deltas.append({"tool_calls": [{"index": state["index"], "name": item.name, "arguments": arguments}]})
                state["index"] += 1
            elif isinstance(item, utils.ReasoningText):
                deltas.append({"reasoning_content": str(item)})
            elif isinstance(item, str):
                deltas.append({"content": item})
            else:
                raise EngineError(f"transformers: the stream queued {type(item).__name__}")
        return deltas


def applies(model) -> str | None:
    """The models `transformers serve` parses: those models.yaml names a response template for."""
    if model.parser("transformers", "response") is None:
        return ("no response template named (models.yaml parsers.transformers.response: the model_type "
                "transformers serve falls back to, e.g. qwen3, gemma4)")
    return None
