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
from generator.budget import RENDER_DEADLINE, RenderDeadline, bounded, deadline  # noqa: F401
from generator.errors import GoldensError, describe

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
        return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except Exception as error:  # Transformers raises many kinds for files it cannot use
        raise GoldensError(f"{directory}: cannot load the tokenizer ({describe(error)})") from None


@functools.lru_cache(maxsize=None)
def load_processor(directory: str | Path):
    """The model's multimodal processor from a local directory (sources.processor builds it).
    The PIL image backend is asked for by name: token ids never depend on it, and it needs
    neither torch nor torchvision, so the reference is the same on every machine."""
    _quiet_transformers()
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(str(directory), local_files_only=True, backend="pil")


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


def render_prompt(tokenizer, template: str, request: dict[str, Any], date: _dt.date) -> str:
    """The prompt string the reference template renders for a request (may raise), within the
    render deadline."""
    kwargs = dict(request.get("chat_template_kwargs") or {})
    with frozen_date(date), deadline():  # waiting for the clock is not the template's time
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


def render(tokenizer, template: str, request: dict[str, Any], date: _dt.date) -> Rendered:
    """The reference's ids for a request as the serving request layer hands it to the template
    (see normalize); a body that needed normalizing also records the template's outcome on it
    as sent."""
    normalized, applied = normalize(request, content_format(template))
    result = _render_as_is(tokenizer, template, normalized, date)
    if applied:
        as_sent = _render_as_is(tokenizer, template, request, date)
        result.normalization = {
            "content_format": content_format(template),
            "applied": applied,
            "as_sent": ({"outcome": "ok", "same_prompt": as_sent.prompt == result.prompt}
                        if as_sent.error is None else {"outcome": "error", "error": as_sent.error}),
        }
    return result


def _render_as_is(tokenizer, template: str, request: dict[str, Any], date: _dt.date) -> Rendered:
    try:
        prompt = bounded(render_prompt(tokenizer, template, request, date))
    except GoldensError:  # the run's own settings or deadline, not the template's doing
        raise
    except Exception as error:  # a template that raises is an outcome to record
        return Rendered(error=describe(error))
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    return Rendered(ids=list(ids), pieces=pieces(tokenizer, ids), prompt=prompt)


# --- The serving request layer's content normalization -------------------------------------
#
# OpenAI clients send an assistant tool-call turn with `"content": null` and often send content
# as a list of {"type": "text"} parts. Templates were written for what Transformers users pass,
# so several refuse both; OpenAI-compatible servers normalize them before the template runs.
# The rule here is vLLM's (entrypoints/chat_utils.py, `_detect_content_format` and
# `_parse_chat_message_content`), which decides per template: a template that loops over a
# message's content (`{% for part in message['content'] %}`) gets the "openai" format, text
# parts as a list of {"type": "text", "text": ...} and null content as []; any other template
# gets the "string" format, text parts joined with "\n" and null content as "". llama.cpp's
# server does the same for string templates (common/chat.cpp: text parts joined with "\n",
# null content becomes ""). Only these two forms are rewritten: a string content, a media part,
# and everything else reach the template exactly as sent, so no other golden moves.


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


def normalize(request: dict[str, Any], fmt: str) -> tuple[dict[str, Any], list[str]]:
    """The request as the serving layer passes it to a template of content format `fmt`, and
    one line per change made (empty: the request is passed as sent, the same object)."""
    applied: list[str] = []
    messages = []
    for i, message in enumerate(request.get("messages") or []):
        if isinstance(message, dict) and "content" in message:
            content = message["content"]
            texts = _text_parts(content)
            if content is None:
                empty: Any = [] if fmt == "openai" else ""
                message = {**message, "content": empty}
                applied.append(f"messages[{i}].content: null passed as {json.dumps(empty)}")
            elif texts is not None:
                if fmt == "openai":
                    parts = [{"type": "text", "text": t} for t in texts]
                    if parts != content:
                        message = {**message, "content": parts}
                        applied.append(f"messages[{i}].content: text parts reduced to type and text")
                else:
                    message = {**message, "content": "\n".join(texts)}
                    applied.append(f"messages[{i}].content: {len(texts)} text part(s) joined with '\\n'")
        messages.append(message)
    if not applied:
        return request, []
    return {**request, "messages": messages}, applied


def render_expanded(processor, template: str, request: dict[str, Any], date: _dt.date) -> Rendered:
    """The ids the model's forward pass gets: Transformers' processor.apply_chat_template with
    tokenize=True, which turns OpenAI image_url parts into images, renders the template and
    expands each media placeholder (Gemma 3: <start_of_image> becomes its 256 soft tokens).
    `prompt` is the template's text before expansion."""
    kwargs = dict(request.get("chat_template_kwargs") or {})
    common = dict(
        tools=request.get("tools"), documents=request.get("documents"), chat_template=template,
        add_generation_prompt=request.get("add_generation_prompt", True),
        continue_final_message=request.get("continue_final_message", False), **kwargs,
    )
    try:
        with frozen_date(date), deadline():
            prompt = bounded(processor.apply_chat_template(copy.deepcopy(request["messages"]), tokenize=False,
                                                           **common))
            out = processor.apply_chat_template(copy.deepcopy(request["messages"]), tokenize=True,
                                                return_dict=True, **common)
    except GoldensError:
        raise
    except Exception as error:  # a template or processor that raises is an outcome to record
        return Rendered(error=describe(error))
    ids = [int(i) for i in out["input_ids"][0]]
    return Rendered(ids=ids, pieces=pieces(processor.tokenizer, ids), prompt=prompt)


def render_request(source, request: dict[str, Any], date: _dt.date) -> Rendered:
    """The reference's view of a request (`source` is a sources.source.Source): the processor's
    expanded ids when it carries media data, else the template's ids."""
    from generator.config.request import carries_media

    if not carries_media(request):
        return render(load_tokenizer(source.tokenizer_dir), source.template, request, date)
    if source.processor_dir is None:
        return Rendered(error=f"{source.model} has no `processor` settings in models.yaml to expand media with")
    return render_expanded(load_processor(source.processor_dir), source.template, request, date)

