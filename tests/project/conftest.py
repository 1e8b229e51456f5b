"""Tests of the repository around the package: observatory/'s layering, ruff and mypy, `pip install .`, the
README and docs/ci.md working as written, the committed examples re-judged by today's judge, the benchmarks'
scripts, and training/ against the bundled field model.
"""
