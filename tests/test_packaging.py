"""The package as users get it: every subpackage installed, light imports, unshadowed names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .tasks import ROOT, regression_task, write_space, SMALL

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def test_every_subpackage_is_listed_for_install() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "tunekit").rglob("__init__.py")
             if "__pycache__" not in p.parts}
    assert found <= listed, f"add to pyproject.toml's packages: {sorted(found - listed)}"


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
    from tunekit import search

    search(regression_task(), str(write_space(tmp_path, SMALL)), trials=2, max_steps=10, device="cpu", out=tmp_path / "s")
    code = ("import sys; from tunekit.cli import main; assert main(['report', sys.argv[1]]) == 0; "
            "from tunekit.results import SearchResult; SearchResult.from_json(sys.argv[1] + '/search.json').table(); "
            "print(sorted(m for m in ('torch', 'optuna', 'ray') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s")], capture_output=True, text=True, cwd=tmp_path,
                       env={"PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg", "PATH": "/usr/bin:/bin"}, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[]"
