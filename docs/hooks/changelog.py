"""MkDocs hook: docs/changelog.md shows the repository's CHANGELOG.md, included when the site is built.

The changelog is written once, at the repository's top; this page includes it where it says
``MARKER``. Without a CHANGELOG.md the page says so and the build goes on. Links in the changelog
that point into the repository (outside docs/) become plain text, so ``mkdocs build --strict``
does not fail on them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG = ROOT / "CHANGELOG.md"
PAGE = "changelog.md"
MARKER = "<!-- CHANGELOG.md: docs/hooks/changelog.py -->"
LINK = re.compile(r"\[([^\]]+)\]\((?!https?://|mailto:|#)[^)]*\)")


def changelog_markdown(path: Path = CHANGELOG) -> str:
    """The changelog's text for the page: its own top heading dropped (the page has one), links into
    the repository made plain text; a line saying it is absent when it is."""
    if not path.is_file():
        return "This checkout has no CHANGELOG.md yet.\n"
    lines = path.read_text().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return LINK.sub(r"\1", "\n".join(lines)).strip("\n") + "\n"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri == PAGE:
        return markdown.replace(MARKER, changelog_markdown())
    return markdown
