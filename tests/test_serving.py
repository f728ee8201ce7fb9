"""`goldens check` against real managed servers: the serving path confirms the stand-ins, one
server that cannot start loses nothing else, and a cancelled run leaves no server behind.

llama-server is the pinned b11434 build and vLLM the pinned CPU build, each on a tiny model
carrying the real Qwen3 tokenizer; both are started and stopped by the runs themselves.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import GOLDENS, ROOT, asked_count, render_count
from faults import FaultServer, processes, wait_for
from interrupt import interruptible

from generator.cli import main
from generator.config import models
from generator.sources.source import resolve

QWEN = '{pack: "npm:qwen3"}'


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------------ serving-path confirmation

@pytest.mark.integration
def test_llama_server_check_confirms_every_case_on_the_serving_path(tmp_path):
    """The committed qwen3 goldens through a managed llama-server: every case also sent to
    /v1/chat/completions and /completion; the stand-in agrees, so no finding and exit 0. With
    --no-confirm the same verdicts, and both reports say the serving path was skipped."""
    from generator.replay.running.check import NO_CONFIRM

    md, xml = tmp_path / "out.md", tmp_path / "out.xml"
    result = invoke("check", "--config", ROOT / "models.yaml", "--goldens", GOLDENS, "--model", "qwen3",
                    "--engine", "llama-server", "--report", md, "--junit", xml)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert "stand-in" not in md.read_text(encoding="utf-8") and NO_CONFIRM not in md.read_text(encoding="utf-8")
    assert result.stdout.splitlines()[-1].startswith(f"{asked_count('llama-server', 'qwen3')} checked: ")

    result = invoke("check", "--config", ROOT / "models.yaml", "--goldens", GOLDENS, "--model", "qwen3",
                    "--engine", "llama-server", "--report", md, "--junit", xml, "--no-confirm")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert NO_CONFIRM in result.stdout
    assert "\n> " + NO_CONFIRM + "\n" in md.read_text(encoding="utf-8")  # under the verdict
    notes = [p.get("value") for p in ET.parse(xml).getroot().iter("property") if p.get("name") == "note"]
    # and the reviewed invariant finding (qwen3's template drops a legacy `function` message)
    from generator.analysis.invariants import docs_url

    assert notes == [NO_CONFIRM, "invariant findings of the reference (qwen3): 1 golden, 1 reviewed as known, "
                                 f"0 not reviewed, 0 stale entries ({docs_url()})"]


DOCUMENTS_TEMPLATE = """\
{%- if documents %}<|im_start|>system
Documents:
{%- for document in documents %}
[{{ loop.index }}] {{ document.title }}: {{ document.text }}
{%- endfor %}<|im_end|>
{% endif %}
{%- for message in messages %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


@pytest.mark.integration
def test_a_vllm_stand_in_that_disagrees_with_serving_is_its_own_finding(tmp_path):
    """vLLM's chat form of /tokenize drops `documents`; /v1/chat/completions renders them, as the
    reference does. The verdict is the serving path's (match); the stand-in's disagreement is a
    finding of its own, in the `vllm stand-in` column, naming both endpoints and both counts."""
    write(tmp_path / "documents.jinja", DOCUMENTS_TEMPLATE)
    config = write(tmp_path / "m.yaml", f"models:\n  qwen3:\n    tokenizer: {QWEN}\n"
                                        "    template: {file: documents.jinja}\n"
                                        "    shapes: [plain, documents]\n    engines: [vllm]\n")
    out = tmp_path / "goldens"
    assert invoke("regenerate", "--config", config, "--out", out).exit_code == 0
    md = tmp_path / "out.md"
    # one serving server for the four commands (the pool's managed vLLM is a render server,
    # read through its render endpoint, with no stand-in): a second serving start in the suite
    # (tests/conftest.py vllm_serving is the first), which a fake /tokenize server could replace
    from generator.engines.vllm.engine import make_serving_server
    loaded = models.load(config)
    server = make_serving_server(loaded.models["qwen3"], resolve(loaded.models["qwen3"], loaded), "0.32.0",
                                 lambda message: None)
    with server:
        _stand_in_finding_is_reviewed(config, out, md, server.url)


def _stand_in_finding_is_reviewed(config: Path, out: Path, md: Path, url: str) -> None:
    server = ("--url", f"vllm={url}")
    result = invoke("check", "--config", config, "--goldens", out, "--report", md, *server)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    drift = [line for line in result.stdout.splitlines() if line.startswith("DRIFT")]
    assert len(drift) == 1, result.stdout
    line = drift[0]
    assert line == ("DRIFT qwen3/documents [vllm stand-in]: vllm: /tokenize gives 14 tokens but "
                    "/v1/chat/completions fed the model 30 tokens, the first difference at token 1 "
                    "(the serving path's ids are judged in the vllm column)")
    assert result.stdout.splitlines()[-1] == (
        "2 checked: 2 rendered and match, 0 both refuse, 0 known divergence, 0 drift, 0 error; 1 stand-in finding "
        "(stand-in endpoint disagreeing with serving: 1 drift)")
    text = md.read_text(encoding="utf-8")
    assert "vllm stand-in" in text and "/tokenize gives" in text
    assert text.splitlines()[0].endswith(result.stdout.splitlines()[-1])  # one summary, the same counts

    # reviewed: recorded as a stand-in ledger entry (the stand-in's own ids), it passes as known
    recorded = invoke("ledger", "--config", config, "--goldens", out, "--engine", "vllm", "--case",
                      "qwen3/documents", "--stand-in", "--reason", "vLLM's /tokenize drops documents",
                      "--url", url)
    assert recorded.exit_code == 0, (recorded.stdout, recorded.stderr)
    entry = json.loads((out / "qwen3" / "documents.vllm.stand-in.json").read_text(encoding="utf-8"))
    assert (entry["stand_in"], entry["token_count"], entry["engine"]) == ("/tokenize", 14, "vllm")
    assert not (out / "qwen3" / "documents.vllm.json").exists()  # the serving path matches: no entry
    again = invoke("check", "--config", config, "--goldens", out, "--report", md, *server)
    assert again.exit_code == 0, (again.stdout, again.stderr)
    assert again.stdout.splitlines()[-1].endswith("1 stand-in finding (stand-in endpoint disagreeing with "
                                                  "serving: 1 known)")
    # the plain case agrees on both endpoints: recording a stand-in entry for it is refused
    refused = invoke("ledger", "--config", config, "--goldens", out, "--engine", "vllm", "--case",
                     "qwen3/plain", "--stand-in", "--reason", "x", "--url", url)
    assert refused.exit_code == 2 and "agrees with its serving path; nothing to record" in refused.stderr


# --------------------------------------------------------------- one server fails, the rest stay

WITH_TEMPLATE = """\
{%- for message in messages %}{% with role = message.role %}<|im_start|>{{ role }}
{{ message.content }}<|im_end|>
{% endwith %}{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


@pytest.mark.integration
def test_a_managed_server_that_cannot_start_loses_only_its_own_cases(tmp_path):
    """`{% with %}` compiles in Transformers but llama-server b11434's Jinja engine refuses it
    at load, so its server exits before becoming healthy: its cases are errors, the
    transformers cases are still judged, both reports are written, exit 2."""
    write(tmp_path / "with.jinja", WITH_TEMPLATE)
    config = write(tmp_path / "m.yaml", f"models:\n  qwen3:\n    tokenizer: {QWEN}\n"
                                        "    template: {file: with.jinja}\n"
                                        "    shapes: [plain, no-system]\n"
                                        "    engines: [llama-server, transformers]\n")
    out = tmp_path / "goldens"
    assert invoke("regenerate", "--config", config, "--out", out).exit_code == 0
    md, xml = tmp_path / "out.md", tmp_path / "out.xml"
    result = invoke("check", "--config", config, "--goldens", out, "--report", md, "--junit", xml)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("goldens: error:")]
    assert len(errors) == 1 and "[llama-server] llama-server unavailable for qwen3:" in errors[0], errors
    assert "exited with code 1 before becoming healthy" in errors[0]
    assert errors[0].endswith("exiting due to model loading error (2 cases, from qwen3/plain)"), errors[0]
    assert result.stdout.splitlines()[-1] == "4 checked: 2 rendered and match, 0 both refuse, 0 known divergence, 0 drift, 2 error"
    suites = {s.get("name"): s for s in ET.parse(xml).getroot()}
    assert (suites["goldens.transformers"].get("tests"), suites["goldens.transformers"].get("errors")) == ("2", "0")
    assert (suites["goldens.llama-server"].get("tests"), suites["goldens.llama-server"].get("errors")) == ("2", "2")
    assert "failed (2 error)" in md.read_text(encoding="utf-8")


# ------------------------------------------------------------------- a cancelled run leaves nothing

def _children(pid: int) -> list[int]:
    """Processes whose parent is `pid` (managed servers run in their own session, still our children)."""
    return [child for child, _, parent, _ in processes() if parent == pid]


def _alive(pid: int) -> bool:
    return any(found == pid and state != "Z" for found, state, _, _ in processes())


@pytest.mark.integration
@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_every_managed_server_and_removes_the_claims(signum, code, tmp_path):
    """A CI job cancelled mid-run (SIGTERM), or Ctrl-C: a managed llama-server is up (qwen3's
    llama-server cases are done) while vLLM, given by --url, hangs. The signal must stop the
    server before goldens exits, promptly (the hanging requests are cut, not waited out), with
    no claim or temp file left."""
    config = write(tmp_path / "m.yaml", f"models:\n  qwen3:\n    tokenizer: {QWEN}\n"
                                        "    shapes: [plain, tools]\n    engines: [llama-server, vllm]\n")
    goldens = tmp_path / "goldens"
    for stem in ("plain", "tools", "tools.llama-server", "tools.vllm"):  # with the entries that still exist
        (goldens / "qwen3").mkdir(parents=True, exist_ok=True)
        if (GOLDENS / "qwen3" / f"{stem}.json").exists():
            shutil.copy(GOLDENS / "qwen3" / f"{stem}.json", goldens / "qwen3" / f"{stem}.json")
    report = tmp_path / "out" / "goldens.md"
    server_pids: list[int] = []
    with FaultServer("hang") as vllm:
        run = interruptible(
            [sys.executable, "-m", "generator.cli", "check", "--config", str(config), "--goldens", str(goldens),
             "--url", f"vllm={vllm.url}", "--report", str(report)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:
            assert wait_for(lambda: vllm.posts > 0 or run.poll() is not None, 300), "vLLM was never asked"
            assert run.poll() is None, run.communicate()
            server_pids = [p for p in _children(run.pid) if "llama-server" in Path(f"/proc/{p}/cmdline").read_text()]
            assert len(server_pids) == 1, server_pids
            assert (report.parent / ".goldens.md.lock").exists()
            started = time.monotonic()
            run.send_signal(signum)
            stdout, stderr = run.communicate(timeout=60)
            took = time.monotonic() - started
        finally:
            if run.poll() is None:
                run.kill()
            for pid in server_pids:  # only on failure: what the run should have stopped
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
    assert not any(_alive(pid) for pid in server_pids), "the managed llama-server outlived goldens"
    assert run.returncode == code, (run.returncode, stdout, stderr)
    assert took < 20, took
    assert not report.exists()
    assert not [p.name for p in report.parent.iterdir()], "a claim or temp file was left behind"
