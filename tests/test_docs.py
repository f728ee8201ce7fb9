"""The documentation: README stays a five-minute read, every relative link in README and docs/
resolves, README's engines table is what `goldens engines --matrix` prints, every page is in the
site's nav, and the benchmarks page is written by the bench scripts (bench/benchpage.py), not by
hand. The site build itself (`make docs`: mkdocs --strict) installs the `docs` extra: integration.
"""

from __future__ import annotations

import importlib.util
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from conftest import ROOT

from generator.cli import main

README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_LINES = 250

LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.DOTALL | re.MULTILINE)
CODE = re.compile(r"`[^`\n]*`")


def pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def relative_links(text: str) -> list[str]:
    """Every link target of a Markdown text that is a path, outside code blocks and code spans."""
    prose = CODE.sub("", FENCE.sub("", text))
    return [target for target in LINK.findall(prose)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target) and not target.startswith("#")]


def anchors(path: Path) -> set[str]:
    """The heading anchors of a page, as mkdocs' toc extension makes them."""
    found = set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", FENCE.sub("", path.read_text(encoding="utf-8")), re.M):
        text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
        found.add(re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", text)).strip("-"))
    return found


def test_readme_is_a_five_minute_read():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_LINES, f"README.md has {lines} lines; at most {README_LINES} (move the rest to docs/)"


@pytest.mark.parametrize("page", pages(), ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in relative_links(page.read_text(encoding="utf-8")):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve()
        if not resolved.exists():
            broken.append(f"{target}: no {resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved}")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.name}")
    assert not broken, broken


def test_the_link_finder_finds_links_and_skips_code():
    text = ("[a](docs/a.md) and [b](b.md#part) but `[c](c.md)` and [web](https://x.org) and [top](#top)\n"
            "```\n[d](d.md)\n```\n![image](img.png)\n")
    assert relative_links(text) == ["docs/a.md", "b.md#part"]


def test_a_broken_link_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[gone](gone.md) [here](#title)\n", encoding="utf-8")
    targets = relative_links(page.read_text(encoding="utf-8"))
    assert targets == ["gone.md"] and not (tmp_path / "gone.md").exists()
    assert anchors(page) == {"title"}


def test_readme_engines_table_is_the_matrix_command_output():
    result = CliRunner().invoke(main, ["engines", "--matrix", "--config", str(ROOT / "models.yaml")])
    assert result.exit_code == 0, result.output
    table = result.output.strip("\n")
    assert table in README.read_text(encoding="utf-8"), (
        "README's engines table is not `goldens engines --matrix`'s output: paste it again")


def nav_files(entries) -> list[str]:
    found = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        found += nav_files(value) if isinstance(value, list) else [value]
    return found


def test_every_docs_page_is_in_the_site_nav_and_every_nav_entry_exists():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["docs_dir"] == "docs" and config["strict"] is True
    listed = nav_files(config["nav"])
    assert len(listed) == len(set(listed))
    assert sorted(listed) == sorted(str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md"))


# ------------------------------------------------------------------------------ the benchmarks page

def benchpage():
    spec = importlib.util.spec_from_file_location("benchpage", ROOT / "bench" / "benchpage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_has_a_section_for_every_bench_script():
    page = benchpage()
    scripts = sorted(path.stem for path in (ROOT / "bench").glob("*.py") if path.stem != "benchpage")
    assert sorted(page.SECTIONS) == scripts
    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    assert list(page.sections_of(text)) == list(page.SECTIONS)
    for script in scripts:  # each script hands its output to the page
        assert f'benchpage.run(main, "{script}")' in (ROOT / "bench" / f"{script}.py").read_text(encoding="utf-8")


def test_a_run_with_page_rewrites_its_own_section_and_keeps_the_others(tmp_path, monkeypatch):
    page, target = benchpage(), tmp_path / "benchmarks.md"
    page.write(target, "build", "```text\nbuilt in 1.0 s\n```")

    def fake_main():
        print("renders  wall 0.50 s")
        return 0

    monkeypatch.setattr(sys, "argv", ["coverage.py", "--model", "qwen3", "--page", str(target)])
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert page.run(fake_main, "coverage") == 0
    assert sys.argv == ["coverage.py", "--model", "qwen3"]  # --page taken out before main parses
    assert "renders  wall 0.50 s" in sys.stdout.getvalue()  # still printed
    sections = page.sections_of(target.read_text(encoding="utf-8"))
    assert list(sections) == list(page.SECTIONS)
    assert "renders  wall 0.50 s" in sections["coverage"] and "bench/coverage.py --model qwen3" in sections["coverage"]
    assert "built in 1.0 s" in sections["build"]
    assert page.NOT_YET in sections["shards"]


def test_a_failed_run_or_one_without_page_writes_nothing(tmp_path, monkeypatch):
    page, target = benchpage(), tmp_path / "benchmarks.md"
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setattr(sys, "argv", ["coverage.py", "--page", str(target)])
    assert page.run(lambda: 1, "coverage") == 1
    monkeypatch.setattr(sys, "argv", ["coverage.py"])
    assert page.run(lambda: print("figures") or 0, "coverage") == 0
    assert not target.exists()


def test_make_bench_writes_the_page():
    recipe = (ROOT / "Makefile").read_text().split("\nbench:", 1)[1].split("\n\n", 1)[0]
    runs = [line for line in recipe.splitlines() if "bench/" in line and ".py" in line]
    assert runs and all("--page $(BENCH_PAGE)" in line for line in runs), runs
    assert "BENCH_PAGE ?= docs/benchmarks.md" in (ROOT / "Makefile").read_text()


# ------------------------------------------------------------------------------------ the site build

@pytest.mark.integration
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    """`make docs`: installs the docs extra into the venv on first use, then mkdocs build --strict."""
    site = tmp_path / "site"
    result = subprocess.run(["make", "-s", "docs", f"DOCS_SITE={site}"], cwd=ROOT, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert (site / "index.html").is_file() and (site / "benchmarks" / "index.html").is_file()
