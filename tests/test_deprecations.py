"""The compatibility policy (tunekit.errors.deprecated): every shim names the release that removes it, later
than this one; every DeprecationWarning tunekit raises goes through that one helper and says so; and the test
suite fails on any tunekit DeprecationWarning outside the shims' own tests (pyproject's filterwarnings)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import warnings
from pathlib import Path

import pytest

import tunekit
from tunekit.errors import DEPRECATED_IN, REMOVED_IN, SHIMS, Deprecated, deprecated

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tunekit"


def _version(text: str) -> tuple[int, ...]:
    """``"0.3.0"`` as ``(0, 3, 0)``: release numbers compared as numbers, not strings."""
    assert re.fullmatch(r"\d+(\.\d+)*", text), f"{text!r} is not a release number such as 0.3.0"
    return tuple(int(part) for part in text.split("."))


def _every_shim() -> list[Deprecated]:
    """The shims registered once every module of tunekit is imported (each registers at import) and the CLI's
    parser is built (its old flags register as they are added)."""
    for info in pkgutil.walk_packages([str(PACKAGE)], "tunekit."):
        if info.name.endswith("__main__") or ".backends.ray" in info.name:  # runs the CLI; imports Ray at the top
            continue
        importlib.import_module(info.name)
    importlib.import_module("tunekit.cli").build_parser()
    return list(SHIMS)


def test_every_shim_names_a_removal_release_after_this_one() -> None:
    shims = _every_shim()
    current = _version(tunekit.__version__)
    assert _version(DEPRECATED_IN) <= current < _version(REMOVED_IN)
    for shim in shims:
        assert _version(shim.since) <= current < _version(shim.removed_in), shim
        said = shim.message()
        assert said.startswith(f"{shim.old} is deprecated since tunekit {shim.since}") and said.endswith(shim.new), said
        assert f"removed in tunekit {shim.removed_in}" in said, said
    # The shims the 0.2.0 release keeps, each registered (the registry is what the versions are checked on).
    olds = {shim.old for shim in shims}
    for old in ("train(max_steps=)", "--steps", "--grace-period", "join_study(storage, study_name, ...)",
                "reap_study(grace_period=)", "lr_find's flat Sweep keywords", "doctor's flat PlannedRun keywords",
                "probe's flat Measurement keywords"):  # the last three keep 0.1.0's steps=, steps= and max_batch= too
        assert old in olds, f"{old} is not registered with tunekit.errors.deprecated"
    assert any(old.startswith("search()'s flat keywords") for old in olds)
    assert any("0.1.0 key" in old for old in olds)


def test_every_deprecation_warning_goes_through_the_helper() -> None:
    """No module but errors.py raises a DeprecationWarning itself (``warnings.warn(..., DeprecationWarning)``
    or ``DeprecationWarning(...)``): each goes through a registered shim, so its removal release is checked."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                named = [node.func, *node.args, *(kw.value for kw in node.keywords)]
                if any(isinstance(n, ast.Name) and n.id in ("DeprecationWarning", "FutureWarning") for n in named):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, "raise it through tunekit.errors.deprecated(old, new).warn(): " + ", ".join(found)


def test_no_shim_is_said_to_last_for_this_or_the_next_release() -> None:
    """The words a shim's end used to be said in ("for this release", "the next release") name no
    release; each now names its own (removed in tunekit 0.3.0)."""
    vague = re.compile(r"for this release|in the next release|for one release|kept for a release", re.I)
    paths = [*PACKAGE.rglob("*.py"), ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    found = [f"{p.relative_to(ROOT)}:{n}" for p in paths if p.is_file()
             for n, line in enumerate(p.read_text().splitlines(), 1) if vague.search(line)]
    assert not found, "name the release that removes it (tunekit.errors.REMOVED_IN): " + ", ".join(found)


def test_a_shim_warns_at_the_users_line_and_the_suite_turns_it_into_an_error() -> None:
    shim = Deprecated("f(old=)", "pass new=")  # not registered: a test's own
    with pytest.deprecated_call(match=r"^f\(old=\) is deprecated since tunekit 0\.2\.0 and removed in tunekit "
                                      r"0\.3\.0: pass new=$") as got:
        shim.warn()
    assert got[0].filename == __file__
    assert shim.message("f(old=3)", "pass new=3") == ("f(old=3) is deprecated since tunekit 0.2.0 and removed in "
                                                      "tunekit 0.3.0: pass new=3")
    # pyproject's filterwarnings: outside pytest.warns / deprecated_call, a tunekit deprecation fails the test,
    # in this helper's words and in the shorter "deprecated since 0.2.0, removed in 0.3.0".
    with pytest.raises(DeprecationWarning, match="removed in tunekit 0.3.0"):
        shim.warn()
    with pytest.raises(DeprecationWarning):
        warnings.warn("g(old=) is deprecated since 0.2.0, removed in 0.3.0: pass new=", DeprecationWarning)


def test_registering_a_shim_lists_it_once() -> None:
    before = len(SHIMS)
    try:
        shim = deprecated("h(old=)", "pass new=", removed_in="0.4.0")
        assert SHIMS[-1] is shim and shim.removed_in == "0.4.0" and shim.since == DEPRECATED_IN
        assert deprecated("h(old=)", "pass new=", removed_in="0.4.0") == shim and len(SHIMS) == before + 1
    finally:
        del SHIMS[before:]
