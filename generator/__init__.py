"""goldens: golden-token regression suites for LLM serving.

models.yaml -> cases -> reference render -> golden files -> replay through engines -> report.
"""

__version__ = "0.1.0"
# Where this project is published: its docs links (analysis/invariants.py) and the workflow
# `goldens init` writes (generator/init.py).
REPOSITORY = "goldens-project/goldens"
