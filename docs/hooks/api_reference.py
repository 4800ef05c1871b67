"""MkDocs hook: the reference pages name each public object as ``::: tunekit.NAME``; this points
mkdocstrings at the module that defines it.

``tunekit/__init__.py`` (and ``tunekit.hpsearch``) export their names lazily (PEP 562), which a
static reader such as griffe cannot follow. So before mkdocstrings reads a reference page, each
``::: tunekit.NAME`` line (NAME in ``tunekit.__all__``) becomes ``::: MODULE.QUALNAME`` of the object
that ``tunekit.NAME`` is today: the page keeps the public name, and a module moved or split inside
the package needs no edit here.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DIRECTIVE = re.compile(r"^::: tunekit\.(\w+)[ \t]*$", re.MULTILINE)
# A Sphinx role left in a docstring (":class:`~tunekit.Task`"), as the page's HTML has it once rendered.
ROLE = re.compile(r":(?:mod|class|func|meth|data|attr|exc|obj):<code>~?")


def defining_paths() -> dict[str, str]:
    """{public name: the dotted path of the object it is} for every name in ``tunekit.__all__``."""
    if str(ROOT) not in sys.path:  # this checkout's tunekit, not another one installed in the environment
        sys.path.insert(0, str(ROOT))
    import tunekit

    objects = {name: getattr(tunekit, name) for name in tunekit.__all__}
    return {name: f"{obj.__module__}.{obj.__qualname__}" for name, obj in objects.items()}


def point_directives(markdown: str, paths: dict[str, str]) -> str:
    """``markdown`` with each ``::: tunekit.NAME`` of a public name pointed at its defining path."""
    return DIRECTIVE.sub(lambda m: f"::: {paths.get(m.group(1), 'tunekit.' + m.group(1))}", markdown)


def drop_roles(html: str) -> str:
    """The rendered docstrings' Sphinx roles dropped: a name in code no longer shows ":func:" before it."""
    return ROLE.sub("<code>", html)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri.startswith("reference/") and DIRECTIVE.search(markdown):
        return point_directives(markdown, defining_paths())
    return markdown


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    return drop_roles(html) if page.file.src_uri.startswith("reference/") else html
