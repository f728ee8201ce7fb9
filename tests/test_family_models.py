"""Built-in families in the matrix (`family:` in models.yaml): the key's parse and its one-line
errors, the surrogate tokenizer derived from the nearest real one (sources/surrogate.py), and the
`surrogate` marking in provenance, `goldens models`, the engines table and the check reports.
Expectations come from the catalogue (generator/data/families.json) and the nearest's own files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import CONFIG, ROOT, golden_of, one_line_error, source_of

from generator.cli import main
from generator.config import engine_matrix, families, models
from generator.goldens.render import provenance
from generator.replay.judging.outcome import Outcome
from generator.replay.reporting.report import Summary, surrogate_note
from generator.replay.reporting.terminal import terminal
from generator.sources import surrogate
from generator.sources.source import _pack_tokenizer, resolve, tokenizer_fingerprint

CATALOGUE = {family.name: family for family in families.builtin()}
FAMILY_MODELS = [name for name, model in CONFIG.models.items() if model.tokenizer.family is not None]


def nearest_dir(family: families.Family) -> Path:
    return _pack_tokenizer(family.tokenizer.source, dict(family.tokenizer.tokenizer_config or {}))[0]


def read(directory: Path) -> tuple[dict, dict]:
    return (json.loads((directory / "tokenizer.json").read_text(encoding="utf-8")),
            json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8")))


def known_tokens(tokenizer: dict) -> dict[str, int]:
    """Every token of a tokenizer.json with its id: its vocabulary, then its added tokens."""
    return {**tokenizer["model"]["vocab"], **{item["content"]: item["id"] for item in tokenizer["added_tokens"]}}


# ------------------------------------------------------------------------------ the matrix

def test_the_five_families_are_in_the_matrix_as_their_catalogue_says():
    assert {"kimi-k3", "deepseek-v4", "glm-4.7-flash", "minimax-m3", "qwen3.5-4b"} <= set(FAMILY_MODELS)
    for name in FAMILY_MODELS:
        spec, family = CONFIG.models[name], CATALOGUE[CONFIG.models[name].tokenizer.family]
        assert spec.template.kind == "pack" and spec.template.value == family.template_pack
        assert spec.tokenizer.value == family.tokenizer.source
        assert spec.surrogate == (family.tokenizer.kind == "surrogate")
        assert spec.tokenizer.adds == (family.tokenizer.adds if spec.surrogate else ())
        assert {"transformers", "llama-server", "vllm", "minijinja"} <= set(spec.engines)


def test_a_family_model_may_bear_its_family_name_and_no_other_model_does():
    for name, model in CONFIG.models.items():
        if name in CATALOGUE:
            assert model.tokenizer.family == name, name


# ------------------------------------------------------------------------------ the surrogate

def tiny_nearest(tmp_path: Path) -> Path:
    """A small real tokenizer directory (a byte-level BPE trained here, with one added special
    token), so the derivation's rules are checked in well under a second; the real nearest
    tokenizers are checked below in the slow tier (an 11 MB tokenizer.json costs seconds)."""
    from tokenizers import Tokenizer, decoders, models as tmodels, pre_tokenizers, trainers

    tokenizer = Tokenizer(tmodels.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(["hello world <think> x </think> 1234"] * 4,
                                  trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    directory = tmp_path / "nearest"
    directory.mkdir()
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ x }}", "added_tokens_decoder": {
        "0": {"content": "<|endoftext|>", "special": True}}}), encoding="utf-8")
    return directory


def test_the_derivation_on_a_small_tokenizer(tmp_path):
    nearest = tiny_nearest(tmp_path)
    before, _ = read(nearest)
    had = known_tokens(before)
    adds = ("<|open|>", "<|endoftext|>", "]~b]", "<|open|>")
    one = surrogate.build(nearest, adds, tmp_path / "one")
    two = surrogate.build(nearest, adds, tmp_path / "two")
    for name in ("tokenizer.json", "tokenizer_config.json"):  # the same inputs, the same bytes
        assert (one / name).read_bytes() == (two / name).read_bytes()
    after, config = read(one)
    now = known_tokens(after)
    assert all(now[token] == i for token, i in had.items())
    new = list(dict.fromkeys(token for token in adds if token not in had))
    assert [now[token] for token in new] == list(range(max(had.values()) + 1, max(had.values()) + 1 + len(new)))
    assert [config["added_tokens_decoder"][str(now[token])]["special"] for token in new] == [True] * len(new)
    assert "chat_template" not in config

    from tokenizers import Tokenizer

    tokenizer, base = Tokenizer.from_file(str(one / "tokenizer.json")), Tokenizer.from_file(str(nearest / "tokenizer.json"))
    assert all(tokenizer.encode(token).ids == [now[token]] for token in adds)
    assert tokenizer.decode([now["<|open|>"], now["hello"]], skip_special_tokens=True) == "hello"
    assert tokenizer.encode("hello world 12").ids == base.encode("hello world 12").ids


@pytest.mark.slow
@pytest.mark.parametrize("name", ["kimi-k3", "glm-4.7-flash", "minimax-m3", "qwen3.5-4b", "deepseek-v4"])
def test_a_surrogate_adds_its_templates_tokens_as_special_and_keeps_the_nearests_ids(name, tmp_path):
    family = CATALOGUE[name]
    nearest = nearest_dir(family)
    before, before_config = read(nearest)
    had = known_tokens(before)
    built = surrogate.build(nearest, family.tokenizer.adds, tmp_path / "a")
    after, config = read(built)
    now = known_tokens(after)
    assert all(now[token] == i for token, i in had.items())  # every id of the nearest is unchanged
    new = [token for token in family.tokenizer.adds if token not in had]
    entries = {item["content"]: item for item in after["added_tokens"]}
    first = max(had.values()) + 1
    assert [entries[token]["id"] for token in new] == list(range(first, first + len(new)))
    for token in new:
        assert entries[token]["special"] is True and entries[token]["normalized"] is False
        assert config["added_tokens_decoder"][str(entries[token]["id"])]["content"] == token
        assert config["added_tokens_decoder"][str(entries[token]["id"])]["special"] is True
    assert len(after["added_tokens"]) == len(before["added_tokens"]) + len(new)
    assert "chat_template" not in config and "chat_template" in before_config  # the family's template is pinned apart

    from tokenizers import Tokenizer

    tokenizer, base = Tokenizer.from_file(str(built / "tokenizer.json")), Tokenizer.from_file(str(nearest / "tokenizer.json"))
    for token in family.tokenizer.adds:  # each is one token now, and decoding skips it as special
        assert tokenizer.encode(token, add_special_tokens=False).ids == [now[token]]
    text = "Hello, wörld: 1234 <think>x</think>\n  ok 你好"
    assert tokenizer.encode(text, add_special_tokens=False).ids == base.encode(text, add_special_tokens=False).ids


@pytest.mark.slow
def test_a_surrogate_is_the_same_bytes_every_time(tmp_path):
    family = CATALOGUE["kimi-k3"]
    nearest = nearest_dir(family)
    one = surrogate.build(nearest, family.tokenizer.adds, tmp_path / "one")
    two = surrogate.build(nearest, family.tokenizer.adds, tmp_path / "two")
    cached = surrogate.tokenizer_dir(nearest, family.name, family.tokenizer.adds, tokenizer_fingerprint(nearest))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (one / name).read_bytes() == (two / name).read_bytes() == (cached / name).read_bytes()
    assert tokenizer_fingerprint(one) == source_of("kimi-k3").tokenizer_sha256


def test_a_token_the_nearest_already_has_stays_its_own():
    made, tokenizer, config = surrogate.derive(
        {"added_tokens": [{"id": 5, "content": "<a>", "special": False}], "model": {"vocab": {"x": 0, "<b>": 7}}},
        {"chat_template": "t", "added_tokens_decoder": {}}, ("<a>", "<b>", "<c>", "<c>"))
    assert [(item["content"], item["id"]) for item in made] == [("<c>", 8)]
    assert tokenizer["added_tokens"][0] == {"id": 5, "content": "<a>", "special": False}
    assert list(config["added_tokens_decoder"]) == ["8"] and "chat_template" not in config


# ------------------------------------------------------------------------------ the key's errors

def write(tmp_path: Path, entry: str) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(f"models:\n  m:\n    {entry}\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("entry, needle", [
    ("{family: kimi-k3, tokenizer: {pack: 'npm:qwen3'}}", "models.m.tokenizer: a family supplies"),
    ("{family: kimi-k3, template: {pack: 'llama.cpp:Kimi-K3.jinja'}}", "models.m.template: a family supplies"),
    ("{family: kimi-k4}", "models.m.family: unknown family 'kimi-k4'"),
    ("{family: [kimi-k3]}", "models.m.family: expected a built-in family's name"),
    ("{shapes: [plain]}", "models.m.tokenizer: missing required key (or `family:`"),
])
def test_a_bad_family_key_is_one_line(tmp_path, entry, needle):
    path = write(tmp_path, entry)
    result = CliRunner().invoke(main, ["models", "--config", str(path)])
    line = one_line_error(result)
    assert "matrix.yaml: " in line and needle in line, line


def test_an_unknown_family_names_the_close_ones(tmp_path):
    with pytest.raises(Exception) as raised:
        models.load(write(tmp_path, "{family: kimi-k33}"))
    assert "did you mean kimi-k3" in str(raised.value)


# ------------------------------------------------------------------------------ the marking

def test_provenance_says_surrogate_or_real(tmp_path):
    for name in FAMILY_MODELS:
        stamp = golden_of(f"{name}/plain").provenance
        assert stamp["family"] == CONFIG.models[name].tokenizer.family
        assert stamp["tokenizer"] == ("surrogate" if CONFIG.models[name].surrogate else "real")
        assert stamp["tokenizer_sha256"] == source_of(name).tokenizer_sha256
    real = next(f for f in families.builtin() if f.tokenizer.kind == "real" and f.tokenizer.source.startswith("npm:"))
    config = models.load(write(tmp_path, f"{{family: {real.name}, shapes: [plain]}}"))
    source = resolve(config.models["m"], config)
    assert provenance(source, config)["tokenizer"] == "real" and provenance(source, config)["family"] == real.name
    assert source.tokenizer_dir == nearest_dir(real)  # a real family's tokenizer is its source as is
    assert "family" not in golden_of("qwen3/plain").provenance  # a model that is no family: unchanged


def test_models_lists_family_models_as_surrogate():
    result = CliRunner().invoke(main, ["models", "--config", str(ROOT / "models.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    by_model = {item["name"]: item for item in data["models"]}
    by_family = {item["name"]: item for item in data["families"]}
    for name in FAMILY_MODELS:
        family = CONFIG.models[name].tokenizer.family
        assert by_model[name]["family"]["tokenizer"] == CATALOGUE[family].tokenizer.kind
        assert by_model[name]["family"]["source"] == CATALOGUE[family].template_pack
        assert name in by_family[family]["models"] and by_family[family]["reference"] == "transformers"
        assert set(by_family[family]["engines"]) == set(CONFIG.models[name].engines) - {"transformers"}
        assert by_family[family]["encoder"] == CONFIG.models[name].encoder
    assert all(item["models"] == [] and item["reference"] is None
               for item in data["families"] if item["name"] not in {CONFIG.models[n].tokenizer.family for n in FAMILY_MODELS})
    text = CliRunner().invoke(main, ["models", "--config", str(ROOT / "models.yaml")]).stdout
    surrogates = [name for name in FAMILY_MODELS if CONFIG.models[name].surrogate]
    assert sum("tokenizer: family " in line and ": surrogate," in line for line in text.splitlines()) == len(surrogates)


def test_the_engines_table_marks_a_surrogate_row():
    table = engine_matrix.markdown(engine_matrix.matrix(CONFIG), labels=engine_matrix.labels(CONFIG))
    rows = [line for line in table.splitlines() if line.startswith("| ") and "(surrogate)" in line]
    assert len(rows) == sum(model.surrogate for model in CONFIG.models.values())
    assert engine_matrix.SURROGATE_NOTE in table
    plain = engine_matrix.markdown(engine_matrix.matrix(CONFIG))
    assert "(surrogate)" not in plain and engine_matrix.SURROGATE_NOTE not in plain


def test_a_surrogate_models_report_lines_say_so():
    outcomes = [Outcome("kimi-k3/plain", "vllm", "drift", "drift at token 3"),
                Outcome("qwen3/plain", "vllm", "drift", "drift at token 3")]
    summary = Summary(outcomes, [surrogate_note("kimi-k3", "kimi-k3")])
    lines = terminal(summary)
    assert any("kimi-k3/plain (surrogate) [vllm]" in line for line in lines)
    assert any("qwen3/plain [vllm]" in line for line in lines)
    from generator.replay.reporting.markdown_report import markdown

    report = markdown(summary)
    assert "kimi-k3 (surrogate)" in report and "qwen3 (surrogate)" not in report
    assert surrogate_note("kimi-k3", "kimi-k3")[:60] in report
