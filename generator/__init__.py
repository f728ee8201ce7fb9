"""goldens: golden-token regression suites for LLM serving.

models.yaml -> cases -> reference render -> golden files -> replay through engines -> report.
"""

__version__ = "0.1.0"
