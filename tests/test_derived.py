"""Derived dialects (generator/config/derived.py): generated from the committed catalogue of the
schemas engines accept (requests/schema.json), combined pairwise, locked (requests/schema.derived.lock)."""

from __future__ import annotations

import itertools
import json

import pytest

from generator.config import derived, dialects
from generator.config.shapes import build


def test_the_covering_array_covers_every_pair_of_levels():
    sizes = [3, 2, 4, 2, 3]
    rows = derived.covering_array(sizes, seed=7)
    for i, j in itertools.combinations(range(len(sizes)), 2):
        seen = {(row[i], row[j]) for row in rows}
        assert seen == set(itertools.product(range(sizes[i]), range(sizes[j]))), (i, j)
    assert len(rows) < 3 * 2 * 4 * 2 * 3  # far fewer than the product
    assert derived.covering_array(sizes, seed=7) == rows  # seeded: the same rows


def test_the_catalogue_has_every_source_the_generator_reads():
    cat = derived.catalogue()
    assert {"openai", "vllm", "mistral-common", "llama.cpp", "json-schema"} <= set(cat)
    assert cat["json-schema"]["draft"] == "2020-12" and "prefixItems" in cat["json-schema"]["keywords"]
    assert "reasoning_content" in cat["llama.cpp"]["keys"]["common/chat.cpp:common_chat_msgs_parse_oaicompat"]


def test_levels_follow_what_the_sources_allow():
    factors = {f.name: f for f in derived.factors(derived.catalogue())}
    name = {lv.name: lv for lv in factors["user.name"].levels}
    assert name["string"].valid and not name["null"].valid  # every source types `name` a string
    content = {lv.name: lv for lv in factors["assistant.content"].levels}
    assert content["null"].valid  # openai's assistant message takes content null
    keywords = {lv.name for lv in factors["tools.function.parameters"].levels}
    assert {"anyOf", "ref", "defs", "prefixItems", "format", "enum"} <= keywords


def test_invalid_levels_and_kinds_of_things_are_rows_of_their_own():
    rows = derived.read_lock()
    factors = {f.name: {lv.name: lv for lv in f.levels} for f in derived.factors(derived.catalogue())}
    for row in rows:
        levels = [factors[f][lv] for f, lv in row.assignment]
        if any(not lv.valid or lv.single for lv in levels):
            assert len(levels) == 1, row


def test_every_locked_row_rewrites_its_shape_as_a_dialect():
    assert dialects.DERIVED and all(name.startswith("gen-") for name in dialects.DERIVED)
    for name in dialects.DERIVED[:200]:
        spec = dialects.DIALECTS[name]
        (shape,) = spec.shapes
        out = spec.apply(build(shape, {}))
        assert out is not None and out != build(shape, {}), name


@pytest.mark.slow
def test_the_lock_is_what_the_catalogue_and_seed_generate():
    data = json.loads(derived.LOCK.read_text(encoding="utf-8"))["data"]
    assert data["catalogue_sha256"] == derived.digest() and data["seed"] == derived.SEED
    generated = derived.rows()
    assert [(r.name, r.shape, [list(a) for a in r.assignment]) for r in generated] == \
        [(r["name"], r["shape"], r["set"]) for r in data["rows"]]


def test_llama_cpp_keys_are_read_from_the_parser_function_alone(tmp_path):
    from generator.coverage import schemas

    source = tmp_path / "common" / "chat.cpp"
    source.parent.mkdir(parents=True)
    source.write_text('''
static void other(const json & m) { m.at("not_this_one"); }
std::vector<common_chat_msg> common_chat_msgs_parse_oaicompat(const json & messages) {
    for (const auto & message : messages) {
        if (message.contains("reasoning_content")) { auto r = message.at("reasoning_content"); }
        auto role = json_value(message, "role", std::string());
        if (message["tool_calls"].is_array()) { }
    }
}
std::vector<common_chat_tool> common_chat_tools_parse_oaicompat(const json & tools) { tools.at("function"); }
''')
    server = tmp_path / "tools" / "server" / "server-common.cpp"
    server.parent.mkdir(parents=True)
    server.write_text('json oaicompat_chat_params_parse(json & body, const x & opt) { body.find("tool_choice"); }\n')
    keys = schemas.llama_keys(tmp_path)
    assert keys["common/chat.cpp:common_chat_msgs_parse_oaicompat"] == ["reasoning_content", "role", "tool_calls"]
    assert keys["common/chat.cpp:common_chat_tools_parse_oaicompat"] == ["function"]
    assert keys["tools/server/server-common.cpp:oaicompat_chat_params_parse"] == ["tool_choice"]


def test_json_schema_keywords_come_from_the_2020_12_vocabularies():
    from generator.coverage import schemas

    keywords = schemas.json_schema_keywords()
    assert keywords["prefixItems"] == {"vocabulary": "applicator", "value": "schema-array"}
    assert keywords["minLength"]["value"] == "count" and keywords["$defs"]["value"] == "schema-map"
    assert "unevaluatedProperties" in keywords and "contentSchema" in keywords
