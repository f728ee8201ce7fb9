"""vLLM's request layer traced with coverage.py inside the managed vLLM server's own process.

The vLLM venv is left as it is: coverage.py is installed, through the same venv machinery
(servers/venv.py), into a small venv of its own (`coverage-<version>`, the version this project
runs, on the same base interpreter), whose site-packages goes on the server's PYTHONPATH with a
session folder holding a `sitecustomize.py`. That file starts coverage.py in every Python
process of the server (COVERAGE_PROCESS_START names the session's rc file: the listed files
only, one data file per process) and, in the API server, answers one extra route before
FastAPI sees it: GET /__goldens_coverage__?context=NAME switches coverage.py's dynamic context,
so requests sent one at a time each get their own lines. The server is stopped with SIGTERM
(uvicorn's graceful shutdown; coverage.py saves at exit), the data files are combined here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from pathlib import Path

from generator.errors import GoldensError
from generator.measure import reach
from generator.measure.engine import Key, Layer, Session, keys_by_context, reachable_files

SUMMARY = ("the functions the render and /tokenize routes reach down to the template call: the request "
           "models and their validators, message parsing, the HF, Mistral and harmony renderers")

# The request layer as a reachable set (reach.py): from the two routes goldens sends a chat body
# to, closed over their callees in these subtrees of vllm, stopping past the template call.
REACH = reach.Spec(
    packages=("vllm/entrypoints/scale_out/render", "vllm/entrypoints/serve/tokenize",
              "vllm/entrypoints/openai/chat_completion/protocol.py", "vllm/entrypoints/serve/engine",
              "vllm/entrypoints/openai/parser", "vllm/entrypoints/serve/utils", "vllm/entrypoints/chat_utils.py",
              "vllm/renderers", "vllm/tokenizers"),
    seeds=("vllm/entrypoints/scale_out/render/api_router.py:render_chat_completion",
           "vllm/entrypoints/serve/tokenize/api_router.py:tokenize"),
    models=("vllm.entrypoints.openai.chat_completion.protocol:ChatCompletionRequest",
            "vllm.entrypoints.serve.tokenize.protocol:TokenizeChatRequest"),
    stops=(
        # past the template: sampling parameters and the engine's request (render_chat_request's tail)
        "vllm/entrypoints/openai/chat_completion/protocol.py:ChatCompletionRequest.to_sampling_params",
        # the completion forms of the two routes (a prompt, not a chat body)
        "vllm/renderers/online_renderer.py:OnlineRenderer.preprocess_completion",
        "vllm/renderers/online_renderer.py:OnlineRenderer.preprocess_cmpl",
        "vllm/entrypoints/serve/tokenize/protocol.py:TokenizeCompletionRequest.build_tok_params",
        "vllm/entrypoints/serve/tokenize/protocol.py:DetokenizeRequest.build_tok_params",
    ),
    # renderers of tokenizer modes no model of the matrix runs (renderers/registry.py picks one
    # per mode; the matrix runs `hf` and `mistral`, gpt-oss through harmony inside the hf path,
    # and DeepSeek-V4's and Kimi-K3's own modes, engines/vllm/engine.py NATIVE_MODES)
    absent=("vllm/renderers/cohere.py", "vllm/renderers/deepseek_v32.py",
            "vllm/renderers/inkling.py", "vllm/renderers/inkling_encoding.py",
            "vllm/renderers/terratorch.py", "vllm/tokenizers/kimi_audio.py", "vllm/tokenizers/deepseek_v32.py",
            "vllm/tokenizers/deepseek_v32_encoding.py", "vllm/tokenizers/deepseek_v41.py",
            "vllm/tokenizers/deepseek_v41_encoding.py", "vllm/tokenizers/fastokens.py"),
    instances=("vllm.renderers.hf:HfRenderer", "vllm.renderers.mistral:MistralRenderer",
               "vllm.renderers.deepseek_v4:DeepseekV4Renderer", "vllm.renderers.kimi_k3:KimiK3Renderer"),
)
_CU, _HF, _BASE = "vllm/renderers/chat_utils.py", "vllm/renderers/hf.py", "vllm/renderers/base.py"
# What the matrix's configuration cannot run: its vLLM servers serve tiny text-only decoder
# models without --enable-prompt-embeds, so media parts are refused before any media parser runs
# (docs/findings.md), and no encoder-decoder or prompt-embeds path is taken. REACH keeps them
# (the full closure, reported beside); CONFIGURED leaves them out, each named here.
CONFIGURED = dataclasses.replace(REACH, absent=REACH.absent + (
    # media: the parsers of image/audio/video parts and their placeholders
    f"{_CU}:AsyncMultiModalContentParser", f"{_CU}:MultiModalContentParser",
    f"{_CU}:BaseMultiModalContentParser._add_placeholder", f"{_CU}:BaseMultiModalItemTracker.allowed_local_media_path",
    f"{_CU}:BaseMultiModalItemTracker.allowed_media_domains", f"{_CU}:BaseMultiModalItemTracker.media_io_kwargs",
    f"{_CU}:BaseMultiModalItemTracker.video_processor_name", f"{_CU}:_resolve_items",
    f"{_CU}:_resolve_vision_chunk_items", f"{_CU}:_get_full_multimodal_text_prompt",
    f"{_CU}:_get_interleaved_text_prompt", f"{_CU}:_detect_field", f"{_CU}:_get_embeds_data",
    f"{_CU}:_load_embeds_dict", f"{_CU}:_merge_embeds", f"{_CU}:_parse_metadata_array",
    f"{_HF}:_try_get_processor_chat_template", f"{_HF}:build_video_prompts_from_mm_data",
    f"{_HF}:rebuild_mm_uuids_from_mm_data", f"{_HF}:replace_vision_chunk_video_placeholder",
    f"{_BASE}:BaseRenderer._process_multimodal", f"{_BASE}:BaseRenderer._process_mm_uuids",
    f"{_BASE}:BaseRenderer._validate_mm_uuids", f"{_BASE}:BaseRenderer.get_mm_processor",
    f"{_BASE}:BaseRenderer.clear_mm_cache", f"{_BASE}:BaseRenderer.update_mm_cache_stats",
    f"{_BASE}:BaseRenderer._join_mm_warmup",
    # prompt embeds (off without --enable-prompt-embeds)
    "vllm/renderers/embed_utils.py", f"{_HF}:HfRenderer._apply_prompt_embeds_to_engine_input",
    f"{_HF}:HfRenderer._apply_prompt_embeds_to_prompt", f"{_HF}:_build_mixed_prompt_embeds",
    f"{_HF}:_build_prompt_embeds_positions", f"{_HF}:_build_prompt_embeds_updates",
    f"{_HF}:_ensure_prompt_embeds_placeholder_token", f"{_HF}:_expand_prompt_embeds_placeholders",
    f"{_BASE}:BaseRenderer._process_embeds",
    # encoder-decoder models
    f"{_BASE}:BaseRenderer._process_enc_dec", f"{_BASE}:BaseRenderer._process_enc_dec_async",
    f"{_BASE}:BaseRenderer._tokenize_enc_dec_prompt", f"{_BASE}:BaseRenderer._tokenize_enc_dec_prompt_async",
    f"{_BASE}:BaseRenderer.get_dec_start_token_id", f"{_BASE}:BaseRenderer._get_skip_decoder_start_token",
    "vllm/renderers/inputs/preprocess.py:_parse_dec_prompt", "vllm/renderers/inputs/preprocess.py:_parse_enc_prompt",
    "vllm/renderers/inputs/preprocess.py:parse_enc_dec_prompt",
))
SWITCH = "/__goldens_coverage__"

SITECUSTOMIZE = '''\
"""goldens engine coverage: coverage.py in every process of this vLLM server."""
import os

if os.environ.get("COVERAGE_PROCESS_START"):
    import coverage

    _cov = coverage.process_startup()
    if _cov is not None and os.environ.get("GOLDENS_COVERAGE_SWITCH"):
        import starlette.applications as _apps
        from urllib.parse import parse_qs as _parse_qs

        _call = _apps.Starlette.__call__
        _path = os.environ["GOLDENS_COVERAGE_SWITCH"]

        async def _switching(self, scope, receive, send):
            if scope.get("type") == "http" and scope.get("path") == _path:
                query = _parse_qs(scope.get("query_string", b"").decode())
                _cov.switch_context(query.get("context", [""])[0])
                await send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": b"{}"})
                return
            await _call(self, scope, receive, send)

        _apps.Starlette.__call__ = _switching
'''


def version(config) -> str:
    from generator.engines.vllm.server import VLLM_VERSION

    return config.engine_versions.get("vllm", VLLM_VERSION)


def coverage_site() -> Path:
    """site-packages of the `coverage-<version>` venv: this project's coverage.py release,
    installed once on the base interpreter the vLLM venvs are made from."""
    import coverage

    from generator.servers import venv

    release = coverage.__version__

    def plan() -> venv.Steps:
        return [(f"install coverage=={release}", venv.INSTALL, [f"coverage=={release}"])]

    python = venv.ensure(f"coverage-{release}", plan, "import coverage; print(coverage.__version__)", release)
    found = sorted(python.parent.parent.glob("lib/python*/site-packages"))
    if not found:
        raise GoldensError(f"{python.parent.parent}: no site-packages")
    return found[0]


def vllm_site(release: str) -> Path:
    from generator.engines.vllm.server import vllm_python

    python = vllm_python(release)
    found = sorted(python.parent.parent.glob("lib/python*/site-packages"))
    if not found:
        raise GoldensError(f"{python.parent.parent}: no site-packages")
    return found[0]


@contextlib.contextmanager
def session(model, source, config):
    """A Session on one managed vLLM server for the model, started under coverage.py; run()
    sends each request (its /tokenize and its /v1/chat/completions, as `goldens check` does)
    in its own dynamic context; start-up (and vLLM's warm-up render) is context "". The data
    is read when the session ends, so run() returns sets it fills then: read them after the
    `with` block."""
    from generator.engines.vllm.engine import VllmEngine, make_server

    release = version(config)
    site = vllm_site(release)
    files, code = reachable_files(site, CONFIGURED)
    tools = coverage_site()
    with tempfile.TemporaryDirectory(prefix="goldens-vllm-coverage-") as tmp:
        folder = Path(tmp)
        (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
        (folder / "data").mkdir()
        rc = folder / "coveragerc"
        include = "\n    ".join(str(path) for path in files.values())
        rc.write_text(f"[run]\ndata_file = {folder / 'data' / '.coverage'}\nparallel = true\nsigterm = true\n"
                      f"include =\n    {include}\n")
        server = make_server(model, source, release, lambda message: None)
        server.startup_timeout = max(server.startup_timeout, 900.0)  # every process starts traced
        python_path = os.pathsep.join([str(folder), str(tools), *filter(None, [os.environ.get("PYTHONPATH")])])
        server.env.update({"PYTHONPATH": python_path, "COVERAGE_PROCESS_START": str(rc),
                           "GOLDENS_COVERAGE_SWITCH": SWITCH})
        pending: list[tuple[list[str], list[set[Key]]]] = []
        try:
            server.start()
            # the managed vLLM is its render server: ids through /v1/chat/completions/render,
            # what `check` judges (serve() asks nothing more of a render server)
            engine = VllmEngine(server.url, server.model_name, render=server.render_only)
            # the render server also answers /tokenize's chat form: the second entry point
            tokenize = VllmEngine(server.url, server.model_name, render=False) if server.render_only else None

            def run(requests, each: bool = True) -> list[set[Key]]:
                from generator import http

                names = [f"request-{len(pending)}-{i}" for i in range(len(requests))]
                out: list[set[Key]] = [set() for _ in requests]
                for name, request in zip(names, requests):
                    http.DEFAULT.get_json(f"{server.url}{SWITCH}?context={name}", where="vllm coverage switch")
                    _replay(engine, request, tokenize)
                http.DEFAULT.get_json(f"{server.url}{SWITCH}?context=", where="vllm coverage switch")
                pending.append((names, out))
                return out

            session = Session(code, run)
            yield session
        finally:
            server.stop(timeout=60)
        data = _combined(folder)
        session.setup |= keys_by_context(data, files, [""])[0]
        for names, out in pending:
            for keys, found in zip(out, keys_by_context(data, files, names)):
                keys |= found


def _combined(folder: Path):
    import coverage

    parts = sorted((folder / "data").glob(".coverage.*"))
    if not parts:
        raise GoldensError(f"vllm engine coverage: the server wrote no coverage data ({folder / 'data'})")
    cov = coverage.Coverage(data_file=str(folder / ".coverage"), config_file=False)
    cov.combine([str(folder / "data")], keep=False)
    return cov.get_data()


def _replay(engine, request, tokenize=None) -> None:
    """The ids `check` judges (the render route, or /tokenize on a serving server), its serving
    path, and on a render server /tokenize's chat form too; a refusal is that request's outcome,
    the lines it reached count."""
    from generator.engines import EngineError

    with contextlib.suppress(EngineError):
        engine.ids(request)
    with contextlib.suppress(EngineError):
        engine.serve(request)
    if tokenize is not None:
        with contextlib.suppress(EngineError):
            tokenize.ids(request)


LAYER = Layer(SUMMARY, session, version)
