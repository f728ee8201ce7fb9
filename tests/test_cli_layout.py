"""The command line stays thin (issue 33 item 4): generator/cli.py declares options and calls one
function per command; the work lives in the stage that owns it. And every command is reachable
through `python -m generator.cli`, including the ones defined last.
"""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from conftest import ROOT

from generator import cli

MAX_LINES = 350


def test_cli_py_is_at_most_350_lines():
    lines = (ROOT / "generator" / "cli.py").read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"generator/cli.py has {lines} lines; move the new logic to its stage"


def test_the_main_guard_comes_after_every_command():
    text = (ROOT / "generator" / "cli.py").read_text(encoding="utf-8")
    guard = text.index('if __name__ == "__main__":')
    assert "@main." not in text[guard:] and "_group.command(" not in text[guard:]
    assert text[guard:].strip() == 'if __name__ == "__main__":\n    main()'


def test_no_command_carries_its_own_error_contract():
    """The `Goldens` group applies `friendly` once, to every command and subcommand."""
    text = (ROOT / "generator" / "cli.py").read_text(encoding="utf-8")
    assert "@friendly" not in text
    assert isinstance(cli.main, cli.Goldens)


def _commands(group: click.Group, path: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        yield (*path, name)
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))


@pytest.mark.parametrize("args", [("coverage", "--help"), ("requests", "--help"), ("requests", "import", "--help")])
def test_python_m_generator_cli_reaches_the_last_commands(args):
    run = subprocess.run([sys.executable, "-m", "generator.cli", *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "No such command" not in run.stderr
    assert run.stdout.startswith("Usage: ")


def test_every_command_is_listed_by_python_m():
    run = subprocess.run([sys.executable, "-m", "generator.cli", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    for name in cli.main.commands:
        assert f"  {name} " in run.stdout or f"  {name}\n" in run.stdout, name
    assert len(list(_commands(cli.main))) >= 17  # 14 at the top, report merge, requests search, import
