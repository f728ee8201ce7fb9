"""The reference: Transformers' apply_chat_template, made deterministic.

Rendering is Transformers' own (its sandboxed Jinja environment, its tojson, its reasoning-field
aliasing); tokenization is what apply_chat_template(tokenize=True) does, the rendered string
encoded with add_special_tokens=False, because the template already wrote every special token.
Two things are pinned so a golden never depends on when it was made: `strftime_now` returns the
matrix's fixed date (see frozen_date), and a template that raises becomes a recorded outcome, not a crash.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import functools
import json
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# the render budget every in-process engine shares (RenderDeadline stays importable from here)
from generator.budget import (  # noqa: F401
    RENDER_DEADLINE,
    PromptTooLarge,
    RenderDeadline,
    bounded,
    bounded_ids,
    deadline,
    on_main_thread,
)
from generator.error_text import describe
from generator.errors import GoldensError

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


@dataclass
class Rendered:
    """What the reference made of one request: ids with pieces and the prompt, or the error."""

    ids: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    prompt: str | None = None
    error: str | None = None
    # what the serving request layer changed before the template saw the body, and the
    # template's own outcome on the body as sent (None: the body went through unchanged)
    normalization: dict[str, Any] | None = None

    @property
    def outcome(self) -> str:
        return "error" if self.error is not None else "ok"


@functools.lru_cache(maxsize=None)
def load_tokenizer(directory: str | Path):
    """A fast tokenizer from a local directory (never the network: sources resolved it)."""
    _quiet_transformers()
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except Exception as error:  # Transformers raises many kinds for files it cannot use
        raise GoldensError(f"{directory}: cannot load the tokenizer ({describe(error)})") from None
    _LOADED_FROM[id(tokenizer)] = str(directory)
    return tokenizer


_LOADED_FROM: dict[int, str] = {}  # id of a loaded tokenizer or processor -> its directory (kept alive by the caches)


@functools.lru_cache(maxsize=None)
def load_processor(directory: str | Path):
    """The model's multimodal processor from a local directory (sources.processor builds it).
    The PIL image backend is asked for by name: token ids never depend on it, and it needs
    neither torch nor torchvision, so the reference is the same on every machine."""
    _quiet_transformers()
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(str(directory), local_files_only=True, backend="pil")
    _LOADED_FROM[id(processor)] = str(directory)
    return processor


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    logging.getLogger("transformers").setLevel(logging.ERROR)


_CLOCK_LOCK = threading.Lock()


@contextlib.contextmanager
def frozen_date(date: _dt.date):
    """Transformers' `strftime_now` global reads `datetime.now()` from its chat-template module;
    for the length of one render that name is a datetime whose now() is the matrix's date (a
    function passed as a render variable would not do: Transformers turns extra render
    arguments into plain data). The lock keeps concurrent renders from seeing each other's."""
    from transformers.utils import chat_template_utils

    moment = _dt.datetime.combine(date, _dt.time(12, 0))

    class _Frozen(_dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return moment if tz is None else moment.replace(tzinfo=tz)

    with _CLOCK_LOCK:
        original = chat_template_utils.datetime
        chat_template_utils.datetime = _Frozen
        try:
            yield
        finally:
            chat_template_utils.datetime = original


class Raised(Exception):
    """A template's raise, as a worker process reported it (render_prompt off the main thread)."""


def _elsewhere(loaded, template: str, request: dict[str, Any], date: _dt.date, until: float | None,
               **job) -> dict:
    """A render asked off the main thread, where no deadline reaches it: done by a worker
    process on its own main thread, under the same deadlines (generator/render_worker.py)."""
    from generator import render_worker

    where = _LOADED_FROM.get(id(loaded)) or getattr(loaded, "name_or_path", "")
    if not where:
        raise GoldensError("internal: a render off the main thread needs a tokenizer loaded by load_tokenizer")
    key = "processor_dir" if job.pop("processor", False) else "tokenizer_dir"
    answer = render_worker.here().ask({key: where, "tokenizer_dir": where, "template": template,
                                       "request": request, "date": date.isoformat(), **job}, until)
    if "fatal" in answer:
        raise GoldensError(f"the reference's render worker: {answer['fatal']}")
    return answer


def _rendered(answer: dict) -> Rendered:
    return Rendered(ids=answer["ids"], pieces=answer["pieces"], prompt=answer["prompt"], error=answer["error"],
                    normalization=answer.get("normalization"))


def render_prompt(tokenizer, template: str, request: dict[str, Any], date: _dt.date,
                  until: float | None = None) -> str:
    """The prompt string the reference template renders for a request (may raise), within the
    render deadline and the run's, `until` (by a worker process when asked off the main thread)."""
    if not on_main_thread():
        answer = _elsewhere(tokenizer, template, request, date, until, as_is=True)
        if "raised" in answer:
            raise Raised(answer["raised"])
        return answer["prompt"]
    kwargs = dict(request.get("chat_template_kwargs") or {})
    with frozen_date(date), deadline(until):  # waiting for the clock is not the template's time
        return tokenizer.apply_chat_template(
            request["messages"],
            tools=request.get("tools"),
            documents=request.get("documents"),
            chat_template=template,
            add_generation_prompt=request.get("add_generation_prompt", True),
            continue_final_message=request.get("continue_final_message", False),
            tokenize=False,
            **kwargs,
        )


def pieces(tokenizer, ids: list[int]) -> list[str]:
    """Each token as the text it decodes to alone; a byte fragment that is not valid UTF-8 on
    its own is shown as the vocabulary entry instead of a replacement character."""
    decoded = tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=False,
                                     clean_up_tokenization_spaces=False)
    out = []
    for token_id, text in zip(ids, decoded):
        if "\ufffd" in text:
            text = tokenizer.convert_ids_to_tokens(token_id)
        out.append(text)
    return out


def render(tokenizer, template: str, request: dict[str, Any], date: _dt.date,
           until: float | None = None) -> Rendered:
    """The reference's ids for a request as the serving request layer hands it to the template
    (see normalize); a body that needed normalizing also records the template's outcome on it
    as sent. `until` is the run's deadline, if it has one (a time.monotonic() value). Off the
    main thread, a worker process renders it (generator/render_worker.py)."""
    if not on_main_thread():
        return _rendered(_elsewhere(tokenizer, template, request, date, until))
    normalized, applied = normalize(request, content_format(template), names_developer(template))
    result = _render_as_is(tokenizer, template, normalized, date, until)
    if applied:
        as_sent = _render_as_is(tokenizer, template, request, date, until)
        result.normalization = {
            "content_format": content_format(template),
            "applied": applied,
            "as_sent": (_as_sent_ok(as_sent, result) if as_sent.error is None
                        else {"outcome": "error", "error": as_sent.error}),
        }
    return result


def _as_sent_ok(as_sent: Rendered, result: Rendered) -> dict[str, Any]:
    """The template's render of the body as sent, where it differs: its length and the sha256 of
    its ids (`1,2,3`), so an engine that hands the template the body as sent (minijinja,
    transformers.js, a client rendering for itself) is recognised on any model
    (replay/judging/causes.py `render: as-sent`)."""
    if as_sent.prompt == result.prompt:
        return {"outcome": "ok", "same_prompt": True}
    import hashlib

    digest = hashlib.sha256(",".join(str(int(i)) for i in as_sent.ids).encode()).hexdigest()
    return {"outcome": "ok", "same_prompt": False, "token_count": len(as_sent.ids), "ids_sha256": digest}


def _render_as_is(tokenizer, template: str, request: dict[str, Any], date: _dt.date,
                  until: float | None) -> Rendered:
    try:
        prompt = bounded(render_prompt(tokenizer, template, request, date, until))
    except GoldensError:  # the run's own settings or deadline, not the template's doing
        raise
    except Exception as error:  # a template that raises is an outcome to record
        return Rendered(error=describe(error))
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    try:
        bounded_ids(ids)
    except PromptTooLarge as error:
        return Rendered(error=describe(error))
    return Rendered(ids=list(ids), pieces=pieces(tokenizer, ids), prompt=prompt)


# --- The serving request layer's normalization -------------------------------------------------
#
# Templates were written for what Transformers users pass; OpenAI clients send other spellings
# of the same conversation, and both OpenAI-compatible servers rewrite them before the template
# runs. Read from vLLM 0.32.0 (renderers/chat_utils.py `_parse_chat_message_content`,
# `_postprocess_messages`; renderers/hf.py `safe_apply_chat_template`) and llama.cpp b11434
# (common/chat.cpp `common_chat_msgs_parse_oaicompat`, `common_chat_msg::to_json_oaicompat`,
# `common_chat_templates_apply_jinja` and its workarounds). The reference applies what they
# agree on, and where they part it follows one of them, named below and in
# docs/reference-normalization.md:
#
# - content null, missing or []: "" for a "string" template, [] for an "openai" one (vLLM;
#   llama.cpp writes "" for all three, and refuses a message with neither content nor tool calls).
# - content as text parts, on any role: joined with "\n" for a "string" template (both); kept as
#   {"type": "text", "text"} parts for an "openai" one (both), on a tool message too (llama.cpp;
#   vLLM joins a tool message's text parts into a string for every template).
# - role developer: system, when the template never names the role (both); a template that
#   names it gets it as sent (vLLM; llama.cpp renames it there too, unless the template is a
#   Harmony one). vLLM then also merges every system message into one at the front; llama.cpp
#   does not, and neither does the reference: a rename moves no text.
# - tool-call arguments as a JSON string holding an object: the object (vLLM always; llama.cpp
#   for every template that reads the arguments as a mapping, the ones where it matters);
#   "" or null: {} (vLLM; llama.cpp answers 500 for an object-reading template). A string that
#   is not a JSON object reaches the template as sent (llama.cpp; vLLM substitutes {}).
# - tool_calls: [] is removed (both).
# - every other key, and a media part, reaches the template as sent. Both servers drop message
#   keys outside their message models (e.g. gpt-oss's `thinking`); the reference keeps them so a
#   request can reach the template code a Transformers caller reaches, and an engine that drops
#   one shows as that engine's divergence.
#
# A body that needs none of this is passed as the same object, so its golden does not move.


@functools.lru_cache(maxsize=64)
def content_format(template: str) -> str:
    """"openai" when the template iterates over some message's `content`, else "string"
    (vLLM's detection: find the loop variables bound to items of `messages`, then a loop whose
    iterable is that variable's `content`, by attribute or subscript, possibly filtered)."""
    import jinja2
    from jinja2 import nodes
    from transformers.utils.chat_template_utils import _compile_jinja_template

    try:
        ast = _compile_jinja_template(template).environment.parse(template)
    except Exception:  # a template that does not compile is reported elsewhere
        return "string"
    del jinja2

    def accessed(node, name: str, key: str | None) -> bool:
        if isinstance(node, (nodes.Filter, nodes.Test)):
            return node.node is not None and accessed(node.node, name, key)
        if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
            return accessed(node.node, name, key)
        if key is None:
            return isinstance(node, nodes.Name) and node.name == name
        if isinstance(node, nodes.Getitem):
            return (isinstance(node.node, nodes.Name) and node.node.name == name
                    and isinstance(node.arg, nodes.Const) and node.arg.value == key)
        if isinstance(node, nodes.Getattr):
            return isinstance(node.node, nodes.Name) and node.node.name == name and node.attr == key
        return False

    aliases, queue = ["messages"], ["messages"]
    while queue:
        current = queue.pop(0)
        for assign in ast.find_all(nodes.Assign):
            if accessed(assign.node, current, None) and isinstance(assign.target, nodes.Name):
                if assign.target.name not in aliases:
                    aliases.append(assign.target.name)
                    queue.append(assign.target.name)
    loops = list(ast.find_all(nodes.For))
    message_names = {loop.target.name for loop in loops if isinstance(loop.target, nodes.Name)
                     and any(accessed(loop.iter, alias, None) for alias in aliases)}
    for loop in loops:
        if any(accessed(loop.iter, name, "content") for name in message_names):
            return "openai"
    return "string"


def template_view(template: str, request: dict[str, Any]) -> dict[str, Any]:
    """The request as `render` hands it to this template (normalized, see normalize)."""
    return normalize(request, content_format(template), names_developer(template))[0]


def names_developer(template: str) -> bool:
    """Whether the template names the `developer` role itself (vLLM's test: the quoted word in
    its source); only then does a developer message reach it unrenamed."""
    return '"developer"' in template or "'developer'" in template


def _text_parts(content: Any) -> list[str] | None:
    """The texts of a content list made only of text parts, else None."""
    if not isinstance(content, list) or not content:
        return None
    texts = []
    for part in content:
        if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
            return None
        texts.append(part["text"])
    return texts


def _content(message: dict[str, Any], i: int, fmt: str, applied: list[str]) -> dict[str, Any]:
    """The message with its content as the template of format `fmt` gets it."""
    empty: Any = [] if fmt == "openai" else ""
    if "content" not in message:
        applied.append(f"messages[{i}].content: missing, passed as {json.dumps(empty)}")
        return {**message, "content": empty}
    content = message["content"]
    if content is None:
        applied.append(f"messages[{i}].content: null passed as {json.dumps(empty)}")
        return {**message, "content": empty}
    if isinstance(content, list) and not content:
        if fmt != "openai":
            applied.append(f"messages[{i}].content: [] passed as \"\"")
            return {**message, "content": ""}
        return message
    texts = _text_parts(content)
    if texts is None:
        return message
    if fmt == "openai":
        parts = [{"type": "text", "text": t} for t in texts]
        if parts != content:
            applied.append(f"messages[{i}].content: text parts reduced to type and text")
            return {**message, "content": parts}
        return message
    applied.append(f"messages[{i}].content: {len(texts)} text part(s) joined with '\\n'")
    return {**message, "content": "\n".join(texts)}


def _arguments(value: Any) -> tuple[bool, Any]:
    """(changed, what the template gets) for a tool call's `arguments`."""
    if value is None or value == "":
        return True, {}
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return False, value
        if isinstance(parsed, dict):
            return True, parsed
    return False, value


def _tool_calls(message: dict[str, Any], i: int, applied: list[str]) -> dict[str, Any]:
    """The message with empty tool_calls removed and JSON-string arguments decoded."""
    calls = message.get("tool_calls")
    if calls == []:
        applied.append(f"messages[{i}].tool_calls: [] removed")
        return {k: v for k, v in message.items() if k != "tool_calls"}
    if not isinstance(calls, list):
        return message
    out, changed = [], False
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            decoded, arguments = _arguments(function.get("arguments"))
            if decoded:
                before = function.get("arguments")
                shown = "a JSON string" if isinstance(before, str) and before else json.dumps(before)
                applied.append(f"messages[{i}].tool_calls[{j}].function.arguments: {shown} passed as an object")
                call = {**call, "function": {**function, "arguments": arguments}}
                changed = True
        out.append(call)
    return {**message, "tool_calls": out} if changed else message


def normalize(request: dict[str, Any], fmt: str, developer: bool = False) -> tuple[dict[str, Any], list[str]]:
    """The request as the serving layer passes it to a template of content format `fmt`
    (`developer`: the template names the developer role), and one line per change made (empty:
    the request is passed as sent, the same object)."""
    applied: list[str] = []
    messages = []
    for i, message in enumerate(request.get("messages") or []):
        if isinstance(message, dict):
            if message.get("role") == "developer" and not developer:
                message = {**message, "role": "system"}
                applied.append(f"messages[{i}].role: developer passed as system (the template does not name it)")
            message = _content(message, i, fmt, applied)
            if message.get("role") == "assistant" and "tool_calls" in message:
                message = _tool_calls(message, i, applied)
        messages.append(message)
    tools = _tools(request.get("tools"), applied)
    kwargs = _effort(request, applied)
    if not applied:
        return request, []
    return {**request, "messages": messages, **({"tools": tools} if "tools" in request else {}),
            **({"chat_template_kwargs": kwargs} if kwargs is not None else {})}, applied


def _effort(request: dict[str, Any], applied: list[str]) -> dict[str, Any] | None:
    """The template kwargs with the request's `reasoning_effort` (None: no such field). Both servers
    turn it into template kwargs, over what chat_template_kwargs says: `none` sets
    enable_thinking false, any other effort is passed as `reasoning_effort` (llama.cpp
    server-common.cpp; vLLM's build_chat_params, which also passes "none" on and sets
    enable_thinking true for any other effort; llama-server's default is thinking on). Where
    chat_template_kwargs sets enable_thinking, both keep it."""
    effort = request.get("reasoning_effort")
    if not isinstance(effort, str):
        return None
    given = dict(request.get("chat_template_kwargs") or {})
    kwargs = {k: v for k, v in given.items() if not (k == "reasoning_effort" and effort == "none")}
    if effort != "none":
        kwargs["reasoning_effort"] = effort
    if "enable_thinking" not in given:
        kwargs["enable_thinking"] = effort != "none"
    if kwargs == given:
        return None
    applied.append(f"reasoning_effort: {json.dumps(effort)} passed as template kwargs "
                   f"{json.dumps({k: kwargs[k] for k in ('reasoning_effort', 'enable_thinking') if k in kwargs})}")
    return kwargs


def _tools(tools: Any, applied: list[str]) -> Any:
    """The tools as the template gets them. `tools: []` is no tools: llama-server and
    mistral-common render it so, vLLM refuses it (HTTP 400), OpenAI's schema wants one tool or
    more. A tool without `type` gets OpenAI's only value, "function": vLLM's request model fills
    that default; llama-server refuses the tool (HTTP 500), so no server renders it otherwise."""
    if not isinstance(tools, list):
        return tools
    if not tools:
        applied.append("tools: [] passed as none")
        return None
    out = []
    for i, tool in enumerate(tools):
        if isinstance(tool, dict) and "type" not in tool and isinstance(tool.get("function"), dict):
            applied.append(f'tools[{i}].type: missing, passed as "function"')
            tool = {"type": "function", **tool}
        out.append(tool)
    return out


def render_expanded(processor, template: str, request: dict[str, Any], date: _dt.date,
                    until: float | None = None) -> Rendered:
    """The ids the model's forward pass gets: Transformers' processor.apply_chat_template with
    tokenize=True, which turns OpenAI image_url parts into images, renders the template and
    expands each media placeholder (Gemma 3: <start_of_image> becomes its 256 soft tokens).
    `prompt` is the template's text before expansion."""
    if not on_main_thread():
        return _rendered(_elsewhere(processor, template, request, date, until, processor=True))
    kwargs = dict(request.get("chat_template_kwargs") or {})
    common = dict(
        tools=request.get("tools"), documents=request.get("documents"), chat_template=template,
        add_generation_prompt=request.get("add_generation_prompt", True),
        continue_final_message=request.get("continue_final_message", False), **kwargs,
    )
    try:
        with frozen_date(date), deadline(until):
            prompt = bounded(processor.apply_chat_template(copy.deepcopy(request["messages"]), tokenize=False,
                                                           **common))
            out = processor.apply_chat_template(copy.deepcopy(request["messages"]), tokenize=True,
                                                return_dict=True, **common)
    except GoldensError:
        raise
    except Exception as error:  # a template or processor that raises is an outcome to record
        return Rendered(error=describe(error))
    ids = [int(i) for i in out["input_ids"][0]]
    try:
        bounded_ids(ids)
    except PromptTooLarge as error:
        return Rendered(error=describe(error))
    return Rendered(ids=ids, pieces=pieces(processor.tokenizer, ids), prompt=prompt)


def render_request(source, request: dict[str, Any], date: _dt.date, until: float | None = None) -> Rendered:
    """The reference's view of a request (`source` is a sources.source.Source): the processor's
    expanded ids when it carries media data, else the template's ids; within the run's deadline
    `until`, if it has one."""
    from generator.config.request import carries_media

    if not carries_media(request):
        return render(load_tokenizer(source.tokenizer_dir), source.template, request, date, until)
    if source.processor_dir is None:
        return Rendered(error=f"{source.model} has no `processor` settings in models.yaml to expand media with")
    return render_expanded(load_processor(source.processor_dir), source.template, request, date, until)

