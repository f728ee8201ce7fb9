"""Reviewed parse causes on disk (goldens/causes/parse/<name>.json): a behaviour of an engine's
parser, the findings (findings.py) it explains for its engines and models, and why."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from generator import files
from generator.errors import GoldensError

CAUSES = "parse"  # goldens/causes/parse/<name>.json


@dataclass(frozen=True)
class Cause:
    """A reviewed behaviour of an engine's parser: every case of its engines and models whose
    findings are all among `findings` is known, with `reason`."""

    name: str
    engines: tuple[str, ...]
    models: tuple[str, ...]
    findings: tuple[str, ...]
    reason: str
    path: Path | None = None
    cases: tuple[str, ...] = ()  # case id patterns (fnmatch) it is limited to; () for every case
    klass: str | None = None  # engine-defect, policy or reference (replay/judging/causes.py CLASSES)
    explains: tuple[str, ...] = ()  # the cases it explained when it was recorded (for `goldens ledger`'s counts)
    upstream: tuple[str, ...] = ()  # an engine-defect's upstream issue links
    report: str | None = None  # the ready-to-file report beside it (`<name>.report.md`, defects.py)

    def applies(self, case: str) -> bool:
        import fnmatch

        return not self.cases or any(fnmatch.fnmatchcase(case, pattern) for pattern in self.cases)


def causes_folder(root: Path) -> Path:
    from generator.replay.judging import causes as render_causes

    return root / render_causes.FOLDER / CAUSES


def load_causes(root: Path) -> list[Cause]:
    """Every reviewed parse cause under the goldens folder (a bad one is one error line)."""
    from generator.json_reader import load_json

    folder = causes_folder(root)
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        data = load_json(files.read_bytes(path), str(path))
        try:
            cause = Cause(name=data["cause"], engines=tuple(data["engines"]), models=tuple(data["models"]),
                          findings=tuple(data["findings"]), reason=data["reason"], path=path,
                          cases=tuple(data.get("cases") or ()), klass=data.get("class"),
                          explains=tuple(data.get("explains") or ()), upstream=tuple(data.get("upstream") or ()),
                          report=data.get("report"))
        except (KeyError, TypeError):
            raise GoldensError(f"{path}: a parse cause has cause, engines, models, findings and reason") from None
        if cause.name != path.stem or not all(isinstance(x, str) and x for x in
                                              (*cause.engines, *cause.models, *cause.findings, *cause.cases,
                                               cause.reason)):
            raise GoldensError(f"{path}: `cause` must be the file's name, and every value a non-empty string")
        from generator.replay.judging.causes import report_name

        if cause.report is not None and cause.report != report_name(cause.name):
            raise GoldensError(f"{path}: `report` must be {report_name(cause.name)!r}, beside the cause")
        out.append(cause)
    return out


def named_cause(root: Path, name: str) -> Cause | None:
    return next((c for c in load_causes(root) if c.name == name), None)


def covering(root: Path, engine: str, model: str) -> list[Cause]:
    return [c for c in load_causes(root) if engine in c.engines and model in c.models]


def write_cause(root: Path, cause: Cause) -> Path:
    import json as json_

    from generator.replay.judging import causes as render_causes

    render_causes.check_name(cause.name)
    data = {"format": 1, "cause": cause.name, "engines": list(cause.engines), "models": list(cause.models),
            **({"cases": list(cause.cases)} if cause.cases else {}),
            "findings": list(cause.findings), "class": cause.klass, "reason": cause.reason,
            **({"upstream": list(cause.upstream)} if cause.upstream else {}),
            **({"report": cause.report} if cause.report else {}), "explains": list(cause.explains)}
    path = causes_folder(root) / f"{cause.name}.json"
    if path.is_file():  # a rewrite (an upstream link, a report) keeps the reviewed file's key order
        old = json_.loads(files.read_text(path))
        data = {**{k: data[k] for k in old if k in data and k != "explains"},
                **{k: v for k, v in data.items() if k not in old and k != "explains"}, "explains": data["explains"]}
    files.atomic_write(path, json_.dumps(data, indent=2, ensure_ascii=False) + "\n", within=root)
    return path
