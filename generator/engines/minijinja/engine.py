"""MiniJinja, the Rust Jinja engine TGI renders chat templates with, set up the way TGI sets it up.

The point is to see the prompts TGI's router would build, so the environment copies TGI's
`ChatTemplate::new` (router/src/infer/chat_template.rs) rather than Transformers':

- `Environment::new()` defaults: trim_blocks, lstrip_blocks and keep_trailing_newline all off
  (Transformers turns trim_blocks and lstrip_blocks on);
- pycompat's unknown-method callback, so `.strip()`, `.items()`, `.get()` ... work;
- two functions: `raise_exception` (an error, here `Refused`) and `strftime_now` (TGI: local
  time; here the matrix's fixed date, like the reference);
- MiniJinja's own `tojson`: TGI adds no override, so < > & ' come out as \\u003c-style escapes
  where Transformers' json.dumps leaves them alone, and `tojson(ensure_ascii=...)` is an error;
- TGI's string rewrites of the template source (`TGI_REWRITES`).

The engine is the pinned Python binding (minijinja 3.1.0), not the Rust minijinja 2.x TGI
releases build with. Two known binding differences: its tojson writes ", " and ": " like
json.dumps (minijinja 2.x writes compact JSON, so TGI's tools JSON parts from Transformers' even
where this engine's does not), and it prints none/true as None/True.

What the template sees is what Transformers passes (messages as sent, tools, documents,
add_generation_prompt, the tokenizer's named special tokens, chat_template_kwargs), so a
difference is the Jinja engine's, not TGI's request parser's (TGI flattens message content to
text and passes only bos/eos; that is not reproduced). A final assistant message is continued
as TGI does it: cut after the last occurrence of its content, trailing whitespace trimmed.

The prompt is encoded by HF `tokenizers` from tokenizer.json, add_special_tokens off: the
template already wrote every special token.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import threading
from pathlib import Path
from typing import Any

from generator import budget
from generator.engines import EngineBase, EngineContext, EngineError, Ids, Refused, Request
from generator.errors import first_line
from generator.sources.source import Source

# TGI rewrites these in every template before compiling it (ChatTemplate::new), each a
# workaround for a construct its MiniJinja or its flattened messages could not handle.
TGI_REWRITES = (
    ("messages[0]['content'][0]['text']", "messages[0]['content']"),  # gemma3, content as text
    ("[::-1]", "|reverse"),  # Qwen3's reversed-list slice
    ("{% generation %}", ""),  # Transformers' training-only assistant-mask tags
    ("{% endgeneration %}", ""),
)

# The named special tokens Transformers passes to every template (SPECIAL_TOKENS_ATTRIBUTES).
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")

# Globals the minijinja Python package adds from minijinja-contrib; TGI's bare
# Environment::new() has neither, so a template using them fails there and must fail here.
CONTRIB_GLOBALS = ("cycler", "joiner")


class TemplateRaised(Exception):
    """`raise_exception(...)` called by the template."""


def _raise_exception(message: Any = "") -> None:
    raise TemplateRaised(str(message))


def special_tokens(tokenizer_dir: Path) -> dict[str, str]:
    """The named special tokens as Transformers reads them: tokenizer_config.json, with
    special_tokens_map.json filling gaps; a token may be a string or an AddedToken dict."""
    found: dict[str, str] = {}
    for filename in ("special_tokens_map.json", "tokenizer_config.json"):
        path = tokenizer_dir / filename
        if not path.exists():
            continue
        config = json.loads(path.read_text(encoding="utf-8"))
        for name in SPECIAL_TOKEN_NAMES:
            value = config.get(name)
            if isinstance(value, dict):
                value = value.get("content")
            if isinstance(value, str):
                found[name] = value  # tokenizer_config.json is read last and wins
    return found


@functools.lru_cache(maxsize=None)
def load_tokenizer(tokenizer_json: Path):
    """One `tokenizers.Tokenizer` per file (gemma3's takes seconds to load; encode is thread-safe)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tokenizer_json))


def tgi_template(template: str) -> str:
    for old, new in TGI_REWRITES:
        template = template.replace(old, new)
    return template


class MinijinjaEngine(EngineBase):
    name = "minijinja"

    def __init__(self, source: Source, date: _dt.date):
        import minijinja

        self.source = source
        self.date = date
        tokenizer_json = source.tokenizer_dir / "tokenizer.json"
        if not tokenizer_json.exists():
            raise EngineError(f"{self.name}: {source.model}: no tokenizer.json in {source.tokenizer_dir}")
        self.tokenizer = load_tokenizer(tokenizer_json)
        self.special_tokens = special_tokens(source.tokenizer_dir)
        moment = _dt.datetime.combine(date, _dt.time(12, 0))  # the reference's fixed_strftime
        self.env = minijinja.Environment(  # fuel: Rust cannot be interrupted, so it is bounded
            trim_blocks=False, lstrip_blocks=False, keep_trailing_newline=False, pycompat=True,
            fuel=budget.FUEL,
        )
        for name in CONTRIB_GLOBALS:
            if name in self.env.globals:
                self.env.remove_global(name)
        self.env.add_global("raise_exception", _raise_exception)
        self.env.add_global("strftime_now", lambda fmt: moment.strftime(fmt))
        self.compile_error: str | None = None
        try:
            self.env.add_template("chat", tgi_template(source.template))
        except minijinja.TemplateError as error:
            self.compile_error = first_line(error)
        self._lock = threading.Lock()

    def version(self) -> str:
        from importlib.metadata import version

        return version("minijinja")

    def render(self, request: Request) -> str:
        """The prompt string (raises Refused when the template raises or cannot render)."""
        import minijinja

        if self.compile_error is not None:
            raise EngineError(f"{self.name}: the template does not compile: {self.compile_error}")
        context: dict[str, Any] = dict(self.special_tokens)
        context.update(request.get("chat_template_kwargs") or {})
        context.update(
            messages=request["messages"],
            tools=request.get("tools"),
            documents=request.get("documents"),
            add_generation_prompt=request.get("add_generation_prompt", True),
        )
        try:
            with self._lock:
                prompt = self.env.render_template("chat", **context)
        except TemplateRaised as error:
            raise Refused(f"{self.name}: template refused the request: raise_exception: {error}") from None
        except minijinja.TemplateError as error:
            if "out of fuel" in str(error):  # goldens' budget ran out, not the engine refusing
                raise EngineError(f"{self.name}: not judged: the template did not finish rendering within "
                                  f"goldens' budget of {budget.FUEL:,} instructions (generator/budget.py)") from None
            raise Refused(f"{self.name}: template refused the request: {first_line(error)}") from None
        except (AttributeError, TypeError) as error:  # a pycompat method on the wrong type: `[].strip()`
            raise Refused(f"{self.name}: template refused the request: {type(error).__name__}: {error}") from None
        try:
            budget.bounded(prompt)
        except budget.PromptTooLarge as error:
            raise Refused(f"{self.name}: {error}") from None
        if request.get("continue_final_message"):
            prompt = continue_final(prompt, request["messages"][-1])
        return prompt

    def ids(self, request: Request) -> Ids:
        prompt = self.render(request)
        ids = self.tokenizer.encode(prompt, add_special_tokens=False).ids
        return Ids(ids, prompt=prompt, pieces=self.pieces(ids))

    def pieces(self, ids: list[int]) -> list[str]:
        """Each token decoded alone; a byte fragment shows as its vocabulary entry (as the reference)."""
        out = []
        for token_id in ids:
            text = self.tokenizer.decode([token_id], skip_special_tokens=False)
            out.append(self.tokenizer.id_to_token(token_id) if "\ufffd" in text else text)
        return out


def continue_final(prompt: str, message: dict) -> str:
    """TGI's continuation of a final assistant message: cut after the last occurrence of its
    content and trim trailing whitespace. Content the template dropped leaves the prompt whole."""
    content = message.get("content")
    if isinstance(content, list):
        texts = [part.get("text") for part in content if isinstance(part, dict) and part.get("text")]
        content = texts[-1] if texts else None
    if message.get("role") != "assistant" or not isinstance(content, str) or not content:
        return prompt
    at = prompt.rfind(content)
    return prompt if at < 0 else prompt[:at + len(content)].rstrip()



def open_engine(context: EngineContext) -> MinijinjaEngine:
    """The registry's factory (config/engine_registry.py)."""
    return MinijinjaEngine(context.source, context.date)
