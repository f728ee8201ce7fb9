"""What a `goldens check` run found, as one Summary every report renders.

The reports (replay/reporting/junit.py for CI, replay/reporting/markdown_report.py for a pull request,
replay/reporting/terminal.py for the terminal, replay/reporting/github.py for Actions) are built from a Summary and
nothing else, so their counts always agree. An outcome's kind is read from `Outcome.kind`, a
word the judge sets, and looked up in KINDS, one ordered table: what it is called, where it
sorts and whether it passes; a new kind is one row there. No report parses the prose in
`Outcome.detail`.

Stand-in findings (an engine's stand-in endpoint disagreeing with its serving path) are counted
apart from the engines' verdicts, in the same kinds: a reviewed one (a stand-in ledger entry) is
known and passes, a new one, one that moved, or a stale entry fails the gate. So are stale
causes (a reviewed cause no case shows any more, replay/judging/causes.py): they fail the gate.

A case both the reference and the engine refuse passes but is its own kind, `both-refuse`, never
a match: every summary line says how many cases rendered and match and how many both refuse,
and a model whose checked cases mostly both refuse is named with the reference's refusal.
Drifts that share their first edit (the same tokens changed the same way) are one group: one
cause to review, not one problem per case.
"""

from __future__ import annotations

import shlex

import dataclasses
import re
from collections.abc import Sequence

from generator.replay.judging.causes import edit_from
from generator.replay.judging.outcome import Outcome

STATUSES = ("match", "both-refuse", "known", "drift", "error", "count")
COUNT_ONLY = " (count only)"  # marks every verdict judged from a prompt token count alone
LINE_LIMIT = 400  # characters of a problem's one terminal line


@dataclasses.dataclass(frozen=True)
class Kind:
    """One row of the ordered kind table: what an outcome is called and whether it passes."""

    key: str
    label: str  # in the Markdown and the terminal line
    word: str  # the terminal line's first word
    passing: bool
    colour: str | None = None  # the terminal word's colour (click.style names)
    junit: str = ""  # the JUnit failure message's note, e.g. " (ledger entry moved)"


# The order a reviewer reads them in: what stops the gate, what moved, then what passed.
KINDS = (
    Kind("error", "error", "ERROR", False, "red"),
    Kind("drift", "drift", "DRIFT", False, "red"),
    Kind("ledger-moved", "reviewed divergence moved", "DRIFT", False, "red", " (ledger entry moved)"),
    Kind("ledger-fixed", "fixed upstream, ledger entry stale", "DRIFT", False, "yellow", " (ledger entry stale)"),
    Kind("cause-stale", "reviewed cause no case shows", "DRIFT", False, "yellow", " (cause stale)"),
    Kind("invariant", "invariant finding not reviewed", "DRIFT", False, "red", " (reference invariant)"),
    Kind("known-gated", "known divergence of a class models.yaml gates on", "DRIFT", False, "red", " (gated class)"),
    Kind("dispute-stale", "reviewed dispute no golden shows", "DRIFT", False, "yellow", " (dispute review stale)"),
    Kind("disputed", "references disagree, not reviewed: not judged", "DISPUTED", False, "yellow",
         " (the model's references disagree)"),
    Kind("known", "known divergence", "known", True),
    Kind("count", "length matches" + COUNT_ONLY, "count", True),
    Kind("both-refuse", "both refuse", "refused", True),
    Kind("match", "match", "ok", True),
)
STALE_CAUSE = "cause-stale"
MOSTLY = 0.5  # a model whose checked cases both refuse more than this share is named
_KIND = {kind.key: kind for kind in KINDS}

# XML 1.0 allows tab, LF, CR and everything from U+0020 except surrogates and U+FFFE/U+FFFF;
# the rest is shown escaped (`\x1b`), in the Markdown too, where it would be invisible.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def kind(outcome: Outcome) -> Kind:
    """The row of KINDS an outcome's kind names; a kind not in the table needs a look unless
    the outcome says it is ok, and sorts after the ones the table names."""
    if outcome.kind in _KIND:
        return _KIND[outcome.kind]
    return Kind(outcome.kind, outcome.kind.replace("_", " "), outcome.kind.upper(), outcome.ok, "red")


def rank(item: Kind) -> int:
    return next((i for i, k in enumerate(KINDS) if k.key == item.key), len(KINDS))


SURROGATE = "surrogate tokenizer: "  # the note that marks a model's lines in every report


def surrogate_note(model: str, family: str) -> str:
    """The note a run writes for a surrogate family; kept in results (and merged shards) as text."""
    return (f"{SURROGATE}{model} is the built-in family {family} rendered with the nearest real tokenizer "
            "plus its template's special tokens: its findings are about templates and request layers, "
            "never tokenizers (docs/families.md)")


def split_case(case: str) -> tuple[str, str]:
    """'qwen3/tools--thinking-off' -> ('qwen3', 'tools--thinking-off')."""
    model, _, stem = case.partition("/")
    return model, stem


def counts(outcomes: Sequence[Outcome]) -> dict[str, int]:
    """Outcomes per status: the five of STATUSES always, then any other status in the run."""
    n = {status: 0 for status in STATUSES}
    for outcome in outcomes:
        n[outcome.status] = n.get(outcome.status, 0) + 1
    return n


def summary_line(outcomes: Sequence[Outcome]) -> str:
    """The counts of a list of verdicts in one line (no stand-in findings: see Summary.line):
    '30 checked: 4 rendered and match, 26 both refuse, 0 known divergence, 0 drift, 0 error'."""
    n = counts(outcomes)
    line = (f"{len(outcomes)} checked: {n['match']} rendered and match, {n['both-refuse']} both refuse, "
            f"{n['known']} known divergence, {n['drift']} drift, {n['error']} error")
    line += f", {n['count']} length only (count only, ids not seen)" if n["count"] else ""
    line += "".join(f", {count} {status}" for status, count in n.items() if status not in STATUSES)
    parsed = [o for o in outcomes if o.axis == "parse"]
    if parsed:  # the output side's share of the same counts
        p = counts(parsed)
        line += (f" (of which {len(parsed)} parse cases: {p['match']} parsed as expected, {p['known']} known, "
                 f"{p['drift']} drift, {p['error']} error)")
    return line


def refusal_notes(outcomes: Sequence[Outcome]) -> list[str]:
    """One line per model whose checked cases mostly both refuse: the gate passes there while
    checking little, so it says how little and why (the reference's refusal, most common first)."""
    models: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        models.setdefault(split_case(outcome.case)[0], []).append(outcome)
    notes = []
    for model, items in models.items():
        both = [o for o in items if o.status == "both-refuse"]
        if not both or len(both) <= MOSTLY * len(items):
            continue
        why: dict[str, int] = {}
        for outcome in both:
            text = first_line(outcome.reason or outcome.detail, 120)
            why[text] = why.get(text, 0) + 1
        reasons = "; ".join(f"{text!r} ({count})" for text, count in sorted(why.items(), key=lambda kv: -kv[1])[:3])
        rendered = sum(1 for o in items if o.status not in ("both-refuse", "error") and not o.refused)
        notes.append(f"{model}: {len(both)} of {len(items)} checked cases both refuse, so only {rendered} "
                     f"rendered: the reference refused with {reasons}")
    return notes


@dataclasses.dataclass
class Summary:
    """A run's outcomes (verdicts and stand-in findings, in run order) and the notes every report
    says (e.g. --no-confirm): the one source of every count any report shows."""

    outcomes: list[Outcome]
    notes: list[str] = dataclasses.field(default_factory=list)
    coverage: dict[str, dict] | None = None  # model -> its template coverage record (check --coverage)

    @property
    def verdicts(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.stand_in is None and o.kind != STALE_CAUSE]

    @property
    def findings(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.stand_in is not None]

    @property
    def stale_causes(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.kind == STALE_CAUSE]

    def surrogates(self) -> frozenset[str]:
        """The models of the run rendered with a surrogate tokenizer (their notes say so)."""
        return frozenset(note[len(SURROGATE):].split(" ", 1)[0] for note in self.notes if note.startswith(SURROGATE))

    def marked(self, case: str) -> str:
        """A case as a report line names it: a surrogate model's says so."""
        return f"{case} (surrogate)" if split_case(case)[0] in self.surrogates() else case

    def refusals(self) -> list[str]:
        """The models whose checked cases mostly both refuse, each named with why."""
        return refusal_notes(self.verdicts)

    def classes(self) -> dict[str, tuple[int, int]]:
        """class -> (known verdicts of it, distinct causes or entries behind them): engine
        defects counted apart from policy and the reference's own errors."""
        cases: dict[str, int] = {}
        behind: dict[str, set] = {}
        for outcome in self.verdicts:
            if outcome.status == "known" or outcome.kind == "known-gated":
                name = outcome.klass or "unclassified"
                cases[name] = cases.get(name, 0) + 1
                behind.setdefault(name, set()).add(outcome.cause or (outcome.case, outcome.engine))
        order = ["engine-defect", "reference", "policy"]
        return {name: (cases[name], len(behind[name]))
                for name in sorted(cases, key=lambda n: (order.index(n) if n in order else len(order), n))}

    def class_line(self) -> str:
        """'known divergences: 28 engine-defect (3 causes), 120 policy (40 causes)'; '' with none."""
        parts = [f"{n} {name} ({k} cause{'s' if k != 1 else ''})" for name, (n, k) in self.classes().items()]
        return f"known divergences by class: {', '.join(parts)}" if parts else ""

    def causes(self) -> dict[tuple[str, str], int]:
        """(cause, column) -> the cases a reviewed cause explained in this run."""
        out: dict[tuple[str, str], int] = {}
        for outcome in self.verdicts:
            if outcome.status == "known" and outcome.cause is not None:
                out[outcome.cause, outcome.column] = out.get((outcome.cause, outcome.column), 0) + 1
        return out

    @property
    def passed(self) -> bool:
        return all(kind(o).passing for o in self.outcomes)

    def line(self) -> str:
        """'485 checked: 479 match, ...; 2 stand-in findings (2 known)'."""
        text = summary_line(self.verdicts)
        findings = self.findings
        if findings:
            n = counts(findings)
            parts = [f"{n[s]} {'known' if s == 'known' else s}" for s in ("known", "drift", "error") if n[s]]
            text += (f"; {len(findings)} stand-in finding{'s' if len(findings) != 1 else ''}"
                     f" (stand-in endpoint disagreeing with serving: {', '.join(parts)})")
        stale = self.stale_causes
        if stale:
            text += f"; {len(stale)} stale cause{'s' if len(stale) != 1 else ''} (no case shows its edit any more)"
        return text

    def verdict(self) -> str:
        """'passed', or 'failed' with what failed; errors first, as they decide the exit code."""
        failing = [o for o in self.outcomes if not kind(o).passing]
        if not failing:
            return "passed"
        n = counts(failing)
        statuses = {o.status for o in failing}
        order = ["error", "drift", *sorted(statuses - {"error", "drift"})]
        return f"failed ({', '.join(f'{n[s]} {s}' for s in order if s in statuses)})"

    def exit_code(self) -> int:
        """0 every verdict and finding passes, 1 drift (or a failing finding), 2 nothing judged, an
        error, or a case the model's references dispute with no review (judged against no engine:
        replay/judging/disputes.py)."""
        if not self.verdicts or any(o.status in ("error", "disputed") for o in self.outcomes):
            return 2
        return 0 if self.passed else 1

    def versions(self) -> dict[str, str]:
        """engine label -> the version it reported, in run order."""
        out: dict[str, str] = {}
        for outcome in self.outcomes:
            if outcome.version and outcome.engine not in out:
                out[outcome.engine] = outcome.version
        return out

    def problems(self) -> list[list[Outcome]]:
        return problems(self.outcomes)


def headline(outcome: Outcome) -> str:
    """One line for an outcome: 'ok', 'drift at token N', 'known divergence', 'error'."""
    if outcome.status == "match":
        return "ok"
    label = kind(outcome).label
    if outcome.divergence is not None:
        return f"{label} at token {outcome.divergence.index}"
    return label + (COUNT_ONLY if outcome.level == "count" and outcome.status != "count" else "")


def xml_safe(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text)


def first_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _piece(entry: tuple[int, int, str] | None) -> str:
    return "(end)" if entry is None else repr(entry[2])


def drift_context(outcome: Outcome, before: int = 2) -> str:
    """The tokens around the first divergence, wdiff style: `'a' 'b' [-'x'-] {+'y'+}`."""
    div = outcome.divergence
    if div is None:
        return ""
    expected = {entry[0]: entry for entry in div.expected}
    actual = {entry[0]: entry for entry in div.actual}
    shared = [expected[p] for p in range(div.index - before, div.index) if p in expected]
    lead = ("… " if shared and shared[0][0] > 0 else "") + " ".join(_piece(e) for e in shared)
    change = f"[-{_piece(expected.get(div.index))}-] {{+{_piece(actual.get(div.index))}+}}"
    return f"{lead} {change}".strip()


def detail(outcome: Outcome) -> str:
    """An error's message without the engine name the report already shows beside it."""
    text = outcome.detail
    if outcome.status == "error" and text.startswith(f"{outcome.engine}: "):
        text = text[len(outcome.engine) + 2:]
    return text


def problems(outcomes: Sequence[Outcome]) -> list[list[Outcome]]:
    """What needs a look, in KINDS order (then run order), one group per row: a drift alone, or
    with every drift of its column that shares its first edit (one cause to review); the
    errors of one engine with one message together (an engine that went away fails every case)."""
    groups: dict[tuple, list[Outcome]] = {}
    for position, outcome in enumerate(outcomes):
        if kind(outcome).passing:
            continue
        if outcome.status == "error":
            key: tuple = (outcome.column, " ".join(detail(outcome).split()))
        elif outcome.kind == "drift" and outcome.edit is not None:
            key = ("edit", outcome.column, edit_key(outcome.edit))
        else:
            key = (position,)
        groups.setdefault(key, []).append(outcome)
    return sorted(groups.values(), key=lambda group: rank(kind(group[0])))


def edit_key(edit: dict) -> str:
    if "findings" in edit:  # a parse drift: grouped by the kinds of what is wrong (replay/judging/parse/findings.py)
        return repr(("findings", sorted(edit["findings"])))
    return repr((edit["at"], [tuple(t) for t in edit["replace"]], [tuple(t) for t in edit["with"]]))


def describe_edit(edit: dict) -> str:
    """A drift's first edit in words: "insert [1 '<s>'] at start"; a parse drift's findings."""
    if "findings" in edit:
        return "findings " + "; ".join(edit["findings"])
    return edit_from(edit, "edit").describe()


def spelled_edit(edit: dict) -> str:
    """A drift's first edit as `goldens ledger` takes it: `--edit 'insert 1 at start'`, or a parse
    drift's `--finding '...'` for each finding."""
    if "findings" in edit:
        return " ".join(f"--finding {shlex.quote(f)}" for f in edit["findings"])
    return f"--edit '{edit_from(edit, 'edit').spelled()}'"


def group_line(group: list[Outcome]) -> str:
    """Drifts that share a first edit, in one line: how many, the edit, the cases, and how to
    record it once as a reviewed cause."""
    first = group[0]
    models = list(dict.fromkeys(split_case(o.case)[0] for o in group))
    engine = first.column.partition("@")[0]
    cases = ", ".join(o.case for o in group[:6]) + (f", and {len(group) - 6} more" if len(group) > 6 else "")
    record = (f"goldens ledger --cause NAME {spelled_edit(first.edit)} --engine {engine} "
              + " ".join(f"--model {m}" for m in models) + " --reason '...'")
    return (f"{len(group)} drifts, one edit: {describe_edit(first.edit)} ({cases}); "
            f"if it is accepted, record it once: {record}")


def problem_line(outcome: Outcome) -> str:
    """A problem in one line: 'drift at token 5 (25 vs 25 tokens): … ' are' [-' terse'-] {+' tersely'+}'."""
    if outcome.divergence is not None:
        text = f"{outcome.divergence.summary()}: {drift_context(outcome)}"
        if kind(outcome).key != "drift":
            text = f"{kind(outcome).label}: {text}"
    else:
        text = detail(outcome) if outcome.status == "error" else outcome.detail
    return first_line(xml_safe(text), LINE_LIMIT)
