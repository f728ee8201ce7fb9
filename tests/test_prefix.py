"""Prefix stability on Transformers and on a real llama-server, the goldens that record it, and
`goldens prefix`.

The figures are the tutorial's, on the three-request conversation (system 'You are terse.',
'What is 2 + 2?', '4.', 'And times 3?', '12.', 'Minus 5?') with Qwen3: thinking on, no breaks;
thinking off, breaks at tokens 25 (2 -> 4 messages) and 42 (4 -> 6), none outside the declared
tail of 4; the same two tools in the other order after the first reply, a break at token 56.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import CONFIG, GOLDENS, ROOT, source_of

from generator.analysis import busters, diagnosis, prefix
from generator.cli import main
from generator.config import models, shapes
from generator.engines.llama_server.engine import LlamaServerEngine
from generator.engines.transformers.engine import TransformersEngine
from generator.errors import GoldensError
from generator.goldens import golden_file

QWEN3 = CONFIG.models["qwen3"]
THINKING_OFF = {"enable_thinking": False}


@pytest.fixture(scope="module")
def transformers_engine():
    return TransformersEngine(source_of("qwen3"), CONFIG.date)


@pytest.fixture(params=["transformers", pytest.param("llama-server", marks=pytest.mark.integration)])
def engine(request):
    if request.param == "transformers":
        return request.getfixturevalue("transformers_engine")
    return LlamaServerEngine(request.getfixturevalue("qwen3_llama_server").url)


def session(kwargs: dict) -> list[dict]:
    return prefix.requests_of({"messages": shapes.SESSION, "chat_template_kwargs": kwargs})


def positions(result: prefix.Result) -> list[tuple[int, int, int]]:
    return [(b.position, b.earlier, b.later) for b in result.breaks]


# ------------------------------------------------------------------------------ request points


def test_a_request_follows_every_user_turn_or_run_of_tool_results():
    assert prefix.request_points(shapes.SESSION) == [2, 4, 6]
    assert prefix.request_points([shapes.SYSTEM]) == []  # a system message alone is never a request
    parallel = shapes.build("parallel-tool-calls", {})["messages"]
    assert [m["role"] for m in parallel] == ["system", "user", "assistant", "tool", "tool"]
    assert prefix.request_points(parallel) == [2, 5]  # both results go out in one request
    # a recorded conversation that ends in the reply: the reply is not a request
    assert prefix.request_points([*shapes.SESSION, {"role": "assistant", "content": "7."}]) == [2, 4, 6]


def test_requests_of_keeps_tools_and_kwargs_and_asks_for_a_reply():
    requests = prefix.requests_of({"messages": shapes.SESSION, "tools": shapes.TOOLS,
                                   "chat_template_kwargs": THINKING_OFF, "continue_final_message": True})
    assert [len(r["messages"]) for r in requests] == [2, 4, 6]
    assert all(r["tools"] == shapes.TOOLS and r["chat_template_kwargs"] == THINKING_OFF for r in requests)
    assert all(r["add_generation_prompt"] and not r["continue_final_message"] for r in requests)


def test_find_breaks_allows_only_the_declared_tail():
    sent = [prefix.Sent(2, [1, 2, 3, 4, 5], list("abcde")), prefix.Sent(4, [1, 2, 3, 9, 9, 9], list("abcXYZ"))]
    (item,) = prefix.find_breaks(sent, tail=0)
    assert (item.position, item.declared) == (3, False)
    assert (item.shared, item.earlier_pieces, item.later_pieces) == (list("abc"), list("de"), list("XYZ"))
    assert prefix.find_breaks(sent, tail=2)[0].declared
    assert not prefix.find_breaks(sent, tail=1)[0].declared  # one token before the tail still counts
    # a later request that only adds tokens is no break; one that is shorter is
    assert prefix.find_breaks([prefix.Sent(2, [1, 2]), prefix.Sent(4, [1, 2, 3])]) == []
    assert prefix.find_breaks([prefix.Sent(2, [1, 2, 3]), prefix.Sent(4, [1, 2])])[0].position == 2


# ------------------------------------------------------------------------------ the tutorial's figures


def test_thinking_on_keeps_the_prefix(engine):
    result = prefix.check(engine, session({}), prefix.tail_for(QWEN3, {}))
    assert [len(s.ids) for s in result.sent] == [25, 42, 59]
    assert result.breaks == []


def test_thinking_off_breaks_four_tokens_before_the_end_by_design(engine):
    undeclared = prefix.check(engine, session(THINKING_OFF))
    assert [len(s.ids) for s in undeclared.sent] == [29, 46, 63]
    assert positions(undeclared) == [(25, 2, 4), (42, 4, 6)]
    assert [b.declared for b in undeclared.breaks] == [False, False]
    for item in undeclared.breaks:
        assert item.earlier_pieces == ["<think>", "\n\n", "</think>", "\n\n"]
        assert item.shared == ["<|im_start|>", "assistant", "\n"]

    tail = prefix.tail_for(QWEN3, THINKING_OFF)
    assert tail is not None and tail.tokens == 4 and "think" in tail.reason
    declared = prefix.check(engine, session(THINKING_OFF), tail)
    assert positions(declared) == [(25, 2, 4), (42, 4, 6)]
    assert declared.undeclared == []
    assert all(b.hint.startswith("declared tail of 4:") for b in declared.breaks)


def test_tools_reordered_after_the_first_reply_break_at_token_56(engine):
    results = {r.buster.name: r for r in busters.cache_busters(engine, {}, prefix.tail_for(QWEN3, {}))}
    reordered = results["tools-reordered"]
    assert positions(reordered.busted) == [(56, 2, 4)]
    item = reordered.busted.breaks[0]
    assert item.shared[-1] == "get"
    assert (item.earlier_pieces[0], item.later_pieces[0]) == ("_weather", "_time")
    assert "reordered" in item.hint and "fixed order" in item.hint
    assert reordered.fixed.breaks == []  # the same order on every request keeps the prefix
    assert [len(s.ids) for s in reordered.busted.sent] == [234, 251, 268]


def test_reasoning_kept_then_dropped_breaks_inside_the_tool_loop(engine):
    results = {r.buster.name: r for r in busters.cache_busters(engine, {})}
    dropped = results["reasoning-dropped"]
    assert positions(dropped.busted) == [(232, 4, 6)]
    item = dropped.busted.breaks[0]
    assert item.earlier_pieces[:3] == ["<think>", "\n", "Weather"]
    assert item.later_pieces[0] == "<tool_call>"
    assert "reasoning_content" in item.hint and "let the template decide" in item.hint
    assert dropped.fixed.breaks == []


def test_tool_arguments_retyped_keep_the_prefix(engine):
    """A client that parses the server's JSON-string arguments into an object keeps its prefix:
    llama-server parses string arguments and re-serializes them, and so does the reference, which
    normalizes a body as the servers do (reference.normalize: a JSON-string object is decoded)."""
    results = {r.buster.name: r for r in busters.cache_busters(engine, {})}
    retyped = results["tool-arguments-retyped"]
    assert retyped.fixed.breaks == []
    assert retyped.busted.breaks == []


def test_a_refused_request_is_recorded_and_skipped():
    engine = TransformersEngine(source_of("gemma3"), CONFIG.date)
    results = {r.buster.name: r for r in busters.cache_busters(engine, {})}
    sent = results["reasoning-dropped"].busted.sent
    assert [s.refused is None for s in sent] == [True, False, False]
    assert "Conversation roles must alternate" in sent[1].refused
    assert results["reasoning-dropped"].busted.breaks == []
    assert results["tools-reordered"].busted.breaks == []  # gemma3's template renders no tools


def test_diagnose_names_the_client_change():
    first, second = session({})[:2]
    assert "unchanged" in diagnosis.diagnose(first, second)
    assert "reordered" in diagnosis.diagnose({**first, "tools": shapes.TOOLS},
                                             {**second, "tools": shapes.TOOLS[::-1]})
    assert "tool list changed" in diagnosis.diagnose({**first, "tools": shapes.TOOLS},
                                                     {**second, "tools": shapes.TOOLS[:1]})
    assert "chat_template_kwargs" in diagnosis.diagnose(first, {**second, "chat_template_kwargs": THINKING_OFF})
    messages = [{**second["messages"][0], "content": "Be verbose."}, *second["messages"][1:]]
    edited = {**second, "messages": messages}
    assert "messages[0] changed between requests (content)" in diagnosis.diagnose(first, edited)


# ------------------------------------------------------------------------------ goldens


def test_multi_turn_goldens_record_request_lengths_and_breaks():
    on = golden_file.read(golden_file.golden_path(GOLDENS, "qwen3/multi-turn"))
    assert [(r["messages"], r["tokens"]) for r in on.extra["requests"]] == [(2, 25), (4, 42), (6, 59)]
    assert on.extra["prefix_breaks"] == []
    assert "prefix_tail" not in on.extra

    off = golden_file.read(golden_file.golden_path(GOLDENS, "qwen3/multi-turn--thinking-off"))
    assert [(r["messages"], r["tokens"]) for r in off.extra["requests"]] == [(2, 29), (4, 46), (6, 63)]
    assert off.extra["requests"][-1]["sha256"] == prefix.Sent(6, off.ids).sha256  # the last request is the golden
    assert [(b["at"], b["messages"], b["declared"]) for b in off.extra["prefix_breaks"]] == [
        (25, "2 -> 4", True), (42, "4 -> 6", True)]
    assert off.extra["prefix_breaks"][0]["earlier"] == "<think>\n\n</think>\n\n"
    assert off.extra["prefix_tail"]["tokens"] == 4
    busters = off.extra["cache_busters"]
    assert busters["tools-reordered"]["as_sent"] == (
        "tokens 238, 255, 272; breaks at 56 (2 -> 4), 251 (4 -> 6, declared)")
    assert "breaks at 56" not in busters["tools-reordered"]["fixed"]


def test_only_multi_request_shapes_record_requests():
    for path in sorted((GOLDENS / "qwen3").glob("*.json")):
        if not golden_file.is_golden_file(path):
            continue
        item = golden_file.read(path)
        if item.outcome != "ok":  # a refused render has no prompt to break into requests
            assert "requests" not in item.extra, path.name
            continue
        assert ("requests" in item.extra) == prefix.is_multi_request(item.request), path.name
        shape = item.case.split("/")[1].split("--")[0]  # the multi-turn shape, not its dialect cases
        assert ("cache_busters" in item.extra) == (shape == "multi-turn"), path.name


# ------------------------------------------------------------------------------ models.yaml


@pytest.mark.parametrize("tails, message", [
    ({"thinking-of": {"tokens": 4, "reason": "x"}},
     "m.yaml: models.qwen3.prefix_tails.thinking-of: unknown variant (known: default, thinking-off)"),
    ({"thinking-off": {"tokens": 0, "reason": "x"}},
     "m.yaml: models.qwen3.prefix_tails.thinking-off.tokens: expected a positive integer"),
    ({"thinking-off": {"tokens": True, "reason": "x"}},
     "m.yaml: models.qwen3.prefix_tails.thinking-off.tokens: expected a positive integer"),
    ({"thinking-off": {"tokens": 4}},
     "m.yaml: models.qwen3.prefix_tails.thinking-off.reason: missing required key"),
    ({"thinking-off": {"tokens": 4, "reason": " "}},
     "m.yaml: models.qwen3.prefix_tails.thinking-off.reason: expected a non-empty string"),
    ({"thinking-off": {"tokens": 4, "reason": "x", "why": "y"}},
     "m.yaml: models.qwen3.prefix_tails.thinking-off.why: unknown key (allowed: reason, tokens)"),
    ({"thinking-off": 4}, "m.yaml: models.qwen3.prefix_tails.thinking-off: expected a mapping, got int"),
    ([4], "m.yaml: models.qwen3.prefix_tails: expected a mapping, got list"),
])
def test_prefix_tails_errors_name_the_key_path(tails, message):
    data = {"models": {"qwen3": {"tokenizer": {"pack": "npm:qwen3"},
                                 "variants": {"thinking-off": {"enable_thinking": False}},
                                 "prefix_tails": tails}}}
    with pytest.raises(GoldensError) as error:
        models.parse(data, Path("m.yaml"))
    assert str(error.value) == message


def test_prefix_tail_for_the_default_variant():
    data = {"models": {"m": {"tokenizer": {"pack": "npm:qwen3"},
                             "prefix_tails": {"default": {"tokens": 2, "reason": "by design"}}}}}
    model = models.parse(data, Path("m.yaml")).models["m"]
    assert prefix.tail_for(model, {}) == models.PrefixTail(2, "by design")
    assert prefix.tail_for(model, {"other": 1}) is None


# ------------------------------------------------------------------------------ goldens prefix


def invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(main, ["prefix", "--config", str(ROOT / "models.yaml"), *args], input=input)


def test_prefix_command_reports_declared_breaks_and_exits_0():
    result = invoke("--model", "qwen3")
    assert result.exit_code == 0, result.output
    assert "qwen3/multi-turn [default] on transformers: 3 requests of 2, 4, 6 messages: 25, 42, 59 tokens" in result.output
    assert "qwen3/multi-turn [thinking-off] on transformers: 3 requests of 2, 4, 6 messages: 29, 46, 63 tokens" in result.output
    assert "declared break at token 25 (2 -> 4 messages), 29 vs 46 tokens" in result.output
    assert "declared break at token 42 (4 -> 6 messages), 46 vs 63 tokens" in result.output
    assert "    earlier »'<think>' '\\n\\n' '</think>' '\\n\\n'" in result.output
    assert result.output.rstrip().endswith("0 undeclared")


def test_prefix_command_exits_1_on_an_undeclared_break_in_a_conversation(tmp_path):
    first, second = session({})[:2]
    log = tmp_path / "client-log.json"
    log.write_text(json.dumps([{**first, "tools": shapes.TOOLS}, {**second, "tools": shapes.TOOLS[::-1]}]))
    result = invoke("--model", "qwen3", "--conversation", str(log))
    assert result.exit_code == 1, result.output
    assert "UNDECLARED break at token 56 (2 -> 4 messages), 234 vs 251 tokens" in result.output
    assert "    earlier »'_weather'" in result.output and "    later   »'_time'" in result.output
    assert "send the tools in one fixed order" in result.output


def test_prefix_command_takes_one_recorded_conversation_from_stdin():
    body = json.dumps({"model": "x", "temperature": 0, "messages": [*shapes.SESSION, {"role": "assistant", "content": "7."}]})
    result = invoke("--model", "qwen3", "--kwargs", '{"enable_thinking": false}', "--conversation", "-", input=body)
    assert result.exit_code == 0, result.output
    assert "qwen3 <stdin> [thinking-off] on transformers: 3 requests of 2, 4, 6 messages: 29, 46, 63 tokens" in result.output
    assert result.output.count("declared break") == 2

    undeclared = invoke("--model", "qwen3", "--kwargs", '{"enable_thinking": false, "x": 1}', "--conversation", "-",
                        input=body)
    assert undeclared.exit_code == 1  # kwargs of no declared variant: no tail
    assert "UNDECLARED break at token 25" in undeclared.output


@pytest.mark.integration
def test_prefix_command_on_a_running_llama_server(qwen3_llama_server):
    result = invoke("--model", "qwen3", "--engine", "llama-server", "--url", qwen3_llama_server.url, "--cache-busters")
    assert result.exit_code == 0, result.output
    assert "qwen3/multi-turn [thinking-off] on llama-server: 3 requests of 2, 4, 6 messages: 29, 46, 63 tokens" in result.output
    assert "cache-buster tools-reordered on llama-server" in result.output
    assert "UNDECLARED break at token 56 (2 -> 4 messages)" in result.output
    assert "  fix: send the tool list in one fixed order" in result.output


@pytest.mark.parametrize("args, input, message", [
    (["--model", "qwen3", "--kwargs", "{nope"], None, "goldens: error: --kwargs: not valid JSON"),
    (["--model", "qwen3", "--kwargs", "[1]"], None, "goldens: error: --kwargs: expected a JSON object"),
    (["--model", "nope"], None, "goldens: error: models.yaml: unknown model 'nope'"),
    (["--model", "qwen3", "--engine", "nope"], None, "goldens: error: unknown engine 'nope'"),
    (["--model", "qwen3", "--conversation", "-"], '{"messages": [{"role": "user", "content": "hi"}]}',
     "goldens: error: <stdin>: the conversation has 1 request point(s)"),
    (["--model", "qwen3", "--conversation", "-"], '{"messages": "hi"}',
     "goldens: error: <stdin>: `messages` must be a non-empty list"),
    (["--model", "qwen3", "--conversation", "-"], '[{"messages": [{"role": "user", "content": "hi"}]}, 3]',
     "goldens: error: <stdin>[1]: expected a JSON object with `messages`"),
    (["--model", "qwen3", "--engine", "llama-server", "--url", "http://127.0.0.1:9"], None,
     "goldens: error: llama-server at http://127.0.0.1:9/apply-template: connection failed"),
])
def test_prefix_command_bad_input_is_one_line_and_exit_2(args, input, message):
    result = invoke(*args, input=input)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith(message), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)


# ------------------------------------------------------- a long conversation (issue 44)

@pytest.mark.parametrize("points", [1, 2, 15, 16, 17, 100, 5000])
def test_a_sample_of_request_points_keeps_the_ends_and_at_most_the_cap(points):
    chosen = prefix.sampled(list(range(2, 2 * points + 2, 2)), 16)
    assert len(chosen) == min(points, 16) and chosen == sorted(set(chosen))
    assert chosen[0] == 2 and chosen[-1] == 2 * points
    if points > 16:  # spread over the whole conversation, not its start
        gaps = [b - a for a, b in zip(chosen, chosen[1:])]
        assert max(gaps) <= 2 * (2 * points // 15 + 1), gaps


def _conversation(turns: int) -> dict:
    messages = []
    for i in range(turns):
        messages += [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]
    return {"messages": messages + [{"role": "user", "content": "last"}]}


def test_a_long_conversations_prefix_analysis_renders_at_most_the_cap(transformers_engine):
    """regenerate rendered every prefix of a conversation: 1,000 messages took 44 s, 2,000 163 s,
    10,000 about an hour. It renders at most MAX_REQUESTS of them, and a break among the requests
    left out still shows between the ones kept."""
    conversation = _conversation(60)
    requests = prefix.requests_of(conversation, at_most=prefix.MAX_REQUESTS)
    assert len(requests) == prefix.MAX_REQUESTS and len(requests[-1]["messages"]) == 121
    assert len(prefix.requests_of(conversation)) == 61  # `goldens prefix` still checks them all
    asked: list[int] = []

    class Counting:
        name = transformers_engine.name

        def ids(self, request):
            asked.append(len(request["messages"]))
            if len(request["messages"]) > 60:  # a client that rewrote an early message from here on
                request = {**request, "messages": [{"role": "user", "content": "rewritten"}, *request["messages"][1:]]}
            return transformers_engine.ids(request)

    result = prefix.check(Counting(), requests)
    assert asked == [len(r["messages"]) for r in requests]
    assert len(result.breaks) == 1 and result.breaks[0].earlier < 60 < result.breaks[0].later


@pytest.mark.slow
def test_regenerate_of_a_long_conversation_is_bounded_and_says_so(tmp_path):
    """2,000 messages took 163 s of regenerate and 833 MB, silently; now at most MAX_REQUESTS
    renders of it, a progress line, and the golden says how many of its requests it rendered."""
    import os
    import resource
    import subprocess
    import sys

    (tmp_path / "requests").mkdir()
    (tmp_path / "requests" / "long.json").write_text(json.dumps(_conversation(1000)))
    (tmp_path / "models.yaml").write_text(
        "date: 2026-01-15\nmodels:\n  m:\n    tokenizer: {pack: \"npm:qwen3\"}\n"
        "    shapes: {only: [plain], requests: [requests/long.json]}\n    engines: [transformers]\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "generator.cli", "regenerate"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr
    assert "m/long: prefix analysis of a 2001-message conversation: done in" in done.stderr
    golden = golden_file.read(tmp_path / "goldens" / "m" / "long.json")
    assert golden.extra["prefix_sampled"] == {"rendered": prefix.MAX_REQUESTS, "of": 1001}
    assert len(golden.extra["requests"]) == prefix.MAX_REQUESTS
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert cpu < 60, f"{cpu:.0f} s of CPU for a 2,001-message conversation"
