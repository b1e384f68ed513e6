"""README.md and docs/ render as written: every relative link (and #anchor) resolves, no table
is cut in two by a blank line, the docs index is linked from the README, the README starts
with its two commands, and docs/cli.md names every flag the CLI has."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from airflow_sparklag import cli

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
SEPARATOR = re.compile(r"^\|(\s*:?-+:?\s*\|)+\s*$")


def prose(text: str) -> list[str]:
    """The page's lines with fenced code blocks blanked (their brackets are not links)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            lines.append("")
            continue
        lines.append("" if fenced else line)
    return lines


def anchors(page: Path) -> set[str]:
    """The #anchors GitHub gives the page's headings (duplicates get -1, -2, ...)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in prose(page.read_text()):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if heading is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return found


def relative_links(page: Path) -> list[str]:
    text = "\n".join(prose(page.read_text()))
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links either
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not broken, broken


def split_tables(text: str) -> list[int]:
    """Line numbers of blank lines between table rows: the rows after one render as a
    paragraph of pipes (a new table starts only with a header and a ``|---|`` row)."""
    lines = prose(text)
    split = []
    for i, line in enumerate(lines):
        if line.strip() or i == 0 or not lines[i - 1].startswith("|"):
            continue
        after = next((j for j in range(i + 1, len(lines)) if lines[j].strip()), None)
        if after is None or not lines[after].startswith("|"):
            continue
        if not (after + 1 < len(lines) and SEPARATOR.match(lines[after + 1])):
            split.append(i + 1)
    return split


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_table_is_split_by_a_blank_line(page: Path) -> None:
    assert split_tables(page.read_text()) == []


def test_the_split_table_check_finds_one_and_lets_two_tables_be() -> None:
    table = "| a | b |\n|---|---|\n| 1 | 2 |\n"
    assert split_tables(table + "\n| 3 | 4 |\n") == [4]
    assert split_tables(table + "\n" + table) == []
    assert split_tables(table + "\ntext\n") == []


def test_the_readme_starts_with_its_two_commands_and_links_the_index() -> None:
    readme = (ROOT / "README.md").read_text()
    head = readme.split("\n```", 2)[1]
    commands = [line.split()[:2] for line in head.splitlines()[1:] if line.startswith("bash")]
    assert commands == [["bash", "scripts/demo.sh"], ["bash", "scripts/test.sh"]]
    assert "](docs/index.md)" in readme
    sections = re.findall(r"^## (.+)$", readme, flags=re.M)
    assert sections[0] == "Install", sections  # installation first, the test bed last
    assert sections[-1] == "The test bed", sections


def test_the_index_reaches_every_page() -> None:
    index = ROOT / "docs" / "index.md"
    linked = {(index.parent / t.partition("#")[0]).resolve() for t in relative_links(index)}
    pages = {p.resolve() for p in (ROOT / "docs").rglob("*.md") if p != index}
    assert not sorted(str(p.relative_to(ROOT)) for p in pages - linked)


def test_docs_cli_names_every_flag_of_every_command() -> None:
    text = (ROOT / "docs" / "cli.md").read_text()
    commands = next(
        a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    )
    missing = [
        f"{name} {flag}"
        for name, command in commands.choices.items()
        for action in command._actions
        for flag in action.option_strings[-1:]
        if flag.startswith("--") and flag != "--help" and f"`{flag}" not in text
    ]
    assert not missing, missing
    for name in commands.choices:
        assert f"| `{name} " in text, name
