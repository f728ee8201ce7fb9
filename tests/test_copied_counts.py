"""No test copies a case count from today's matrix (issue 43).

A count typed into a test ("N checked", "(N cases, from qwen3/plain)") is re-typed every time
the matrix grows, and a commit that only re-copies counts reviews nothing. Tests derive what they
expect from the matrix (conftest's `render_count`, generator.config.cases) or keep a reviewed
syrupy snapshot (tests/__snapshots__/, `pytest --snapshot-update`). This test greps every test
module for qwen3's render-case count written as a case count: the count is derived here too.
"""

from __future__ import annotations

import re
from pathlib import Path

from conftest import render_count

TESTS = Path(__file__).resolve().parent

# a number spoken as a count of cases: "N cases", "N case(s)", "N checked", "N error",
# "N goldens", "N rendered"; a token count ("271 vs N tokens") or a length is not one
CONTEXTS = r" (?:cases?\b|case\(s\)|checked\b|errors?\b|goldens?\b|rendered\b)"


def copied(count: int, text: str) -> list[str]:
    """The lines of `text` that write `count` as a count of cases."""
    pattern = re.compile(rf"(?<![\w.]){count}(?={CONTEXTS})")
    return [line.strip() for line in text.splitlines() if pattern.search(line)]


def test_the_grep_finds_a_copied_count():
    """The pattern catches the forms counts were copied in, and not a token count."""
    n = render_count("qwen3")
    assert copied(n, f'    assert result.stdout.splitlines()[-1].startswith("{n} checked: ")')
    assert copied(n, f'        f"unavailable for qwen3: {{fault}} ({n} cases, from qwen3/plain)"]')
    assert copied(n, f'    assert "{n} error" in (tmp_path / "out.md").read_text()')
    assert copied(n, f'    assert "0.31.0 and 0.32.0 agree on all {n} case(s)" in result.stdout')
    assert not copied(n, f'        assert "drift at token 5 (271 vs {n} tokens)" in line')
    assert not copied(n, f'    assert "{n + 100} checked" in out and "1{n} cases" in out')


def test_no_test_module_copies_qwen3s_case_count():
    n = render_count("qwen3")  # from models.yaml, as the tests that need it derive it
    found = {path.name: lines for path in sorted(TESTS.glob("*.py"))
             if (lines := copied(n, path.read_text(encoding="utf-8")))}
    assert not found, (f"qwen3's {n} render cases typed as a literal; derive it (conftest.render_count) "
                       f"or keep it in a syrupy snapshot: {found}")
