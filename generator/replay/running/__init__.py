"""Running a check: `goldens check`'s plan over the matrix, its engines opened and replayed
(check.py), shards, the options for a server someone else runs, and the goldens no case owns.

Joins the two parts below it: judges through replay/judging/, writes through replay/reporting/."""
