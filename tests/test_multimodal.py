"""Image goldens: the project's own PNG, the processor's expanded view, and drift in it.

The picture is part of every image golden's request, so its bytes are pinned here; the
expanded ids are Transformers' Gemma3Processor's; a processor setting that moves must show up
in `goldens check` as drift at the first image token.
"""

from __future__ import annotations

import base64
import json
import hashlib
import io
import shutil
import zlib

import pytest
import yaml
from click.testing import CliRunner
from conftest import CONFIG, GOLDENS, ROOT, refusal_count, render_count, source_of, tier
from PIL import Image

from generator import reference
from generator.cli import main
from generator.config import images, shapes
from generator.config.cases import EXPANDED_VIEW, TEMPLATE_VIEW, matrix
from generator.config.request import carries_media
from generator.goldens import golden_file
from generator.replay.judging.divergence import divergence_point

BOI, SOFT, EOI = 255999, 262144, 256000  # <start_of_image>, <image_soft_token>, <end_of_image>

# sha256 of the PNG bytes: any change to the picture or the writer changes every image golden.
PNG_SHA256 = {
    images.SQUARE: "17538dd3ca7d9d5d",
    images.WIDE: "034645275ae5ff65",
}


@pytest.mark.parametrize("size", [images.SQUARE, images.WIDE], ids=["square", "wide"])
def test_png_is_byte_identical_and_decodes_to_its_pixels(size):
    data = images.png(*size)
    assert hashlib.sha256(data).hexdigest()[:16] == PNG_SHA256[size]
    assert data == images.png(*size)
    picture = Image.open(io.BytesIO(data))
    picture.load()
    assert (picture.size, picture.mode) == (size, "RGB")
    assert picture.tobytes() == images.pixels(*size)
    url = images.data_url(*size)
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == data


def test_png_zlib_stream_is_stored_blocks_any_zlib_reads():
    """Stored blocks: the IDAT payload is the scanlines themselves, readable by any inflater,
    and it spans several blocks once the image outgrows one (65535 bytes)."""
    width, height = 200, 120  # 72120 bytes of scanlines: two stored blocks
    data = images.png(width, height)
    start = data.index(b"IDAT") + 4
    length = int.from_bytes(data[start - 8:start - 4], "big")
    scanlines = zlib.decompress(data[start:start + length])
    assert len(scanlines) == height * (1 + 3 * width)
    assert data[start:start + 3] == b"\x78\x01\x00"  # zlib header, first block not final
    Image.open(io.BytesIO(data)).load()


def test_pixels_reject_a_degenerate_size():
    with pytest.raises(ValueError, match="too small"):
        images.pixels(1, 8)


def test_image_shapes_carry_the_png_as_an_openai_image_url_part():
    for shape, size in (("image-expanded", images.SQUARE), ("image-expanded-wide", images.WIDE)):
        request = shapes.build(shape, {})
        part = request["messages"][0]["content"][0]
        assert part == {"type": "image_url", "image_url": {"url": images.data_url(*size)}}
        assert carries_media(request)
    assert not carries_media(shapes.build("image", {}))  # the bare placeholder carries no data


def test_views_of_the_gemma3_cases():
    views = {case.shape: case.view for case in matrix(CONFIG, ["gemma3"])}
    assert views["image"] == TEMPLATE_VIEW and views["plain"] == TEMPLATE_VIEW
    assert views["image-expanded"] == EXPANDED_VIEW == views["image-expanded-wide"]


@pytest.mark.slow
def test_gemma3_expands_its_image_marker_into_256_soft_tokens():
    """Gemma3Processor replaces the template's <start_of_image> with \\n\\n, the marker, 256 soft
    tokens, <end_of_image>, \\n\\n; the newlines merge with the template's own."""
    source = source_of("gemma3")
    template_ids = reference.render_request(source, shapes.build("image", {}), CONFIG.date).ids
    expanded = reference.render_request(source, shapes.build("image-expanded", {}), CONFIG.date)
    assert expanded.error is None
    assert template_ids[:4] == [2, 105, 2364, 107] and template_ids[4] == BOI
    assert expanded.ids[:5] == [2, 105, 2364, 109, BOI]  # "user", "\n\n\n", <start_of_image>
    assert expanded.ids[5:261] == [SOFT] * 256
    assert expanded.ids[261:263] == [EOI, 108]  # <end_of_image>, "\n\n"
    assert expanded.ids[263:] == template_ids[5:]
    assert expanded.pieces[5] == "<image_soft_token>"
    assert "<start_of_image>" in expanded.prompt and "<image_soft_token>" not in expanded.prompt
    wide = reference.render_request(source, shapes.build("image-expanded-wide", {}), CONFIG.date)
    assert wide.ids == expanded.ids  # Gemma 3 (no pan-and-scan): 256 whatever the size


def test_the_expanded_golden_names_its_view_and_processor():
    item = golden_file.read(golden_file.golden_path(GOLDENS, "gemma3/image-expanded"))
    assert item.extra["view"] == "expanded"
    assert item.extra["processor"]["origin"].startswith("google/gemma-3-4b-it")
    assert len(item.extra["processor"]["sha256"]) == 64
    assert len(item.ids) == 271
    template = golden_file.read(golden_file.golden_path(GOLDENS, "gemma3/image"))
    assert "view" not in template.extra and len(template.ids) == 13


def test_media_without_a_processor_is_a_recorded_refusal():
    rendered = reference.render_request(source_of("qwen3"), shapes.build("image-expanded", {}), CONFIG.date)
    assert rendered.error == "qwen3 has no `processor` settings in models.yaml to expand media with"


def test_a_longer_or_shorter_run_of_one_token_is_reported_at_its_start():
    golden = [2, 105, BOI] + [SOFT] * 4 + [EOI, 108]
    assert divergence_point(golden, [2, 105, BOI] + [SOFT] * 2 + [EOI, 108]) == 3
    assert divergence_point(golden, [2, 105, BOI] + [SOFT] * 6 + [EOI, 108]) == 3
    assert divergence_point(golden, [2, 105, BOI] + [SOFT] * 4 + [EOI, 107]) == 8
    assert divergence_point(golden, [2, 105, 7]) == 2
    assert divergence_point(golden, list(golden)) is None


def _matrix_with(tmp_path, edit) -> str:
    """A copy of models.yaml with gemma3's processor settings edited; returns its path."""
    data = yaml.safe_load((ROOT / "models.yaml").read_text(encoding="utf-8"))
    edit(data["models"]["gemma3"]["processor"])
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    shutil.copytree(ROOT / "requests", tmp_path / "requests")  # the request files it names
    shutil.copy(ROOT / "models.capabilities.lock", tmp_path / "models.capabilities.lock")  # its polyfilled cases
    shutil.copy(ROOT / "models.dialects.lock", tmp_path / "models.dialects.lock")  # its dialect cases
    return str(path)


def _check_transformers(config_path: str, tmp_path) -> tuple[int, str, str]:
    """(exit code, terminal output, Markdown report) of `goldens check --engine transformers`."""
    goldens = tmp_path / "goldens"
    shutil.copytree(GOLDENS / "gemma3", goldens / "gemma3")
    report = tmp_path / "report.md"
    result = CliRunner().invoke(main, ["check", "--config", config_path, "--goldens", str(goldens),
                                       "--engine", "transformers", "--model", "gemma3", "--jobs", "2",
                                       "--report", str(report)])
    return result.exit_code, result.stdout + result.stderr, report.read_text() if report.exists() else ""


@pytest.mark.slow
def test_goldens_check_passes_with_the_committed_processor_settings(tmp_path):
    code, output, _ = _check_transformers(_matrix_with(tmp_path, lambda p: None), tmp_path)
    assert code == 0, output


@pytest.mark.slow
def test_a_changed_image_seq_length_is_drift_at_the_first_image_token(tmp_path):
    def fewer_soft_tokens(processor):
        processor["processor_config"]["image_seq_length"] = 64
        processor["preprocessor_config"]["image_seq_length"] = 64

    code, output, markdown = _check_transformers(_matrix_with(tmp_path, fewer_soft_tokens), tmp_path)
    assert code == 1, output
    for case in ("gemma3/image-expanded", "gemma3/image-expanded-wide"):
        line = output[output.index(case + " "):]
        assert f"drift at token 5 (271 vs {271 - 256 + 64} tokens)" in line[:200], line[:400]  # 256 soft tokens -> 64
        full = markdown[markdown.index(f"{case} · transformers: drift at token 5"):]
        assert "'<image_soft_token>' repeated 256 times in reference, 64 in transformers" in full[:600], full[:800]
    cases, both = render_count("gemma3"), refusal_count("gemma3")
    assert (f"{cases} checked: {cases - both - 2} rendered and match, {both} both refuse, 0 known divergence, "
            "2 drift, 0 error") in output, output


# ------------------------------------------------------------------ llama-server with a projector

def _processor(image_seq_length: int):
    """gemma3's processor settings from models.yaml, image_seq_length changed."""
    from generator.config.models import ProcessorSpec

    spec = CONFIG.models["gemma3"].processor
    return ProcessorSpec(
        origin=spec.origin,
        processor_config={**spec.processor_config, "image_seq_length": image_seq_length},
        preprocessor_config={**spec.preprocessor_config, "image_seq_length": image_seq_length},
    )


@pytest.fixture(scope="module")
def gemma3_text_gguf():
    from generator.engines.llama_server.tiny_gguf import tiny_gguf
    from generator.engines.llama_server.tiny_mmproj import vocab_with_added

    source = source_of("gemma3")
    return tiny_gguf("gemma3", source.tokenizer_dir, source.template,
                     vocab_size=vocab_with_added(source.tokenizer_dir))


@pytest.fixture(scope="module")
@tier(pytest.mark.integration)  # a llama-server started on a tiny GGUF and a projector built for it
def fewer_tokens_server(gemma3_text_gguf):
    """llama-server on the managed gemma3 text GGUF with a projector built for 64 tokens."""
    from generator.engines.llama_server.llama_cpp import LlamaServer
    from generator.engines.llama_server.tiny_gguf_writer import N_EMBD
    from generator.engines.llama_server.tiny_mmproj import tiny_mmproj

    mmproj = tiny_mmproj("gemma3", _processor(64), N_EMBD)
    with LlamaServer(gemma3_text_gguf, extra_args=["--mmproj", str(mmproj)]) as server:
        yield server


def test_the_mmproj_carries_the_converters_keys():
    import gguf

    from generator.engines.llama_server.tiny_gguf_writer import N_EMBD
    from generator.engines.llama_server.tiny_mmproj import tiny_mmproj

    def fields(path):
        reader = gguf.GGUFReader(str(path))
        return {key: field.contents() for key, field in reader.fields.items() if key.startswith("clip.")}, \
            {tensor.name for tensor in reader.tensors}

    committed, tensors = fields(tiny_mmproj("gemma3", CONFIG.models["gemma3"].processor, N_EMBD))
    assert committed["clip.projector_type"] == "gemma3"
    assert (committed["clip.vision.image_size"], committed["clip.vision.patch_size"]) == (896, 14)
    assert committed["clip.vision.projection_dim"] == N_EMBD
    assert "clip.vision.projector.scale_factor" not in committed  # 896/14/4 = 16 per side: the default
    assert {"mm.input_projection.weight", "mm.soft_emb_norm.weight", "v.patch_embd.weight"} <= tensors
    fewer, _ = fields(tiny_mmproj("gemma3", _processor(64), N_EMBD))
    assert fewer["clip.vision.projector.scale_factor"] == 8  # 896/14/8 = 8 per side: 64 tokens


def test_an_image_seq_length_that_does_not_tile_the_image_is_an_error():
    from generator.errors import GoldensError
    from generator.engines.llama_server.tiny_mmproj import tiny_mmproj

    with pytest.raises(GoldensError, match="image_seq_length 200 does not fit a 896px image"):
        tiny_mmproj("gemma3", _processor(200), 64)


def test_llama_server_with_a_changed_projector_drifts_at_the_first_image_token(fewer_tokens_server):
    """The same server build and text model, a projector made for 64 tokens: the replay moves
    from its reviewed ledger entry at token 4 + 1, the first image position."""
    from generator.engines.llama_server.engine import MTMD_FRAMING, LlamaServerEngine
    from generator.replay.judging.judge import judge

    engine = LlamaServerEngine(fewer_tokens_server.url, media=MTMD_FRAMING["gemma3"])
    item = golden_file.read(golden_file.golden_path(GOLDENS, "gemma3/image-expanded"))
    outcome = judge(engine, item, GOLDENS)
    # the reviewed framing is a cause (an edit of the golden) now: no edit explains 64 positions,
    # so the replay drifts from the golden at its first image token
    assert outcome.status == "drift", outcome.detail
    assert outcome.divergence.index == 3 and (outcome.divergence.expected_len, outcome.divergence.actual_len) == (271, 78)


def test_a_framing_the_server_does_not_use_is_an_error_not_a_guess(fewer_tokens_server):
    from generator.engines import EngineError
    from generator.engines.llama_server.engine import LlamaServerEngine

    wrong = LlamaServerEngine(fewer_tokens_server.url,
                              media=("<start_of_turn>", "<end_of_image>", "<image_soft_token>"))
    with pytest.raises(EngineError, match=r"evaluated 78 positions with text .*needs review"):
        wrong.ids(shapes.build("image-expanded", {}))
    with pytest.raises(EngineError, match="no image framing known"):
        LlamaServerEngine(fewer_tokens_server.url).ids(shapes.build("image-expanded", {}))
    with pytest.raises(EngineError, match="is not one token"):
        LlamaServerEngine(fewer_tokens_server.url, media=("<start_of_image>", "<end_of_image>", "two words")
                          ).ids(shapes.build("image-expanded", {}))


@pytest.mark.slow  # loads Gemma 3's processor and vocabulary, a model outside conftest.FAST_MODELS
def test_render_command_expands_an_image_request(tmp_path):
    """Gemma 3's processor, loaded once per session (the slow tier's replays of the image goldens
    load it too)."""
    body = tmp_path / "body.json"
    body.write_text(json.dumps(shapes.build("image-expanded", {})), encoding="utf-8")
    result = CliRunner().invoke(main, ["render", "--config", str(ROOT / "models.yaml"), "--model", "gemma3",
                                       "--request", str(body)])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    golden = golden_file.read(golden_file.golden_path(GOLDENS, "gemma3/image-expanded"))
    assert out["ids"] == golden.ids  # the committed golden of the same body
    assert out["ids"].count(SOFT) == CONFIG.models["gemma3"].processor.processor_config["image_seq_length"]


def test_render_command_refuses_an_image_for_a_model_without_a_processor(tmp_path):
    body = tmp_path / "body.json"
    body.write_text(json.dumps(shapes.build("image-expanded", {})), encoding="utf-8")
    refused = CliRunner().invoke(main, ["render", "--config", str(ROOT / "models.yaml"), "--model", "qwen3",
                                        "--request", str(body)])
    assert refused.exit_code == 2
    assert "qwen3 has no `processor` settings" in refused.stderr


def test_build_once_builds_a_cached_file_once_and_leaves_nothing_on_failure(tmp_path):
    from generator.files import build_once

    calls = []

    def build(path):
        calls.append(path)
        path.write_bytes(b"artifact")

    target = tmp_path / "cache" / "thing.bin"
    target.parent.mkdir()
    assert build_once(target, build) == target and target.read_bytes() == b"artifact"
    assert build_once(target, build) == target and len(calls) == 1

    def broken(path):
        path.write_bytes(b"half")
        raise RuntimeError("writer crashed")

    other = tmp_path / "cache" / "other.bin"
    with pytest.raises(RuntimeError, match="writer crashed"):
        build_once(other, broken)
    assert sorted(p.name for p in other.parent.iterdir()) == [".other.bin.lock", ".thing.bin.lock", "thing.bin"]


def test_goldens_check_against_a_server_with_a_changed_projector(fewer_tokens_server, tmp_path):
    """The gate as a user runs it, --url at a llama-server whose projector gives 64 positions:
    exit 1, both image goldens drift at their first image token, everything else still holds."""
    goldens = tmp_path / "goldens"
    shutil.copytree(GOLDENS / "gemma3", goldens / "gemma3")
    shutil.copytree(GOLDENS / "causes", goldens / "causes")
    result = CliRunner().invoke(main, [
        "check", "--config", str(ROOT / "models.yaml"), "--goldens", str(goldens), "--model", "gemma3",
        "--engine", "llama-server", "--url", f"llama-server={fewer_tokens_server.url}", "--jobs", "2",
    ])
    assert result.exit_code == 1, result.output
    for case in ("gemma3/image-expanded", "gemma3/image-expanded-wide"):
        assert f"DRIFT {case} [llama-server]: drift at token 3 (271 vs 78 tokens)" in result.stdout, result.stdout
    # a --url llama-server has no parse harness: the render cases alone, the two image cases drift,
    # and the cause that framed them is stale for want of a case showing it
    assert f"{render_count('gemma3')} checked: " in result.stdout and ", 2 drift, 0 error" in result.stdout, result.stdout
    assert "DRIFT gemma3/causes:llama-server-cpp-mtmd-frames-gemma-3-image [llama-server]" in result.stdout
