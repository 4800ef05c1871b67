"""MkDocs hook: one page per benchmark report (benchmarks/data/NAME_report.txt -> benchmarks/NAME.md).

Each page is generated from its report when the site is built: the header the report was written
with (command, commit, machine, load, date; benchmarks/harness/report.py writes it), then the
report's tables unchanged, so a page can never drift from its report. The pages are listed in the
nav after benchmarks/index.md and in a table on that page (where it says ``MARKER``). The pure
part (``parse_report``, ``report_page``, ``index_table``) needs no MkDocs: tests/test_docs_site.py
calls it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "benchmarks" / "data"
SUFFIX = "_report.txt"
INDEX = "benchmarks/index.md"
MARKER = "<!-- the benchmark pages: docs/hooks/benchmark_pages.py -->"
# A header's "key: value" lines, as benchmarks/harness/report.py writes them (and older reports' "hardware:").
KEYS = {"command": "command", "commit": "commit", "machine": "machine", "hardware": "machine",
        "load at the end": "load", "written": "date"}
# An older report's first line may be the machine alone: "AMD EPYC, 2 cores, torch 2.13.0+cpu ...".
BARE_MACHINE = re.compile(r"^[^:]*\d+ cores?, torch ")
NOT_RECORDED = "not recorded in this report"


@dataclass(frozen=True)
class Report:
    """A benchmark report, its header read into fields and its body kept as written."""

    name: str
    title: str
    command: str = ""
    commit: str = ""
    machine: str = ""
    load: str = ""
    date: str = ""
    notes: list[str] = field(default_factory=list)  # the header's other "# ..." lines
    body: str = ""


def _module_summary(name: str) -> str:
    """The first line of benchmarks/NAME.py's docstring (read, not imported), or ""."""
    source = ROOT / "benchmarks" / f"{name}.py"
    if not source.is_file():
        return ""
    doc = ast.get_docstring(ast.parse(source.read_text()))
    return doc.strip().splitlines()[0].rstrip(".") if doc else ""


def parse_report(name: str, text: str) -> Report:
    """Read a report's header (its leading "# title", "key: value" and bare machine lines) and body."""
    lines = text.splitlines()
    values: dict[str, str] = {}
    comments: list[str] = []
    at = 0
    for at, line in enumerate(lines):  # noqa: B007  (``at`` is where the body starts)
        key, _, value = line.partition(":")
        if line.startswith("#"):
            comments.append(line.lstrip("#").strip())
        elif key.strip() in KEYS and value.strip() and KEYS[key.strip()] not in values:
            values[KEYS[key.strip()]] = value.strip()
        elif BARE_MACHINE.match(line) and "machine" not in values:
            values["machine"] = line.strip()
        else:
            break
    else:
        at = len(lines)
    title = comments.pop(0) if comments else (_module_summary(name) or name)
    body = "\n".join(lines[at:]).strip("\n")
    return Report(name=name, title=title, notes=comments, body=body, **values)


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if text else f"*{NOT_RECORDED}*"


def _fence(text: str) -> str:
    ticks = "`" * max(3, 1 + max((len(run) for run in re.findall("`+", text)), default=0))
    return f"{ticks}text\n{text}\n{ticks}"


def report_page(report: Report) -> str:
    """The page for one report: its header as a table, its notes, its body preformatted."""
    rows = [("Command", f"`{report.command}`" if report.command else ""), ("Commit", report.commit),
            ("Machine", report.machine), ("Load", report.load), ("Date", report.date)]
    parts = [f"# {report.title}\n",
             f"Generated from `benchmarks/data/{report.name}{SUFFIX}` when the site is built: the figures below are "
             f"the report's, unchanged. " + ("Run its command again to write a new report.\n" if report.command else
                                             "It predates the header that names its command: its notes say how it was made.\n"),
             "| | |\n|---|---|\n" + "\n".join(f"| {key} | {_cell(value)} |" for key, value in rows) + "\n"]
    if report.notes:
        parts.append("\n".join(f"> {note}  " for note in report.notes) + "\n")
    parts.append("## Report\n")
    parts.append(_fence(report.body) + "\n")
    return "\n".join(parts)


def index_table(reports: list[Report]) -> str:
    """The benchmarks index's table: one row a report, linking its page."""
    rows = [f"| [{r.name}]({r.name}.md) | {_cell(r.title)} | {_cell(r.date)} |" for r in reports]
    return "\n".join(["| Benchmark | What it measures | Written |", "|---|---|---|", *rows]) + "\n"


def load_reports(folder: Path = REPORTS) -> list[Report]:
    """Every NAME_report.txt in ``folder``, by name."""
    return [parse_report(path.name[:-len(SUFFIX)], path.read_text())
            for path in sorted(folder.glob(f"*{SUFFIX}"), key=lambda p: p.name[:-len(SUFFIX)])]


def on_config(config: Any) -> Any:
    """List each report's page in the nav, after the benchmarks index."""
    pages = [f"benchmarks/{r.name}.md" for r in load_reports()]
    for entry in config["nav"] or []:
        if isinstance(entry, dict) and "Benchmarks" in entry:
            entry["Benchmarks"] = [INDEX, *pages]
    return config


def on_files(files: Any, config: Any) -> Any:
    """Add one generated page per report."""
    from mkdocs.structure.files import File

    for report in load_reports():
        files.append(File.generated(config, f"benchmarks/{report.name}.md", content=report_page(report)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill the index's table where its marker is."""
    if page.file.src_uri == INDEX:
        return markdown.replace(MARKER, index_table(load_reports()))
    return markdown
