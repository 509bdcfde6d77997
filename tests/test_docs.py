"""Docs name only what a reader can open: no internal documents, no issue numbers, no dead links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TEXT_FILES = sorted(
    [REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "src").rglob("*.py")], key=str
)
# Documents of the people who build mrgrpo, not of its users.
UNREADABLE = re.compile(r"DESIGN\.md|STYLE\.md|\bissue #?\d+\b|papers/\w+|_summary_ko|_review_zh", re.IGNORECASE)


@pytest.mark.parametrize("path", TEXT_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_references_to_documents_readers_cannot_open(path):
    hits = [f"{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1) if UNREADABLE.search(line)]
    assert not hits, hits


@pytest.mark.parametrize("path", [p for p in TEXT_FILES if p.suffix == ".md"], ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(path):
    text = path.read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://|mailto:|#", target):
            continue
        file = (path.parent / target.split("#")[0]).resolve()
        assert file.exists(), f"{path.name}: link to {target} does not resolve"
