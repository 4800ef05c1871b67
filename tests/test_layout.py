"""The package's shape, read from its source with ``ast`` (nothing of tunekit is imported):
no import cycle, no private name imported across modules, short functions with few
parameters, no module over 500 lines, and every module named on the layout page.

Each assertion lists every offender, so one run says everything there is to fix.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tunekit"

MAX_LINES = 80  # a function, from its ``def`` to its last line, docstring included
MAX_PARAMS = 15  # self and cls not counted
MAX_MODULE_LINES = 500  # a module that does one job fits in this; over it, split it by job
# The modules over MAX_MODULE_LINES today, each being split on its own branch; the lead empties this list
# as the splits land (a module listed here that is no longer over the limit fails the check too).
# The public entry points take many keyword arguments on purpose, each a setting a user may
# change; those past the first few (the objects under test) must be keyword-only.
ENTRY_POINTS = {
    ("tunekit.hpsearch.run", "search"), ("tunekit.probes.range_test", "lr_find"),
    ("tunekit.probes.batch_probe", "probe"), ("tunekit.checks.run", "doctor"), ("tunekit.training.loop", "train"),
    ("tunekit.hpsearch.entries", "create_study"), ("tunekit.hpsearch.entries", "join_study"),
}
MAX_POSITIONAL = 5  # doctor's model, train_data, loss_fn, optimizer, val_data


@dataclass(frozen=True)
class Import:
    """One ``import`` or ``from ... import`` of a module of the package."""

    source: str  # the importing module
    target: str  # the imported module
    names: tuple[str, ...]  # what ``from target import ...`` takes (empty for ``import target``)
    line: int


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    tree: ast.Module

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


def load_package(root: Path) -> dict[str, Module]:
    """Every module under ``root`` (a package folder), parsed, by dotted name."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = Module(name, path, ast.parse(path.read_text(), str(path)))
    return modules


def _type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """The import nodes under ``if TYPE_CHECKING:``: they never run, so they cannot make a cycle."""
    skipped: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(n for stmt in node.body for n in ast.walk(stmt))
    return skipped


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    """The module a ``from`` import names, relative imports resolved against ``module``."""
    if node.level == 0:
        return node.module or ""
    base = module.name.split(".")
    base = base if module.is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _known(name: str, modules: dict[str, Module]) -> str | None:
    """The longest prefix of ``name`` that is a module of the package (``a.b.C`` -> ``a.b``)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def imports(modules: dict[str, Module]) -> Iterator[Import]:
    """Every import of a module of the package, those inside functions too (they run when called)."""
    for module in modules.values():
        skipped = _type_checking_only(module.tree)
        for node in ast.walk(module.tree):
            if node in skipped:
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = _known(alias.name, modules)
                    if target is not None:
                        yield Import(module.name, target, (), node.lineno)
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(module, node)
                for alias in node.names:
                    # ``from pkg import sub`` imports the submodule; ``from pkg import name``, pkg itself.
                    target = _known(f"{base}.{alias.name}", modules) or _known(base, modules)
                    if target is not None:
                        yield Import(module.name, target, (alias.name,), node.lineno)


def find_cycles(modules: dict[str, Module]) -> list[tuple[list[str], list[str]]]:
    """Per group of modules that import each other (directly or round about): one shortest cycle
    through it, as [a, b, ..., a], and every module of the group."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for imp in imports(modules):
        graph[imp.source].add(imp.target)
    cycles, seen = [], set()
    for group in _strongly_connected(graph):
        if len(group) > 1 or any(m in graph[m] for m in group):
            start = min(group)
            if start not in seen:
                seen.update(group)
                cycles.append((_shortest_cycle(graph, start, group), sorted(group)))
    return cycles


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit to hit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                groups.append(group)
    return groups


def _shortest_cycle(graph: dict[str, set[str]], start: str, group: set[str]) -> list[str]:
    """The shortest path from ``start`` back to itself within ``group`` (breadth first)."""
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph[node] & group):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if child not in parent:
                parent[child] = node
                queue.append(child)
    raise AssertionError(f"{start} is in a cycle but no path leads back to it")


def _functions(modules: dict[str, Module]) -> Iterator[tuple[Module, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for module in modules.values():
        for node in ast.walk(module.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield module, node


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = fn.args
    named = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    star = [p.arg for p in (a.vararg, a.kwarg) if p is not None]
    return [p for p in named + star if p not in ("self", "cls")]


def _where(module: Module, line: int) -> str:
    return f"{module.path.relative_to(PACKAGE.parent)}:{line}"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@pytest.fixture(scope="module")
def package() -> dict[str, Module]:
    return load_package(PACKAGE)


def test_no_import_cycle(package: dict[str, Module]) -> None:
    cycles = find_cycles(package)
    assert not cycles, "import cycles (break each, e.g. by moving what both need into a third module):\n" + "\n".join(
        " -> ".join(cycle) + (f" (all in one cycle: {', '.join(group)})" if len(group) > len(cycle) - 1 else "")
        for cycle, group in cycles)


def test_the_cycle_finder_finds_a_cycle_through_a_function_and_a_relative_import(tmp_path: Path) -> None:
    """Its own check, on a fake package: a imports b at the top, b imports a inside a function
    (relatively); a imports c only for type checkers, which is no cycle."""
    pkg = tmp_path / "fake"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nfrom fake.sub import b\n"
                              "if TYPE_CHECKING:\n    from fake import c\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n    return a\n")
    (pkg / "c.py").write_text("import fake.a\n")
    assert find_cycles(load_package(pkg)) == [(["fake.a", "fake.sub.b", "fake.a"], ["fake.a", "fake.sub.b"])]
    (pkg / "sub" / "b.py").write_text("X = 1\n")
    assert find_cycles(load_package(pkg)) == []


def test_no_private_name_is_imported_from_another_module(package: dict[str, Module]) -> None:
    offenders = sorted(f"{_where(package[i.source], i.line)}: from {i.target} import {name}"
                       for i in imports(package) for name in i.names if _is_private(name) and i.target != i.source)
    assert not offenders, "private names imported across modules (make them public, or move the code):\n" + "\n".join(
        offenders)


def test_no_function_is_over_80_lines(package: dict[str, Module]) -> None:
    offenders = sorted(f"{_where(m, fn.lineno)}: {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)"
                       for m, fn in _functions(package) if fn.end_lineno - fn.lineno + 1 > MAX_LINES)
    assert not offenders, f"functions over {MAX_LINES} lines (split them into named stages):\n" + "\n".join(offenders)


def test_no_function_takes_over_15_parameters(package: dict[str, Module]) -> None:
    offenders = sorted(f"{_where(m, fn.lineno)}: {fn.name} ({len(_parameters(fn))} parameters)"
                       for m, fn in _functions(package)
                       if len(_parameters(fn)) > MAX_PARAMS and (m.name, fn.name) not in ENTRY_POINTS)
    assert not offenders, (f"functions over {MAX_PARAMS} parameters (group related ones in a small dataclass):\n"
                           + "\n".join(offenders))


def test_the_entry_points_take_their_settings_by_keyword(package: dict[str, Module]) -> None:
    found = {(m.name, fn.name): (m, fn) for m, fn in _functions(package) if (m.name, fn.name) in ENTRY_POINTS}
    offenders = [f"{name} is not defined in {module}" for module, name in sorted(ENTRY_POINTS - set(found))]
    for (module, name), (m, fn) in sorted(found.items()):
        positional = [p.arg for p in fn.args.posonlyargs + fn.args.args]
        if len(positional) > MAX_POSITIONAL:
            offenders.append(f"{_where(m, fn.lineno)}: {name} takes {len(positional)} positional parameters "
                             f"({', '.join(positional[MAX_POSITIONAL:])} should follow a *)")
    assert not offenders, "entry points:\n" + "\n".join(offenders)


def test_no_module_is_over_500_lines(package: dict[str, Module]) -> None:
    sizes = {m.path.relative_to(PACKAGE).as_posix(): len(m.path.read_text().splitlines()) for m in package.values()}
    over = {path: n for path, n in sizes.items() if n > MAX_MODULE_LINES}
    offenders = [f"tunekit/{path}: {n} lines" for path, n in sorted(over.items())]
    assert not offenders, (f"modules over {MAX_MODULE_LINES} lines (split each into modules that do one job):\n"
                           + "\n".join(offenders))


def drawn_sections(page: Path) -> dict[str, str]:
    """The layout page's first block, by top-level entry: each folder's text (``probes/`` -> what its
    line and the lines under it say), and the package's own modules' text under ``""``."""
    block = page.read_text().split("```", 2)[1]
    sections: dict[str, str] = {}
    current = ""
    for line in block.splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            name = line.split()[0]
            current = name if name.endswith("/") else ""
        sections[current] = sections.get(current, "") + "\n" + line
    return sections


def undrawn_modules(modules: dict[str, Module], page: Path, root: Path = PACKAGE) -> list[str]:
    """The modules the layout page does not name: a module's file name belongs in its top-level folder's
    entry of the block (a module at the package's root, in a root entry), or its path in the page's text.
    A sub-package's ``__init__.py`` is its folder, and needs no name of its own."""
    sections, text = drawn_sections(page), page.read_text()
    missing = []
    for m in modules.values():
        path = m.path.relative_to(root).as_posix()
        parts = path.split("/")
        if len(parts) > 1 and parts[-1] == "__init__.py":
            continue
        section = sections.get(parts[0] + "/" if len(parts) > 1 else "", "")
        if parts[-1] not in section and path not in text:
            missing.append(f"tunekit/{path}")
    return sorted(missing)


def test_every_module_is_named_on_the_layout_page(package: dict[str, Module]) -> None:
    missing = undrawn_modules(package, LAYOUT)
    assert not missing, ("modules docs/contributing/layout.md does not name (add each, with a few words, to its "
                         "folder's entry of the block):\n" + "\n".join(missing))


def test_the_layout_check_sees_an_undrawn_module(tmp_path: Path) -> None:
    """Its own check, on a fake package and page: a module named only in another folder's entry is undrawn."""
    pkg = tmp_path / "tunekit"
    for sub in ("low", "high"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
        (pkg / sub / "run.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("")
    page = tmp_path / "layout.md"
    page.write_text("```\ntunekit/\n  __init__.py  the API\n  high/   run.py\n  low/    the low one\n"
                    "  *.py    errors.py\n```\n")
    assert undrawn_modules(load_package(pkg), page, pkg) == ["tunekit/low/run.py"]
    page.write_text(page.read_text() + "\n`low/run.py` runs the low one.\n")  # or named in the page's text
    assert undrawn_modules(load_package(pkg), page, pkg) == []


TOP = {"tunekit", "tunekit.__main__", "tunekit.cli", "tunekit.cli_commands"}  # the API and the CLI: above all


LAYOUT = PACKAGE.parent / "docs" / "contributing" / "layout.md"  # the code layout, drawn for contributors


def drawn_floors(page: Path) -> list[str]:
    """The folders of the layout page's first block, top to bottom (``  name/`` at two spaces)."""
    block = page.read_text().split("```", 2)[1]
    return [line.split("/")[0].strip() for line in block.splitlines()
            if line.startswith("  ") and not line.startswith("   ") and line.split()[0].endswith("/")]


def floor_of(module: str, floors: list[str]) -> int:
    """0 for the API and the CLI, then each drawn folder by its place; the modules at the package's
    root (errors, defaults, ...) lie below every folder."""
    if module in TOP or module.startswith("tunekit.cli_"):  # the CLI's modules, split by job
        return 0
    parts = module.split(".")
    return floors.index(parts[1]) + 1 if len(parts) > 2 or parts[1] in floors else len(floors) + 1


def test_folders_import_only_from_below_as_the_readme_draws_them(package: dict[str, Module]) -> None:
    floors = drawn_floors(LAYOUT)
    folders = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert sorted(floors) == folders, f"docs/contributing/layout.md draws {floors}; the package's folders are {folders}"
    offenders = sorted(f"{_where(package[i.source], i.line)}: imports {i.target} (a floor above it)"
                       for i in imports(package) if floor_of(i.target, floors) < floor_of(i.source, floors))
    assert not offenders, ("imports that climb the layout page's order (move the code down, or redraw the order "
                           "if it is the true one):\n" + "\n".join(offenders))


def test_the_floor_check_sees_a_climbing_import(tmp_path: Path) -> None:
    pkg = tmp_path / "tunekit"
    for sub in ("low", "high"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "high" / "a.py").write_text("from tunekit.low import b\n")
    (pkg / "low" / "b.py").write_text("def f():\n    from tunekit.high import a\n")
    modules = load_package(pkg)
    floors = ["high", "low"]
    climbing = [(i.source, i.target) for i in imports(modules) if floor_of(i.target, floors) < floor_of(i.source, floors)]
    assert climbing == [("tunekit.low.b", "tunekit.high.a")]


MAX_DOC_LINES = 12  # a function's or class's docstring: what and why (a parameter list after "Args:" aside)
MAX_MODULE_DOC_LINES = 16  # a module's: what it holds and why it is built so
MAX_COMMENT_LINES = 6  # one block of comments: a reason, not a lab notebook (history goes to benchmark reports)


def _prose_lines(doc: str) -> int:
    lines = doc.strip().splitlines()
    ends = [i for i, line in enumerate(lines) if line.strip() in ("Args:", "Parameters", "Returns:", "Attributes:")]
    return ends[0] if ends else len(lines)


def test_docstrings_and_comments_are_short(package: dict[str, Module]) -> None:
    offenders = []
    for m in package.values():
        doc = ast.get_docstring(m.tree)
        if doc and _prose_lines(doc) > MAX_MODULE_DOC_LINES:
            offenders.append(f"{_where(m, 1)}: the module's docstring ({_prose_lines(doc)} lines)")
        for node in ast.walk(m.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                doc = ast.get_docstring(node)
                if doc and _prose_lines(doc) > MAX_DOC_LINES:
                    offenders.append(f"{_where(m, node.lineno)}: {node.name}'s docstring ({_prose_lines(doc)} lines)")
        run = 0
        for number, line in enumerate([*m.path.read_text().splitlines(), ""], start=1):
            run = run + 1 if line.strip().startswith("#") else 0
            if run == MAX_COMMENT_LINES + 1:
                offenders.append(f"{_where(m, number - MAX_COMMENT_LINES)}: a comment block over {MAX_COMMENT_LINES} lines")
    assert not offenders, ("docstrings say what and why briefly, comments give a reason (benchmark history goes "
                           "in benchmark reports):\n" + "\n".join(sorted(offenders)))


def governed_defaults(path: Path) -> dict[str, object]:
    """``GOVERNED`` of tunekit/defaults.py, read with ``ast``: parameter name -> the literal it defaults to."""
    tree = ast.parse(path.read_text())
    constants: dict[str, object] = {}
    governed: dict[str, object] = {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if not isinstance(target, ast.Name) or node.value is None:
            continue
        if target.id == "GOVERNED" and isinstance(node.value, ast.Dict):
            for key, value in zip(node.value.keys, node.value.values):
                assert isinstance(key, ast.Constant) and isinstance(value, ast.Name), ast.dump(node)
                governed[key.value] = constants[value.id]
        elif isinstance(node.value, ast.Constant):
            constants[target.id] = node.value.value
    return governed


def literal_defaults(module: Module) -> Iterator[tuple[str, object, int]]:
    """(name, literal value, line) of every keyword default and dataclass field default written as a literal."""
    for node in ast.walk(module.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            for arg, default in pairs:
                if isinstance(default, ast.Constant):
                    yield arg.arg, default.value, default.lineno
        elif isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                        and isinstance(stmt.value, ast.Constant)):
                    yield stmt.target.id, stmt.value.value, stmt.lineno


def _same(a: object, b: object) -> bool:
    return type(a) is type(b) and a == b or (isinstance(a, (int, float)) and isinstance(b, (int, float))
                                             and not isinstance(a, bool) and not isinstance(b, bool) and a == b)


def test_one_definition_per_default(package: dict[str, Module]) -> None:
    """A default that several modules share (clipping 1.0, warmup 0.05, ...) is written once, in
    tunekit/defaults.py; a copy elsewhere drifts from it (lr_at's warmup was 0, training's 0.05)."""
    governed = governed_defaults(PACKAGE / "defaults.py")
    assert {"clip_grad_norm", "warmup", "run_steps", "sweep_steps"} <= set(governed)
    offenders = sorted(f"{_where(m, line)}: {name}={value!r} (use tunekit.defaults)"
                       for m in package.values() if m.name != "tunekit.defaults"
                       for name, value, line in literal_defaults(m)
                       if name in governed and _same(value, governed[name]))
    assert not offenders, "defaults written outside tunekit/defaults.py:\n" + "\n".join(offenders)


def test_the_default_scan_finds_a_copy(tmp_path: Path) -> None:
    """Its own check, on a fake module: a keyword default and a dataclass field that copy a default."""
    (tmp_path / "m.py").write_text("def f(x, *, clip_grad_norm=1.0, warmup=0):\n    pass\n"
                                   "class C:\n    warmup: float = 0.05\n")
    module = Module("fake.m", tmp_path / "m.py", ast.parse((tmp_path / "m.py").read_text()))
    found = [(n, v) for n, v, _ in literal_defaults(module)]
    assert ("clip_grad_norm", 1.0) in found and ("warmup", 0.05) in found and ("warmup", 0) in found
    governed = governed_defaults(PACKAGE / "defaults.py")
    assert [n for n, v in found if n in governed and _same(v, governed[n])] == ["clip_grad_norm", "warmup"]


LOCAL_IMPORTS_SAID = "# Imported where used"


def test_a_function_local_import_saves_import_time_and_the_module_says_so(package: dict[str, Module]) -> None:
    """Imports sit at a module's top, except those that keep importing it light (a heavy library, or a
    module of ours that pulls one in), and the module says so once, at its top; the standard library's
    light modules are never imported inside a function (an optional import under ``try`` aside)."""
    import sys

    offenders = []
    for m in package.values():
        text = m.path.read_text()
        optional = {id(n) for t in ast.walk(m.tree) if isinstance(t, ast.Try) for n in ast.walk(t)}
        local = [n for fn in ast.walk(m.tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))]
        for n in local:
            name = (n.module if isinstance(n, ast.ImportFrom) else n.names[0].name) or ""
            if id(n) not in optional and getattr(n, "level", 0) == 0 and name.split(".")[0] in sys.stdlib_module_names:
                offenders.append(f"{_where(m, n.lineno)}: imports {name} inside a function (put it at the top)")
        first_def = min((n.lineno for n in m.tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))), default=10**9)
        said = any(line.startswith(LOCAL_IMPORTS_SAID) for line in text.splitlines()[:first_def])
        if local and not said:
            offenders.append(f"{_where(m, local[0].lineno)}: imports inside functions, without a "
                             f"'{LOCAL_IMPORTS_SAID}, not at the top: ...' comment above its first definition")
    assert not offenders, "function-local imports:\n" + "\n".join(sorted(offenders))
