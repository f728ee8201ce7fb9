"""Replay: the one judge, divergences, the ledger, `goldens check` and its reports."""
