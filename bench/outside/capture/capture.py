"""Run each client driver (drivers/*.py) against its own capturing server (server.py) and keep what
the client sent as bench/outside/bodies4/<driver>-<n>.json, n the request's place in the
conversation. The drivers run in a scratch venv outside the repository holding clients.lock's
pins (`--python /tmp/capture-venv/bin/python`); the bodies are kept as the JSON values received,
re-indented, keys in the order sent.

    python capture.py --python /tmp/capture-venv/bin/python [DRIVER ...]
"""
from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BODIES = HERE.parent / "bodies4"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def capture(driver: Path, python: str, timeout: int) -> list[Path]:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen([sys.executable, str(HERE / "server.py"), "--port", str(port), "--out", tmp])
        try:
            for _ in range(50):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    time.sleep(0.1)
            run = subprocess.run([python, str(driver), f"http://127.0.0.1:{port}/v1"], capture_output=True,
                                 text=True, timeout=timeout)
        finally:
            server.terminate()
            server.wait()
        if run.returncode != 0:
            print(f"{driver.stem}: exit {run.returncode}\n{run.stderr[-2000:]}", file=sys.stderr)
        kept = []
        for i, raw in enumerate(sorted(Path(tmp).glob("*.json")), 1):
            out = BODIES / f"{driver.stem.replace('_', '-')}-{i}.json"
            out.write_text(json.dumps(json.loads(raw.read_bytes()), indent=2, ensure_ascii=False) + "\n")
            kept.append(out)
        print(f"{driver.stem}: {len(kept)} request(s); answer: {run.stdout.strip()[-120:]!r}")
        return kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="the scratch venv's python (clients.lock)")
    parser.add_argument("--timeout", type=int, default=300)
    parser.add_argument("drivers", nargs="*")
    args = parser.parse_args()
    BODIES.mkdir(exist_ok=True)
    drivers = [HERE / "drivers" / f"{d}.py" for d in args.drivers] or sorted((HERE / "drivers").glob("*.py"))
    for driver in drivers:
        capture(driver, args.python, args.timeout)


if __name__ == "__main__":
    main()
