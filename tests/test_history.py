"""`goldens history`: every release in a range that changed a case, by recursive k-ary search.

The search itself is checked first on a made-up release line (which releases it asks, that an
agreeing segment is left alone unless --exhaustive, that --jobs splits k ways): no engine can
be told to change at a chosen release. Then real releases, whose answers are known:
Transformers 5.21.0 began copying reasoning_content into `thinking` (gpt-oss/agentic-turn
keeps its analysis channel from then on), llama.cpp b9246 breaks phi3.5's prefill
('<|assistant|>' -> '<|endoftext|>assistant|>'); a second run over an overlapping range builds
and installs nothing, its answers all from the cache.
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from conftest import CONFIG as MATRIX
from conftest import ROOT, one_line_error, refusal_count, render_count

from generator.cli import main
from generator.config.cases import Case
from generator.errors import GoldensError
from generator.replay.releases import history as search
from generator.replay.releases.releases import Answer, AnswerStore, Replayed

CONFIG = str(ROOT / "models.yaml")


def run(*args: str):
    return CliRunner().invoke(main, ["history", "--config", CONFIG, *args])


class _Line:
    """Releases 0..n-1 of a made-up engine, all cached."""

    def __init__(self, count: int):
        self.versions = [str(v) for v in range(count)]

    def label(self, version: str) -> str:
        return f"r{version}"

    def order(self, version: str) -> int:
        return int(version)


def _search(monkeypatch, count: int, ids_at, *, jobs: int = 1, exhaustive: bool = False,
            broken: frozenset[int] = frozenset(), silent: frozenset[int] = frozenset(),
            reverse: bool = False, echo=lambda line: None):
    """history() over a line whose release v answers case c with ids_at(v, c); returns the
    History and the releases asked, in the order asked. A `broken` release cannot be made
    ready, a `silent` one is made ready but its server does not answer."""
    cases = [Case("m", "a", "", {}), Case("m", "b", "", {})]
    versions = _Line(count)
    asked: list[int] = []

    def replay(config, engine, version, chosen, note=None, store=None):
        asked.append(int(version))
        if int(version) in silent:
            raise GoldensError(f"the render server of {version} did not start")
        return Replayed({c.id: Answer(ids=list(ids_at(int(version), c.shape))) for c in chosen})

    monkeypatch.setattr(search, "line", lambda engine, command="bisect": versions)
    monkeypatch.setattr(search, "span", lambda engine, a, b, names, command:
                        versions.versions[::-1] if reverse else versions.versions)
    monkeypatch.setattr(search, "cases_for", lambda config, engine, models, ids: cases)
    monkeypatch.setattr(search, "replay", replay)
    def ready_all(engine, versions, jobs, failed=None):
        for version in versions:
            if int(version) in broken:
                failed[version] = f"release {version} cannot be installed here"
        return {version: (0.0, "cached") for version in versions if int(version) not in broken}

    monkeypatch.setattr(search, "ready_all", ready_all)
    monkeypatch.setattr(search, "_change", lambda config, before, release, visits, cases, label:
                        search.ChangePoint(release, before, [c.id for c in cases
                                                             if not visits[before].answers[c.id].same(
                                                                 visits[release].answers[c.id])]))

    class _Store:
        def get(self, version, case):
            return None

    ends = (str(count - 1), "0") if reverse else ("0", str(count - 1))
    result = search.history(MATRIX, "x", *ends, jobs=jobs, exhaustive=exhaustive, echo=echo, store=_Store())
    return result, asked


def test_every_change_point_is_found_and_agreeing_segments_are_left_alone(monkeypatch):
    """17 releases; case a changes at 5 and at 12, case b at 12: binary search asks the ends,
    then splits only segments whose ends disagree."""
    result, asked = _search(monkeypatch, 17, lambda v, shape: [v >= 5, v >= 12] if shape == "a" else [v >= 12])
    assert [(c.before, c.release, c.cases) for c in result.changes] == [("4", "5", ["m/a"]), ("11", "12", ["m/a", "m/b"])]
    assert asked[:3] == [0, 16, 8]  # both ends, then the midpoint
    assert len(asked) == len(set(asked)) < 17
    assert search.lower_bound(17, result.changes, {str(v): v for v in range(17)}) == 6  # 0, 4, 5, 11, 12, 16


def test_a_reversed_range_is_searched_oldest_first_and_said_so(monkeypatch):
    """Issue 44: --from newer than --to was swapped silently."""
    said: list[str] = []
    result, asked = _search(monkeypatch, 9, lambda v, shape: [v >= 4], reverse=True, echo=said.append)
    assert [(c.before, c.release) for c in result.changes] == [("3", "4")] and asked[:2] == [0, 8]
    assert said[0].startswith("history x: 9 published releases from r0 to r8")
    assert said[0].endswith("(--from 8 is newer than --to 0: searched oldest to newest)"), said[0]
    said.clear()
    _search(monkeypatch, 9, lambda v, shape: [v >= 4], echo=said.append)
    assert "newer than" not in said[0]


def test_a_change_undone_inside_an_agreeing_segment_needs_exhaustive(monkeypatch):
    """Case a changes at 3 and back at 6: both ends agree, so only --exhaustive finds them."""
    there_and_back = (lambda v, shape: [3 <= v < 6])
    quick, asked = _search(monkeypatch, 9, there_and_back)
    assert quick.changes == [] and asked == [0, 8]
    full, asked = _search(monkeypatch, 9, there_and_back, exhaustive=True)
    assert [c.release for c in full.changes] == ["3", "6"]
    assert sorted(asked) == list(range(9))


def test_jobs_split_each_segment_k_plus_one_ways_in_fewer_rounds(monkeypatch):
    changes_at_7 = (lambda v, shape: [v >= 7])
    one, _ = _search(monkeypatch, 17, changes_at_7, jobs=1)
    three, asked = _search(monkeypatch, 17, changes_at_7, jobs=3)
    assert [c.release for c in one.changes] == [c.release for c in three.changes] == ["7"]
    assert asked[2:5] == [4, 8, 12]  # the second round: the range split 4 ways at once
    assert three.rounds < one.rounds


def test_a_release_that_cannot_be_asked_is_named_and_passed_over(monkeypatch):
    """17 releases, case a changes at 7: release 8 (the first midpoint) cannot be installed
    and 6 answers nothing; the search splits around them, names both with their reason, and
    the change point (7 after 5) says that 6 was not asked."""
    result, asked = _search(monkeypatch, 17, lambda v, shape: [v >= 7], broken=frozenset({8}),
                            silent=frozenset({6}))
    assert 8 not in asked and 6 in asked
    assert result.unavailable == {"8": "release 8 cannot be installed here",
                                  "6": "the render server of 6 did not start"}
    assert [(c.before, c.release, c.skipped) for c in result.changes] == [("5", "7", ["6"])]
    lines = search.summary_lines(result, _Line(17))
    assert "r7 (or r6, not asked) (after r5): 2 case(s) changed, 0 group(s)" in lines
    assert any(line.startswith("2 release(s) could not be asked here: r6 (") for line in lines), lines
    with pytest.raises(GoldensError, match="the range's end r16 cannot be asked here"):
        _search(monkeypatch, 17, lambda v, shape: [v >= 7], broken=frozenset({16}))


def test_a_case_a_release_cannot_answer_is_an_answer_of_its_own_kind(tmp_path):
    """An engine error on one case (b9101's server sends no __verbose.prompt for an image case)
    neither stops the search nor passes the release over: it is that release's answer, compared
    by kind, remembered like the others."""
    error, refusal = Answer(error="reply has no __verbose.prompt"), Answer(refused="HTTP 400")
    assert error.same(Answer(error="another text")) and not error.same(refusal)
    assert not error.same(Answer(ids=[1])) and not refusal.same(Answer(ids=[1]))
    store = AnswerStore(MATRIX, "llama-server", root=tmp_path)
    case = next(c for c in search.cases_for(MATRIX, "llama-server", ["qwen3"], []) if c.shape == "tools")
    store.put("9101", case, error)
    assert store.get("9101", case) == error


def test_a_machine_limit_is_asked_once_more_and_never_remembered(tmp_path):
    """A render deadline is this machine's limit, not the release's answer (a first render in a
    fresh Transformers 4.57.6 worker on a loaded machine passed 30 s on Kimi-K3): it is asked
    once more, and an answer still cut short is never remembered, so the next search asks again."""
    from generator.budget import RenderDeadline
    from generator.replay.releases import releases

    class Runner:
        def __init__(self, failures):
            self.failures, self.calls = failures, 0

        def ids(self, request):
            self.calls += 1
            if self.calls <= self.failures:
                raise RenderDeadline("the template did not finish rendering within 30 s")
            return [7, 8]

    case = next(c for c in search.cases_for(MATRIX, "transformers", ["qwen3"], []) if c.shape == "tools")
    once = Runner(1)
    assert releases._answer(once, case, "4.57.6").ids == [7, 8] and once.calls == 2
    twice = Runner(2)
    answer = releases._answer(twice, case, "4.57.6")
    assert (answer.kind, answer.limited, twice.calls) == ("error", True, 2)
    store = AnswerStore(MATRIX, "transformers", root=tmp_path)
    store.put("4.57.6", case, answer)
    assert store.get("4.57.6", case) is None and not list(tmp_path.rglob("*.json"))
    store.put("4.57.6", case, releases._answer(Runner(1), case, "4.57.6"))
    assert store.get("4.57.6", case) == Answer(ids=[7, 8])


@pytest.mark.slow  # the parse case's output ids are made by the reference: over a second
def test_a_parse_probe_that_does_not_build_is_no_answer_of_the_release(tmp_path):
    """llama.cpp's parse harness not compiling against a build (its server functions changed
    shape) is goldens' limit, not the build's answer: compared as an error, never remembered, so
    the build's parse is asked once the harness compiles."""
    from generator.errors import NoProbe
    from generator.replay.releases import releases

    class Runner:
        name = "llama-server"

        def parse(self, *args, **kwargs):
            raise NoProbe("llama-server b10108: the parse harness does not compile against it: error: ...")

    case = next(c for c in search.cases_for(MATRIX, "llama-server", ["qwen3"], []) if c.axis == "parse")
    answer = releases._answer(Runner(), case, "10108", MATRIX)
    assert (answer.kind, answer.limited) == ("error", True), answer
    assert "does not compile" in answer.error
    store = AnswerStore(MATRIX, "llama-server", root=tmp_path)
    store.put("10108", case, answer)
    assert store.get("10108", case) is None and not list(tmp_path.rglob("*.json"))


def test_answers_are_remembered_per_release_and_case_under_the_request_and_sources(tmp_path):
    store = AnswerStore(MATRIX, "transformers", root=tmp_path)
    case = next(c for c in search.cases_for(MATRIX, "transformers", ["qwen3"], []) if c.shape == "tools")
    assert store.get("5.21.0", case) is None
    store.put("5.21.0", case, Answer(ids=[1, 2], pieces=["a", "b"], prompt="ab"))
    assert store.get("5.21.0", case) == Answer(ids=[1, 2], pieces=["a", "b"], prompt="ab")
    assert store.get("5.21.1", case) is None  # another release
    other = Case(case.model, case.shape, case.variant, {**case.request, "add_generation_prompt": False})
    assert store.key(other) != store.key(case) and store.get("5.21.0", other) is None  # another request
    reordered = Case(case.model, case.shape, case.variant, dict(reversed(list(case.request.items()))))
    assert store.key(reordered) != store.key(case)  # key order is part of a request (tojson keeps it)
    (path,) = (tmp_path / "transformers" / "5.21.0").glob("*.json")
    path.write_text("{not json")
    assert store.get("5.21.0", case) is None  # a damaged entry is asked again


def test_media_answers_made_before_the_processor_fix_are_not_reused(tmp_path, monkeypatch):
    """transformers@V once rendered image cases without the model's processor (the image
    dropped): bumping MEDIA_REVISION moves those cases' keys, and only theirs."""
    from generator.replay.releases import releases

    cases = search.cases_for(MATRIX, "transformers", ["gemma3"], [])
    media = next(c for c in cases if c.shape == "image-expanded")
    text = next(c for c in cases if c.shape == "plain")
    store, server = AnswerStore(MATRIX, "transformers", root=tmp_path), AnswerStore(MATRIX, "llama-server", root=tmp_path)
    before = {c.id: (store.key(c), server.key(c)) for c in (media, text)}
    monkeypatch.setitem(releases.MEDIA_REVISION, "transformers", releases.MEDIA_REVISION["transformers"] + 1)
    assert store.key(media) != before[media.id][0]
    assert store.key(text) == before[text.id][0] and server.key(media) == before[media.id][1]


BAD_INPUT = {
    "vllm-before-render": (["--engine", "vllm", "--from", "0.18.1", "--to", "0.32.0"],
                           ["vllm 0.18.1 has no render server (the first release with one is 0.19.0)"]),
    "same": (["--engine", "llama-server", "--from", "9246", "--to", "b9246"], ["--from and --to are the same release"]),
    "unpublished": (["--engine", "transformers", "--from", "5.20.9", "--to", "5.24.0"],
                    ["transformers 5.20.9 was never published"]),
    "missing-to": (["--engine", "transformers", "--from", "5.20.1"], ["history needs --engine, --from and --to"]),
    "versioned-engine": (["--engine", "transformers@5.21.0", "--from", "5.20.1", "--to", "5.24.0"],
                         ["history takes the versions from --from and --to"]),
    "unknown-case": (["--engine", "transformers", "--from", "5.20.1", "--to", "5.24.0", "--case", "qwen3/nope"],
                     ["unknown case 'qwen3/nope'"]),
    "atlas-with-json": (["--update-atlas", "--json"], ["--update-atlas runs the whole matrix"]),
}


@pytest.mark.parametrize("case", [pytest.param(case, marks=[pytest.mark.integration]
                                               if case in ("unpublished", "vllm-before-render") else [])
                                  for case in sorted(BAD_INPUT)])  # the package index names the releases
def test_bad_history_input_is_one_line_exit_2(case):
    args, needles = BAD_INPUT[case]
    line = one_line_error(run(*args))
    for needle in needles:
        assert needle in line, (needle, line)


def asked(output: str) -> list[str]:
    return re.findall(r"^\s+(b?\d[\w.]*)\s+round \d+\s", output, re.M)


@pytest.mark.integration
def test_transformers_history_lists_every_release_that_changed_the_matrix_and_repeats_from_cache():
    first = run("--engine", "transformers", "--from", "5.20.1", "--to", "5.24.0", "--json")
    assert first.exit_code == 1, first.output
    document = json.loads(first.stdout)
    assert document["schema"] == "goldens.history/1"
    changed = {c["label"]: c for c in document["change_points"]}
    # measured: gpt-oss's analysis channel (5.21.0), DeepSeek's ByteLevel pre-tokenizer back
    # (5.22.0), null-valued message keys dropped before the template runs (5.23.0: `tool_calls:
    # null` had made Llama 3.1's and gpt-oss's templates refuse). Gemma 3's image cases go through
    # each release's processor, which expands the image in all nine: no change at 5.24.0
    # (rendered without it, they seemed to change there)
    assert list(changed) == ["5.21.0", "5.22.0", "5.23.0"], sorted(changed)
    # every case the reference renders with DeepSeek-V3's tokenizer (deepseek-v3, and the families
    # whose surrogate is built on it): the pre-tokenizer change moves them all
    deepseek = [name for name, model in MATRIX.models.items()
                if model.tokenizer.kind == "pack" and model.tokenizer.value == "npm:deepseek_v3"]
    rendered = render_count(*deepseek) - sum(refusal_count(name) for name in deepseek)
    assert changed["5.22.0"]["before_label"] == "5.21.1" and len(changed["5.22.0"]["cases"]) == rendered
    assert sorted(changed["5.23.0"]["cases"]) == ["gpt-oss/multi-turn_null-fields", "llama3/multi-turn_null-fields"]
    assert "5.22.2 refused" in changed["5.23.0"]["groups"][0]["summary"]
    assert {"gemma3/image-expanded", "gemma3/image-expanded-wide"} <= set(document["cases"])  # asked
    point = changed["5.21.0"]
    assert point["before_label"] == "5.20.2"
    assert point["url"] == "https://github.com/huggingface/transformers/releases/tag/v5.21.0"
    (group,) = [g for g in point["groups"] if "gpt-oss/agentic-turn" in g["cases"]]
    assert group["first_divergent_token"] == 166 and group["removed"] == []
    assert [piece for _, piece in group["added"][:3]] == ["<|channel|>", "analysis", "<|message|>"]
    assert document["cost"]["floor"] <= document["cost"]["asked"] <= len(document["releases"]) == 9
    again = run("--engine", "transformers", "--from", "5.20.1", "--to", "5.24.0")
    assert again.exit_code == 1, again.output
    assert re.search(r"^\d+ rounds, \d+ of 9 releases asked \(0 built, 0 installed, (\d+) answered from the "
                     r"cache\)", again.stdout, re.M), again.stdout
    lines = [line for line in again.stdout.splitlines() if re.match(r"^\s+\d[\w.]*\s+round \d+", line)]
    assert lines and all(line.rstrip().endswith("answers from the cache") for line in lines), again.stdout
    assert sorted(asked(again.stdout)) == sorted(a["label"] for a in document["asked"])
    assert f"{len(changed)} change point(s): " + ", ".join(changed) in again.stdout


@pytest.mark.integration
def test_llama_server_history_finds_the_change_point_a_bisection_finds():
    """b9101 b9113 b9246 b9247: the history of every qwen3 and phi3.5 case on llama-server
    names b9246 with phi3.5/prefill, as `goldens bisect` over the same builds does; again,
    nothing is built. (gemma3's image cases need a field b9101's server does not send.)"""
    first = run("--engine", "llama-server", "--from", "9101", "--to", "9247", "--model", "qwen3", "--model", "phi3.5",
                "--json")
    assert first.exit_code == 1, first.output
    document = json.loads(first.stdout)
    changed = {c["label"]: c for c in document["change_points"]}
    assert "b9246" in changed and "phi3.5/prefill" in changed["b9246"]["cases"], sorted(changed)
    assert changed["b9246"]["url"] == "https://github.com/ggml-org/llama.cpp/releases/tag/b9246"
    for point in document["change_points"]:  # each is where a bisection of one of its cases lands
        case = point["groups"][0]["cases"][0]
        earliest = next(c["label"] for c in document["change_points"] if case in c["cases"])
        hand = CliRunner().invoke(main, ["bisect", "--config", CONFIG, "--engine", "llama-server", "--good", "9101",
                                         "--bad", "9247", "--case", case])
        assert hand.exit_code == 0 and f"first changed release: {earliest} " in hand.stdout, hand.output
    again = run("--engine", "llama-server", "--from", "9113", "--to", "9247", "--model", "qwen3", "--model", "phi3.5")
    assert again.exit_code == 1, again.output
    assert re.search(r"^\d+ rounds, \d+ of 3 releases asked \(0 built, 0 installed, ", again.stdout, re.M), again.stdout
