"""The docs site's machinery: the reference covers the API, the generated pages say what their sources say.

The hooks under docs/hooks/ are plain modules whose pure functions are called here without MkDocs
(the docs' extra is not the tests'); ``make docs`` builds the site itself with ``--strict``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

import tunekit

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
REFERENCE = sorted((DOCS / "reference").glob("*.md"))
DIRECTIVE = re.compile(r"^::: tunekit\.(\w+)\s*$", re.MULTILINE)


def _hook(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"docs_hook_{name}", DOCS / "hooks" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as MkDocs loads a hook (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def _entries() -> dict[str, str]:
    """{public name: the text of its reference entry, up to the next entry or heading}."""
    entries: dict[str, str] = {}
    for page in REFERENCE:
        text = page.read_text()
        found = list(DIRECTIVE.finditer(text))
        for m, nxt in zip(found, [*found[1:], None]):
            end = nxt.start() if nxt else len(text)
            assert m.group(1) not in entries, f"tunekit.{m.group(1)} has two reference entries"
            entries[m.group(1)] = re.split(r"^#{1,3} ", text[m.end():end], flags=re.MULTILINE)[0]
    return entries


def test_every_public_name_has_a_reference_entry_a_docstring_and_an_example() -> None:
    entries = _entries()
    assert sorted(entries) == sorted(tunekit.__all__), (
        f"in tunekit.__all__ without an entry: {sorted(set(tunekit.__all__) - set(entries))}; "
        f"entries of no public name: {sorted(set(entries) - set(tunekit.__all__))}")
    for name, entry in entries.items():
        obj = getattr(tunekit, name)
        doc = obj.__doc__ or ""
        assert doc.strip() and not doc.startswith(f"{name}("), f"tunekit.{name} has no docstring of its own"
        assert "**Example**" in entry and "```python\n" in entry, f"tunekit.{name}'s entry has no example"
        assert re.search(rf"\b{name}\b", entry.split("**Example**", 1)[1]), f"tunekit.{name}'s example does not use it"


def test_each_directive_is_pointed_at_the_object_the_public_name_is() -> None:
    hook = _hook("api_reference")
    paths = hook.defining_paths()
    for name, path in paths.items():
        module, _, qualname = path.rpartition(".")
        assert getattr(importlib.import_module(module), qualname) is getattr(tunekit, name)
    assert hook.point_directives("::: tunekit.lr_find\n::: tunekit.other\n", paths) == \
        f"::: {paths['lr_find']}\n::: tunekit.other\n"
    assert hook.drop_roles("see :func:<code>~tunekit.lr_find</code>") == "see <code>tunekit.lr_find</code>"


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]  # noqa: SLF001
    return [p for s in subs for child in s.choices.values() for p in (child, *_subparsers(child))]


def test_the_cli_page_has_every_command_and_every_flag_the_parser_takes() -> None:
    from tunekit.cli import build_parser

    parser = build_parser()
    page = _hook("cli_reference").cli_markdown(parser)
    for sub in [parser, *_subparsers(parser)]:
        assert f"# {sub.prog}\n" in page, f"no section for `{sub.prog}`"
        for action in sub._actions:  # noqa: SLF001
            shown = action.help != argparse.SUPPRESS
            for flag in action.option_strings:
                assert (re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", page) is not None) == shown, \
                    f"`{sub.prog} {flag}` is {'missing from' if shown else 'hidden but on'} the CLI page"
    assert "## tunekit study create\n" in page or "### tunekit study create\n" in page  # nested commands too


def test_a_report_page_carries_the_header_the_harness_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.harness import report

    hook = _hook("benchmark_pages")
    monkeypatch.setattr(report, "command", lambda: "python -m benchmarks.demo --quick")
    text = report.header("A demo benchmark") + "arm    seconds\nnone      28.7\n"
    parsed = hook.parse_report("demo", text)
    lines = dict(line.split(": ", 1) for line in text.splitlines()[1:6])
    assert (parsed.title, parsed.command, parsed.commit, parsed.machine, parsed.load, parsed.date) == (
        "A demo benchmark", "python -m benchmarks.demo --quick", lines["commit"], lines["machine"],
        lines["load at the end"], lines["written"])
    assert parsed.body == "arm    seconds\nnone      28.7"
    page = hook.report_page(parsed)
    assert page.startswith("# A demo benchmark\n") and "| Command | `python -m benchmarks.demo --quick` |" in page
    assert "```text\narm    seconds\nnone      28.7\n```" in page


def test_an_older_report_keeps_what_it_has_and_says_what_it_lacks() -> None:
    hook = _hook("benchmark_pages")
    bare = hook.parse_report("their_tuners", "AMD EPYC, 2 cores, torch 2.13.0+cpu (1 threads), no GPU\n== a table ==\n")
    assert bare.machine.startswith("AMD EPYC") and bare.body == "== a table ==" and not bare.date
    assert bare.title == "tunekit on the user's own objects against the tuners those objects come with"  # its docstring
    old = hook.parse_report("x", "# LR benchmark\n# 2 processes\nhardware: Xeon, 2 cores\n\nbudget: 1\n")
    assert (old.title, old.notes, old.machine, old.body) == ("LR benchmark", ["2 processes"], "Xeon, 2 cores", "budget: 1")
    assert f"| Date | *{hook.NOT_RECORDED}* |" in hook.report_page(old)


def test_every_report_has_a_page_listed_on_the_index() -> None:
    hook = _hook("benchmark_pages")
    reports = hook.load_reports()
    names = sorted(p.name.removesuffix("_report.txt") for p in (ROOT / "benchmarks" / "data").glob("*_report.txt"))
    assert [r.name for r in reports] == names and names
    table = hook.index_table(reports)
    assert all(f"[{name}]({name}.md)" in table for name in names)
    assert hook.MARKER in (DOCS / "benchmarks" / "index.md").read_text()
    for report in reports:  # every figure of the report is on its page
        assert report.body in hook.report_page(report)


def test_the_changelog_page_includes_changelog_md_and_does_without_it(tmp_path: Path) -> None:
    hook = _hook("changelog")
    assert "no CHANGELOG.md" in hook.changelog_markdown(tmp_path / "CHANGELOG.md")
    (tmp_path / "CHANGELOG.md").write_text("# Changelog\n\n## 0.2.0\n- see [the layout](docs/contributing/layout.md)"
                                           " and [Optuna](https://optuna.org)\n")
    text = hook.changelog_markdown(tmp_path / "CHANGELOG.md")
    assert text == "## 0.2.0\n- see the layout and [Optuna](https://optuna.org)\n"
    assert hook.MARKER in (DOCS / "changelog.md").read_text()


def _nav_pages(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [p for item in nav for p in _nav_pages(item)]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in _nav_pages(value)]
    return []


def test_the_nav_names_pages_that_exist_and_the_hooks_that_make_the_others() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    generated = {_hook("cli_reference").PAGE}
    missing = [p for p in _nav_pages(config["nav"]) if not (DOCS / p).is_file() and p not in generated]
    assert not missing, f"mkdocs.yml's nav names pages that do not exist: {missing}"
    assert all((ROOT / hook).is_file() for hook in config["hooks"])
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert on_disk <= set(_nav_pages(config["nav"])), f"pages not in the nav: {sorted(on_disk - set(_nav_pages(config['nav'])))}"


def test_the_examples_page_states_the_convention_first() -> None:
    text = (DOCS / "contributing" / "examples.md").read_text()
    first = text.split("\n## ", 1)[0]
    assert "# -> " in first and "(`tunekit" in first and "Sybil" in first
