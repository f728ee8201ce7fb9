"""The reference render inside another Transformers' venv: `python -m` this module there.

It speaks JSON lines on stdin/stdout. The first line it writes names the versions it runs
({"transformers": ..., "tokenizers": ..., "jinja2": ...}); then each request line
{"tokenizer_dir", "template", "request", "date", "processor_dir"} gets one answer line {"ids",
"pieces", "prompt", "error", "normalization"} (with "as_is": {"prompt"} or {"raised"}, what
render_prompt gives), rendered by generator.reference exactly as the goldens were (a
request with `processor_dir`, one that carries media, by the model's processor), so the only
thing that differs from the golden is the Transformers release. A tokenizer or processor this
release cannot load is answered {"fatal": "..."}. Only the standard library and generator.reference
are imported, so any Transformers from 4.x on can host it.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys


def main() -> None:
    from importlib.metadata import version

    from generator import reference
    from generator.errors import GoldensError, describe

    out = sys.stdout
    out.write(json.dumps({name: version(name) for name in ("transformers", "tokenizers", "jinja2")}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        media = job.get("processor_dir")
        where = media or job["tokenizer_dir"]
        try:
            loaded = reference.load_processor(media) if media else reference.load_tokenizer(where)
        except Exception as error:  # this release cannot load it: the run's answer
            answer = {"fatal": str(error) if isinstance(error, GoldensError)  # it names the directory
                      else f"cannot load {where}: {describe(error)}"}
        else:
            date = _dt.date.fromisoformat(job["date"])
            try:
                if job.get("as_is"):  # render_prompt's job: the template's text for the body as sent
                    try:
                        answer = {"prompt": reference.render_prompt(loaded, job["template"], job["request"], date)}
                    except GoldensError:
                        raise
                    except Exception as error:  # noqa: BLE001 (the template's raise, said as render_prompt's)
                        answer = {"raised": describe(error)}
                else:
                    result = (reference.render_expanded(loaded, job["template"], job["request"], date) if media
                              else reference.render(loaded, job["template"], job["request"], date))
                    answer = {"ids": result.ids, "pieces": result.pieces, "prompt": result.prompt,
                              "error": result.error, "normalization": result.normalization}
            except GoldensError as error:  # the deadline, memory: this machine's, not the template's
                answer = {"unjudged": str(error), "kind": type(error).__name__}
        out.write(json.dumps(answer, ensure_ascii=False) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
