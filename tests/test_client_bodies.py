"""Bodies as OpenAI clients send them: `"content": null` beside tool calls, content as a list of
text parts. The reference renders them the way the serving request layer hands them to the
template (vLLM's per-template content format), records what it changed and the template's own
outcome on the body as sent; the servers are judged against that."""

from __future__ import annotations

import pytest
from conftest import CONFIG, GOLDENS, engine_of, golden_of, model_servers, server_marks, source_of

from generator import reference
from generator.engines import Refused
from generator.replay.judging import causes, ledger

CLIENT_CASES = [f"{model}/{shape}" for model in ("qwen3", "phi3.5")
                for shape in ("client-null-content", "client-text-parts")]


@pytest.mark.parametrize("case_id", CLIENT_CASES)
def test_client_bodies_give_ok_goldens_and_record_the_refusal_as_sent(case_id):
    item = golden_of(case_id)
    assert item.outcome == "ok" and item.ids
    record = item.extra["normalization"]
    assert record["content_format"] == "string"
    assert record["as_sent"]["outcome"] == "error"  # the template itself refuses the raw body
    if case_id.endswith("null-content"):
        assert item.request["messages"][2]["content"] is None  # the golden keeps the body as sent
        assert record["applied"] == ['messages[2].content: null passed as ""',
                                     "messages[2].tool_calls[0].function.arguments: a JSON string passed as an object"]
    else:
        assert isinstance(item.request["messages"][1]["content"], list)
        assert "What is 2 + 2?\nAnswer with a digit." in item.prompt  # text parts joined by \n


def test_content_format_follows_the_template():
    """A template that loops over a message's content takes text-part lists (vLLM's "openai"
    format); the others take strings."""
    assert reference.content_format(source_of("gemma3").template) == "openai"
    assert reference.content_format(source_of("qwen3").template) == "string"
    looping = ("{% for m in messages %}{% for part in m['content'] %}[{{ part.text }}]{% endfor %}"
               "{% endfor %}")
    assert reference.content_format(looping) == "openai"
    assert reference.content_format("{% for m in messages %}{{ m.content }}{% endfor %}") == "string"


def test_openai_format_keeps_text_parts_and_passes_null_as_an_empty_list():
    request = {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "a", "cache_control": {}}]},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "user", "content": "plain"},
    ]}
    normalized, applied = reference.normalize(request, "openai")
    assert normalized["messages"][0]["content"] == [{"type": "text", "text": "a"}]
    assert normalized["messages"][1]["content"] == []
    assert normalized["messages"][2] is request["messages"][2]  # a string reaches the template as sent
    assert len(applied) == 3 and applied[2] == "messages[1].tool_calls: [] removed"  # as both servers do
    same, none = reference.normalize({"messages": [{"role": "user", "content": "x"}]}, "string")
    assert none == [] and same["messages"][0]["content"] == "x"


REPLAYS = [pytest.param(case_id, engine, id=f"{case_id}@{engine}",
                        marks=[pytest.mark.integration, *server_marks(engine, case_id.split("/")[0])])
           for case_id in CLIENT_CASES + [c + "--thinking-off" for c in CLIENT_CASES if c.startswith("qwen3")]
           for engine in model_servers()
           if engine in CONFIG.models[case_id.split("/")[0]].engines]


@pytest.mark.parametrize(("case_id", "engine_name"), REPLAYS)
def test_servers_render_client_bodies_as_the_golden(case_id, engine_name, pool):
    """llama-server and vLLM, sent the body exactly as a client sends it, give the golden's ids,
    or, where a reviewed cause says so, the golden's ids behind the phi-3 GGUF's own <s> and
    nothing else (the GGUF says add_bos_token; the body's normalization is the reference's)."""
    item = golden_of(case_id)
    engine = engine_of(pool, engine_name, item.model)
    assert ledger.read(GOLDENS, case_id, engine_name) is None
    try:
        actual = list(engine.ids(item.request))
    except Refused as refusal:  # only a reviewed refusal cause may explain it (vLLM with no tool parser)
        explaining = [c.name for c in causes.covering(GOLDENS, engine_name, item.model)
                      if c.refusal and c.explains_refusal(str(refusal), item)]
        assert explaining, str(refusal)
        return
    if actual != item.ids:  # only a reviewed cause that is an edit of the golden may explain it
        explaining = [c.name for c in causes.covering(GOLDENS, engine_name, item.model)
                      if c.explains(item.ids, actual, item)]
        assert explaining == ["phi3-gguf-bos"] and engine_name == "llama-server", (explaining, actual[:20])
        assert actual == [1] + item.ids
