"""Replay speed: goldens' replay against the engine's own capacity, measured in the same run.

On a small machine a llama-server's own work per case (/apply-template runs its request parser and
Jinja engine, /tokenize its tokenizer) bounds any client, so a replay is not measured against a
sequential loop but against the best a plain client gets from the same server: one keep-alive
httpx client with 1, 4 and 16 threads, sending the same two calls per case (the bodies the
llama-server engine sends) and judging nothing. The server's CPU time per case is
printed beside both (read from /proc: Linux only); on 2 cores it is the ceiling.

Other processes on the machine slow both sides alike; the ratio is taken within one run, and each
figure is the best of --repeat passes.

    .venv/bin/python bench/replay.py [--model qwen3] [--rounds 5] [--jobs 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # runnable from a checkout without the editable install

from generator import machine  # noqa: E402
from generator.config import models  # noqa: E402
from generator.config.cases import model_cases  # noqa: E402
from generator.engines.llama_server.engine import LlamaServerEngine, _chat_body  # noqa: E402
from generator.errors import GoldensError  # noqa: E402
from generator.goldens import golden_file  # noqa: E402
from generator.replay.judging.judge import replay  # noqa: E402
from generator.replay.judging.outcome import load_goldens  # noqa: E402
from generator.engines.llama_server.llama_cpp import LlamaServer  # noqa: E402
from generator.engines.llama_server.tiny_gguf import tiny_gguf  # noqa: E402
from generator.sources import pack  # noqa: E402
from generator.sources.source import resolve  # noqa: E402

THREADS = (1, 4, 16)


def plain(url: str, goldens: list[golden_file.Golden], threads: int) -> int:
    """The two calls per case from a plain keep-alive client; returns the cases tokenized (a
    request the server refuses, HTTP 400 or 500, stops after its first call, as in a replay)."""
    limits = httpx.Limits(max_connections=threads, max_keepalive_connections=threads)
    bodies = [_chat_body("plain", f"{url}/apply-template", item.request) for item in goldens]
    with httpx.Client(timeout=60, limits=limits) as client:
        def one(body: dict) -> int:
            reply = client.post(f"{url}/apply-template", json=body)
            if reply.status_code in (400, 500):  # llama-server's refusals (500: what its JSON parsing throws)
                return 0
            reply.raise_for_status()
            tokens = client.post(f"{url}/tokenize", json={"content": reply.json()["prompt"], "add_special": True,
                                                          "parse_special": True, "with_pieces": True})
            tokens.raise_for_status()
            return 1

        with ThreadPoolExecutor(threads) as pool:
            return sum(pool.map(one, bodies))


def replayed(url: str, goldens: list[golden_file.Golden], jobs: int) -> list:
    """goldens' replay through the engine as `goldens check` makes it (its own kept-alive
    connections: the server is started with HTTP workers for them and the plain clients both)."""
    return replay(LlamaServerEngine(url), goldens, ROOT / "goldens", jobs=jobs)


def server_cpu(pid: int) -> float:
    """User + system CPU seconds the server process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(pid: int, run) -> tuple[tuple[float, float, float], object]:
    """((wall seconds, server CPU seconds, this process's CPU seconds), result) of one pass."""
    cpu, mine, start = server_cpu(pid), time.process_time(), time.perf_counter()
    result = run()
    return (time.perf_counter() - start, server_cpu(pid) - cpu, time.process_time() - mine), result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen3")
    parser.add_argument("--rounds", type=int, default=5, help="times the model's goldens are replayed per pass")
    parser.add_argument("--jobs", type=int, default=8, help="the replay's requests in flight (goldens check --jobs)")
    parser.add_argument("--repeat", type=int, default=3, help="passes of each; the best is reported")
    parser.add_argument("--build", type=int, default=None, help="the llama.cpp build to serve (default: the pinned one)")
    args = parser.parse_args(argv)

    try:
        config = models.load(ROOT / "models.yaml")
        (model,) = config.select([args.model])
        source = resolve(model, config)
        goldens = load_goldens(ROOT / "goldens", [c.id for c in model_cases(model)]) * args.rounds
        if source.gguf is not None:
            gguf = tiny_gguf(model.name, None, source.template, vocab_gguf=source.gguf)
        else:
            gguf = tiny_gguf(model.name, source.tokenizer_dir, source.template)
        # cpp-httplib holds a worker per open keep-alive connection: the replay's idle ones
        # (generator/http.py keeps up to MAX_IDLE) must not starve the 16-thread plain client
        build = {"build": args.build} if args.build else {}
        server = LlamaServer(gguf, extra_args=("--threads-http", str(max(THREADS) + 2 * args.jobs)), **build).start()
    except GoldensError as error:
        print(f"bench: error: {error}", file=sys.stderr)
        return 2
    try:
        pid, url = server.process.pid, server.url
        plain(url, goldens[:8], 4)  # warm both paths once
        replayed(url, goldens[:8], args.jobs)
        passes: dict[str, list[tuple[float, float, float]]] = {f"plain-{n}": [] for n in THREADS}
        passes["replay"] = []
        outcomes, tokenized = [], 0
        for _ in range(max(1, args.repeat)):  # interleaved, so drift in the machine's load hits all alike
            for threads in THREADS:
                figures, tokenized = measure(pid, lambda: plain(url, goldens, threads))
                passes[f"plain-{threads}"].append(figures)
            figures, outcomes = measure(pid, lambda: replayed(url, goldens, args.jobs))
            passes["replay"].append(figures)
    finally:
        server.stop()

    cases = len(goldens)
    best = {name: min(values) for name, values in passes.items()}  # by wall time
    statuses = {status: sum(o.status == status for o in outcomes) for status in ("match", "known", "drift", "error")}
    print(f"{cases} cases ({args.model} x {args.rounds} rounds) against one llama-server b{args.build or pack.LLAMA_CPP_BUILD}, "
          f"{machine.cores()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    for name, (wall, cpu, mine) in best.items():
        label = f"plain client, {name.split('-')[1]:>2} threads" if name != "replay" else f"goldens replay, --jobs {args.jobs}"
        print(f"{label:28s} {cases / wall:7.1f} cases/s  ({wall:6.3f} s; CPU a case: server "
              f"{cpu / cases * 1000:5.2f} ms, client {mine / cases * 1000:5.2f} ms)")
    capacity_name = min((n for n in best if n != "replay"), key=lambda n: best[n][0])
    capacity = cases / best[capacity_name][0]
    print(f"capacity (best plain client): {capacity:7.1f} cases/s  ({capacity_name.split('-')[1]} threads; "
          f"{tokenized} of {cases} tokenized, the rest refused)")
    print(f"replay / capacity:            {cases / best['replay'][0] / capacity:7.2f}  "
          f"(replay judged: {', '.join(f'{n} {k}' for k, n in statuses.items() if n)})")
    return 0


if __name__ == "__main__":
    import benchpage  # bench/ is this script's folder: sys.path[0]

    sys.exit(benchpage.run(main, "replay"))
