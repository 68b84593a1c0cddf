"""README.md is a map: short, its contents table links every page of docs/, and no relative link in README
or docs/ leads to a file, or a heading, that is not there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
MAX_README_LINES = 400
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _prose(text: str) -> str:
    """The text outside fenced code blocks, where a `](...)` is code, not a link."""
    return FENCE.sub("", text)


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped but `-` and `_`, spaces to `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#{1,6} (.+)$", _prose(page.read_text()), re.M)
    return {_slug(heading) for heading in headings}


def _relative_links(page: Path) -> list[str]:
    return [target for target in LINK.findall(_prose(page.read_text())) if not re.match(r"[a-z]+:", target)]


def _contents_table() -> str:
    text = README.read_text()
    section = text[text.index("\n## Contents\n") :]
    return section[: section.index("\n## ", 1)]


def test_readme_stays_a_map() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines: move detail into a docs/ page"


def test_the_contents_table_links_every_docs_page() -> None:
    rows = [line for line in _contents_table().splitlines() if line.startswith("| [")]
    linked = {link for row in rows for link in LINK.findall(row)}
    missing = [f"docs/{page.name}" for page in PAGES if f"docs/{page.name}" not in linked]
    assert not missing, f"README's contents table does not link {missing}"
    assert len(PAGES) >= 10, PAGES  # the pages are found at all


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page: Path) -> None:
    broken = []
    for target in _relative_links(page):
        path, _, anchor = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            broken.append(f"{target}: no {destination.relative_to(ROOT) if ROOT in destination.parents else path}")
        elif anchor and destination.suffix == ".md" and anchor not in _anchors(destination):
            broken.append(f"{target}: no heading #{anchor} in {destination.relative_to(ROOT)}")
    assert not broken, broken


def test_the_link_check_sees_a_broken_link_and_a_missing_heading(tmp_path: Path) -> None:
    """The check above passes only because the links hold: one to nowhere, and one to no heading, fail it."""
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[a](missing.md) [b](#no-such-heading) [c](#title)\n\n```\n[d](in-code.md)\n```\n")
    assert _relative_links(page) == ["missing.md", "#no-such-heading", "#title"]
    assert _anchors(page) == {"title"}
    assert _slug("Placing models by memory: `serverSelector`, `capacity`, `memory`") == (
        "placing-models-by-memory-serverselector-capacity-memory"
    )


def test_readme_s_helm_install_is_the_one_operations_documents() -> None:
    """The e2e tier installs the operator with README's block; docs/operations.md shows the same commands."""

    def helm_install(text: str) -> str:
        [block] = [b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if b.startswith("helm install")]
        return block

    assert helm_install(README.read_text()) == helm_install((DOCS / "operations.md").read_text())
