"""Replay: judging engines against the goldens, in four parts that import only downward, in
this order (generator/layers.py LAYERS): judging/ (the one judge, divergences, the ledger and
causes), reporting/ (what a check found, told in every format), running/ (`goldens check` itself,
shards) and releases/ (the release search: bisect, history, the atlas)."""
