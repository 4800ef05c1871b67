"""Every example in the README and the docs that shows output prints that output today.

The convention (docs/contributing/examples.md) has two forms, both read with Sybil's Markdown lexers:

- A plain ``` block right after a line ending with "(`tunekit ...`):" is that command's output. The
  command runs here as quoted (in a folder of its own where ``tests/`` is this checkout's), and the
  quoted lines must be among its output lines, in order and consecutive ("..." stands for lines left
  out). Every other plain block fails: a block that is not output names its language.
- A ```python block shows a value as a ``# -> value`` comment on an expression's last line. On a page
  with any such comment, every python block runs, top to bottom in one namespace (as a reader runs
  them in one session), and each shown value must be the expression's repr (or what it printed).
  ``<!-- skip: next -->`` before a block leaves it out (Sybil's skip directive). On a page without
  one, the python blocks are compiled and the tunekit names they use must exist.

The text must match exactly; each number within 2% (the figures are seeded, so this leaves room only
for another torch's or CPU's rounding) or one unit of its last printed digit, except a duration (a
number followed by "s": wall-clock time, never the same twice).
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import shlex
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sybil import Document, Example, Region
from sybil.parsers.markdown import CodeBlockParser, SkipParser
from sybil.parsers.markdown.lexers import FencedCodeBlockLexer

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
# Pages whose plain blocks are not output: the layout's drawing, which tests/test_layout.py reads.
NOT_OUTPUT = {ROOT / "docs" / "contributing" / "layout.md"}
REL_TOL = 0.02
# A number as the CLI prints one: 0.003, 1.37, 113x's 113, 5.89 (GiB), 3e-3; a sign is text.
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")
DURATION = re.compile(r"\d+(?:\.\d+)?s\b")
COMMAND_BEFORE = re.compile(r"\(`(tunekit [^`]+)`\):\s*$")
SHOWN = re.compile(r"#\s*->\s?(.*)$")


def _same_line(quoted: str, printed: str) -> bool:
    """The same text, durations aside, with each number within REL_TOL (or one unit of its last printed digit)."""
    mask = lambda s: NUMBER.sub("#", DURATION.sub("#s", s))  # noqa: E731
    if mask(quoted) != mask(printed):
        return False
    for q, p in zip(NUMBER.findall(DURATION.sub("#s", quoted)), NUMBER.findall(DURATION.sub("#s", printed))):
        digit = 10.0 ** -len(q.split(".")[1]) if "." in q and "e" not in q else 0.0
        if abs(float(q) - float(p)) > max(REL_TOL * abs(float(p)), digit):
            return False
    return True


def _missing(quoted: list[str], printed: list[str]) -> list[str]:
    """The quoted lines not printed where the quote puts them: in order, each right after the one above
    it unless a "..." line between them stands for lines left out."""
    missing, at, skip = [], 0, True
    for line in quoted:
        if line.strip() == "...":
            skip = True
            continue
        stop = len(printed) if skip else min(at + 1, len(printed))
        found = next((j for j in range(at, stop) if _same_line(line, printed[j])), None)
        if found is None:
            missing.append(line)
        else:
            at, skip = found + 1, False
    return missing


# --- the CLI's output blocks ------------------------------------------------------------------------

@dataclass(frozen=True)
class Quoted:
    """A plain block and the command named before it ("" when none is)."""

    command: str
    lines: list[str]


def run_command(example: Example) -> str | None:
    """Run the quoted command in the current folder; what it no longer prints, or None."""
    from tunekit.cli import main

    quoted: Quoted = example.parsed
    if not quoted.command:
        return ("a plain block is a command's output: end the line before it with (`tunekit ...`): "
                "or give the block a language (```text)")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        main(shlex.split(quoted.command)[1:])
    missing = _missing(quoted.lines, printed.getvalue().splitlines())
    if missing:
        return "quoted lines that `{}` no longer prints:\n{}\n-- it prints:\n{}".format(
            quoted.command, "\n".join(missing), printed.getvalue())
    return None


def output_blocks(document: Document) -> Iterator[Region]:
    """A Sybil parser: every plain block, with the command named on the line before it."""
    for region in FencedCodeBlockLexer(language="")(document):
        before = document.text[:region.start].rstrip().rsplit("\n", 1)[-1]
        said = COMMAND_BEFORE.search(before)
        region.parsed = Quoted(said.group(1) if said else "", str(region.lexemes["source"]).splitlines())
        region.evaluator = run_command
        yield region


# --- the python blocks ------------------------------------------------------------------------------

def shown_values(source: str) -> dict[int, str]:
    """{line in the block (1-based): the value its ``# -> value`` comment shows}."""
    return {n: m.group(1).strip() for n, line in enumerate(source.splitlines(), 1) if (m := SHOWN.search(line))}


def run_python(example: Example) -> str | None:
    """Run a block statement by statement in the page's namespace; each shown value is compared."""
    source = str(example.parsed)
    shown = shown_values(source)
    tree = ast.parse(source)
    ast.increment_lineno(tree, example.line)  # tracebacks name the page's lines
    name = f"{example.path}:{example.line}"
    for statement in tree.body:
        last = statement.end_lineno - example.line if statement.end_lineno else 0
        if last not in shown or not isinstance(statement, ast.Expr):
            exec(compile(ast.Module([statement], type_ignores=[]), name, "exec"), example.namespace)
            continue
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            value = eval(compile(ast.Expression(statement.value), name, "eval"), example.namespace)
        got = printed.getvalue().rstrip("\n") if value is None and printed.getvalue() else repr(value)
        if not _same_line(shown[last], got):
            return f"line {statement.end_lineno}: the page shows\n  {shown[last]}\nthe code gives\n  {got}"
    return None


PYTHON = CodeBlockParser(language="python", evaluator=run_python)


def _has_output(path: Path) -> bool:
    return any(shown_values(str(e.parsed)) for e in Document.parse(str(path), PYTHON))


# --- the tests ---------------------------------------------------------------------------------------

def test_the_line_comparison_takes_rounding_but_not_other_figures() -> None:
    ok = "[WARN] recipe        lr 0.003 is 59x below the test's suggestion 0.176  -> try --lr 0.18"
    assert _same_line(ok, ok.replace("0.176", "0.177")) and _same_line("done in 0.4s", "done in 25.2s")
    assert not _same_line(ok, ok.replace("0.176", "0.339")) and not _same_line(ok, ok.replace("59x", "113x"))
    assert not _same_line(ok, ok.replace("recipe", "loss"))
    assert _missing(["a 1", "...", "c 3"], ["a 1", "b 2", "c 3"]) == [] == _missing(["b 2", "c 3"], ["a 1", "b 2", "c 3"])
    assert _missing(["a 1", "c 3"], ["a 1", "b 2", "c 3"]) == ["c 3"]  # a line left out needs its "..."
    assert _missing(["c 3", "...", "a 1"], ["a 1", "b 2", "c 3"]) == ["a 1"]  # out of order


def _page(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(text)
    return page


def test_a_shown_value_that_drifts_fails_and_one_within_rounding_passes(tmp_path: Path) -> None:
    good = _page(tmp_path, "```python\nx = 0.1234\nx  # -> 0.1235\nprint('a', x * 2)  # -> a 0.2468\n```\n")
    for example in Document.parse(str(good), PYTHON, SkipParser()):
        example.evaluate()
    bad = _page(tmp_path, "```python\nx = 0.1234\n```\n\n<!-- skip: next -->\n```python\nx = 1\n```\n\n"
                          "```python\n[x, 'a']  # -> [0.5, 'a']\n```\n")
    examples = list(Document.parse(str(bad), PYTHON, SkipParser()))
    examples[0].evaluate()
    examples[1].evaluate()  # the skip: the next block does not run
    examples[2].evaluate()
    with pytest.raises(AssertionError, match=r"the page shows\n  \[0.5, 'a'\]\nthe code gives\n  \[0.1234, 'a'\]"):
        examples[3].evaluate()


def test_a_plain_block_without_its_command_fails(tmp_path: Path) -> None:
    page = _page(tmp_path, "Some text:\n\n```\nnot output\n```\n\nIt prints (`tunekit tasks`):\n\n```\nshapes ...\n```\n"
                           "\n```text\na listing\n```\n")
    examples = list(Document.parse(str(page), output_blocks))
    assert [e.parsed.command for e in examples] == ["", "tunekit tasks"]  # the ```text block is not output
    with pytest.raises(AssertionError, match="a plain block is a command's output"):
        examples[0].evaluate()


def _examples(parser: object, pages: list[Path]) -> list[Example]:
    return [e for page in pages if page not in NOT_OUTPUT for e in Document.parse(str(page), parser)]


OUTPUT = _examples(output_blocks, PAGES)


def test_the_readme_quotes_the_doctor_example() -> None:
    """The README's doctor example is found, so its figures are checked against the code."""
    assert "tunekit doctor --task tests/tasks.py:softmax_task --lr 3e-3" in [e.parsed.command for e in OUTPUT
                                                                             if Path(e.path) == README]


# The commands run in this process: the README's doctor about a second, as tests/test_doctor.py's run.
@pytest.mark.parametrize("example", OUTPUT, ids=[f"{Path(e.path).relative_to(ROOT)}:{e.line}" for e in OUTPUT])
def test_a_quoted_output_is_what_its_command_prints(example: Example, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # the command's paths, as from the repository's root
    # the recorded runs the pages redraw (`tunekit report docs/examples/...`), copied: a report writes its plots
    shutil.copytree(ROOT / "docs" / "examples", tmp_path / "docs" / "examples")
    monkeypatch.chdir(tmp_path)  # and its files (tunekit_runs/) written here
    example.evaluate()


RUN = [page for page in PAGES if _has_output(page)]
COMPILED = [page for page in PAGES if page not in RUN]


@pytest.mark.slow  # a page's python blocks, each a call of the API on a toy task (seconds)
@pytest.mark.parametrize("page", RUN, ids=[str(p.relative_to(ROOT)) for p in RUN])
def test_a_page_with_shown_values_runs_and_shows_them(page: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # what the examples write (tunekit_runs/) goes here
    for example in Document.parse(str(page), PYTHON, SkipParser()):
        example.evaluate()


@pytest.mark.parametrize("page", COMPILED, ids=[str(p.relative_to(ROOT)) for p in COMPILED])
def test_a_page_without_shown_values_compiles_and_names_what_tunekit_has(page: Path) -> None:
    import tunekit

    for example in Document.parse(str(page), CodeBlockParser(language="python")):
        tree = ast.parse(str(example.parsed), f"{page}:{example.line}")
        used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name) and node.value.id == "tunekit"}
        used |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "tunekit"
                 for alias in node.names}
        assert used <= set(tunekit.__all__) | {"__version__"}, \
            f"{page.name}:{example.line} uses tunekit names that do not exist: {sorted(used - set(tunekit.__all__))}"
