"""The package as users get it: a wheel with every module, light imports, unshadowed names."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .tasks import ROOT, regression_task, write_space, SMALL

@pytest.mark.slow  # a wheel build in a subprocess
def test_the_wheel_holds_every_module_and_the_search_spaces(tmp_path: Path) -> None:
    """The wheel pip builds from the repo root (offline) installs every module under tunekit/ and the
    search spaces. Built from a copy of the sources: a stale build/ left in the checkout would mask a
    package missing from pyproject.toml's list (bdist_wheel packs all of build/lib)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info",
                                                              "__pycache__", "tunekit_runs", ".pytest_cache"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                        "-q", "-w", str(tmp_path / "wheels"), "."], cwd=src, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = (tmp_path / "wheels").glob("tunekit-*.whl")
    held = set(zipfile.ZipFile(wheel).namelist())
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tunekit").rglob("*.py") if "__pycache__" not in p.parts}
    spaces = {f"tunekit/search_spaces/{p.name}" for p in (ROOT / "search_spaces").glob("*.toml")}
    assert modules and spaces
    missing = sorted((modules | spaces) - held)
    assert not missing, f"the wheel lacks (list the package in pyproject.toml's packages / package-data): {missing}"


def test_the_functions_are_not_shadowed_by_modules() -> None:
    """Importing every module of the package (as a user's code or Ray's workers may) leaves each
    public name of ``tunekit`` what the API says it is: a submodule named like a function would
    rebind ``tunekit.probe`` to itself."""
    import importlib
    import pkgutil

    import tunekit

    for info in pkgutil.walk_packages(tunekit.__path__, "tunekit."):
        if ".backends.ray" not in info.name and not info.name.endswith("__main__"):  # Ray: not needed here
            importlib.import_module(info.name)
    for name in tunekit.__all__:
        value = getattr(tunekit, name)
        assert not isinstance(value, type(tunekit)), f"tunekit.{name} is a module"
        assert value is getattr(importlib.import_module(tunekit._LAZY.get(name, "tunekit.errors")), name), name


@pytest.mark.slow  # a subprocess
def test_report_and_loading_a_result_import_no_training_code(tmp_path: Path) -> None:
    from tunekit import Local, search

    search(regression_task(), str(write_space(tmp_path, SMALL)), trials=2, out=tmp_path / "s",
           backend=Local(device="cpu"), budget="10updates")
    code = ("import sys; from tunekit.cli import main; assert main(['report', sys.argv[1]]) == 0; "
            "from tunekit.results import SearchResult; SearchResult.from_json(sys.argv[1] + '/search.json').table(); "
            "print(sorted(m for m in ('torch', 'optuna', 'ray') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s")], capture_output=True, text=True, cwd=tmp_path,
                       env={"PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg", "PATH": "/usr/bin:/bin"}, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[]"
