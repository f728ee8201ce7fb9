"""Judging: the one judge of an engine's answer against a golden, and what it reads (divergences, the
ledger, reviewed causes and disputes, typed outcomes); the parse judge; the gate; goldens as snapshots.

Below every other part of replay/: running a check and every report read its verdicts."""
