"""The dialect axis (generator/config/dialects.py, docs/dialects.md): the transforms, the choice
and its lock, the request fields engines act on, and one regenerate end to end."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from generator.cli import main
from generator.config import dialects, models
from generator.config.cases import model_cases
from generator.config.request import ENGINE_FIELDS, parse_request
from generator.config.shapes import SHAPES, build
from generator.errors import GoldensError
from generator.goldens import golden_file

ROOT = Path(__file__).resolve().parents[1]


def case(name: str) -> dict:
    return dialects.request(name, {})


# --- the transforms ---------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", list(dialects.DIALECTS))
def test_every_dialect_rewrites_each_shape_it_names_and_only_a_copy(dialect):
    spec = dialects.DIALECTS[dialect]
    for shape in spec.shapes:
        base = build(shape, {})
        kept = json.dumps(base)
        out = spec.apply(base)
        assert out is not None and json.dumps(out) != json.dumps(base), (shape, dialect)
        assert json.dumps(base) == kept  # the base request is not touched
        assert dialects.split(dialects.case_name(shape, dialect)) == (shape, dialect)
        assert json.dumps(spec.apply(build(shape, {}))) == json.dumps(out)  # deterministic


def test_a_dialect_applies_only_where_the_shape_has_what_it_rewrites():
    for shape, dialect in [("plain", "content-null"), ("plain", "args-compact"), ("plain", "tool-choice-none"),
                           ("no-system", "developer"), ("plain", "reasoning"), ("plain", "key-order"),
                           ("prefill", "ends-assistant"), ("tool-result", "result-no-name")]:
        if dialect == "result-no-name":  # tool-result's result has a name: this one does apply
            assert dialects.DIALECTS[dialect].apply(build(shape, {})) is not None
            continue
        assert dialects.DIALECTS[dialect].apply(build(shape, {})) is None, (shape, dialect)
    assert "plain_content-null" not in dialects.candidates(tuple(SHAPES), tuple(dialects.DIALECTS))
    assert dialects.split("plain_content-null") is None  # not a shape the dialect names
    assert dialects.split("plain") is None and dialects.split("client-x_y") is None


def test_the_spellings_outside_bodies_brought():
    """The eight dialects from bench/outside: each the body a real client sent, on a built-in shape."""
    ends = case("tool-result-json-args_ends-call")["messages"]
    assert ends[-1]["role"] == "assistant" and ends[-1]["tool_calls"] and not any(m["role"] == "tool" for m in ends)
    text = case("tool-result-json-args_call-with-text")["messages"]
    assert [m["content"] for m in text if m.get("tool_calls")] == ["Let me check the weather."]
    assert [m["role"] for m in case("tool-result-json-args_drop-system")["messages"]] == ["user", "assistant", "tool"]
    assert [m["role"] for m in case("plain_system-only")["messages"]] == ["system"]
    assert [m["role"] for m in case("plain_two-assistants")["messages"]] == ["system", "user", "assistant", "assistant"]
    typed = case("tools-reduced_type-int")["tools"]
    assert all(t["function"]["parameters"]["properties"]["days"]["type"] == "int" for t in typed)
    assert case("plain_response-format-no-name")["response_format"] == {
        "type": "json_schema", "json_schema": {"schema": dialects.SCHEMA["json_schema"]["schema"]}}
    assert case("plain_response-format-json-object")["response_format"]["type"] == "json_object"
    # request files keep both response formats, so every engine that takes the field is sent it
    for name in ("plain_response-format-no-name", "plain_response-format-json-object"):
        body = case(name)
        assert parse_request(json.dumps(body), name)["response_format"] == body["response_format"]
    named = case("tool-result-json-args_result-by-name")["messages"][-1]
    assert named["role"] == "tool" and named["name"] == "get_weather" and "tool_call_id" not in named
    rounds = case("tool-result-json-args_two-rounds")["messages"]
    assert [m["role"] for m in rounds][-4:] == ["assistant", "tool", "assistant", "tool"]
    assert rounds[-2]["tool_calls"][0]["id"] == rounds[-1]["tool_call_id"] != rounds[2]["tool_calls"][0]["id"]
    assert [m["role"] for m in case("tool-result-json-args_starts-call")["messages"]] == ["assistant", "tool"]
    described = [t["function"]["description"] for t in case("tools-reduced_empty-description")["tools"]]
    assert described[0] == "" and all(described[1:])
    # none applies where there is nothing to rewrite
    for shape, dialect in [("plain", "ends-call"), ("tool-result", "ends-call"), ("no-system", "system-only"),
                           ("prefill", "two-assistants"), ("no-system", "drop-system"), ("plain", "type-int")]:
        assert dialect not in dialects.DIALECTS or shape not in dialects.DIALECTS[dialect].shapes \
            or dialects.DIALECTS[dialect].apply(build(shape, {})) is None, (shape, dialect)
        assert dialects.split(dialects.case_name(shape, dialect)) is None or \
            dialects.DIALECTS[dialect].apply(build(shape, {})) is None


def test_the_outside_dialects_come_after_the_rest_so_earlier_choices_stay():
    names = list(dialects.WRITTEN)
    new = ["ends-call", "call-with-text", "drop-system", "system-only", "two-assistants", "type-int",
           "response-format-no-name", "response-format-json-object", "result-by-name", "two-rounds", "starts-call",
           "empty-description",
           # the second batch (bench/outside/bodies2)
           "null-fields", "tool-no-type", "markup-chars", "multiline-description", "think-chunk", "args-invalid",
           "call-id-long", "tools-empty", "starts-result", "user-after-tool", "effort-none", "effort-high",
           # the bodies the loader once refused (bench/outside/unwired)
           "tool-choice-bare", "function-role"]
    assert names[-len(new):] == new
    lock = dialects.read_lock(ROOT / "models.yaml")
    for model, entry in lock.items():  # every model keeps the earlier cases first, the new ones after
        cases = entry["cases"]
        firsts = [i for i, c in enumerate(cases) if c.split(dialects.SEPARATOR, 1)[1] in new]
        assert firsts == list(range(len(cases) - len(firsts), len(cases))), model


def test_the_spellings():
    calls = lambda r: r["messages"][2]["tool_calls"]  # noqa: E731
    assert calls(case("tool-result_args-compact"))[0]["function"]["arguments"] == '{"city":"Paris"}'
    assert calls(case("tool-result_args-pretty"))[0]["function"]["arguments"] == '{\n  "city": "Paris"\n}'
    assert calls(case("tool-result_args-empty"))[0]["function"]["arguments"] == ""
    assert calls(case("tool-result_args-empty-object"))[0]["function"]["arguments"] == "{}"
    assert "id" not in calls(case("tool-result_call-no-id"))[0]
    assert "type" not in calls(case("tool-result_call-no-type"))[0]
    assert case("tool-result_content-null")["messages"][2]["content"] is None
    assert "content" not in case("tool-result_content-missing")["messages"][2]
    assert case("tool-result_content-empty-list")["messages"][2]["content"] == []
    assert case("plain_one-part")["messages"][1]["content"] == [{"type": "text", "text": "What is 2 + 2?"}]
    parts = case("multi-turn_parts")["messages"]
    assert all(isinstance(m["content"], list) and len(m["content"]) == 2 for m in parts)
    assert case("tool-result_tool-parts")["messages"][3]["content"] == [
        {"type": "text", "text": "sunny,"}, {"type": "text", "text": "21 C"}]
    assert case("reasoning-history_reasoning")["messages"][2]["reasoning"] == "2 plus 2 is 4."
    inline = case("reasoning-history_think-inline")["messages"][2]
    assert "reasoning_content" not in inline and inline["content"] == "<think>\n2 plus 2 is 4.\n</think>\n\n4."
    results = case("parallel-tool-calls_result-no-name")["messages"][3:]
    assert len(results) == 2 and all("name" not in m and "tool_call_id" in m for m in results)
    tool = case("tools-reduced_key-order")["tools"][0]
    assert list(tool) == ["function", "type"] and list(tool["function"]) == ["parameters", "description", "name"]
    strict = case("tools-reduced_strict")["tools"][0]["function"]
    assert strict["strict"] is True and strict["parameters"]["additionalProperties"] is False
    assert strict["parameters"]["properties"]["city"]["title"] == "City"
    no_params = case("tools-reduced_no-params")["tools"]
    assert no_params[0]["function"]["parameters"] == {"type": "object", "properties": {}}
    assert "parameters" not in no_params[1]["function"]
    assert [m["role"] for m in case("plain_developer")["messages"]] == ["developer", "user"]
    assert [m["role"] for m in case("plain_two-systems")["messages"]] == ["system", "system", "user"]
    assert [m["role"] for m in case("multi-turn_mid-system")["messages"]][-2:] == ["system", "user"]
    assert case("plain_user-name")["messages"][1]["name"] == "alice"
    assert case("plain_ends-assistant")["messages"][-1] == {"role": "assistant", "content": "4."}
    assert case("tools-reduced_tool-choice-required")["tool_choice"] == "required"
    assert case("tools-reduced_tool-choice-required")["parallel_tool_calls"] is False
    assert case("tools-reduced_tool-choice-named")["tool_choice"]["function"] == {"name": "get_weather"}
    assert case("plain_response-format")["response_format"]["type"] == "json_schema"


# --- the choice and its lock --------------------------------------------------------------------


def fake_render(request: dict) -> SimpleNamespace:
    """A render that sees the messages' text and nothing else (no normalization record)."""
    text = json.dumps([m.get("content") for m in request["messages"]], sort_keys=True)
    return SimpleNamespace(outcome="ok", ids=[len(text)], error=None, normalization=None)


def test_choose_keeps_what_reaches_something_new_and_nothing_twice():
    shapes = ("plain", "tool-result", "tools-reduced")
    chosen = dialects.choose(shapes, ("call-no-id", "content-null", "content-missing", "parts", "one-part",
                                      "tool-choice-none", "tool-choice-named"), {}, fake_render)
    # call-no-id: the fake render never sees ids; content-null: its text differs; content-missing:
    # the same text as content-null here (None either way); one-part: a list, new; the fields: each new
    assert chosen == ["plain_one-part", "tool-result_content-null",
                      "tools-reduced_tool-choice-none", "tools-reduced_tool-choice-named"]
    assert chosen == dialects.choose(shapes, ("call-no-id", "content-null", "content-missing", "one-part",
                                              "tool-choice-none", "tool-choice-named"), {}, fake_render)


def test_choose_counts_normalization_rules_once_per_model():
    def render(request):
        out = fake_render(request)
        calls = [c for m in request["messages"] for c in m.get("tool_calls") or []]
        if any(isinstance(c["function"]["arguments"], str) for c in calls):
            out.normalization = {"applied": ["messages[2].tool_calls[0].function.arguments: a JSON string passed as "
                                             "an object"], "as_sent": {"outcome": "ok"}}
        return out
    # tool-result-json-args, a shape of the matrix, already reaches the rule: neither is kept
    assert dialects.choose(("tool-result", "tool-result-json-args"), ("args-compact", "args-pretty"), {}, render) == []
    assert dialects.choose(("tool-result",), ("args-compact", "args-pretty"), {}, render) == ["tool-result_args-compact"]


def test_an_engine_keyed_dialect_is_kept_though_the_reference_renders_it_as_its_base():
    """result-by-name changes how an engine's request layer finds a result's call (harmony names it by
    tool_call_id); the fake render, like most templates, cannot tell it from its base: kept anyway."""
    assert dialects.DIALECTS["result-by-name"].engine_keyed
    assert dialects.choose(("tool-result-json-args",), ("result-by-name",), {}, fake_render) == [
        "tool-result-json-args_result-by-name"]
    # not so for a dialect without the mark whose render matches its base
    assert dialects.choose(("parallel-tool-calls",), ("result-no-call-id",), {}, fake_render) == []


def test_choose_keeps_a_case_for_an_invariant_finding_its_render_hides():
    """Llama 3.1's template writes a tool-call turn as the call alone: text beside the call leaves
    the ids of the base shape. The render below does the same; the real invariant check finds the
    dropped text, so the case is kept, once (and not at all when no finding kinds are asked)."""
    from generator.analysis import invariants

    def render(request):
        parts = []
        for m in request["messages"]:
            calls = m.get("tool_calls") or []
            parts.append(json.dumps([c["function"] for c in calls]) if calls else str(m.get("content") or ""))
        prompt = "\n".join(parts)
        return SimpleNamespace(outcome="ok", ids=[len(prompt)], error=None, normalization=None, prompt=prompt)

    def kinds(request, rendered):
        return [f["kind"] for f in invariants.check(request, rendered.prompt).findings]

    shapes, wanted = ("tool-result-json-args",), ("call-with-text", "content-null")
    assert render(case("tool-result-json-args_call-with-text")).ids == render(build("tool-result-json-args", {})).ids
    assert dialects.choose(shapes, wanted, {}, render) == []
    assert dialects.choose(shapes, wanted, {}, render, kinds=kinds) == ["tool-result-json-args_call-with-text"]


def test_the_lock_is_deterministic_and_read_back(tmp_path):
    config = tmp_path / "models.yaml"
    path = tmp_path / "models.dialects.lock"
    lock = {"qwen3": {"dialects": ["parts"], "cases": ["multi-turn_parts"]},
            "gemma3": {"dialects": ["parts", "developer"], "cases": []}}
    assert dialects.write_lock(config, lock) is True
    first = path.read_bytes()
    assert dialects.write_lock(config, dict(reversed(list(lock.items())))) is False  # same bytes
    assert path.read_bytes() == first
    assert dialects.read_lock(config) == lock
    path.write_text('{"models": {"qwen3": {"cases": "x"}}}')
    with pytest.raises(GoldensError, match="models.dialects.lock"):
        dialects.read_lock(config)


CONFIG = """\
{top}models:
  qwen3:
    tokenizer: {{pack: "npm:qwen3"}}
    shapes: [plain, tool-result, tools-reduced]
{own}"""


def load(tmp_path: Path, top: str = "", own: str = "") -> models.Config:
    path = tmp_path / "models.yaml"
    path.write_text(CONFIG.format(top=top, own=own), encoding="utf-8")
    return models.load(path)


def test_models_yaml_selects_dialects_and_takes_the_lock_only_for_that_selection(tmp_path):
    assert load(tmp_path).models["qwen3"].dialects == ()  # off unless asked for
    assert load(tmp_path, "dialects: all\n").models["qwen3"].dialects == dialects.WRITTEN
    # the derived dialects only when named: after the hand-written ones, which are their seeds
    both = load(tmp_path, "dialects: [all, derived]\n").models["qwen3"].dialects
    assert both == dialects.WRITTEN + dialects.DERIVED and dialects.DERIVED
    assert load(tmp_path, "dialects: all\n", "    dialects: none\n").models["qwen3"].dialects == ()
    model = load(tmp_path, "", "    dialects: [parts, developer]\n").models["qwen3"]
    assert model.dialects == ("parts", "developer") and model.dialect_cases is None  # not chosen yet
    with pytest.raises(GoldensError, match=r"qwen3.dialects\[0\]: unknown dialect 'dev'"):
        load(tmp_path, "", "    dialects: [dev]\n")
    dialects.write_lock(tmp_path / "models.yaml",
                        {"qwen3": {"dialects": ["developer"], "cases": ["plain_developer"]}})
    assert load(tmp_path, "", "    dialects: [developer]\n").models["qwen3"].dialect_cases == ("plain_developer",)
    # another selection, or a case the shapes cannot make: chosen again
    assert load(tmp_path, "", "    dialects: [developer, parts]\n").models["qwen3"].dialect_cases is None
    dialects.write_lock(tmp_path / "models.yaml",
                        {"qwen3": {"dialects": ["developer"], "cases": ["multi-turn_developer"]}})
    assert load(tmp_path, "", "    dialects: [developer]\n").models["qwen3"].dialect_cases is None


def test_a_request_file_cannot_take_a_dialect_case_name(tmp_path):
    (tmp_path / "plain_developer.json").write_text('{"messages": [{"role": "user", "content": "hi"}]}')
    text = 'models:\n  qwen3:\n    tokenizer: {pack: "npm:qwen3"}\n    shapes: {only: [plain], requests: [plain_developer.json]}\n'
    (tmp_path / "models.yaml").write_text(text)
    with pytest.raises(GoldensError, match="names a dialect case"):
        models.load(tmp_path / "models.yaml")


def test_the_committed_lock_matches_the_committed_matrix():
    config = models.load(ROOT / "models.yaml")
    for model in config.models.values():
        if not model.dialects:  # `dialects: none` (the built-in families, bounded on purpose): no lock entry
            assert model.dialect_cases == () and not any(dialects.split(c.shape) for c in model_cases(model)), model.name
            continue
        assert model.dialect_cases is not None, model.name
        for name in model.dialect_cases:
            assert (ROOT / "goldens" / model.name / f"{name}.json").is_file()


# --- the request fields engines act on ------------------------------------------------------


def test_request_files_keep_the_fields_engines_act_on():
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": [], "tool_choice": "required",
            "parallel_tool_calls": False, "response_format": {"type": "json_object"}, "reasoning_effort": "low",
            "temperature": 0}
    request = parse_request(json.dumps(body), "body.json")
    assert {k: request[k] for k in ENGINE_FIELDS} == {k: body[k] for k in ENGINE_FIELDS}
    assert "temperature" not in request
    for bad in ({"tool_choice": 3}, {"parallel_tool_calls": "no"}, {"response_format": "json"},
                {"reasoning_effort": 2}, {"tools": {"type": "function"}}):
        with pytest.raises(GoldensError):
            parse_request(json.dumps({**body, **bad}), "body.json")


def test_the_loader_takes_what_servers_take_and_leaves_them_to_judge_it():
    """Bodies goldens once refused before any engine saw them (bench/outside/unwired): null
    optional fields (llama.cpp's tests send `"tools": null, "tool_choice": null`), a bare tool
    name as tool_choice (TGI's), and the legacy `function` role (LangChain's FunctionMessage).
    vLLM and llama-server take each; another role is still a typo."""
    user = {"role": "user", "content": "hi"}
    nulls = parse_request(json.dumps({"messages": [user], "tools": None, "tool_choice": None}), "b.json")
    assert nulls["tools"] is None and nulls["tool_choice"] is None
    named = parse_request(json.dumps({"messages": [user], "tool_choice": "get_weather"}), "b.json")
    assert named["tool_choice"] == "get_weather"
    legacy = parse_request(json.dumps({"messages": [{"role": "function", "name": "f", "content": "{}"}]}), "b.json")
    assert legacy["messages"][0]["role"] == "function"
    with pytest.raises(GoldensError, match=r"messages\[0\]: needs a role \(assistant, developer, function, system, tool, user\)"):
        parse_request(json.dumps({"messages": [{"role": "robot", "content": "hi"}]}), "b.json")
    # null tools reach the reference as no tools: the same prompt as a body without the key
    from generator import reference

    normalized, applied = reference.normalize(nulls, "string")
    assert applied == [] and normalized["tools"] is None


class Recorder(BaseHTTPRequestHandler):
    """A stand-in server answering /apply-template, /tokenize, /v1/chat/completions, keeping bodies."""

    bodies: list[tuple[str, dict]] = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Recorder.bodies.append((self.path, body))
        if self.path == "/apply-template":
            reply = {"prompt": "hi"}
        elif self.path == "/tokenize" and "content" in body:
            reply = {"tokens": [{"id": 1, "piece": "hi"}]}
        elif self.path == "/tokenize":
            reply = {"tokens": [1], "token_strs": ["hi"]}
        else:
            reply = {"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": 1},
                     "prompt_token_ids": [1]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def recorder():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Recorder.bodies = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("name", ["tools-reduced_tool-choice-named", "tools-reduced_tool-choice-required",
                                  "plain_response-format"])
def test_the_fields_reach_every_server_engine(recorder, name):
    from generator.engines.llama_server.engine import LlamaServerEngine
    from generator.engines.openai.engine import OpenAIEngine
    from generator.engines.vllm.engine import VllmEngine

    request = case(name)
    sent = {k: request[k] for k in ENGINE_FIELDS if k in request}
    assert sent
    LlamaServerEngine(recorder).ids(request)
    VllmEngine(recorder, "m").ids(request)
    VllmEngine(recorder, "m").serve(request)
    engine = OpenAIEngine(recorder, "m")
    try:
        engine.ids(request)
    except GoldensError:
        pass  # the stand-in's reply need not satisfy the engine; what it was sent is the point
    finally:
        engine.close()
    chat = {path for path, _ in Recorder.bodies if path != "/tokenize" or "messages" in _}
    assert chat == {"/apply-template", "/tokenize", "/v1/chat/completions"}
    for path, body in Recorder.bodies:
        if "messages" in body:
            assert {k: body.get(k) for k in sent} == sent, path


def test_mistral_common_is_handed_the_fields():
    from generator.engines.mistral_common.engine import MistralCommonEngine

    engine = MistralCommonEngine.__new__(MistralCommonEngine)
    engine.name = "mistral-common"
    chat = engine.request(case("tools-reduced_tool-choice-required"))
    assert chat.tool_choice == "required" and chat.parallel_tool_calls is False
    assert engine.request(case("plain_response-format")).response_format.type == "json_schema"


# --- one regenerate end to end ----------------------------------------------------------------


def invoke(*args) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout.strip().splitlines()[-1]


def test_regenerate_chooses_locks_and_then_writes_nothing(tmp_path):
    own = "    dialects: [args-pretty, content-missing, call-no-id, tool-choice-named]\n"
    (tmp_path / "models.yaml").write_text(CONFIG.format(top="", own=own), encoding="utf-8")
    out = tmp_path / "goldens"
    assert invoke("regenerate", "--config", tmp_path / "models.yaml", "--goldens", out) == "6 written, 0 unchanged, 0 removed"
    lock = tmp_path / "models.dialects.lock"
    chosen = json.loads(lock.read_text())["data"]["qwen3"]
    # Qwen3 prints neither call ids nor (after normalizing) the string: those two reach nothing new
    assert chosen["cases"] == ["tool-result_args-pretty", "tool-result_content-missing",
                               "tools-reduced_tool-choice-named"]
    first = lock.read_bytes()
    assert invoke("regenerate", "--config", tmp_path / "models.yaml", "--goldens", out) == "0 written, 6 unchanged, 0 removed"
    assert invoke("regenerate", "--config", tmp_path / "models.yaml", "--goldens", out,
                  "--rechoose-dialects") == "0 written, 6 unchanged, 0 removed"
    assert lock.read_bytes() == first
    named = golden_file.read(out / "qwen3" / "tools-reduced_tool-choice-named.json")
    assert named.request["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    missing = golden_file.read(out / "qwen3" / "tool-result_content-missing.json")
    assert missing.outcome == "ok" and "content: missing" in missing.extra["normalization"]["applied"][0]
    # a model turned off: its dialect goldens are this matrix's own stale files, removed
    (tmp_path / "models.yaml").write_text(CONFIG.format(top="", own="    dialects: none\n"), encoding="utf-8")
    assert invoke("regenerate", "--config", tmp_path / "models.yaml", "--goldens", out) == "0 written, 3 unchanged, 3 removed"


@pytest.mark.slow  # loads Command R's tokenizer, a model outside conftest.FAST_MODELS
def test_minijinja_refuses_a_python_method_on_the_wrong_type():
    """command-r's template calls content.strip(); with content [] the pycompat callback raised
    AttributeError, which escaped as an internal error and made `check` exit 2."""
    from conftest import CONFIG, source_of

    from generator.engines import Refused
    from generator.engines.minijinja.engine import MinijinjaEngine

    engine = MinijinjaEngine(source_of("command-r"), CONFIG.date)
    with pytest.raises(Refused, match="AttributeError"):
        engine.ids(case("tool-result_content-empty-list"))


def test_function_role_spells_the_tool_result_as_a_legacy_function_message():
    """The result keeps its text and the function's name, loses its tool_call_id; a shape with no
    tool result makes no case."""
    from generator.config.shapes import build

    base = build("tool-result-json-args", {})
    result = case("tool-result-json-args_function-role")["messages"][3]
    assert base["messages"][3]["role"] == "tool" and "tool_call_id" in base["messages"][3]
    assert result == {"role": "function", "name": "get_weather", "content": base["messages"][3]["content"]}
    assert dialects.DIALECTS["function-role"].apply(build("plain", {})) is None
    assert case("tools-reduced_tool-choice-bare")["tool_choice"] == "get_weather"
