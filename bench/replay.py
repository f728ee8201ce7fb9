"""Replay speed: the project's replay against a one-request-at-a-time, new-connection-per-request loop.

Both send the same goldens to the same managed llama-server (the tutorial's adapter posts with
urllib, a fresh connection per call, one case after another; goldens replays concurrently over
keep-alive connections). Prints both times and the ratio. Run: .venv/bin/python bench/replay.py
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from generator.config import models  # noqa: E402
from generator.config.cases import model_cases  # noqa: E402
from generator.engines.pool import EnginePool  # noqa: E402
from generator.goldens import golden_file  # noqa: E402
from generator.replay.judge import load_goldens, replay  # noqa: E402
from generator.sources.source import resolve  # noqa: E402


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def sequential(url: str, goldens: list[golden_file.Golden]) -> list[list[int]]:
    out = []
    for item in goldens:
        body = {"messages": item.request["messages"]}
        if item.request.get("tools"):
            body["tools"] = item.request["tools"]
        if item.request.get("chat_template_kwargs"):
            body["chat_template_kwargs"] = item.request["chat_template_kwargs"]
        try:
            prompt = post(f"{url}/apply-template", body)["prompt"]
        except urllib.error.HTTPError:
            out.append([])
            continue
        out.append(post(f"{url}/tokenize", {"content": prompt, "add_special": True, "parse_special": True})["tokens"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="qwen3")
    parser.add_argument("--rounds", type=int, default=5, help="times the model's goldens are replayed")
    parser.add_argument("--jobs", type=int, default=8)
    args = parser.parse_args()

    config = models.load(ROOT / "models.yaml")
    model = config.models[args.model]
    source = resolve(model, config)
    goldens = load_goldens(ROOT / "goldens", [c.id for c in model_cases(model)]) * args.rounds
    with EnginePool(config.date) as pool:
        engine = pool.engine("llama-server", model, source)
        sequential(engine.url, goldens[:4])  # warm both paths once
        replay(engine, goldens[:4], ROOT / "goldens", jobs=args.jobs)

        start = time.perf_counter()
        slow = sequential(engine.url, goldens)
        t_slow = time.perf_counter() - start

        start = time.perf_counter()
        outcomes = replay(engine, goldens, ROOT / "goldens", jobs=args.jobs)
        t_fast = time.perf_counter() - start

    rendered = sum(1 for ids in slow if ids)
    print(f"{len(goldens)} requests ({args.model} x {args.rounds} rounds) against one llama-server")
    print(f"sequential, new connection per request: {t_slow:7.3f} s  ({rendered} rendered)")
    print(f"goldens replay, {args.jobs} in flight, keep-alive: {t_fast:7.3f} s  ({len(outcomes)} judged)")
    print(f"speed-up: {t_slow / t_fast:.1f}x")


if __name__ == "__main__":
    main()
