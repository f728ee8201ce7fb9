"""Reporting: what a `goldens check` run found, told: the Summary every report renders, one module
per format (terminal, JUnit, Markdown, GitHub Actions), the results document and its merge, where
report files go, and ready-to-file engine defect reports.

Reads the judging's verdicts; a run (replay/running/) hands its results here."""
