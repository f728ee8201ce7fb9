"""An Outcome: one case's verdict on one engine, as data (replay/judging/judge.py gives it; every report,
the gate and the results read it), and the committed goldens a verdict is judged against.

Both judges, the ids' (judge.py) and the parse's (parse/judge.py), give Outcomes; they live here,
below both, so neither judge imports the other to name its verdict.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from generator.errors import GoldensError
from generator.goldens import golden_file
from generator.replay.judging.divergence import Divergence

STAND_IN = " stand-in"  # suffix of the column a stand-in finding is reported in

# What an outcome is, in one word: the status it counts under and whether it passes follow from it.
KIND_STATUS = {
    "match": "match", "count": "count", "known": "known", "drift": "drift", "error": "error",
    "both-refuse": "both-refuse",  # the reference and the engine both refused: passes, not a match
    "ledger-moved": "drift",  # a reviewed divergence (or refusal) that moved
    "ledger-fixed": "drift",  # the engine now matches; the ledger entry is stale
    "cause-stale": "drift",  # a reviewed cause no case of its engines and models shows any more
    "invariant": "drift",  # the reference's own golden drops a message or a call, unreviewed
    "known-gated": "drift",  # a known divergence of a class models.yaml's `gate:` fails on
    "disputed": "disputed",  # the model's references disagree and no review says which is right: not judged
    "dispute-stale": "drift",  # a reviewed dispute no golden shows any more
}
PASSING = ("match", "both-refuse", "known", "count")  # the statuses that pass the gate


@dataclass
class Outcome:
    case: str
    engine: str  # the engine's label: its name, or name@version when several versions run
    status: str  # "match" | "known" | "drift" | "error" | "count" (lengths equal, ids unseen)
    detail: str = ""
    divergence: Divergence | None = None
    reason: str | None = None  # the ledger's, for "known"
    level: str = "ids"  # "ids", or "count" when judged from a prompt token count alone
    refused: bool = False  # the engine's answer was a refusal
    unreachable: bool = False  # the engine stopped answering (timeout, connection lost)
    finding: Outcome | None = None  # the stand-in disagreed with the serving path
    version: str = ""  # what the engine said it is (llama-server's build_info, vLLM's /version)
    kind: str = ""  # a key of KIND_STATUS; defaults to the status
    stand_in: str | None = None  # a stand-in finding: the stand-in endpoint it is about
    cause: str | None = None  # the reviewed cause a known outcome matched (or a stale one names)
    edit: dict | None = None  # a drift's first edit (causes.Edit.data()): drifts sharing it group
    advice: str = ""  # what to do, for a body the reference normalized
    axis: str = "render"  # or "parse": an engine's parse of output ids (replay/judging/parse/judge.py)
    klass: str | None = None  # a known divergence's class: engine-defect, policy, reference (causes.CLASSES)

    def __post_init__(self) -> None:
        self.kind = self.kind or self.status

    @property
    def ok(self) -> bool:
        return self.status in PASSING

    @property
    def column(self) -> str:
        """Where reports show it: the engine's column, or '<engine> stand-in' for a finding."""
        return self.engine + STAND_IN if self.stand_in is not None else self.engine


def load_goldens(root: Path, case_ids: Iterable[str]) -> list[golden_file.Golden]:
    """The committed goldens of these cases; a missing one is an error that says to regenerate."""
    out = []
    for case_id in case_ids:
        path = golden_file.golden_path(root, case_id)
        if not path.exists():
            raise GoldensError(f"{path}: no golden for case {case_id}; run `goldens regenerate`")
        out.append(golden_file.read(path))
    return out
