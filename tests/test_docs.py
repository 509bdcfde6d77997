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


MD_FILES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "examples").rglob("*.md")], key=str)
# `mrgrpo <command> <arguments>` up to the end of a code span, a comment or the next command.
COMMAND_LINE = re.compile(r"\bmrgrpo ([a-z]+)((?:[ \t]+[^\s`#;|)]+)*)")


def test_every_flag_a_doc_gives_a_command_is_one_the_command_has():
    import typer

    from mrgrpo.cli import app

    root = typer.main.get_command(app)
    uses = 0
    for path in MD_FILES:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for name, rest in COMMAND_LINE.findall(line):
                command = root.commands.get(name)  # typer's Group (its own click, or click: duck-typed)
                if command is None:
                    continue  # prose ("mrgrpo is ...") or the package, not a command
                words = rest.split()
                while hasattr(command, "commands") and words and words[0] in command.commands:
                    command = command.commands[words.pop(0)]
                flags = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)} | {"--help"}
                for word in words:
                    if re.match(r"--?[A-Za-z]", word):
                        uses += 1
                        assert word.split("=")[0] in flags, f"{path.relative_to(REPO)}:{n}: mrgrpo {name} has no {word}"
    assert uses > 30  # the docs do name flags: the pattern found them
