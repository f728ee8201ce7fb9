"""The encoder reference: a vendor's encoding module turning a request into the prompt text.

Where a model's own format is Python code (generator/sources/encoders.py), that code is a second
reference beside Transformers' render of the template. The module is loaded from its pinned
file in the cache under a private name (never into sys.modules, never vLLM), called with the
request, and its text tokenized as the reference tokenizes a template's: the model's tokenizer,
add_special_tokens=False, because the text already holds every special token.

How a request becomes the module's call is the one part written here (`CALLS`, per encoder), and
it is kept to what the module leaves to its caller, so that a difference between the two
references is one of the formats, not of two request layers:

- the request as the serving layer hands it over (reference.normalize, content format "openai":
  text parts stay parts, which the encoder itself flattens), and the reasoning fields aliased as
  Transformers aliases them (`reasoning_content`, `thinking`, `reasoning` -> the encoder's `reasoning`);
- the tools on the first system message, one made at the front when there is none (the
  encoder reads tools from a message; vLLM 0.32.0's caller, vllm/tokenizers/deepseek_v4.py, does
  the same);
- the template kwargs the model's templates read: `thinking` (else `enable_thinking`; neither:
  off, the request asked for no thinking) -> thinking_mode; `reasoning_effort` and
  `drop_thinking` passed on, absent ones left to the module's own defaults (an effort the module
  does not know is its refusal, recorded);
- continue_final_message: the last assistant turn left open (the module's `wo_eos`).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from generator import reference
from generator.budget import PromptTooLarge, bounded, bounded_ids, deadline, on_main_thread
from generator.error_text import describe
from generator.errors import GoldensError

_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")  # Transformers' order


@functools.lru_cache(maxsize=None)
def load(path: str | Path) -> Any:
    """The module at `path`, executed under a private name (not added to sys.modules)."""
    private = f"_goldens_encoder_{hashlib.sha256(str(path).encode()).hexdigest()[:16]}"
    spec = importlib.util.spec_from_file_location(private, str(path))
    if spec is None or spec.loader is None:
        raise GoldensError(f"{path}: cannot load the encoder module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # a damaged cache file: the pin check should have caught it
        raise GoldensError(f"{path}: cannot load the encoder module ({describe(error)})") from None
    return module


def _messages(request: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The request's messages as the encoder reads them (normalized, reasoning aliased), and the
    normalized request."""
    normalized, _ = reference.normalize(request, "openai", developer=True)
    out = []
    for message in normalized.get("messages") or []:
        message = copy.deepcopy(message)
        if isinstance(message, dict) and message.get("role") == "assistant":
            reasoning = next((message[key] for key in _REASONING_FIELDS if message.get(key) is not None), None)
            if reasoning is not None:
                message["reasoning"] = reasoning
        out.append(message)
    return out, normalized


def _deepseek_v4(module: Any, request: dict[str, Any]) -> str:
    messages, normalized = _messages(request)
    kwargs = dict(normalized.get("chat_template_kwargs") or {})
    tools = normalized.get("tools")
    if tools:
        at = next((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "system"), None)
        if at is None:
            messages.insert(0, {"role": "system"})
            at = 0
        messages[at]["tools"] = tools
    thinking = kwargs["thinking"] if "thinking" in kwargs else kwargs.get("enable_thinking", False)
    if normalized.get("continue_final_message") and messages and messages[-1].get("role") == "assistant":
        messages[-1]["wo_eos"] = True
    call: dict[str, Any] = {"thinking_mode": "thinking" if thinking else "chat"}
    if "drop_thinking" in kwargs:
        call["drop_thinking"] = kwargs["drop_thinking"]
    if kwargs.get("reasoning_effort") is not None:
        call["reasoning_effort"] = kwargs["reasoning_effort"]
    return module.encode_messages(messages, **call)


# encoder name (config/encoders.py ENCODERS) -> how a request becomes its module's prompt text
CALLS: dict[str, Callable[[Any, dict[str, Any]], str]] = {"deepseek-v4": _deepseek_v4}


def render(tokenizer, name: str, path: Path, request: dict[str, Any]) -> reference.Rendered:
    """The encoder's ids for a request; a module that raises is a recorded refusal, as a
    template's raise is."""
    module = load(path)
    try:
        with deadline() if on_main_thread() else contextlib.nullcontext():  # pure Python: no C call to bound
            prompt = bounded(CALLS[name](module, copy.deepcopy(request)))
    except GoldensError:
        raise
    except Exception as error:  # the encoder refusing a request is an outcome to record
        return reference.Rendered(error=describe(error))
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    try:
        bounded_ids(ids)
    except PromptTooLarge as error:
        return reference.Rendered(error=describe(error))
    return reference.Rendered(ids=list(ids), pieces=reference.pieces(tokenizer, ids), prompt=prompt)


def dispute(template: reference.Rendered, encoder: reference.Rendered) -> dict[str, Any] | None:
    """None where the two references agree (the same ids, or both refuse); else the golden's
    `disputed` record: where they part (the first token that differs, or which one refused) and
    the encoder's whole outcome, so a review can judge against it."""
    if template.error is not None and encoder.error is not None:
        return None
    if template.error is None and encoder.error is None and template.ids == encoder.ids:
        return None
    record: dict[str, Any] = {"references": ["template", "encoder"]}
    if template.error is None and encoder.error is None:
        at = next((i for i, (a, b) in enumerate(zip(template.ids, encoder.ids)) if a != b),
                  min(len(template.ids), len(encoder.ids)))
        record["first_divergence"] = {
            "index": at,
            "template": [template.ids[at], template.pieces[at]] if at < len(template.ids) else None,
            "encoder": [encoder.ids[at], encoder.pieces[at]] if at < len(encoder.ids) else None,
        }
    record["encoder"] = {
        "outcome": encoder.outcome, "error": encoder.error, "prompt": encoder.prompt,
        "token_count": len(encoder.ids), "tokens": [[i, piece] for i, piece in zip(encoder.ids, encoder.pieces)],
    }
    return record
