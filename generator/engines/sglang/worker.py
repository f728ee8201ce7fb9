"""SGLang's output path run on given output ids, in its own light venv (no torch, no server).

    python worker.py

SGLang's server needs CUDA kernels, but the code between the model's output ids and the client's
message is Python: the DetokenizerManager's incremental detokenization, then serving_chat's
reasoning parser and tool-call parser. The parsers themselves (sglang/srt/function_call/,
sglang/srt/parser/reasoning_parser.py) are imported from the installed release and run as they
are; what serving_chat and the detokenizer do around them is copied here from SGLang 0.5.23, each
step naming its source, because those two modules import the whole server (torch, zmq, the
kernels) and cannot be imported here.

It speaks JSON lines. The first line it writes names its versions ({"sglang", "transformers",
"tokenizers"}). Then:

  {"op": "model", "tokenizer_dir", "template", "tool", "reasoning", "model_type", "stop"}
      -> {"model": {...}}: the server state a `--tool-call-parser T --reasoning-parser R` launch
         would have for this model (the tokenizer, the template's reasoning mode, the stop ids)
  {"op": "parse", "request", "output", "chunks", "prompt_tail"}
      -> {"message": <ChatCompletion message>, "finish_reason"} for chunks null, else
         {"chunks": [[{"delta", "finish_reason"}, ...] per chunk]}; or {"refused"} (HTTP 400),
         {"error"} (HTTP 500, or a parser raising where the server would answer an error)

Only SGLang's top-level imports are stubbed (STUBS below): `sglang/__init__.py` and
`sglang/srt/utils/__init__.py` are not run (they import torch and the kernels), and three
modules the parsers import but never call on this path are empty stand-ins.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import re
import sys
import types
import typing

# ---------------------------------------------------------------------------- the stubs
# Modules imported at the top of modules the parser path loads, never called on it:
#   IPython (sglang/utils.py: HTML, display for notebooks), xgrammar (structural tags for
#   constrained decoding; it imports torch), sglang.srt.arg_groups (server-argument overrides
#   that template_detection imports for its auto-detection of launch flags).
STUBS = ("IPython", "xgrammar", "sglang.srt.arg_groups")
# Packages whose __init__ is skipped (their submodules load from their folder as usual).
BARE_PACKAGES = ("sglang", "sglang.srt.utils")


class _Stub(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if self.__name__ == "xgrammar":
            if name == "StructuralTag":  # what protocol.py falls back to without xgrammar
                return typing.Any
            raise AttributeError(name)  # `from xgrammar import get_model_structural_tag` fails
            #                              as it would without xgrammar: the guarded fallback runs
        return type(name, (), {"__init__": lambda self, *a, **k: None})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if any(name == stub or name.startswith(stub + ".") for stub in STUBS):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Stub(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        pass


def install_stubs() -> None:
    root = os.path.dirname(importlib.util.find_spec("sglang").submodule_search_locations[0])
    for name in BARE_PACKAGES:
        package = types.ModuleType(name)
        package.__path__ = [os.path.join(root, *name.split("."))]
        sys.modules[name] = package
    sys.meta_path.insert(0, _StubFinder())


# ---------------------------------------------------------------------------- the model


class Refusal(Exception):
    """What SGLang answers with HTTP 400."""


class ServerError(Exception):
    """What SGLang answers with HTTP 500 (or a parser raising where serving_chat logs and
    answers an error)."""


def load_tokenizer(directory: str):
    """sglang/srt/utils/hf_transformers/tokenizer.py `get_tokenizer` for a local directory with a
    tokenizer.json, tokenizer_mode "auto" and the huggingface backend: AutoTokenizer with
    clean_up_tokenization_spaces=False; a generic TokenizersBackend retried with use_fast=False
    and then as the class tokenizer_config.json declares (`_resolve_tokenizers_backend`); the
    tokenizer.json's own pre-tokenizer and decoder put back when that class rebuilt them
    (`_fix_v5_tokenizer_components`, DeepSeek's LlamaTokenizerFast over a ByteLevel vocabulary);
    SGLang's additional stop tokens attached (hf_transformers/common.py)."""
    import transformers
    from transformers import AutoTokenizer

    kwargs = {"trust_remote_code": False, "tokenizer_revision": None,
              "clean_up_tokenization_spaces": False, "use_fast": True}
    tokenizer = AutoTokenizer.from_pretrained(directory, **kwargs)
    if type(tokenizer).__name__ == "TokenizersBackend":
        kwargs["use_fast"] = False
        tokenizer = AutoTokenizer.from_pretrained(directory, **kwargs)
        if type(tokenizer).__name__ == "TokenizersBackend":
            config_path = os.path.join(directory, "tokenizer_config.json")
            declared = None
            if os.path.isfile(config_path):
                with open(config_path, encoding="utf-8") as f:
                    declared = json.load(f).get("tokenizer_class")
            cls = getattr(transformers, declared, None) if declared not in (
                None, "PreTrainedTokenizer", "PreTrainedTokenizerBase") else None
            if cls is not None:
                try:
                    tokenizer = cls.from_pretrained(directory, **kwargs)
                except (OSError, ValueError, TypeError, ImportError):
                    pass
    backend = getattr(tokenizer, "_tokenizer", None)
    raw_path = os.path.join(directory, "tokenizer.json")
    if backend is not None and os.path.isfile(raw_path):
        from tokenizers import Tokenizer

        raw = Tokenizer.from_file(raw_path)
        raw_pre = type(raw.pre_tokenizer).__name__ if raw.pre_tokenizer else None
        loaded_pre = type(backend.pre_tokenizer).__name__ if backend.pre_tokenizer else None
        if raw_pre and loaded_pre and raw_pre != loaded_pre:
            backend.pre_tokenizer = raw.pre_tokenizer
            backend.decoder = raw.decoder
    added = tokenizer.get_added_vocab()
    stop = {added[text] for text in ("<|eom_id|>", "<|content_model_end_sampling|>", "<|ifm|im_end|>")
            if text in added}
    tokenizer.additional_stop_token_ids = stop or None
    return tokenizer


class Model:
    """What a server launched on this model with `--tool-call-parser T --reasoning-parser R`
    holds: the tokenizer, the template manager's reasoning mode and the stop ids."""

    def __init__(self, job: dict):
        self.tokenizer = load_tokenizer(job["tokenizer_dir"])
        self.tool_call_parser = job.get("tool") or None
        self.reasoning_parser = job.get("reasoning") or None
        self.model_type = job.get("model_type") or ""
        from sglang.srt.function_call.function_call_parser import FunctionCallParser
        from sglang.srt.parser.reasoning_parser import ReasoningParser

        if self.tool_call_parser and self.tool_call_parser not in FunctionCallParser.ToolCallParserEnum:
            raise ServerError(f"no tool-call parser {self.tool_call_parser!r} in this release")
        if self.reasoning_parser and self.reasoning_parser.lower() not in ReasoningParser.DetectorMap:
            raise ServerError(f"no reasoning parser {self.reasoning_parser!r} in this release")
        self.force_reasoning, self.reasoning_config = _reasoning_pattern(job.get("template"))
        # serving_chat __init__: the reasoning detector built once, for its defaults
        self.reasoning_detector = None
        if self.reasoning_parser:
            try:
                self.reasoning_detector = ReasoningParser(
                    model_type=self.reasoning_parser, stream_reasoning=True,
                    **_accepted(ReasoningParser, tokenizer=self.tokenizer)).detector
            except ValueError:
                pass
        for name in ("ResponseTemplateReasoningDetector",):
            cls = getattr(sys.modules["sglang.srt.parser.reasoning_parser"], name, None)
            if cls is not None and isinstance(self.reasoning_detector, cls):
                raise ServerError("response-template reasoning parsers are not supported here")
        # schedule_batch.py _check_token_based_finish: the model config's eos ids (here the ones
        # the engine names: the model's generation_config.json eos_token_id), the tokenizer's
        # eos_token_id and its additional stop tokens
        stop = {self.tokenizer.convert_tokens_to_ids(text) for text in job.get("stop") or ()}
        if self.tokenizer.eos_token_id is not None:
            stop.add(self.tokenizer.eos_token_id)
        stop |= set(self.tokenizer.additional_stop_token_ids or ())
        unk = self.tokenizer.unk_token_id
        self.stop_ids = {i for i in stop if isinstance(i, int) and i != unk}
        self.tool_close_ids = _tool_close_token_ids(self.tool_call_parser, self.tokenizer)

    def facts(self) -> dict:
        config = self.reasoning_config
        return {"tokenizer": type(self.tokenizer).__name__, "stop_ids": sorted(self.stop_ids),
                "force_reasoning": self.force_reasoning,
                "reasoning_config": None if config is None else repr(config)}


def _accepted(cls, **kwargs) -> dict:
    """Keyword arguments an older release's class does not take are left out."""
    import inspect

    parameters = inspect.signature(cls).parameters
    return {k: v for k, v in kwargs.items() if k in parameters}


def _reasoning_pattern(template: str | None):
    """TemplateManager._run_template_detection: template_detection.detect_reasoning_pattern where
    the release has it; before it (0.5.10 and older) the template manager's own check, an
    always-thinking Qwen generation prompt."""
    try:
        from sglang.srt.parser.template_detection import detect_reasoning_pattern
    except ImportError:
        if template is None:
            return False, None
        return re.search(r"<\|im_start\|>assistant\\n<think>\\n", template) is not None, None
    return detect_reasoning_pattern(template)


def _tool_close_token_ids(parser: str | None, tokenizer) -> frozenset:
    """detokenizer_manager.py init: the single-token closers of a response-template tool parser."""
    try:
        from sglang.srt.parser.response_template import tool_close_token_ids
    except ImportError:
        return frozenset()
    return tool_close_token_ids(parser, tokenizer)


# ---------------------------------------------------------------------------- detokenizing

INIT_INCREMENTAL_DETOKENIZATION_OFFSET = 5  # managers/schedule_batch.py


class Detokenizer:
    """One request through DetokenizerManager._decode_batch_token_id_output (0.5.23), fed the way
    the scheduler feeds it (scheduler_components/output_streamer.py `accept`,
    schedule_batch.py `Req.init_incremental_detokenize`): the first step carries the last five
    prompt ids as surrogate context (read_offset after them) and its output ids, each later step
    its new ids; the step that finishes carries the finish reason, whose matched stop token is
    trimmed (`trim_matched_stop`) unless it closes a call."""

    def __init__(self, model: Model, skip_special_tokens: bool, prompt_tail: list[int]):
        self.model = model
        self.skip = skip_special_tokens
        self.spaces = True  # SamplingParams.spaces_between_special_tokens default
        self.decode_ids = list(prompt_tail[-INIT_INCREMENTAL_DETOKENIZATION_OFFSET:])
        self.surr_offset = 0
        self.read_offset = len(self.decode_ids)
        self.decoded_text = ""
        self.sent_offset = 0

    def _decode(self, ids: list[int]) -> str:
        """_grouped_batch_decode for one row: "" for no ids; a fast tokenizer's batch_decode
        with the request's flags, else decode_without_hf_kwargs (patch_tokenizer.py)."""
        tokenizer = self.model.tokenizer
        if not ids:
            return ""
        if getattr(tokenizer, "is_fast", False):
            return tokenizer.batch_decode([ids], skip_special_tokens=self.skip,
                                          spaces_between_special_tokens=self.spaces)[0]
        if self.skip:
            special = set(getattr(tokenizer, "all_special_ids", ()) or ())
            ids = [i for i in ids if i not in special]
        return tokenizer.decode(ids)

    def _trim(self, output, finished: dict | None):
        """trim_matched_stop (no_stop_trim False): a matched stop string is cut from the text; a
        matched stop token from the ids, except gpt-oss's <|call|> (200012) under the gpt-oss
        tool parser and a response-template parser's call closer."""
        if not finished:
            return output
        matched = finished.get("matched")
        if matched is None:
            return output
        if isinstance(matched, str) and isinstance(output, str):
            pos = output.find(matched)
            return output if pos == -1 else output[:pos]
        if isinstance(matched, int) and isinstance(output, list):
            if output[-1] == 200012 and self.model.tool_call_parser == "gpt-oss":
                return output
            if output[-1] in self.model.tool_close_ids:
                return output
            return output[:-1]
        return output

    def step(self, new_ids: list[int], finished: dict | None) -> str:
        from sglang.utils import find_printable_text

        self.decode_ids.extend(new_ids)
        read_ids = self._trim(self.decode_ids[self.surr_offset:], finished)
        surr_ids = self.decode_ids[self.surr_offset:self.read_offset]
        surr_text = self._decode(surr_ids)
        read_text = self._decode(read_ids)
        new_text = read_text[len(surr_text):]
        if finished is None:
            pending = self.sent_offset - len(self.decoded_text)
            if new_text and not new_text.endswith("\ufffd"):
                self.decoded_text += new_text
                self.surr_offset = self.read_offset
                self.read_offset = len(self.decode_ids)
                self.sent_offset = len(self.decoded_text)
                return new_text[pending:] if pending else new_text
            printable = find_printable_text(new_text)
            self.sent_offset = len(self.decoded_text) + len(printable)
            return printable[pending:] if pending else printable
        output = self._trim(self.decoded_text + new_text, finished)
        tail = output[self.sent_offset:]
        self.sent_offset = len(output)
        return tail


def finish_reason(model: Model, output: list[int]) -> dict:
    """schedule_batch.py: a stop id ends the request with FINISH_MATCHED_TOKEN ({"type": "stop",
    "matched": id}); an output without one ended at max_tokens (FINISH_LENGTH)."""
    if output and output[-1] in model.stop_ids:
        return {"type": "stop", "matched": output[-1]}
    return {"type": "length", "length": len(output)}


def steps(output: list[int], chunks: list[int] | None) -> list[list[int]]:
    """The scheduler's detokenizer steps: a stream's chunks as planned; a non-streamed request
    every SGLANG_FORCE_STREAM_INTERVAL ids (output_streamer.py `accept`: len % 50 == 0), then
    the finishing step."""
    if chunks is None:
        try:
            from sglang.srt.environ import envs

            interval = envs.SGLANG_FORCE_STREAM_INTERVAL.get()
        except (ImportError, AttributeError):
            interval = 50
        chunks = [interval] * (len(output) // interval)
        if len(output) % interval or not chunks:
            chunks.append(len(output) % interval or len(output))
    out, at = [], 0
    for size in chunks:
        out.append(output[at:at + size])
        at += size
    return out


# ---------------------------------------------------------------------------- serving_chat


class Serving:
    """The parts of entrypoints/openai/serving_chat.py (0.5.23) that run around the parsers for
    one request on a server launched with this model's parsers (no chat encoding spec, no
    response-template parser: the path every built-in model takes)."""

    def __init__(self, model: Model, body: dict):
        from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

        self.model = model
        body = {key: value for key, value in body.items() if key != "stream"}
        try:
            self.request = ChatCompletionRequest.model_validate(body)
        except Exception as error:  # noqa: BLE001 - pydantic's refusal is the server's 400
            raise Refusal(" ".join(str(error).split())[:500]) from None
        self.skip_special_tokens = self._skip_special_tokens()
        self.tools = self._effective_tools()

    # --- _process_messages
    def _skip_special_tokens(self) -> bool:
        """_process_messages: special tokens are kept (skip_special_tokens False) for a gpt-oss or
        Gemma 4 model type, for the reasoning parsers _patch_reasoning_skip_special_tokens names,
        and whenever tools are sent and tool_choice is not "none"."""
        request, reasoning = self.request, self.model.reasoning_parser
        skip = request.skip_special_tokens
        if self.model.model_type in ("gpt_oss", "gemma4", "gemma4_unified"):
            skip = False
        if reasoning in ("apertus2509", "kimi_k3", "inkling", "muse"):
            skip = False
        if reasoning == "mistral" and request.reasoning_effort not in (None, "none"):
            skip = False
        if self._effective_tools() and request.tool_choice != "none":
            skip = False
        return skip

    def _effective_tools(self) -> list:
        """_effective_tools: the request's tools and those a system/developer message carries."""
        tools = list(self.request.tools or [])
        for message in self.request.messages:
            if getattr(message, "role", None) in ("root", "system", "developer") and getattr(message, "tools", None):
                tools.extend(message.tools)
        return tools

    def tool_call_parsing_active(self) -> bool:
        """_tool_call_parsing_active."""
        from sglang.srt.function_call.function_call_parser import FunctionCallParser

        parser = self.model.tool_call_parser
        if not parser or getattr(self.request, "_response_parser_json_response_format", False):
            return False
        if not self.tools:
            detector = FunctionCallParser.ToolCallParserEnum[parser]
            return bool(getattr(detector, "parses_without_tools", lambda: False)())
        return self.request.tool_choice != "none"

    def reasoning_from_request(self) -> bool:
        """_get_reasoning_from_request: whether this request thinks (the reasoning parser then
        starts inside the reasoning, force_reasoning)."""
        request, parser = self.request, self.model.reasoning_parser
        kwargs = request.chat_template_kwargs or {}
        if not parser:
            return False
        if parser == "iquest_q1":
            from sglang.srt.parser.reasoning_parser import IQuestQ1ReasoningDetector

            return IQuestQ1ReasoningDetector.thinking_enabled(kwargs)
        if parser == "minimax-m3":
            return kwargs.get("thinking_mode") == "enabled"
        config = self.model.reasoning_config
        if parser == "hunyuan":
            if config is not None and config.special_case == "hunyuan_effort":
                return request.reasoning_effort not in ("none", "no_think")
            return request.reasoning_effort not in (None, "none", "no_think")
        if config is None:
            detector = self.model.reasoning_detector
            mode = getattr(detector, "reasoning_default", None) if detector is not None else None
            if mode is None:
                return False
            if mode == "always":
                return True
            if mode == "mistral":
                return request.reasoning_effort is not None and request.reasoning_effort != "none"
            if mode in ("thinking", "enable_thinking"):
                return not request.chat_template_kwargs or kwargs.get(mode) is not False
            if mode in ("explicit_thinking", "explicit_enable_thinking"):
                toggle = mode.replace("explicit_", "")
                return request.chat_template_kwargs is not None and kwargs.get(toggle) is True
            return False
        if config.special_case == "always":
            return True
        if config.special_case == "mistral":
            return request.reasoning_effort is not None and request.reasoning_effort != "none"
        if config.toggle_param is None or config.default_enabled is None:
            return False
        if config.default_enabled:
            return not request.chat_template_kwargs or kwargs.get(config.toggle_param) is not False
        return request.chat_template_kwargs is not None and kwargs.get(config.toggle_param) is True

    def reasoning_parser(self, stream_reasoning: bool):
        """The ReasoningParser _build_chat_response (stream_reasoning False) and
        _process_reasoning_stream (the request's stream_reasoning) build."""
        from sglang.srt.parser.reasoning_parser import ReasoningParser

        force = self.model.force_reasoning or self.reasoning_from_request()
        return ReasoningParser(
            self.model.reasoning_parser, stream_reasoning, force, self.request,
            **_accepted(ReasoningParser, tokenizer=self.model.tokenizer,
                        tool_call_parser_active=self.tool_call_parsing_active()))

    def function_call_parser(self, tool_choice=None):
        from sglang.srt.function_call.function_call_parser import FunctionCallParser

        return FunctionCallParser(self.tools, self.model.tool_call_parser,
                                  **_accepted(FunctionCallParser, tokenizer=self.model.tokenizer,
                                              tool_choice=tool_choice))

    def is_required(self) -> bool:
        from sglang.srt.entrypoints.openai.protocol import ToolChoice

        choice = self.request.tool_choice
        return choice == "required" or isinstance(choice, ToolChoice)

    # --- the non-streamed answer: _build_chat_response
    def answer(self, text: str, finish: dict) -> dict:
        """_build_chat_response: the reasoning parser on the whole text (when the server has one
        and the request separates reasoning), then _process_tool_calls on what is left;
        content "" when empty (ChatMessage(content=text if text else "")), reasoning_content
        None when empty."""
        request = self.request
        reasoning_text, tool_calls, started = None, None, False
        if self.model.reasoning_parser and request.separate_reasoning:
            try:
                parser = self.reasoning_parser(stream_reasoning=False)
                reasoning_text, text = parser.parse_non_stream(text)
                started = _answer_started(parser)
            except Exception as error:  # noqa: BLE001 - serving_chat answers 500
                raise ServerError(f"Failed to parse reasoning content ({type(error).__name__}: {error})") from None
        if self.tool_call_parsing_active() and not started:
            tool_calls, text, finish = self.process_tool_calls(text, finish)
        message = {"role": "assistant", "content": text if text else "",
                   "reasoning_content": reasoning_text if reasoning_text else None,
                   "tool_calls": tool_calls}
        return {"message": message, "finish_reason": finish["type"] if finish else None}

    def process_tool_calls(self, text: str, finish: dict):
        """_process_tool_calls: the model's own parser when the text has a call (for a required
        or named tool_choice only when the parser owns the format); a stop becomes
        "tool_calls" once calls are parsed. A required/named choice whose output the json_schema
        constraint shaped is read as a JSON array of {name, parameters}."""
        is_required = self.is_required()
        parser = self.function_call_parser(tool_choice=self.request.tool_choice)
        owns = getattr(parser, "owns_tool_format", lambda: False)()
        if (not is_required or owns) and parser.has_tool_call(text):
            try:
                text, calls = parser.parse_non_stream(text)
            except Exception:  # noqa: BLE001 - serving_chat logs "Tool call parsing error"
                return None, text, finish
            if not calls:
                return None, text, finish
            tool_calls = [{"index": index, "type": "function",
                           "function": {"name": call.name, "arguments": call.parameters}}
                          for index, call in enumerate(calls)]
            if finish["type"] == "stop":
                finish = {"type": "tool_calls", "matched": None}
            return tool_calls, text, finish
        if is_required and owns:
            return None, text, finish
        if is_required:
            import orjson

            original = finish
            if finish["type"] == "stop":
                finish = {"type": "tool_calls", "matched": None}
            try:
                data = orjson.loads(text)
                if isinstance(data, dict):
                    data = [data]
                if not isinstance(data, list) or not all(isinstance(t, dict) and "name" in t for t in data):
                    raise ValueError("not a JSON array of tool calls")
                return ([{"index": i, "type": "function",
                          "function": {"name": t["name"],
                                       "arguments": json.dumps(t.get("parameters", {}), ensure_ascii=False)}}
                         for i, t in enumerate(data)], "", finish)
            except Exception:  # noqa: BLE001 - serving_chat logs it and keeps the text
                return None, text, original
        return None, text, finish

    # --- the stream: _generate_chat_stream and _generate_stream_content
    def stream(self, deltas: list[str], finish: dict) -> list[list[dict]]:
        """Each detokenizer step's text through _generate_stream_content: the reasoning parser
        first (parse_stream_end at the finishing step), then the tool-call parser unless the
        answer started (parse_stream_end at the finishing step, then
        _check_for_unstreamed_tool_args), else the text as content; after the last step the
        finish chunk, "tool_calls" when calls were streamed and the request stopped with none
        left incomplete. The first step's role chunk (content "") is sent as SGLang sends it."""
        request = self.request
        out: list[list[dict]] = []
        reasoning = None
        tool_parser = None
        has_calls = False
        active = self.tool_call_parsing_active()
        for number, delta in enumerate(deltas):
            last = number == len(deltas) - 1
            ending = last and finish["type"] != "abort"
            chunk: list[dict] = []
            if number == 0:
                chunk.append({"delta": {"role": "assistant", "content": ""}, "finish_reason": None})
            if self.model.reasoning_parser and request.separate_reasoning:
                if reasoning is None:
                    reasoning = self.reasoning_parser(stream_reasoning=request.stream_reasoning)
                reasoning_text, delta = reasoning.parse_stream_chunk(delta)
                if ending and hasattr(reasoning, "parse_stream_end"):
                    end_reasoning, end_normal = reasoning.parse_stream_end()
                    if end_reasoning:
                        reasoning_text = (reasoning_text or "") + end_reasoning
                    if end_normal:
                        delta = (delta or "") + end_normal
                if reasoning_text:
                    chunk.append({"delta": {"reasoning_content": reasoning_text}, "finish_reason": None})
            if active and not _answer_started(reasoning):
                if tool_parser is None:
                    tool_parser = self._stream_tool_parser()
                normal, calls = self._tool_stream_step(tool_parser, delta or "", ending)
                if normal:
                    chunk.append({"delta": {"content": normal}, "finish_reason": None})
                for call in calls:
                    has_calls = True
                    chunk.append({"delta": {"tool_calls": [{
                        "index": call.tool_index,
                        "function": {"name": call.name or None, "arguments": call.parameters}}]},
                        "finish_reason": None})
                if last:
                    rest = _unstreamed_tool_args(tool_parser)
                    if rest is not None:
                        chunk.append({"delta": {"tool_calls": [{
                            "index": rest[0], "function": {"name": None, "arguments": rest[1]}}]},
                            "finish_reason": None})
            elif delta:
                chunk.append({"delta": {"content": delta}, "finish_reason": None})
            out.append(chunk)
        final = finish["type"]
        detector = getattr(tool_parser, "detector", tool_parser)
        if has_calls and final == "stop" and not getattr(detector, "incomplete_tool_call_indices", set()):
            final = "tool_calls"
        out[-1].append({"delta": {}, "finish_reason": final})
        return out

    def _stream_tool_parser(self):
        """_process_tool_call_stream's parser: for a required or named tool_choice the model's
        parser only when it owns the format, else a JsonArrayParser; otherwise the model's."""
        if self.is_required():
            probe = self.function_call_parser(tool_choice=self.request.tool_choice)
            if getattr(probe, "owns_tool_format", lambda: False)():
                return probe
            from sglang.srt.function_call.json_array_parser import JsonArrayParser

            return JsonArrayParser()
        return self.function_call_parser()

    def _tool_stream_step(self, parser, delta: str, flush: bool):
        from sglang.srt.function_call.function_call_parser import FunctionCallParser

        if isinstance(parser, FunctionCallParser):
            normal, calls = parser.parse_stream_chunk(delta)
            if flush and hasattr(parser, "parse_stream_end"):
                end_text, end_calls = parser.parse_stream_end()
                normal = (normal or "") + end_text
                calls = list(calls) + end_calls
            return normal, calls
        result = parser.parse_streaming_increment(delta, self.tools)
        normal, calls = result.normal_text, result.calls
        if flush and hasattr(parser, "finish"):
            end = parser.finish(self.tools)
            normal = (normal or "") + end.normal_text
            calls = list(calls) + end.calls
        return normal, calls


def _answer_started(reasoning) -> bool:
    """_answer_started: only a response-template reasoning detector opens an answer."""
    if reasoning is None:
        return False
    module = sys.modules.get("sglang.srt.parser.reasoning_parser")
    cls = getattr(module, "ResponseTemplateReasoningDetector", None)
    return cls is not None and isinstance(reasoning.detector, cls) and reasoning.detector.answer_started


def _unstreamed_tool_args(parser):
    """_check_for_unstreamed_tool_args: the last call's arguments the detector parsed but did
    not stream (json.dumps of its parsed arguments, ensure_ascii False, past what was sent)."""
    detector = getattr(parser, "detector", parser)
    calls = getattr(detector, "prev_tool_call_arr", None)
    streamed = getattr(detector, "streamed_args_for_tool", None)
    if not calls or not streamed:
        return None
    index = len(calls) - 1
    if index < 0 or index >= len(streamed):
        return None
    expected = calls[index].get("arguments", {})
    expected = expected if isinstance(expected, str) else json.dumps(expected, ensure_ascii=False)
    actual = streamed[index]
    rest = expected[len(actual):] if expected.startswith(actual) else ""
    return (index, rest) if rest else None


# ---------------------------------------------------------------------------- the loop


def parse(model: Model, job: dict) -> dict:
    output = list(job["output"])
    chunks = job.get("chunks")
    serving = Serving(model, job["request"])
    finish = finish_reason(model, output)
    detokenizer = Detokenizer(model, serving.skip_special_tokens, list(job.get("prompt_tail") or []))
    parts = steps(output, chunks)
    texts = [detokenizer.step(ids, finish if i == len(parts) - 1 else None) for i, ids in enumerate(parts)]
    said = {"texts": texts, "skip_special_tokens": serving.skip_special_tokens}
    if chunks is None:
        return {**serving.answer("".join(texts), dict(finish)), **said}
    return {"chunks": serving.stream(texts, dict(finish)), **said}


def main() -> None:
    import logging

    logging.disable(logging.CRITICAL)  # SGLang logs parser errors; its answer is what counts
    install_stubs()
    from importlib.metadata import version

    out = sys.stdout
    versions = {name: version(name) for name in ("sglang", "transformers", "tokenizers")}
    out.write(json.dumps(versions) + "\n")
    out.flush()
    model = None
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        try:
            if job.get("op") == "model":
                model = Model(job)
                answer = {"model": model.facts()}
            elif model is None:
                answer = {"error": "no model opened"}
            else:
                answer = parse(model, job)
        except Refusal as error:
            answer = {"refused": str(error)}
        except ServerError as error:
            answer = {"error": str(error)}
        except Exception as error:  # noqa: BLE001 - one line back, the worker lives on
            answer = {"error": f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"}
        out.write(json.dumps(answer, ensure_ascii=False) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
