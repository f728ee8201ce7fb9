"""The release search: an engine's published releases made ready and asked (releases.py), the
first changed release (`goldens bisect`), every change point in a range (`goldens history`) and
the atlas committed from them.

Reads the judging's divergences and parse judge; no check run or report depends on it."""
