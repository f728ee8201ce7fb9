"""The JUnit XML report of a `goldens check` run, for CI.

One <testsuite> per column (an engine label, or '<engine> stand-in' for stand-in findings), one
<testcase> per (model, shape[--variant]) in it, with classname = model and name = the case's
stem. A failing outcome is a <failure message="drift at token N"> carrying the full drift report;
an engine that could not answer is an <error>; a reviewed (known) divergence passes and is
listed, with its reason (and its cause), in the suite's <system-out>, as is a case both the
reference and the engine refuse (it passes, but nothing was rendered); a model that mostly both
refuses is a `note` property. The output keeps to what both the
Ant/"windyroad" JUnit.xsd and Jenkins' junit-10.xsd accept.
"""

from __future__ import annotations

import datetime as _dt
import socket
import xml.etree.ElementTree as ET

from generator.replay.judging.outcome import Outcome
from generator.replay.reporting.report import Summary, first_line, headline, kind, split_case, xml_safe


def junit_xml(summary: Summary, elapsed: float = 0.0, timestamp: _dt.datetime | None = None,
              hostname: str | None = None) -> str:
    """The run as JUnit XML (one suite per column); `elapsed` seconds is split evenly over cases."""
    outcomes = summary.outcomes
    stamp = (timestamp or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%S")
    host = hostname or socket.gethostname() or "localhost"
    per_case = elapsed / len(outcomes) if outcomes else 0.0
    columns: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        columns.setdefault(outcome.column, []).append(outcome)

    root = ET.Element("testsuites")
    for suite_id, (column, items) in enumerate(columns.items()):
        failing = [o for o in items if not kind(o).passing and o.status != "error"]
        suite = ET.SubElement(root, "testsuite", {
            "name": xml_safe(f"goldens.{column}"),
            "package": xml_safe(f"goldens.{column}"),
            "id": str(suite_id),
            "tests": str(len(items)),
            "failures": str(len(failing)),
            "errors": str(sum(1 for o in items if o.status == "error")),
            "time": f"{per_case * len(items):.3f}",
            "timestamp": stamp,
            "hostname": xml_safe(host),
        })
        properties = ET.SubElement(suite, "properties")
        ET.SubElement(properties, "property", {"name": "engine", "value": xml_safe(column)})
        count_only = sum(1 for o in items if o.level == "count")
        if count_only:  # judged from prompt token counts: these verdicts never saw the ids
            ET.SubElement(properties, "property", {"name": "count_only", "value": str(count_only)})
        for note in [*summary.notes, *summary.refusals()]:
            ET.SubElement(properties, "property", {"name": "note", "value": xml_safe(note)})
        version = next((o.version for o in items if o.version), "")
        if version:
            ET.SubElement(properties, "property", {"name": "version", "value": xml_safe(version)})
        known = []
        for outcome in items:
            model, stem = split_case(outcome.case)
            case = ET.SubElement(suite, "testcase", {
                "name": xml_safe(stem), "classname": xml_safe(model), "time": f"{per_case:.3f}",
            })
            if outcome.status == "error":
                error = ET.SubElement(case, "error", {
                    "message": xml_safe(first_line(outcome.detail or "engine error")), "type": "error",
                })
                error.text = xml_safe(f"{outcome.case} [{column}]\n{outcome.detail}")
            elif not kind(outcome).passing:
                failure = ET.SubElement(case, "failure", {
                    "message": xml_safe(first_line(_failure_message(outcome))),
                    "type": "disputed" if outcome.kind == "disputed" else "drift",
                })
                advice = f"\n{outcome.advice}" if outcome.advice else ""
                failure.text = xml_safe(f"{outcome.case} [{column}]\n{outcome.detail}{advice}")
            elif outcome.status == "known":
                cause = f" (cause {outcome.cause})" if outcome.cause else ""
                known.append(f"{outcome.case} [{column}]: {headline(outcome)}{cause}: {outcome.reason or outcome.detail}")
            elif outcome.status == "both-refuse":  # passes, but nothing was rendered: said apart
                known.append(f"{outcome.case} [{column}]: both refuse: {outcome.reason or outcome.detail}")
            elif outcome.status == "count":
                known.append(f"{outcome.case} [{column}]: {headline(outcome)}: {outcome.detail}")
        ET.SubElement(suite, "system-out").text = xml_safe("\n".join(known)) if known else None
        ET.SubElement(suite, "system-err")
    ET.indent(root, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _failure_message(outcome: Outcome) -> str:
    if outcome.kind == "disputed":  # judged against no engine (replay/judging/disputes.py)
        return f"disputed{kind(outcome).junit}: {outcome.detail}"
    if outcome.divergence is not None:
        return f"drift at token {outcome.divergence.index}{kind(outcome).junit}"
    return f"drift: {outcome.detail}"
