"""Template coverage: which of a chat template's code the matrix's reference renders execute
(trace), request variations that reach the rest (search), and a team's logged traffic reduced
to the bodies that reach everything the log reaches (traffic)."""
