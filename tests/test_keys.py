"""Study and trial attribute keys are defined once, in tunekit/hpsearch/keys.py.

Scanned with ``ast``: a key retyped as a literal elsewhere drifts from its definition (a reader
that never finds what the writer stored), silently; so does a literal key at an attribute call.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tunekit.hpsearch import keys

ROOT = Path(keys.__file__).resolve().parents[1]  # the tunekit package
KEYS_FILE = Path(keys.__file__).resolve()
# Optuna's calls that take an attribute key: the study's or trial's, and the storage's (key after an id).
SETTERS = {"set_user_attr": 0, "set_system_attr": 0, "set_trial_user_attr": 1, "set_trial_system_attr": 1,
           "set_study_user_attr": 1, "set_study_system_attr": 1}
ATTR_MAPS = ("user_attrs", "system_attrs")


def _defined() -> dict[str, str]:
    return {name: getattr(keys, name) for name in keys.__all__}


def _sources() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(), str(p))) for p in sorted(ROOT.rglob("*.py")) if p.resolve() != KEYS_FILE]


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_attr_map(node: ast.AST, aliases: set[str]) -> bool:
    """``x.user_attrs`` (or ``system_attrs``), or a name bound to one in the same module."""
    return (isinstance(node, ast.Attribute) and node.attr in ATTR_MAPS) or (isinstance(node, ast.Name) and node.id in aliases)


def _aliases(tree: ast.Module) -> set[str]:
    """Names assigned an attribute map (``ua = t.user_attrs``, ``attrs = load_study(...).user_attrs``)."""
    return {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and _is_attr_map(n.value, set())
            for t in n.targets if isinstance(t, ast.Name)}


def _literal_keys(tree: ast.Module) -> list[tuple[int, str]]:
    """Every string literal used as a key at an attribute call, subscript, ``.get`` or ``in`` test."""
    aliases, found = _aliases(tree), []
    for n in ast.walk(tree):
        key: ast.AST | None = None
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            if n.func.attr in SETTERS and len(n.args) > SETTERS[n.func.attr]:
                key = n.args[SETTERS[n.func.attr]]
            elif n.func.attr == "get" and n.args and _is_attr_map(n.func.value, aliases):
                key = n.args[0]
            for kw in n.keywords:  # enqueue_trial(params, user_attrs={KEY: ...})
                if kw.arg in ATTR_MAPS and isinstance(kw.value, ast.Dict):
                    found += [(n.lineno, s) for k in kw.value.keys if (s := _literal(k)) is not None]
        elif isinstance(n, ast.Subscript) and _is_attr_map(n.value, aliases):
            key = n.slice
        elif isinstance(n, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in n.ops) \
                and any(_is_attr_map(c, aliases) for c in n.comparators):
            key = n.left
        if (s := _literal(key)) is not None:
            found.append((n.lineno, s))
    return found


def test_keys_are_unique_and_each_says_what_it_stores() -> None:
    defined = _defined()
    assert len(set(defined.values())) == len(defined), "two names for one stored key"
    prefixes = [v for n, v in defined.items() if n.endswith("_PREFIX")]
    assert not [v for v in defined.values() for p in prefixes if v != p and v.startswith(p)], "a key inside a prefix's ids"
    lines = KEYS_FILE.read_text().splitlines()
    for name in defined:
        line = next(x for x in lines if x.startswith(f"{name} = "))
        assert "  # " in line, f"{name}: say what the study or trial stores under it"


def test_no_module_retypes_a_tunekit_key() -> None:
    """tunekit's own keys (``tunekit_...``) appear as literals nowhere but keys.py."""
    own = {v for v in _defined().values() if v.startswith("tunekit_")}
    bad = []
    for path, tree in _sources():
        for n in ast.walk(tree):
            s = _literal(n)
            if s is not None and (s in own or any(s.startswith(v) for v in own if v.endswith(":"))):
                bad.append(f"{path.relative_to(ROOT.parent)}:{n.lineno}: {s!r}")
    assert not bad, "import the key from tunekit.hpsearch.keys:\n" + "\n".join(bad)


def test_no_attribute_is_read_or_written_by_a_literal_key() -> None:
    """Every set_user_attr / user_attrs[...] / .get / ``in`` takes its key from keys.py."""
    bad = [f"{path.relative_to(ROOT.parent)}:{line}: {s!r}" for path, tree in _sources() for line, s in _literal_keys(tree)]
    assert not bad, "use (or add) a constant of tunekit.hpsearch.keys:\n" + "\n".join(bad)


def test_the_scan_finds_what_it_forbids() -> None:
    """The scan itself, on a module that breaks each rule once."""
    src = ('study.set_user_attr("a", 1)\nstore.set_trial_user_attr(tid, "b", 2)\nt.user_attrs.get("c")\n'
           'ua = t.user_attrs\nua["d"]\n"e" in ua\nstudy.enqueue_trial(p, user_attrs={"f": p})\n'
           'study.set_user_attr(KEY, 1)\nother.get("g")\n')
    assert [s for _, s in sorted(_literal_keys(ast.parse(src)))] == ["a", "b", "c", "d", "e", "f"]


def test_stored_studies_still_read() -> None:
    """The values studies already hold (changing one orphans every stored study's attribute)."""
    assert (keys.PLAN_KEY, keys.DISTS_KEY, keys.SPEC_KEY, keys.SURPLUS, keys.FINAL_STEP, keys.WALL_SECONDS_KEY) == (
        "tunekit_plan", "tunekit_distributions", "tunekit_spec", "tunekit_surplus", "tunekit_final_step", "tunekit_seconds")
    assert (keys.WORKER_PREFIX, keys.STOPPED_PREFIX, keys.DESIGN_KEY, keys.WEIGHTS) == (
        "tunekit_worker:", "tunekit_stopped:", "tunekit_design_queued", "weights")
