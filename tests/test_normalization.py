"""The reference hands a body to the template as vLLM and llama-server do (reference.normalize,
docs/reference-normalization.md): missing and [] content, developer, JSON-string arguments."""

from __future__ import annotations

import copy

import pytest
from conftest import CONFIG, golden_of, source_of, tokenizer_of

from generator import reference
from generator.config import shapes

# models.yaml's models whose template takes tool calls
TOOL_MODELS = ("qwen3", "gemma3", "llama3", "mistral-nemo", "phi3.5", "deepseek-v3", "gpt-oss", "gemma4",
               "command-r")


def _tool_call_turn(content: object) -> dict:
    """system, user, then an assistant tool-call turn whose content is `content` (... = no key)."""
    request = shapes.build("tool-result-json-args", {})
    request["messages"] = request["messages"][:3]
    if content is ...:
        del request["messages"][2]["content"]
    else:
        request["messages"][2]["content"] = content
    return request


@pytest.mark.parametrize("model", TOOL_MODELS)
@pytest.mark.parametrize("content", [..., []], ids=["no-content-key", "empty-list"])
@pytest.mark.slow
def test_a_tool_call_turn_without_content_renders_ok(model, content):
    source = source_of(model)
    request = _tool_call_turn(content)
    result = reference.render(tokenizer_of(model), source.template, request, CONFIG.date)
    assert result.outcome == "ok", result.error
    expected = reference.render(tokenizer_of(model), source.template,
                                _tool_call_turn([] if reference.content_format(source.template) == "openai" else ""),
                                CONFIG.date)
    assert result.ids == expected.ids  # exactly what the empty content of the template's format gives
    assert request["messages"][2].get("content", ...) == content  # the body itself is not touched
    applied = result.normalization["applied"]
    if reference.content_format(source.template) == "string" or content is ...:
        assert applied[0].startswith("messages[2].content: ")


def test_the_template_refusal_as_sent_is_recorded():
    """Qwen3's template reads message.content: a missing key fails there, so the golden says so."""
    result = reference.render(tokenizer_of("qwen3"), source_of("qwen3").template, _tool_call_turn(...), CONFIG.date)
    assert result.normalization["as_sent"]["outcome"] == "error"
    assert "content" in result.normalization["as_sent"]["error"]
    assert result.normalization["applied"][0] == 'messages[2].content: missing, passed as ""'


def test_text_parts_are_joined_on_every_role_for_a_string_template():
    request = {"messages": [{"role": role, "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
                            for role in ("system", "user", "assistant", "tool")]}
    normalized, applied = reference.normalize(request, "string")
    assert [m["content"] for m in normalized["messages"]] == ["a\nb"] * 4
    assert len(applied) == 4
    kept, _ = reference.normalize(request, "openai")  # a template that loops over parts keeps them
    assert kept["messages"][3]["content"] == request["messages"][3]["content"]


def test_developer_becomes_system_unless_the_template_names_it():
    request = {"messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}]}
    normalized, applied = reference.normalize(request, "string")
    assert normalized["messages"][0] == {"role": "system", "content": "Be brief."}
    assert applied == ["messages[0].role: developer passed as system (the template does not name it)"]
    same, none = reference.normalize(request, "string", developer=True)
    assert same is request and none == []
    assert reference.names_developer(source_of("gpt-oss").template)
    assert not reference.names_developer(source_of("qwen3").template)


def test_string_arguments_become_objects_and_empty_ones_empty_objects():
    calls = [{"type": "function", "function": {"name": "f", "arguments": text}}
             for text in ('{"city":"Paris"}', "", None, "not json", "[1]")]
    request = {"messages": [{"role": "assistant", "content": "", "tool_calls": calls}]}
    before = copy.deepcopy(request)
    normalized, applied = reference.normalize(request, "string")
    got = [c["function"]["arguments"] for c in normalized["messages"][0]["tool_calls"]]
    assert got == [{"city": "Paris"}, {}, {}, "not json", "[1]"]  # not an object: passed as sent
    assert len(applied) == 3
    assert request == before  # the body as sent is never rewritten in place
    dropped, _ = reference.normalize({"messages": [{"role": "assistant", "content": "x", "tool_calls": []}]}, "string")
    assert "tool_calls" not in dropped["messages"][0]


def test_an_empty_tools_list_is_no_tools_and_a_tool_without_type_a_function():
    """llama-server and mistral-common render `tools: []` as no tools (vLLM refuses it); vLLM's
    request model gives a tool without `type` "function" (llama-server refuses it)."""
    tool = {"function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    request = {"messages": [{"role": "user", "content": "hi"}], "tools": [tool, {"type": "function", **tool}]}
    before = copy.deepcopy(request)
    normalized, applied = reference.normalize(request, "string")
    assert normalized["tools"] == [{"type": "function", **tool}] * 2
    assert applied == ['tools[0].type: missing, passed as "function"'] and request == before
    empty, applied = reference.normalize({**request, "tools": []}, "string")
    assert empty["tools"] is None and applied == ["tools: [] passed as none"]
    # the goldens: Llama 3.1 writes no tool preamble for tools: [], and tool-no-type renders
    # exactly its base shape
    assert golden_of("llama3/plain_tools-empty").ids == golden_of("llama3/plain").ids
    assert golden_of("qwen3/tools-reduced_tool-no-type").ids == golden_of("qwen3/tools-reduced").ids
    as_sent = golden_of("llama3/plain_tools-empty").extra["normalization"]["as_sent"]
    assert (as_sent["outcome"], as_sent["same_prompt"]) == ("ok", False)
    assert as_sent["token_count"] > len(golden_of("llama3/plain").ids)  # the template's empty tool preamble


def test_reasoning_effort_becomes_template_kwargs_as_both_servers_make_it():
    """llama-server and vLLM turn `reasoning_effort` into template kwargs over chat_template_kwargs:
    "none" turns thinking off, any other effort is passed on and turns it on; an enable_thinking
    the body's kwargs set stays."""
    from generator.config.request import validate_request

    body = {"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "none", "temperature": 0}
    request = validate_request(body, "body")  # the loader keeps the field, as it keeps tool_choice
    assert request["reasoning_effort"] == "none" and "temperature" not in request
    normalized, applied = reference.normalize(request, "string")
    assert normalized["chat_template_kwargs"] == {"enable_thinking": False}
    assert applied == ['reasoning_effort: "none" passed as template kwargs {"enable_thinking": false}']
    high, _ = reference.normalize({**request, "reasoning_effort": "high",
                                   "chat_template_kwargs": {"enable_thinking": False, "x": 1}}, "string")
    assert high["chat_template_kwargs"] == {"enable_thinking": False, "x": 1, "reasoning_effort": "high"}
    # Qwen3 with effort none: the empty think block both servers' enable_thinking false writes
    assert golden_of("qwen3/plain_effort-none").prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not golden_of("qwen3/plain").prompt.endswith("</think>\n\n")


def test_llama3_string_arguments_render_as_the_servers_render_them():
    """Both servers hand Llama 3.1's template the parsed object (the ledger entries that said so
    are gone): the golden writes {"city": "Paris"}, not an escaped string."""
    item = golden_of("llama3/tool-result-json-args")
    assert '"parameters": {"city": "Paris"}' in item.prompt
    assert item.request["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'
    as_sent = item.extra["normalization"]["as_sent"]
    assert (as_sent["outcome"], as_sent["same_prompt"]) == ("ok", False) and as_sent["token_count"] != len(item.ids)
    assert len(as_sent["ids_sha256"]) == 64


def test_a_body_that_needs_nothing_is_passed_as_the_same_object():
    request = shapes.build("tool-result", {})
    assert reference.normalize(request, "string") == (request, [])
    assert "normalization" not in golden_of("qwen3/tool-result").extra
