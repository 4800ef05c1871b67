"""MkDocs hook: the CLI reference page (reference/cli.md), generated from ``tunekit.cli.build_parser()``.

The page is each command's ``--help`` as the parser prints it, so it holds every flag the CLI takes
(the flags generated from the API's option objects included) and can never drift from them. The
pure part, ``cli_markdown``, needs no MkDocs: tests/test_docs_site.py calls it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PAGE = "reference/cli.md"
WIDTH = "100"  # the help's line width, whatever the terminal that builds the site
ROOT = Path(__file__).resolve().parents[2]  # the checkout whose CLI the page documents


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each subcommand, in the order ``--help`` lists them.

    argparse has no public accessor for a parser's subparsers; its _SubParsersAction is what
    sphinx-argparse and other help generators read too."""
    for action in parser._actions:  # noqa: SLF001
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            helps = {a.dest: a.help or "" for a in action._choices_actions}  # noqa: SLF001
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def _fence(text: str) -> str:
    """A text block that holds ``text`` whatever backquotes it has."""
    ticks = "`" * max(3, 1 + max((len(run) for run in re.findall("`+", text)), default=0))
    return f"{ticks}text\n{text.rstrip()}\n{ticks}"


def _sections(parser: argparse.ArgumentParser, level: int) -> Iterator[str]:
    for name, help_line, sub in _subcommands(parser):
        yield f"{'#' * level} {sub.prog}\n"
        if help_line:
            yield f"{help_line[0].upper()}{help_line[1:]}.\n" if not help_line.endswith(".") else f"{help_line}\n"
        yield _fence(sub.format_help()) + "\n"
        yield from _sections(sub, level + 1)


def cli_markdown(parser: argparse.ArgumentParser) -> str:
    """The CLI reference page for ``parser``: the top-level help, then each subcommand's, nested."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parts = ["# Command line\n",
                 "Every command's `--help`, generated from `tunekit.cli.build_parser()` when the site is built "
                 "(docs/hooks/cli_reference.py): the flags are the ones the parser takes, which come from the "
                 "same option objects as the Python API's keywords.\n",
                 f"## {parser.prog}\n", _fence(parser.format_help()) + "\n", *_sections(parser, 2)]
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return "\n".join(parts)


def on_files(files: Any, config: Any) -> Any:
    """Add the generated CLI page to the site's files (MkDocs >= 1.6: File.generated)."""
    from mkdocs.structure.files import File

    if str(ROOT) not in sys.path:  # this checkout's tunekit, not another one installed in the environment
        sys.path.insert(0, str(ROOT))
    from tunekit.cli import build_parser

    files.append(File.generated(config, PAGE, content=cli_markdown(build_parser())))
    return files
